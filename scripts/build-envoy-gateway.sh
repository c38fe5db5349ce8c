#!/usr/bin/env bash
# Builds Envoy Gateway's control plane (github.com/envoyproxy/gateway/cmd/envoy-gateway) from its
# Go module at the version scripts/versions.sh pins (ENVOY_GATEWAY_VERSION), and caches it outside
# the repository beside what its release installs with it. tests/envoy_gateway/ runs it, with no
# Envoy, as a second real Gateway API controller behind `gateway-leader proxy`
# (docs/sidecar.md, "Envoy Gateway").
#
# Usage:   eg=$(scripts/build-envoy-gateway.sh | tail -n1)   # the envoy-gateway binary
#          scripts/build-envoy-gateway.sh --cached           # its path, or exit 1 without building
#
# Beside the binary:
#   envoy-gateway-crds.yaml   Envoy Gateway's own CRDs (EnvoyProxy, ClientTrafficPolicy, ...):
#                             charts/gateway-crds-helm/templates/generated/ of the module, with the
#                             chart's `{{- if }}` guards around each file taken off.
#   envoy-gateway-rbac.yaml   Its RBAC as its Helm chart (charts/gateway-helm) renders it: the
#                             ClusterRole for what it watches and the statuses it writes, the Roles
#                             for its Lease and the Envoy infrastructure it creates, and their
#                             bindings (the certgen Job's are left out: the tests make the
#                             certificates themselves).
#   envoy-gateway-chart/      its Helm chart (charts/gateway-helm) as its release publishes it:
#                             values.tmpl.yaml filled into values.yaml (the release's image), for
#                             the tests of what gateway-leader's post-renderer adds to it.
#   gateway-api-version       the sigs.k8s.io/gateway-api version its go.mod requires.
#
# How: the go.mod replaces nothing, so `go install MODULE/cmd/envoy-gateway@VERSION` builds exactly
# the dependencies its release resolves. The version is stamped as its Makefile does, so
# `envoy-gateway version` says it. The chart is rendered with the helm scripts/build-helm.sh
# builds.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/envoy-gateway-vX.Y.Z-<recipe>/
#          (see scripts/build-kube-apiserver.sh; about 6 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-envoy-gateway "$@"
VERSION=$ENVOY_GATEWAY_VERSION
MODULE=github.com/envoyproxy/gateway

# `envoy-gateway version` prints `ENVOY_GATEWAY_VERSION: vX.Y.Z`; what it installs stands beside.
binary_ok() {
  local dir said
  dir=$(dirname "$1")
  # Read whole before matching: grep -q stops reading at the first match, and the rest of the
  # output then kills the writer with SIGPIPE, which pipefail reports as a failed check.
  said=$("$1" version 2>&1) || return 1
  grep -qx "ENVOY_GATEWAY_VERSION: $VERSION" <<<"$said" \
    && grep -q 'kind: CustomResourceDefinition' "$dir/envoy-gateway-crds.yaml" 2>/dev/null \
    && grep -q 'kind: ClusterRoleBinding' "$dir/envoy-gateway-rbac.yaml" 2>/dev/null \
    && [ -f "$dir/envoy-gateway-chart/values.yaml" ] \
    && grep -Eqx 'v[0-9]+\.[0-9]+\.[0-9]+' "$dir/gateway-api-version" 2>/dev/null
}

build() {
  local work=$1 helm mdir gateway_api crds chart ldflags f
  helm=$("$GO_HERE/build-helm.sh" | tail -n 1)
  go_say "downloading $MODULE@$VERSION"
  mdir=$(go_module_dir "$MODULE" "$VERSION")
  grep -q '^replace' "$mdir/go.mod" \
    && go_die "$MODULE@$VERSION's go.mod has replace directives, which go install @version refuses"
  gateway_api=$(sed -n 's/^[[:space:]]*sigs\.k8s\.io\/gateway-api \(v[0-9.]*\)$/\1/p' "$mdir/go.mod")
  [ -n "$gateway_api" ] || go_die "$MODULE@$VERSION's go.mod requires no sigs.k8s.io/gateway-api"
  crds="$mdir/charts/gateway-crds-helm/templates/generated"
  chart="$mdir/charts/gateway-helm"
  [ -d "$crds" ] || go_die "$MODULE@$VERSION has no charts/gateway-crds-helm/templates/generated"
  [ -f "$chart/values.tmpl.yaml" ] || go_die "$MODULE@$VERSION has no charts/gateway-helm"

  go_say "building $MODULE/cmd/envoy-gateway $VERSION (Gateway API $gateway_api; $(go version))"
  ldflags="-s -w -X $MODULE/internal/cmd/version.envoyGatewayVersion=$VERSION"
  (cd "$work" && GOBIN="$work" GOFLAGS=-trimpath go install -ldflags "$ldflags" \
    "$MODULE/cmd/envoy-gateway@$VERSION")

  # Each generated CRD file is one CRD between a `{{- if ... }}` line and a `{{- end }}` line.
  for f in "$crds"/*.yaml; do
    grep -v '^{{' "$f"
  done >"$work/envoy-gateway-crds.yaml"

  # The chart ships values.tmpl.yaml, which its release pipeline fills: the same substitution,
  # with the release's image, renders it as a release would.
  cp -r "$chart" "$work/envoy-gateway-chart"
  chmod -R u+w "$work/envoy-gateway-chart"
  sed -e "s|\${GatewayImage}|docker.io/envoyproxy/gateway:$VERSION|" \
    -e 's|\${GatewayImagePullPolicy}|IfNotPresent|' \
    "$work/envoy-gateway-chart/values.tmpl.yaml" >"$work/envoy-gateway-chart/values.yaml"
  grep -q '\${' "$work/envoy-gateway-chart/values.yaml" \
    && go_die "the chart's values.tmpl.yaml has a placeholder this script does not fill: \
$(grep -o '\${[A-Za-z]*}' "$work/envoy-gateway-chart/values.yaml" | sort -u | tr '\n' ' ')"
  "$helm" template eg "$work/envoy-gateway-chart" --namespace envoy-gateway-system --skip-crds \
    >"$work/rendered.yaml"
  # Only the RBAC objects, and none of the certgen Job's.
  awk '
    function flush() { if (doc ~ /\nkind: (Cluster)?Role(Binding)?\n/ && doc !~ /certgen/) printf "---\n%s", doc; doc = "" }
    /^---/ { flush(); next }
    { doc = doc $0 "\n" }
    END { flush() }
  ' "$work/rendered.yaml" >"$work/envoy-gateway-rbac.yaml"
  printf '%s\n' "$gateway_api" >"$work/gateway-api-version"
  rm -f "$work/rendered.yaml"
  binary_ok "$work/envoy-gateway" || go_die "the built envoy-gateway does not say version $VERSION: \
$("$work/envoy-gateway" version 2>&1 | tail -n 5 || true)"
}

go_build envoy-gateway "$VERSION" binary_ok build envoy-gateway \
  envoy-gateway-crds.yaml envoy-gateway-rbac.yaml gateway-api-version envoy-gateway-chart \
  envoy-gateway
