#!/usr/bin/env bash
# Builds the repository's Dockerfile where no base image can be pulled, then runs the image
# against a test kube-apiserver. Run by hand (as root; not part of .ci/run: the release build
# alone takes about 15 minutes on 2 cores); docs/operations.md ("The image") has its figures.
#
# Usage:   scripts/image.sh [build|check|all]      (default: all)
#   build  The same Dockerfile, with buildah, on two local bases instead of the pulled ones:
#          - BUILD_IMAGE: a Debian bookworm minbase made with debootstrap (gcc, libc6-dev, make,
#            protoc)
#            plus this machine's Rust toolchain in /usr/local, as rust:1-bookworm has one;
#          - RUNTIME_IMAGE: scratch plus what distroless/cc's nonroot variant holds that the
#            binary uses: the shared libraries it links (ldd, from the same Debian rootfs), the
#            CA certificates, and /etc/passwd and /etc/group with the user 65532. No shell.
#          The image is localhost/gateway-leader:<version>, labelled with that version.
#   check  The image, run as its config says (entrypoint, user 65532, environment; a read-only
#          root filesystem, no capabilities, the host's loopback network; by hand in a private
#          mount namespace, as podman cannot run containers here: see image_start) beside a
#          throwaway kube-apiserver with deploy/base's RBAC and a service-account kubeconfig:
#          it elects (the Lease names it), writes statuses (deploy/examples/hello.yaml's route
#          gets its conditions), and on SIGTERM releases the Lease (holder empty) and exits 0. It
#          also checks the image has no shell and the label is the binary's --version.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/image/ (the rootfs and the
#          container storage; about 5 GB while building, 2 GB after).
set -euo pipefail
cd "$(dirname "$0")/.."
here=$PWD/scripts
. "$here/packages.sh"

say() { printf '[image.sh] %s\n' "$*" >&2; }
die() { say "ERROR: $*"; exit 1; }

what=${1:-all}
case "$what" in build|check|all) ;; *) die "usage: $0 [build|check|all]" ;; esac
[ "$(id -u)" -eq 0 ] || die "run as root: buildah and podman keep their storage under the cache \
and need mount rights (no rootless setup is assumed)"

cache="${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/image"
mkdir -p "$cache"
version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n 1)
[ -n "$version" ] || die "no version in Cargo.toml"
image=localhost/gateway-leader:$version
build_base=localhost/gateway-leader-build-base:bookworm
runtime_base=localhost/gateway-leader-runtime-base:bookworm
# Our own storage: nothing of the machine's other containers is touched.
storage=(--root "$cache/storage" --runroot "$cache/run" --storage-driver overlay)
buildah() { command buildah "${storage[@]}" "$@"; }
podman() { command podman "${storage[@]}" --cgroup-manager cgroupfs "$@"; }

