# Sourced by scripts/test.sh and scripts/demo.sh: builds (once, cached) the servers the tests and
# the demo run, from their Go modules, and exports where they are:
#   GATEWAY_LEADER_KUBE_APISERVER    kube-apiserver at GATEWAY_LEADER_KUBE_VERSION (newest by
#                                    default; not built when GATEWAY_LEADER_TEST_KUBECONFIG names a
#                                    cluster or the variable is set already)
#   GATEWAY_LEADER_ETCD              etcd (etcdctl beside it)
#   GATEWAY_LEADER_GATEWAY_API_CRDS  the Gateway API standard-channel CRDs (kept when set): the
#                                    newest release (GATEWAY_API_VERSION), or the oldest supported
#                                    one (GATEWAY_API_OLDEST) with GATEWAY_LEADER_KUBE_VERSION=oldest
#   GATEWAY_LEADER_PEERS             the Go peers of testkit/peers/ (kept when set)
#   GATEWAY_LEADER_CONTOUR           Contour's controller, its CRDs and RBAC beside it (kept when
#                                    set): a real Gateway API controller for tests/contour/
#   GATEWAY_LEADER_ENVOY_GATEWAY     Envoy Gateway's control plane, its CRDs and RBAC beside it
#                                    (kept when set): the second, for tests/envoy_gateway/
# SERVERS_WITHOUT_APISERVER=1, SERVERS_WITHOUT_ETCD=1 and SERVERS_WITHOUT_CRDS=1 skip one (the
# demo on an existing cluster); SERVERS_WITHOUT_CONTOUR=1 skips Contour and Envoy Gateway (the
# demo runs neither).

ensure_servers() {
  if [ -z "${GATEWAY_LEADER_TEST_KUBECONFIG:-}" ] && [ -z "${GATEWAY_LEADER_KUBE_APISERVER:-}" ] \
    && [ "${SERVERS_WITHOUT_APISERVER:-0}" != 1 ]; then
    printf '[servers] making sure kube-apiserver %s is built (first run: about 6 minutes)\n' \
      "${GATEWAY_LEADER_KUBE_VERSION:-newest}" >&2
    GATEWAY_LEADER_KUBE_APISERVER=$(scripts/build-kube-apiserver.sh | tail -n 1)
    export GATEWAY_LEADER_KUBE_APISERVER
  fi
  if [ -z "${GATEWAY_LEADER_ETCD:-}" ] && [ "${SERVERS_WITHOUT_ETCD:-0}" != 1 ]; then
    GATEWAY_LEADER_ETCD="$(scripts/build-etcd.sh | tail -n 1)/etcd"
    export GATEWAY_LEADER_ETCD
  fi
  if [ -z "${GATEWAY_LEADER_GATEWAY_API_CRDS:-}" ] && [ "${SERVERS_WITHOUT_CRDS:-0}" != 1 ]; then
    # newest, or oldest beside the oldest apiserver (the script follows
    # GATEWAY_LEADER_KUBE_VERSION).
    GATEWAY_LEADER_GATEWAY_API_CRDS=$(scripts/gateway-api-crds.sh | tail -n 1)
    export GATEWAY_LEADER_GATEWAY_API_CRDS
  fi
  # GATEWAY_LEADER_PEERS: the Go peers of testkit/peers/ (kept when set).
  if [ -z "${GATEWAY_LEADER_PEERS:-}" ]; then
    GATEWAY_LEADER_PEERS=$(scripts/build-peers.sh | tail -n 1)
    export GATEWAY_LEADER_PEERS
  fi
  if [ -z "${GATEWAY_LEADER_CONTOUR:-}" ] && [ "${SERVERS_WITHOUT_CONTOUR:-0}" != 1 ]; then
    printf '[servers] making sure contour is built (first run: about 4 minutes)\n' >&2
    GATEWAY_LEADER_CONTOUR=$(scripts/build-contour.sh | tail -n 1)
    export GATEWAY_LEADER_CONTOUR
  fi
  if [ -z "${GATEWAY_LEADER_ENVOY_GATEWAY:-}" ] && [ "${SERVERS_WITHOUT_CONTOUR:-0}" != 1 ]; then
    printf '[servers] making sure envoy-gateway is built (first run: about 6 minutes)\n' >&2
    GATEWAY_LEADER_ENVOY_GATEWAY=$(scripts/build-envoy-gateway.sh | tail -n 1)
    export GATEWAY_LEADER_ENVOY_GATEWAY
  fi
}
