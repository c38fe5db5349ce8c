#!/usr/bin/env bash
# Prints the folder of the upstream Gateway API standard-channel CRDs the status writer targets:
# config/crd/standard/ of the sigs.k8s.io/gateway-api module, fetched through the Go module proxy
# once and checked against the checksum database. The test and demo scripts point
# GATEWAY_LEADER_GATEWAY_API_CRDS at it.
#
# Usage:   dir=$(scripts/gateway-api-crds.sh [newest|oldest|vX.Y.Z] | tail -n1)
#          scripts/gateway-api-crds.sh --cached [newest|oldest|vX.Y.Z]   # only when downloaded
# newest is GATEWAY_API_VERSION and oldest GATEWAY_API_OLDEST (scripts/versions.sh): the oldest
# release the status writer supports, which the tests install beside the oldest apiserver. Without
# an argument, GATEWAY_LEADER_KUBE_VERSION=oldest chooses oldest, as scripts/servers.sh does.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script gateway-api-crds "$@"

want=${GO_ARGS[0]:-}
if [ -z "$want" ]; then
  [ "${GATEWAY_LEADER_KUBE_VERSION:-newest}" = oldest ] && want=oldest || want=newest
fi
case "$want" in
  newest) VERSION=$GATEWAY_API_VERSION ;;
  oldest) VERSION=$GATEWAY_API_OLDEST ;;
  *) VERSION=$want ;;
esac
[[ "$VERSION" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || go_die "'$VERSION' is not a release vX.Y.Z"
dir="$(go_cache_root)/go/mod/sigs.k8s.io/gateway-api@$VERSION/config/crd/standard"
if [ ! -d "$dir" ]; then
  [ "$GO_CACHED_ONLY" = 1 ] && { go_say "sigs.k8s.io/gateway-api@$VERSION is not downloaded; run $0"; exit 1; }
  ensure_go
  go_say "downloading sigs.k8s.io/gateway-api@$VERSION"
  dir="$(go_module_dir sigs.k8s.io/gateway-api "$VERSION")/config/crd/standard"
fi
ls "$dir"/*.yaml >/dev/null 2>&1 || go_die "$dir holds no CRD"
go_print "$dir"
