#!/usr/bin/env bash
# Builds the Go peers in testkit/peers/ (client-go-elector: client-go's leaderelection over a
# Lease; controller-runtime-manager: a controller-runtime Manager with leader election;
# client-go-proxy-client: an informer and typed writes through two proxies; refusal-probe: what
# client-go, controller-runtime and kubectl do with each answer a proxy could refuse a write
# with, docs/sidecar.md), at the
# client-go and controller-runtime versions their go.mod pins (scripts/versions.sh says the same),
# and caches them outside the repository. The interop test
# (benches/gateway-leader-bench/tests/interop/) runs them beside gateway-leader replicas on one
# Lease; tests/proxy/client_go.rs runs client-go-proxy-client. From the module testkit/peers/next/
# (client-go CLIENT_GO_NEXT_VERSION) it builds client-go-gated-elector: client-go's elector with
# KEP-6361's recovery and write gate, which benches/gateway-leader-bench/tests/gated_peer.rs runs.
#
# Usage:   dir=$(scripts/build-peers.sh | tail -n1)      # a folder holding the programs
#          scripts/build-peers.sh --cached               # its path, or exit 1 without building
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/
#          client-go-elector-<client-go>-<sources>-<recipe>/ where <sources> hashes the Go files,
#          go.mod and go.sum of testkit/peers/ and <recipe> this script and scripts/go.sh (see
#          scripts/build-kube-apiserver.sh): an edited peer is rebuilt once, and the older build
#          removed. About a minute on 2 cores once the modules are downloaded.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-peers "$@"
src="$GO_HERE/../testkit/peers"
# The peers' sources are part of the recipe (cached_build hashes this script and go.sh).
VERSION="$CLIENT_GO_VERSION-$(cd "$src" && find . -type f \( -name '*.go' -o -name 'go.mod' \
  -o -name 'go.sum' \) -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-12)"
PROGRAMS=(client-go-elector controller-runtime-manager client-go-proxy-client refusal-probe
  client-go-gated-elector)

# The programs (the folder's name says which sources they were built from).
binaries_ok() {
  local dir p
  dir=$(dirname "$1")
  for p in "${PROGRAMS[@]}"; do
    [ -x "$dir/$p" ] || return 1
  done
}

# The built programs carry the pinned modules (their build info, `go version -m`).
modules_ok() {
  go version -m "$1/client-go-elector" | grep -Eq "k8s.io/client-go[[:space:]]+$CLIENT_GO_VERSION" \
    && go version -m "$1/controller-runtime-manager" \
      | grep -Eq "sigs.k8s.io/controller-runtime[[:space:]]+$CONTROLLER_RUNTIME_VERSION" \
    && go version -m "$1/client-go-gated-elector" \
      | grep -Eq "k8s.io/client-go[[:space:]]+$CLIENT_GO_NEXT_VERSION"
}

build() {
  local work=$1
  go_say "building the peers (client-go $CLIENT_GO_VERSION, controller-runtime $CONTROLLER_RUNTIME_VERSION)"
  # go.sum is committed: the modules are checked against it, and nothing is resolved anew.
  (cd "$src" && GOFLAGS="-mod=readonly -trimpath" go build -ldflags "-s -w" -o "$work/" ./cmd/...)
  # next/ is a module of its own (`./cmd/...` above does not reach into it); it takes
  # internal/peer from the folder above through a replace directive.
  go_say "building the gated peer (client-go $CLIENT_GO_NEXT_VERSION)"
  (cd "$src/next" && GOFLAGS="-mod=readonly -trimpath" go build -ldflags "-s -w" -o "$work/" ./cmd/...)
  modules_ok "$work" || go_die "the built peers do not carry client-go \
$CLIENT_GO_VERSION and controller-runtime $CONTROLLER_RUNTIME_VERSION, and the gated one client-go \
$CLIENT_GO_NEXT_VERSION"
}

grep -q "k8s.io/client-go $CLIENT_GO_VERSION" "$src/go.mod" \
  && grep -q "sigs.k8s.io/controller-runtime $CONTROLLER_RUNTIME_VERSION" "$src/go.mod" \
  || go_die "testkit/peers/go.mod does not pin client-go $CLIENT_GO_VERSION and controller-runtime \
$CONTROLLER_RUNTIME_VERSION (scripts/versions.sh); change both together"
grep -q "k8s.io/client-go $CLIENT_GO_NEXT_VERSION" "$src/next/go.mod" \
  || go_die "testkit/peers/next/go.mod does not pin client-go $CLIENT_GO_NEXT_VERSION \
(scripts/versions.sh, CLIENT_GO_NEXT_VERSION); change both together"

# The cache folder is named after the first program (client-go-elector-<client-go>-...), and
# older builds of the peers are pruned under that name.
go_build client-go-elector "$VERSION" binaries_ok build "" "${PROGRAMS[@]}"
