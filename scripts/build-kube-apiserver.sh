#!/usr/bin/env bash
# Builds a genuine kube-apiserver from the k8s.io/kubernetes Go module at a pinned version, and
# caches it outside the repository.
#
# Usage:   bin=$(scripts/build-kube-apiserver.sh [newest|oldest|vX.Y.Z[-PRE]] | tail -n1)
#          scripts/build-kube-apiserver.sh --cached [newest|oldest|vX.Y.Z[-PRE]]
#                                 # the cached binary's path, or exit 1 without building
#                                 # (testkit finds the binary so)
#
# newest (the default) and oldest are the versions scripts/versions.sh pins (KUBE_NEWEST,
# KUBE_OLDEST); GATEWAY_LEADER_KUBE_VERSION chooses when no argument does. The last line of stdout
# is the binary's absolute path; progress and build logs go to stderr.
#
# A pre-release (-alpha.N, -beta.N or -rc.N, e.g. v1.38.0-beta.0) builds the same way: its staging
# modules are published as v0.Y.Z-beta.N, and the version is stamped whole, as upstream stamps a
# pre-release. It is tried in a run of its own and never pinned (docs/kubernetes.md), so its build
# prunes nothing: the pinned builds beside it stay, and a later build of a pinned version removes
# it once it has gone a day unused (scripts/go.sh, prune_builds).
#
# How: k8s.io/kubernetes requires its staging modules (k8s.io/api, apimachinery, apiserver,
# client-go, component-base, ...) at v0.0.0 and replaces them with ./staging/..., which a module
# that depends on it does not inherit. So a throwaway wrapper module requires k8s.io/kubernetes
# vX.Y.Z and replaces each staging module with its published v0.Y.Z; `go build
# k8s.io/kubernetes/cmd/kube-apiserver` then builds from the module proxy, checked against the
# checksum database. The version is stamped as upstream's release builds do, so `--version` and
# `/version` say vX.Y.Z. Go comes from scripts/go.sh (the installed one, or a toolchain it fetches).
#
# Cache:   ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/kube-apiserver-vX.Y.Z-<recipe>/
#          <recipe> hashes this script and scripts/go.sh: a changed recipe
#          rebuilds once. Module downloads and Go's build cache sit in .../go/ beside it, so a
#          rebuild, or the other version, reuses what they share. A first build takes about
#          6 minutes on 2 cores (the second version, sharing Go's build cache, about 3).
#
# Controllers: `scripts/build-kube-apiserver.sh [--cached] VERSION controllers` builds
# kube-controller-manager and kube-scheduler of the same release from the same wrapper module
# instead, into their own cache entry (.../kube-controller-manager-vX.Y.Z-<recipe>/ holds both;
# its path is the last line; about 4 minutes after the apiserver, sharing Go's build cache).
# testkit's simulated nodes (testkit/src/kube/simulated.rs) run them, so that Deployments get
# Pods and Pods get bound; scripts/servers.sh builds the newest release's only.
set -euo pipefail
. "$(dirname "${BASH_SOURCE[0]}")/go.sh"
go_script build-kube-apiserver "$@"

want=${GO_ARGS[0]:-${GATEWAY_LEADER_KUBE_VERSION:-newest}}
case "$want" in
  newest) VERSION=$KUBE_NEWEST ;;
  oldest) VERSION=$KUBE_OLDEST ;;
  v1.[0-9]*.[0-9]*) VERSION=$want ;;
  *) go_die "unknown version '$want': give newest ($KUBE_NEWEST), oldest ($KUBE_OLDEST), a release \
vX.Y.Z or a pre-release vX.Y.Z-alpha.N, -beta.N or -rc.N" ;;
esac
[[ "$VERSION" =~ ^v1\.([0-9]+)\.([0-9]+)(-(alpha|beta|rc)\.[0-9]+)?$ ]] \
  || go_die "'$VERSION' is not a release vX.Y.Z or a pre-release vX.Y.Z-alpha.N, -beta.N or -rc.N"
