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
#   scripts/demo.sh --kubeconfig ~/.kube/config [backend]
#                                # an existing cluster (kind, k3s, ...) instead of a local
#                                # apiserver: no server is built (but etcd for the etcd lock); the
#                                # Gateway API CRDs are installed when the cluster lacks them; the
#                                # replicas run on this machine with that kubeconfig's rights, and
#                                # the sample (namespaces gateway-leader-demo*, GatewayClass
#                                # gateway-leader-demo) is removed afterwards
#
# This script only prepares: it installs what is missing with apt-get (scripts/packages.sh), builds
# the servers it needs once from their Go modules (scripts/servers.sh: kube-apiserver, etcd, the
# Gateway API CRDs; cached), builds the release binary and examples/demo/, and runs the example,
# which does the work.
set -euo pipefail
cd "$(dirname "$0")/.."

usage() { echo "usage: scripts/demo.sh [--kubeconfig PATH] [kubernetes|etcd|redis]" >&2; exit 2; }
kubeconfig=
backend=
while [ $# -gt 0 ]; do
  case "$1" in
    --kubeconfig) [ $# -ge 2 ] || usage; kubeconfig=$2; shift 2 ;;
    --kubeconfig=*) kubeconfig=${1#*=}; shift ;;
    kubernetes|etcd|redis) [ -z "$backend" ] || usage; backend=$1; shift ;;
    *) usage ;;
  esac
done
backend=${backend:-kubernetes}
if [ -n "$kubeconfig" ]; then
  [ -f "$kubeconfig" ] || { echo "--kubeconfig $kubeconfig: no such file" >&2; exit 2; }
  kubeconfig=$(cd "$(dirname "$kubeconfig")" && pwd)/$(basename "$kubeconfig")
fi

say() { printf '[demo.sh] %s\n' "$*" >&2; }

. scripts/packages.sh
ensure_packages

. scripts/servers.sh
# The demo's replicas are gateway-leader's own: no Contour to build.
SERVERS_WITHOUT_CONTOUR=1
if [ -n "$kubeconfig" ]; then
  SERVERS_WITHOUT_APISERVER=1
  [ "$backend" = etcd ] || SERVERS_WITHOUT_ETCD=1
  # The CRDs come from the Go module only if the cluster lacks them and Go is here (the demo
  # checks the cluster and says what is missing).
  command -v go >/dev/null 2>&1 || SERVERS_WITHOUT_CRDS=1
fi
ensure_servers

say "building gateway-leader and the demo (release; a first build takes several minutes)"
cargo build --release --bin gateway-leader --example demo
# Wherever CARGO_TARGET_DIR or a cargo config puts the build.
target=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
[ -n "$target" ] || { echo "cannot find cargo's target directory" >&2; exit 1; }

exec "$target/release/examples/demo" "$target/release/gateway-leader" "$backend" \
  ${kubeconfig:+--kubeconfig "$kubeconfig"}
