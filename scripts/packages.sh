# Sourced by scripts/test.sh, scripts/demo.sh and the build scripts: installs, with apt-get, what
# building gateway-leader (the etcd-client crate needs protoc, jemalloc make), its Redis servers and the docs'
# walkthrough need, when missing. etcd and kube-apiserver are built from their Go modules instead
# (scripts/servers.sh).

as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"
  elif command -v sudo >/dev/null 2>&1; then sudo "$@"
  else echo "need root to run: $*" >&2; exit 1
  fi
}

ensure_packages() {
  local missing=()
  command -v protoc >/dev/null 2>&1 || missing+=(protobuf-compiler)
  # The binary's allocator, jemalloc, is built from its C sources with make.
  command -v make >/dev/null 2>&1 || missing+=(make)
  [ -e /usr/include/google/protobuf/timestamp.proto ] || missing+=(libprotobuf-dev)
  command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
  # docs/operations.md's walkthrough (and its test) reads /metrics with curl.
  command -v curl >/dev/null 2>&1 || missing+=(curl ca-certificates)
  # The build scripts' lock.
  command -v flock >/dev/null 2>&1 || missing+=(util-linux)
  # tests/envoy_gateway/ gives each Envoy Gateway replica a network namespace of its own.
  command -v ip >/dev/null 2>&1 || missing+=(iproute2)
  [ ${#missing[@]} -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null 2>&1; then
    echo "missing: ${missing[*]}; install them with your package manager and run again" >&2
    exit 1
  fi
  echo "installing ${missing[*]}" >&2
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
}
