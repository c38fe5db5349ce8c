#!/usr/bin/env bash
# Builds kwok ("Kubernetes WithOut Kubelet", sig-scheduling's simulator) from its Go module
# (sigs.k8s.io/kwok/cmd/kwok) at the version scripts/versions.sh pins (KWOK_VERSION), with the
# Stages it runs, and caches them outside the repository. testkit's simulated nodes
# (testkit/src/kube/simulated.rs) run it to keep a fake Node and move its Pods to Running and
# Ready, as the upstream Gateway API conformance suite's readiness checks need: no container runs.
#
# Usage:   kwok=$(scripts/build-kwok.sh | tail -n1)      # the kwok binary, kwok-stages.yaml beside it
#          scripts/build-kwok.sh --cached                # its path, or exit 1 without building
#
# Stages: the kwok binary run standalone has none built in (kwokctl writes them into the config it
# gives kwok: pkg/kwokctl/runtime/cluster.go, getDefaultNodeStages and getDefaultPodStages). So
# kwok-stages.yaml is that same default set, concatenated from the module's own files as its
# kustomize/stage/fast/kustomization.yaml lists them: node/fast (node-initialize),
# node/heartbeat-with-lease (kwok keeps the node's Lease, 40 s by default) and pod/fast
# (pod-ready, pod-complete, pod-delete). Give it to kwok with --config.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/kwok-vX.Y.Z-<recipe>/
#          (see scripts/build-kube-apiserver.sh; about 2 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-kwok "$@"
VERSION=$KWOK_VERSION

# The binary says the pinned version, and the stages beside it are all there.
binary_ok() {
  local said
  said=$("$1" --version 2>/dev/null) || return 1
  grep -q "${VERSION#v}" <<<"$said" \
    && [ "$(grep -c '^kind: Stage$' "$(dirname "$1")/kwok-stages.yaml" 2>/dev/null)" = 5 ]
}

# kwok's go.mod has no replace directives: a wrapper module that requires it resolves the same
# dependencies its release does.
build() {
  local work=$1 dir go_line f
  dir=$(go_module_dir sigs.k8s.io/kwok "$VERSION")
  go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$dir/go.mod")
  printf 'module gateway-leader.test/kwok\n\ngo %s\n\nrequire sigs.k8s.io/kwok %s\n' \
    "${go_line:-$GO_NEEDED}" "$VERSION" >"$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/kwok/cmd/kwok"\n' >"$work/tools.go"
  go_say "resolving kwok $VERSION's modules ($(go version))"
  (cd "$work" && go mod tidy)
  go_say "building kwok $VERSION"
  (cd "$work" && go build -ldflags "-s -w -X sigs.k8s.io/kwok/pkg/consts.Version=${VERSION#v}" \
    -o "$work/kwok" sigs.k8s.io/kwok/cmd/kwok)
  for f in node/fast/node-initialize.yaml node/heartbeat-with-lease/node-heartbeat-with-lease.yaml \
    pod/fast/pod-ready.yaml pod/fast/pod-complete.yaml pod/fast/pod-delete.yaml; do
    [ -f "$dir/kustomize/stage/$f" ] || go_die "sigs.k8s.io/kwok@$VERSION has no kustomize/stage/$f"
    printf -- '---\n# sigs.k8s.io/kwok@%s kustomize/stage/%s\n' "$VERSION" "$f"
    cat "$dir/kustomize/stage/$f"
  done >"$work/kwok-stages.yaml"
  binary_ok "$work/kwok" || go_die "the built kwok does not say version ${VERSION#v}, or a stage \
is missing: $("$work/kwok" --version 2>&1 | head -n 1 || true)"
}

go_build kwok "$VERSION" binary_ok build kwok kwok-stages.yaml kwok
