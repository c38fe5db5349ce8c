# Sourced by every script that builds or fetches from Go modules (build-kube-apiserver.sh,
# build-etcd.sh, build-peers.sh, build-helm.sh, build-contour.sh, build-envoy-gateway.sh,
# gateway-api-crds.sh): what they share, once. Such a script is
#
#   set -euo pipefail
#   . "$(dirname "${BASH_SOURCE[0]}")/go.sh"
#   go_script build-etcd "$@"       # stdout kept for the result, versions and packages sourced,
#                                   # --cached taken off into GO_CACHED_ONLY, the rest in GO_ARGS
#   ...                             # a CHECK function (is a build complete and right?) and a
#                                   # BUILD function (build into the work dir it is given)
#   go_build etcd "$ETCD_VERSION" CHECK BUILD "" etcd etcdctl
#
# and go_build does the rest: the cached build when CHECK passes (or exit 1 with --cached),
# else Go, a fresh work dir, BUILD, the files installed, older builds pruned, and the result's
# path as the last line of stdout. Sourcing this file alone does nothing else (testkit sources
# it for go_cache_root).
#
# ensure_go: makes `go` able to build what versions.sh pins, or stops at once saying how:
#   1. the installed Go, when it is GO_NEEDED or newer (GOTOOLCHAIN=local);
#   2. an installed Go 1.21+ that is older: GOTOOLCHAIN=$GO_TOOLCHAIN, which it fetches from the
#      Go module proxy (about 80 MB, once);
#   3. no Go: Debian's or Ubuntu's golang-go package when its version is 1.21+, then as in 2;
#   4. otherwise: an error naming the minimum and where to get it.
# Module downloads and build outputs are kept under the project's cache
# (${GATEWAY_LEADER_CACHE_DIR:-~/.cache/gateway-leader}/go), shared by every build there.

GO_HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

go_say() { printf '[%s] %s\n' "${GO_SCRIPT:-go.sh}" "$*" >&2; }
go_die() { go_say "ERROR: $*"; exit 1; }