MINOR=${BASH_REMATCH[1]}
PRERELEASE=${BASH_REMATCH[3]}
# The staging modules are tagged with the same patch and pre-release: v1.38.0-beta.0 requires
# k8s.io/api v0.38.0-beta.0.
STAGING_VERSION="v0.$MINOR.${BASH_REMATCH[2]}$PRERELEASE"

binary_ok() {
  [ "$("$1" --version 2>/dev/null)" = "Kubernetes $VERSION" ]
}

# The commands of k8s.io/kubernetes/cmd/ to build, and the check of the controllers' build: each
# of them, beside the binary it is given, says the version.
COMMANDS=(kube-apiserver)
case "${GO_ARGS[1]:-}" in
  "") ;;
  controllers) COMMANDS=(kube-scheduler kube-controller-manager) ;;
  *) go_die "unknown argument '${GO_ARGS[1]}' after the version: give controllers or nothing" ;;
esac
commands_ok() {
  local c
  for c in "${COMMANDS[@]}"; do binary_ok "$(dirname "$1")/$c" || return 1; done
}

# A wrapper module in $1 that requires k8s.io/kubernetes and its staging modules, and the
# binaries of COMMANDS built there.
build() {
  local work=$1 kdir go_line staging m pkg ldflags c
  go_say "downloading k8s.io/kubernetes@$VERSION"
  kdir=$(go_module_dir k8s.io/kubernetes "$VERSION")
  go_line=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$kdir/go.mod")
  staging=$(sed -n 's/^[[:space:]]*\(k8s\.io\/[a-z0-9-]*\) => \.\/staging\/src\/.*/\1/p' "$kdir/go.mod")
  [ -n "$staging" ] || go_die "k8s.io/kubernetes@$VERSION's go.mod replaces no staging module"
  {
    printf 'module gateway-leader.test/kube-apiserver\n\ngo %s\n\nrequire k8s.io/kubernetes %s\n\nreplace (\n' \
      "${go_line:-$GO_NEEDED}" "$VERSION"
    for m in $staging; do printf '\t%s => %s %s\n' "$m" "$m" "$STAGING_VERSION"; done
    printf ')\n'
  } >"$work/go.mod"
  # A package that imports the commands, so that `go mod tidy` resolves exactly their
  # dependencies.
  {
    printf '//go:build tools\n\npackage tools\n\nimport (\n'
    for c in "${COMMANDS[@]}"; do printf '\t_ "k8s.io/kubernetes/cmd/%s"\n' "$c"; done
    printf ')\n'
  } >"$work/tools.go"
  go_say "resolving the modules ${COMMANDS[*]} $VERSION need ($(go version))"
  (cd "$work" && go mod tidy)
  pkg=k8s.io/component-base/version
  ldflags="-s -w -X $pkg.gitVersion=$VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$MINOR \
-X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
  for c in "${COMMANDS[@]}"; do
    go_say "building k8s.io/kubernetes/cmd/$c $VERSION (a first build of kube-apiserver takes about 6 minutes on 2 cores)"
    (cd "$work" && go build -ldflags "$ldflags" -o "$work/$c" "k8s.io/kubernetes/cmd/$c")
    binary_ok "$work/$c" \
      || go_die "the built $c does not say Kubernetes $VERSION: $("$work/$c" --version 2>&1 || true)"
  done
}

GO_KEEP=("$KUBE_NEWEST" "$KUBE_OLDEST")
if [ -n "$PRERELEASE" ]; then
  # A pre-release is a run of its own: building it must not remove the pinned builds (of any
  # recipe) that another checkout or a test is using.
  prune_builds() { :; }
fi
if [ "${COMMANDS[*]}" = kube-apiserver ]; then
  go_build kube-apiserver "$VERSION" binary_ok build kube-apiserver kube-apiserver
else
  go_build kube-controller-manager "$VERSION" commands_ok build "" "${COMMANDS[@]}"
fi
