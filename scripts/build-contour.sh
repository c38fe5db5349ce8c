#!/usr/bin/env bash
# Builds Contour's controller (github.com/projectcontour/contour/cmd/contour) from its Go module
# at the version scripts/versions.sh pins (CONTOUR_VERSION), and caches it outside the repository
# beside the CRDs of that same release. tests/contour/ runs it, with no Envoy, as a real Gateway
# API controller behind `gateway-leader proxy` (docs/sidecar.md, "Contour").
#
# Usage:   contour=$(scripts/build-contour.sh | tail -n1)   # the contour binary
#          scripts/build-contour.sh --cached                # its path, or exit 1 without building
#
# Beside the binary:
#   contour-crds.yaml     Contour's own CRDs (HTTPProxy, ContourConfiguration, ExtensionService,
#                         ...): examples/contour/01-crds.yaml of the module, as its release ships
#                         it. Contour watches some of them whatever it is asked to do.
#   contour-rbac.yaml     Contour's own RBAC: examples/contour/02-role-contour.yaml (a ClusterRole
#                         for what it watches and the statuses it writes, a Role for its Lease and
#                         Events) and 02-rbac.yaml (their bindings), which the tests bind to
#                         their service accounts.
#   gateway-api-version   the sigs.k8s.io/gateway-api version Contour's go.mod requires: the
#                         Gateway API release its status writer was built against.
#
# How: Contour's go.mod replaces nothing, so `go install MODULE/cmd/contour@VERSION` builds exactly
# the dependencies its release resolves (checked against the module's go.sum and the checksum
# database). The version is stamped as its Makefile does, so `contour version` says it.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/contour-vX.Y.Z-<recipe>/
#          (see scripts/build-kube-apiserver.sh; about 4 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-contour "$@"
VERSION=$CONTOUR_VERSION
MODULE=github.com/projectcontour/contour

# `contour version` prints YAML with a `version:` line, on stderr; the CRDs, the RBAC and the
# Gateway API version stand beside the binary.
binary_ok() {
  local dir said
  dir=$(dirname "$1")
  # Read whole before matching (see build-envoy-gateway.sh's binary_ok: SIGPIPE and pipefail).
  said=$("$1" version 2>&1) || return 1
  grep -qx "version: $VERSION" <<<"$said" \
    && grep -q 'kind: CustomResourceDefinition' "$dir/contour-crds.yaml" 2>/dev/null \
    && grep -q 'kind: ClusterRoleBinding' "$dir/contour-rbac.yaml" 2>/dev/null \
    && grep -Eqx 'v[0-9]+\.[0-9]+\.[0-9]+' "$dir/gateway-api-version" 2>/dev/null
}

build() {
  local work=$1 mdir gateway_api examples f ldflags
  go_say "downloading $MODULE@$VERSION"
  mdir=$(go_module_dir "$MODULE" "$VERSION")
  grep -q '^replace' "$mdir/go.mod" \
    && go_die "$MODULE@$VERSION's go.mod has replace directives, which go install @version refuses"
  gateway_api=$(sed -n 's/^[[:space:]]*sigs\.k8s\.io\/gateway-api \(v[0-9.]*\)$/\1/p' "$mdir/go.mod")
  [ -n "$gateway_api" ] || go_die "$MODULE@$VERSION's go.mod requires no sigs.k8s.io/gateway-api"
  examples="$mdir/examples/contour"
  for f in 01-crds.yaml 02-role-contour.yaml 02-rbac.yaml; do
    [ -f "$examples/$f" ] || go_die "$MODULE@$VERSION has no examples/contour/$f"
  done

  go_say "building $MODULE/cmd/contour $VERSION (Gateway API $gateway_api; $(go version))"
  # -mod applies to a main module, and go install @version has none: only -trimpath is kept.
  ldflags="-s -w -X $MODULE/internal/build.Version=$VERSION -X $MODULE/internal/build.Branch=release"
  (cd "$work" && GOBIN="$work" GOFLAGS=-trimpath go install -ldflags "$ldflags" \
    "$MODULE/cmd/contour@$VERSION")
  cp "$examples/01-crds.yaml" "$work/contour-crds.yaml"
  # One manifest: the roles, then what binds them (a YAML stream needs the separator between).
  { cat "$examples/02-role-contour.yaml"; printf '\n---\n'; cat "$examples/02-rbac.yaml"; } \
    >"$work/contour-rbac.yaml"
  printf '%s\n' "$gateway_api" >"$work/gateway-api-version"
  binary_ok "$work/contour" || go_die "the built contour does not say version $VERSION: \
$("$work/contour" version 2>&1 | tail -n 3 || true)"
}

go_build contour "$VERSION" binary_ok build contour \
  contour-crds.yaml contour-rbac.yaml gateway-api-version contour
