#!/usr/bin/env bash
# Builds the upstream Gateway API conformance suite (the sigs.k8s.io/gateway-api/conformance Go
# module, at GATEWAY_API_VERSION, the release whose CRDs the newest apiserver gets) as a test
# binary, and caches it outside the repository. tests/conformance.rs runs it against
# `gateway-leader run` (docs/conformance.md says which tests and why).
#
# Usage:   bin=$(scripts/build-conformance.sh | tail -n1)   # the suite's test binary
#          scripts/build-conformance.sh --cached            # its path, or exit 1 without building
#
# How: the conformance module replaces sigs.k8s.io/gateway-api with ../, which a module that
# depends on it does not inherit, so a throwaway wrapper module requires both at the same
# version; `go test -c` then compiles the suite's own TestConformance, unmodified, from the
# module proxy (checked against the checksum database). The binary takes the suite's flags
# (-gateway-class, -supported-features, -skip-tests, -report-output, ...) after the usual
# `-test.*` ones, and says the version it was built from in GATEWAY_API_VERSION beside it.
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/conformance-vX.Y.Z-<recipe>/
#          (see scripts/build-kube-apiserver.sh; about 3 minutes on 2 cores the first time).
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-conformance "$@"
VERSION=$GATEWAY_API_VERSION

# The binary runs (-test.list answers without a cluster) and was built from VERSION.
binary_ok() {
  [ "$(cat "$(dirname "$1")/GATEWAY_API_VERSION" 2>/dev/null)" = "$VERSION" ] \
    && grep -qx TestConformance <<<"$("$1" -test.list 'TestConformance' 2>/dev/null)"
}

build() {
  local work=$1 go_line
  go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' \
    "$(go_module_dir sigs.k8s.io/gateway-api/conformance "$VERSION")/go.mod")
  printf 'module gateway-leader.test/conformance\n\ngo %s\n\nrequire (\n\tsigs.k8s.io/gateway-api %s\n\tsigs.k8s.io/gateway-api/conformance %s\n)\n' \
    "${go_line:-$GO_NEEDED}" "$VERSION" "$VERSION" >"$work/go.mod"
  # The suite's echo-server clients (gRPC, TCP, UDP: traffic only, which no test run here
  # sends) come from sigs.k8s.io/gateway-api-conformance-images; the module proxy answers 403
  # for the v0.2.0 zip the suite asks for and serves v0.1.0, which has the same packages.
  [ -n "${CONFORMANCE_IMAGES_VERSION:-}" ] \
    && printf '\nreplace sigs.k8s.io/gateway-api-conformance-images => sigs.k8s.io/gateway-api-conformance-images %s\n' \
      "$CONFORMANCE_IMAGES_VERSION" >>"$work/go.mod"
  # Keeps the suite's packages, test-only imports included, in the module graph for tidy.
  printf '//go:build tools\n\npackage tools\n\nimport _ "sigs.k8s.io/gateway-api/conformance"\n' \
    >"$work/tools.go"
  go_say "resolving the conformance suite $VERSION's modules ($(go version))"
  (cd "$work" && go mod tidy && go get -t sigs.k8s.io/gateway-api/conformance@"$VERSION")
  go_say "compiling the conformance suite $VERSION"
  (cd "$work" && go test -c -o "$work/conformance" sigs.k8s.io/gateway-api/conformance)
  printf '%s\n' "$VERSION" >"$work/GATEWAY_API_VERSION"
  binary_ok "$work/conformance" \
    || go_die "the built suite does not list TestConformance: $("$work/conformance" -test.list . 2>&1 | head -n 3)"
}

go_build conformance "$VERSION" binary_ok build conformance GATEWAY_API_VERSION conformance
