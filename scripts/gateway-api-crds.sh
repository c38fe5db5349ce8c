#!/usr/bin/env bash
# Prints the folder of the upstream Gateway API standard-channel CRDs the status writer targets:
# config/crd/standard/ of the sigs.k8s.io/gateway-api module at GATEWAY_API_VERSION
# (scripts/versions.sh), fetched through the Go module proxy once and checked against the
# checksum database. The test and demo scripts point GATEWAY_LEADER_GATEWAY_API_CRDS at it.
#
# Usage:   dir=$(scripts/gateway-api-crds.sh [vX.Y.Z] | tail -n1)
#          scripts/gateway-api-crds.sh --cached [vX.Y.Z]   # only when already downloaded
set -euo pipefail

exec 3>&1 1>&2
GO_SCRIPT=gateway-api-crds
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
. "$here/versions.sh"
. "$here/packages.sh"
. "$here/go.sh"

cached=0
if [ "${1:-}" = "--cached" ]; then
  cached=1
  shift
fi
VERSION=${1:-$GATEWAY_API_VERSION}
[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || go_die "'$VERSION' is not a release vX.Y.Z"
dir="$(go_cache_root)/go/mod/sigs.k8s.io/gateway-api@$VERSION/config/crd/standard"
if [ ! -d "$dir" ]; then
  [ "$cached" = 1 ] && { go_say "sigs.k8s.io/gateway-api@$VERSION is not downloaded; run $0"; exit 1; }
  ensure_go
  go_say "downloading sigs.k8s.io/gateway-api@$VERSION"
  dir="$(go_module_dir sigs.k8s.io/gateway-api "$VERSION")/config/crd/standard"
fi
ls "$dir"/*.yaml >/dev/null 2>&1 || go_die "$dir holds no CRD"
printf '%s\n' "$dir" >&3