# 0 when version $1 >= version $2 (both like 1.26.0, go1.26.8 or v1.26).
version_ge() {
  local a=${1#go} b=${2#go}
  a=${a#v} b=${b#v}
  [ "$(printf '%s\n%s\n' "$b" "$a" | sort -V | head -n 1)" = "$b" ]
}

go_cache_root() {
  printf '%s' "${GATEWAY_LEADER_CACHE_DIR:-${HOME:?HOME is not set}/.cache/gateway-leader}"
}

ensure_go() {
  local have hint
  hint="Go $GO_FETCHES_TOOLCHAINS or newer is needed to build the test servers (it fetches Go \
$GO_NEEDED itself through the Go module proxy); install it from https://go.dev/dl/ or your \
distribution (Ubuntu 24.04: apt-get install golang-go; Debian 12: golang-1.23 from \
bookworm-backports), or set GATEWAY_LEADER_KUBE_APISERVER and GATEWAY_LEADER_ETCD to binaries"
  if ! command -v go >/dev/null 2>&1; then
    if command -v apt-cache >/dev/null 2>&1; then
      local candidate
      # "2:1.22~2build1" -> 1.22
      candidate=$(apt-cache policy golang-go 2>/dev/null | awk '/Candidate:/ {print $2}' \
        | sed -e 's/^[0-9]*://' -e 's/[~+-].*//')
      if [ -n "$candidate" ] && [ "$candidate" != "(none)" ] \
        && version_ge "$candidate" "$GO_FETCHES_TOOLCHAINS"; then
        go_say "installing golang-go $candidate (it fetches Go $GO_NEEDED when building)"
        as_root apt-get update -q
        as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
          golang-go ca-certificates
      else
        go_die "no go on PATH, and this machine's golang-go package is ${candidate:-missing}, \
older than $GO_FETCHES_TOOLCHAINS. $hint"
      fi
    else
      go_die "no go on PATH. $hint"
    fi
  fi
  have=$(GOTOOLCHAIN=local go env GOVERSION 2>/dev/null) || go_die "\`go env GOVERSION\` failed. $hint"
  if version_ge "$have" "$GO_NEEDED"; then
    export GOTOOLCHAIN=local
  elif version_ge "$have" "$GO_FETCHES_TOOLCHAINS"; then
    go_say "$have is older than $GO_NEEDED: using GOTOOLCHAIN=$GO_TOOLCHAIN from the module proxy"
    export GOTOOLCHAIN=$GO_TOOLCHAIN
  else
    go_die "$(command -v go) is $have, older than $GO_FETCHES_TOOLCHAINS. $hint"
  fi
  local root
  root=$(go_cache_root)
  mkdir -p "$root/go/mod" "$root/go/build"
  export GOMODCACHE="$root/go/mod" GOCACHE="$root/go/build"
  # A user's GOFLAGS (say -mod=vendor) must not change what is built; the wrapper modules
  # below have no vendor dir and are resolved from the module proxy.
  export GOFLAGS="-mod=mod -trimpath" CGO_ENABLED=0
  unset GOPATH GOROOT GOBIN
  go version >/dev/null 2>&1 || go_die "\`go version\` failed with GOTOOLCHAIN=$GOTOOLCHAIN \
(is the Go module proxy, ${GOPROXY:-https://proxy.golang.org}, reachable?)"
}

# The directory of module $1 at version $2 in the module cache (downloaded when missing).
go_module_dir() {
  local dir
  dir=$(go mod download -json "$1@$2" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')
  [ -n "$dir" ] && [ -d "$dir" ] || go_die "go mod download $1@$2 gave no directory"
  printf '%s' "$dir"
}

# cached_build NAME VERSION CHECK
# Sets BUILD_DIR (the cache dir of NAME at VERSION for this recipe: a hash of the calling script
# and this file, so a changed recipe never reuses an old binary) and takes its lock.
# Returns 0 when "$BUILD_DIR/$NAME" already passes CHECK (a function given the binary's path);
# 1 when it must be built. With --cached as GO_CACHED_ONLY=1, a missing binary exits 1 at once.
# A build found fine is stamped as used (.used), which keeps it from prune_builds for a day.
cached_build() {
  local name=$1 version=$2 check=$3 here recipe root
  here=$(dirname "${BASH_SOURCE[0]}")
  recipe=$(cat "$0" "$here/go.sh" | sha256sum | cut -c1-12)
  root=$(go_cache_root)
  BUILD_DIR="$root/$name-$version-$recipe"
  if [ -x "$BUILD_DIR/$name" ] && "$check" "$BUILD_DIR/$name"; then
    touch "$BUILD_DIR/.used" 2>/dev/null || true
    return 0
  fi
  if [ "${GO_CACHED_ONLY:-0}" = 1 ]; then
    go_say "no $name $version built by this recipe at $BUILD_DIR; run $0"
    exit 1
  fi
  mkdir -p "$BUILD_DIR"
  exec 9>"$BUILD_DIR/.lock"
  if ! flock -n 9; then
    go_say "another build of $name $version is running (lock $BUILD_DIR/.lock); waiting"
    flock 9
  fi
  if [ -x "$BUILD_DIR/$name" ] && "$check" "$BUILD_DIR/$name"; then
    touch "$BUILD_DIR/.used" 2>/dev/null || true
    return 0
  fi
  return 1
}

# Removes the builds of NAME by other recipes or versions than the ones in $BUILD_DIR's name
# and in "$@" (the versions still pinned): each is about 100 MB. The cache is shared by every
# checkout on the machine, and another checkout (a branch with another recipe or version, its
# tests running) may be using one: a build in progress (its lock held) or one used within the
# last day (.used, stamped by cached_build) stays, to go at a later build's prune.
prune_builds() {
  local name=$1 root old keep v
  shift
  root=$(go_cache_root)
  for old in "$root/$name"-v*; do
    [ -d "$old" ] || continue
    [ "$old" = "$BUILD_DIR" ] && continue
    keep=0
    for v in "$@"; do
      # Another pinned version built by this same recipe stays.
      [ "$old" = "$root/$name-$v-${BUILD_DIR##*-}" ] && keep=1
    done
    [ "$keep" = 1 ] && continue
    if [ -n "$(find "$old/.used" -maxdepth 0 -mmin -1440 2>/dev/null)" ]; then
      go_say "keeping an older build used within the last day (another checkout's?): $old"
      continue
    fi
    if [ -e "$old/.lock" ] && ! flock -n "$old/.lock" true; then
      go_say "keeping an older build that is being built now: $old"
      continue
    fi
    go_say "removing an older build: $old"
    rm -rf "$old"
  done
}

# install_built SRC DEST: moves a fresh file into place atomically: 0755 when SRC is executable
# (a binary), else 0644. A directory replaces DEST whole.
install_built() {
  local tmp="$2.tmp.$$" mode=0644
  if [ -d "$1" ]; then
    rm -rf "$2" && mv "$1" "$2"
    return
  fi
  [ -x "$1" ] && mode=0755
  cp "$1" "$tmp" && chmod "$mode" "$tmp" && mv -f "$tmp" "$2"
}

# go_script NAME "$@": the start of every such script. All its output goes to stderr and fd 3
# keeps the real stdout for the one path it prints (go_print); messages are tagged NAME;
# versions.sh and packages.sh are sourced; a leading --cached sets GO_CACHED_ONLY=1 (print what
# is there or exit 1, never build or download); the other arguments are left in GO_ARGS.
go_script() {
  exec 3>&1 1>&2
  GO_SCRIPT=$1
  shift
  . "$GO_HERE/versions.sh"
  . "$GO_HERE/packages.sh"
  GO_CACHED_ONLY=0
  if [ "${1:-}" = "--cached" ]; then
    GO_CACHED_ONLY=1
    shift
  fi
  GO_ARGS=("$@")
}

# go_print PATH: the script's result, as the last line of its stdout.
go_print() {
  printf '%s\n' "$1" >&3
}

# go_build NAME VERSION CHECK BUILD RESULT FILE...
# The cached build of NAME at VERSION (see cached_build) when CHECK passes on it; otherwise Go
# (ensure_go), an empty "$BUILD_DIR/work", `BUILD work-dir` (which builds there and checks what
# it built), then each FILE of the work dir installed into $BUILD_DIR (the last one's presence is
# what says a build is complete, so name the binary last; one FILE must be NAME, the executable
# CHECK is given), the work dir removed and older builds of NAME pruned, keeping the versions in
# GO_KEEP (an array; none by default). A failure keeps the work dir and says where. Prints
# "$BUILD_DIR/RESULT" ($BUILD_DIR when RESULT is empty) and exits 0.
go_build() {
  local name=$1 version=$2 check=$3 build=$4 result=$5 start work f
  shift 5
  if cached_build "$name" "$version" "$check"; then
    go_say "cached $name $version is fine: $BUILD_DIR"
    go_print "$BUILD_DIR${result:+/$result}"
    exit 0
  fi
  ensure_go
  start=$(date +%s)
  work="$BUILD_DIR/work"
  rm -rf "$work"
  mkdir -p "$work"
  # EXIT, not ERR: an ERR trap does not reach into BUILD (a function), and go_die exits.
  trap 'go_say "failed; the work dir is kept for inspection: '"$work"'"' EXIT
  "$build" "$work"
  for f in "$@"; do
    install_built "$work/$f" "$BUILD_DIR/$f"
  done
  # What the next run's cached_build checks: a recipe that installs no "$BUILD_DIR/$name" would
  # build again on every run (the conformance suite once did, as conformance.test).
  [ -x "$BUILD_DIR/$name" ] && "$check" "$BUILD_DIR/$name" \
    || go_die "the recipe installed no $name that passes $check in $BUILD_DIR, so every run \
would build it again"
  trap - EXIT
  touch "$BUILD_DIR/.used"
  rm -rf "$work"
  prune_builds "$name" ${GO_KEEP[@]+"${GO_KEEP[@]}"}
  go_say "built $name $version in $(($(date +%s) - start)) s"
  go_print "$BUILD_DIR${result:+/$result}"
  exit 0
}
