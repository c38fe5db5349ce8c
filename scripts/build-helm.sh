#!/usr/bin/env bash
# Builds helm from its Go module (helm.sh/helm/v4/cmd/helm) at the version scripts/versions.sh
# pins (HELM_VERSION), and caches it outside the repository. The chart's tests
# (tests/helm_chart.rs) lint and render deploy/helm/gateway-leader/ with it.
#
# Usage:   helm=$(scripts/build-helm.sh | tail -n1)      # the helm binary
#          scripts/build-helm.sh --cached                # its path, or exit 1 without building
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/helm-vX.Y.Z-<recipe>/helm
#          (see scripts/build-kube-apiserver.sh; about 3 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-helm "$@"
VERSION=$HELM_VERSION

# `helm version --short` says "v4.3.2+g<commit>" or "v4.3.2": the pinned version either way.
binary_ok() {
  local said
  said=$("$1" version --short 2>/dev/null) || return 1
  [ "${said%%+*}" = "$VERSION" ]
}

# helm's go.mod has no replace directives, so a wrapper module that requires it resolves the
# same dependencies its release does (go.sum comes from the module proxy's checksums).
build() {
  local work=$1 go_line
  go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$(go_module_dir helm.sh/helm/v4 "$VERSION")/go.mod")
  printf 'module gateway-leader.test/helm\n\ngo %s\n\nrequire helm.sh/helm/v4 %s\n' \
    "${go_line:-$GO_NEEDED}" "$VERSION" >"$work/go.mod"
  printf '//go:build tools\n\npackage tools\n\nimport _ "helm.sh/helm/v4/cmd/helm"\n' >"$work/tools.go"
  go_say "resolving helm $VERSION's modules ($(go version))"
  (cd "$work" && go mod tidy)
  go_say "building helm $VERSION"
  # The version the release Makefile stamps; without it `helm version` says only "v4.3".
  (cd "$work" && go build -ldflags "-s -w -X helm.sh/helm/v4/internal/version.version=$VERSION \
-X helm.sh/helm/v4/internal/version.metadata= -X helm.sh/helm/v4/internal/version.gitTreeState=clean" \
    -o "$work/helm" helm.sh/helm/v4/cmd/helm)
  binary_ok "$work/helm" || go_die "the built helm does not say version $VERSION: \
$("$work/helm" version --short 2>&1 | head -n 1 || true)"
}

go_build helm "$VERSION" binary_ok build helm helm
