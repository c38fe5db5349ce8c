#!/usr/bin/env bash
# The main job of gateway-leader, live on this machine: a local kube-apiserver with the Gateway API
# CRDs and a small sample (a GatewayClass, a Gateway, a Service, three HTTPRoutes, a GRPCRoute), and three
# `gateway-leader run` replicas. Every replica computes the statuses, only the leader writes them;
# the demo prints who leads under which fencing term and each object's status with the replica and
# term that wrote it. Then it stops the leader (SIGTERM) and crashes the next one (SIGKILL),
# changing a route each time, and shows how long the next leader took to write.
#
#   scripts/demo.sh              # the lock is a Kubernetes Lease on that apiserver
#   scripts/demo.sh etcd         # the lock is a key in a throwaway etcd
#   scripts/demo.sh redis        # the lock is a key in a throwaway Redis (see docs/redis.md)
#
# This script only prepares: it installs what is missing with apt-get (scripts/packages.sh), builds
# kube-apiserver v1.20.2 once (scripts/build-kube-apiserver.sh, cached), builds the release binary
# and examples/demo.rs, and runs the example, which does the work.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/demo.sh [kubernetes|etcd|redis]" >&2; exit 2; }
[ $# -le 1 ] || usage
backend=${1:-kubernetes}
case "$backend" in kubernetes|etcd|redis) ;; *) usage ;; esac

say() { printf '[demo.sh] %s\n' "$*" >&2; }

. scripts/packages.sh
ensure_packages

if [ -z "${GATEWAY_LEADER_KUBE_APISERVER:-}" ]; then
  say "making sure kube-apiserver v1.20.2 is built (first run: about 5 minutes)"
  if [ "$(id -u)" -eq 0 ]; then
    GATEWAY_LEADER_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -n 1)
  else
    GATEWAY_LEADER_KUBE_APISERVER=$(sudo -E scripts/build-kube-apiserver.sh | tail -n 1)
  fi
  export GATEWAY_LEADER_KUBE_APISERVER
fi

# The upstream Gateway API CRDs, when the shared copy is beside the checkout (stand-ins otherwise).
if [ -z "${GATEWAY_LEADER_GATEWAY_API_CRDS:-}" ] && [ -d ../shared/gateway-api/v1.5.1 ]; then
  GATEWAY_LEADER_GATEWAY_API_CRDS=$(cd ../shared/gateway-api/v1.5.1 && pwd)
  export GATEWAY_LEADER_GATEWAY_API_CRDS
fi

say "building gateway-leader and the demo (release; a first build takes several minutes)"
cargo build --release --bin gateway-leader --example demo
# Wherever CARGO_TARGET_DIR or a cargo config puts the build.
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "cannot find cargo's target directory" >&2; exit 1; }

exec "$target/release/examples/demo" "$target/release/gateway-leader" "$backend"
