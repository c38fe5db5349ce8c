#!/usr/bin/env bash
# Builds etcd and etcdctl from their Go modules (go.etcd.io/etcd/server/v3 and
# go.etcd.io/etcd/etcdctl/v3) at the version scripts/versions.sh pins (ETCD_VERSION, the 3.6 line
# Kubernetes 1.37 is tested with), and caches them outside the repository. The test apiservers,
# the etcd backend's tests and the bench's `etcdctl elect` anchor run on them.
#
# Usage:   dir=$(scripts/build-etcd.sh | tail -n1)      # a folder holding etcd and etcdctl
#          scripts/build-etcd.sh --cached               # its path, or exit 1 without building
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/etcd-vX.Y.Z-<recipe>/
#          (see scripts/build-kube-apiserver.sh; about 2 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-etcd "$@"
VERSION=$ETCD_VERSION

# Both binaries, each saying the pinned version.
binaries_ok() {
  local dir server ctl
  dir=$(dirname "$1")
  server=$("$dir/etcd" --version 2>/dev/null) || return 1
  ctl=$("$dir/etcdctl" version 2>/dev/null) || return 1
  grep -qx "etcd Version: ${VERSION#v}" <<<"$server" \
    && grep -qx "etcdctl version: ${VERSION#v}" <<<"$ctl"
}

# One wrapper module for both commands: their own go.mod files replace etcd's other modules with
# ../api and so on, which a dependent ignores; the published modules of the same version are
# what those paths hold.
build() {
  local work=$1 go_line
  go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(go_module_dir go.etcd.io/etcd/server/v3 "$VERSION")/go.mod")
  printf 'module gateway-leader.test/etcd\n\ngo %s\n\nrequire (\n\tgo.etcd.io/etcd/server/v3 %s\n\tgo.etcd.io/etcd/etcdctl/v3 %s\n)\n' \
    "${go_line:-$GO_NEEDED}" "$VERSION" "$VERSION" >"$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport (\n\t_ "go.etcd.io/etcd/etcdctl/v3"\n\t_ "go.etcd.io/etcd/server/v3"\n)\n' \
    >"$work/tools.go"
  go_say "resolving etcd $VERSION's modules ($(go version))"
  (cd "$work" && go mod tidy)
  go_say "building etcd and etcdctl $VERSION"
  (cd "$work" && go build -ldflags "-s -w" -o "$work/etcd" go.etcd.io/etcd/server/v3 \
    && go build -ldflags "-s -w" -o "$work/etcdctl" go.etcd.io/etcd/etcdctl/v3)
  binaries_ok "$work/etcd" || go_die "the built binaries do not say version ${VERSION#v}: \
$("$work/etcd" --version 2>&1 | head -n 1 || true)"
}

go_build etcd "$VERSION" binaries_ok build "" etcdctl etcd