ensure_tools() {
  local missing=()
  command -v buildah >/dev/null 2>&1 || missing+=(buildah)
  command -v podman >/dev/null 2>&1 || missing+=(podman)
  command -v crun >/dev/null 2>&1 || missing+=(crun)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  command -v kubectl >/dev/null 2>&1 || [ -n "${GATEWAY_LEADER_KUBECTL:-}" ] \
    || GATEWAY_LEADER_KUBECTL=$(scripts/install-kubectl.sh | tail -n 1)
  [ ${#missing[@]} -eq 0 ] && return 0
  command -v apt-get >/dev/null 2>&1 || die "missing: ${missing[*]}; install them and run again"
  say "installing ${missing[*]}"
  as_root apt-get update -q
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
    "${missing[@]}" uidmap netavark
}

# The Debian rootfs both bases come from; its name says what it holds.
packages=ca-certificates,gcc,libc6-dev,make,protobuf-compiler,libprotobuf-dev
rootfs="$cache/rootfs-bookworm-$(printf '%s' "$packages" | sha256sum | cut -c1-8)"

ensure_rootfs() {
  [ -x "$rootfs/usr/bin/gcc" ] && [ -e "$rootfs/etc/ssl/certs/ca-certificates.crt" ] && return 0
  # The mirror apt already uses on this machine (Debian's).
  local mirror
  mirror=$(sed -n 's/^URIs: *\(http[^ ]*debian\)\/*$/\1/p' /etc/apt/sources.list.d/*.sources \
    2>/dev/null | head -n 1)
  say "debootstrap bookworm (minbase + $packages) from ${mirror:=http://deb.debian.org/debian}"
  rm -rf "$rootfs.tmp"
  debootstrap --variant=minbase --include="$packages" bookworm "$rootfs.tmp" "$mirror" >&2
  mv "$rootfs.tmp" "$rootfs"
}

has_image() { buildah inspect --type image "$1" >/dev/null 2>&1; }

build_bases() {
  local sysroot ctr
  sysroot=$(rustc --print sysroot) || die "no rustc: the build base takes this machine's toolchain"
  if ! has_image "$build_base"; then
    say "build base: the rootfs plus $(rustc --version) in /usr/local"
    ctr=$(buildah from scratch)
    buildah copy "$ctr" "$rootfs" / >/dev/null
    # rustc finds its standard library beside itself (../lib/rustlib), as in rust:1-bookworm.
    buildah copy "$ctr" "$sysroot/bin" /usr/local/bin >/dev/null
    buildah copy "$ctr" "$sysroot/lib" /usr/local/lib >/dev/null
    buildah config --env PATH=/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
      --env CARGO_HOME=/usr/local/cargo "$ctr"
    buildah commit --rm "$ctr" "$build_base" >/dev/null
  fi
}

# The runtime base for a binary: the libraries `ldd` names for it inside the Debian rootfs.
runtime_base_for() {
  local bin=$1 ctr libs lib dir
  mkdir -p "$rootfs/tmp/ldd"
  cp "$bin" "$rootfs/tmp/ldd/gateway-leader"
  libs=$(chroot "$rootfs" ldd /tmp/ldd/gateway-leader | awk '/=> \// {print $3} /^\t\// {print $1}')
  rm -rf "$rootfs/tmp/ldd"
  printf '%s\n' "$libs" >"$cache/linked-libraries.txt"
  say "the binary links: $(tr '\n' ' ' <"$cache/linked-libraries.txt")"
  local tree="$cache/runtime-tree"
  rm -rf "$tree"
  mkdir -p "$tree/etc/ssl/certs" "$tree/tmp" "$tree/home/nonroot" "$tree/usr/local/bin"
  chmod 1777 "$tree/tmp"
  chown 65532:65532 "$tree/home/nonroot"
  for lib in $libs; do
    dir=$(dirname "$lib")
    mkdir -p "$tree$dir"
    # The file itself, not the symlink: the name the binary asks for must be a file here.
    cp -L "$rootfs$lib" "$tree$lib"
  done
  # /lib64 -> usr/lib64 and /lib -> usr/lib, as merged-/usr Debian has them.
  for l in lib lib64; do
    if [ -L "$rootfs/$l" ] && [ -d "$tree/usr/$l" ]; then
      ln -s "usr/$l" "$tree/$l"
    fi
  done
  cp "$rootfs/etc/ssl/certs/ca-certificates.crt" "$tree/etc/ssl/certs/"
  printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' \
    >"$tree/etc/passwd"
  printf 'root:x:0:\nnonroot:x:65532:\n' >"$tree/etc/group"
  printf 'hosts: files dns\n' >"$tree/etc/nsswitch.conf"
  buildah rmi "$runtime_base" >/dev/null 2>&1 || true
  ctr=$(buildah from scratch)
  buildah copy "$ctr" "$tree" / >/dev/null
  buildah config --user 65532:65532 --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt "$ctr"
  buildah commit --rm "$ctr" "$runtime_base" >/dev/null
}

build_image() {
  local start bin ctr mnt ctx
  ensure_rootfs
  build_bases
  start=$(date +%s)
  # One snapshot of the work tree (what .dockerignore leaves in) for both builds below: an edit
  # made meanwhile would otherwise change the second build's context and redo the first.
  ctx=$(mktemp -d -t gateway-leader-image-context-XXXXXX)
  # shellcheck disable=SC2064 # the folder's name now: ctx is local
  trap "rm -rf '$ctx'" EXIT
  tar --exclude=./target --exclude=./.git -c . | tar -x -C "$ctx"
  local args=(--layers --build-arg "BUILD_IMAGE=$build_base" --build-arg "VERSION=$version"
    --isolation chroot --network host
    # The crates come from this machine's cargo cache when it has them (else from crates.io).
    --volume "${CARGO_HOME:-$HOME/.cargo}/registry:/usr/local/cargo/registry")
  say "building the build stage (cargo build --release --locked; about 15 minutes on 2 cores)"
  buildah bud "${args[@]}" --target build -t localhost/gateway-leader-build:"$version" "$ctx" >&2
  # The binary the build stage made decides which libraries the runtime base holds.
  ctr=$(buildah from localhost/gateway-leader-build:"$version")
  mnt=$(buildah mount "$ctr")
  bin="$cache/gateway-leader.built"
  cp "$mnt/src/target/release/gateway-leader" "$bin"
  buildah umount "$ctr" >/dev/null
  buildah rm "$ctr" >/dev/null
  runtime_base_for "$bin"
  say "building the image on the local runtime base"
  buildah bud "${args[@]}" --build-arg "RUNTIME_IMAGE=$runtime_base" -t "$image" "$ctx" >&2
  # The build stage's layers (the release target dir, gigabytes) are no longer needed.
  buildah rmi localhost/gateway-leader-build:"$version" >/dev/null 2>&1 || true
  buildah rmi --prune >/dev/null 2>&1 || true
  rm -rf "$ctx"
  trap - EXIT
  say "built $image in $(($(date +%s) - start)) s: $(podman image inspect --format '{{.Size}}' "$image") bytes"
}

# kubectl with the throwaway apiserver's kubeconfig.
kc() { "${GATEWAY_LEADER_KUBECTL:-kubectl}" --kubeconfig "$work/kubeconfig" "$@"; }

# Where podman cannot run containers (here crun fails on setrlimit RLIMIT_NPROC, without
# CAP_SYS_RESOURCE, and on hybrid cgroups), the image runs as its config says, by hand: its
# filesystem (buildah mount) bound read-only as the root of a private mount namespace, the
# entrypoint started by chroot as the image's user, with no capabilities and no_new_privs, only
# the image's environment and what is given, and `dir` (a folder of ours) bound on /home/nonroot.
# Sets `started` to the program's process id (unshare, sh, env, setpriv and chroot each exec the
# next, so it is the program's own).
image_start() {
  local dir=$1 log=$2
  shift 2
  local vars=() entry user env=() e
  while [ $# -gt 0 ] && [ "$1" != -- ]; do vars+=("$1"); shift; done
  [ "${1:-}" = -- ] && shift
  entry=$(buildah inspect --type image --format '{{range .OCIv1.Config.Entrypoint}}{{.}} {{end}}' "$image")
  user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
  while IFS= read -r e; do [ -n "$e" ] && env+=("$e"); done \
    < <(buildah inspect --type image --format '{{range .OCIv1.Config.Env}}{{println .}}{{end}}' "$image")
  mkdir -p "$work/root"
  # shellcheck disable=SC2086 # the entrypoint's words
  unshare --mount --propagation private -- sh -c '
    set -e
    root=$1 fs=$2 dir=$3; shift 3
    mount --bind "$fs" "$root"
    mount -o remount,bind,ro "$root"
    mount --bind "$dir" "$root/home/nonroot"
    exec "$@"
  ' image "$work/root" "$mnt" "$dir" \
    "$(command -v env)" -i "${env[@]}" HOME=/home/nonroot "${vars[@]}" \
    "$(command -v setpriv)" --no-new-privs "$(command -v chroot)" --userspec="$user" "$work/root" \
    $entry "$@" >"$log" 2>&1 &
  started=$!
}

check_image() {
  has_image "$image" || die "no $image: run $0 build first"
  work=$(mktemp -d -t gateway-leader-image-XXXXXX)
  # Globals: the EXIT trap reads them after this function returns.
  apiserver_pid="" pid=""
  ctr=$(buildah from "$image")
  mnt=$(buildah mount "$ctr")
  cleanup() {
    # Every step, whatever the one before it did (errexit would stop at the first).
    set +e
    [ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null
    [ -n "$apiserver_pid" ] && kill "$apiserver_pid" 2>/dev/null && wait "$apiserver_pid" 2>/dev/null
    buildah umount "$ctr" >/dev/null 2>&1 || true
    buildah rm "$ctr" >/dev/null 2>&1 || true
    rm -rf "$work"
  }
  trap cleanup EXIT
  local said label user
  # The label is the binary's --version; the image has no shell; its user is 65532.
  mkdir -p "$work/home"
  chown 65532:65532 "$work/home"
  image_start "$work/home" "$work/version.log" -- --version
  pid=$started
  wait "$pid" || die "--version failed: $(cat "$work/version.log")"
  pid=""
  said=$(cat "$work/version.log")
  label=$(buildah inspect --type image --format '{{index .OCIv1.Config.Labels "org.opencontainers.image.version"}}' "$image")
  [ "$said" = "gateway-leader $label" ] || die "label $label, binary says $said"
  for sh in bin/sh bin/bash bin/busybox usr/bin/sh usr/bin/dash; do
    [ ! -e "$mnt/$sh" ] || die "the image has a shell: /$sh"
  done
  user=$(buildah inspect --type image --format '{{.OCIv1.Config.User}}' "$image")
  [ "$user" = 65532:65532 ] || die "the image's user is $user, not 65532:65532"
  say "label $label = the binary's version; no shell; user $user"

  say "starting a throwaway kube-apiserver (gateway-leader-bench local-apiserver)"
  cargo build -q -p gateway-leader-bench
  target/debug/gateway-leader-bench local-apiserver --dir "$work/server" >"$work/server.log" 2>&1 &
  apiserver_pid=$!
  timeout 300 sh -c "until [ -s '$work/server/kubeconfig' ]; do sleep 1; done" \
    || die "the apiserver did not start: $(tail -n 5 "$work/server.log")"
  cp "$work/server/kubeconfig" "$work/kubeconfig"
  kc apply -k deploy/base >/dev/null
  kc apply -f deploy/examples/hello.yaml >/dev/null
  # The service account's rights only, as the pod would have them, at ~/.kube/config.
  mkdir -p "$work/home/.kube"
  kc config view --raw --minify --flatten >"$work/home/.kube/config"
  "${GATEWAY_LEADER_KUBECTL:-kubectl}" --kubeconfig "$work/home/.kube/config" config \
    set-credentials gateway-leader --token="$(kc -n gateway-system create token gateway-leader)" \
    >/dev/null
  "${GATEWAY_LEADER_KUBECTL:-kubectl}" --kubeconfig "$work/home/.kube/config" config \
    set-context --current --user gateway-leader >/dev/null
  chown -R 65532:65532 "$work/home"

  say "running the image: read-only root, user 65532, no capabilities"
  image_start "$work/home" "$work/run.log" POD_NAME=image-check POD_NAMESPACE=gateway-system \
    -- run --log-format json --health-addr 127.0.0.1:0
  pid=$started
  local holder=""
  for _ in $(seq 1 120); do
    holder=$(kc -n gateway-system get lease gateway-leader-leader-election-lock \
      -o jsonpath='{.spec.holderIdentity}' 2>/dev/null || true)
    case "$holder" in image-check_*) break ;; esac
    kill -0 "$pid" 2>/dev/null || die "it exited: $(tail -n 5 "$work/run.log")"
    sleep 1
  done
  case "$holder" in image-check_*) ;; *)
    die "it did not take the Lease (holder '$holder'): $(tail -n 5 "$work/run.log")" ;;
  esac
  say "it elects: the Lease's holder is $holder"
  local conditions=""
  for _ in $(seq 1 120); do
    conditions=$(kc -n demo get httproute hello \
      -o jsonpath='{range .status.parents[0].conditions[*]}{.type}={.status} {end}' 2>/dev/null || true)
    case "$conditions" in *ResolvedRefs=True*) break ;; esac
    sleep 1
  done
  case "$conditions" in *ResolvedRefs=True*) ;; *) die "no status written: '$conditions'" ;; esac
  say "it writes statuses: HTTPRoute demo/hello has $conditions"
  # SIGTERM, as the kubelet sends it.
  local code=0 lease
  kill -TERM "$pid"
  timeout 60 tail --pid="$pid" -f /dev/null || die "still running 60 s after SIGTERM"
  wait "$pid" || code=$?
  pid=""
  [ "$code" = 0 ] || die "exit code $code after SIGTERM: $(tail -n 5 "$work/run.log")"
  lease=$(kc -n gateway-system get lease gateway-leader-leader-election-lock \
    -o jsonpath='{.spec.holderIdentity}|{.spec.leaseDurationSeconds}')
  [ "$lease" = "|1" ] || die "the Lease was not released: holder|duration = $lease"
  grep -q '"released leadership"' "$work/run.log" \
    || die "no \"released leadership\" in its log"
  say "on SIGTERM it released the Lease (holder empty, leaseDurationSeconds 1) and exited 0"
  say "image: $image, $(podman image inspect --format '{{.Size}}' "$image") bytes; linked \
libraries: $(tr '\n' ' ' <"$cache/linked-libraries.txt" 2>/dev/null || echo unknown)"
}

ensure_tools
case "$what" in
  build) build_image ;;
  check) check_image ;;
  all) build_image; check_image ;;
esac
