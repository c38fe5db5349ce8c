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
#   GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER, GATEWAY_LEADER_KUBE_SCHEDULER
#                                    kube-controller-manager and kube-scheduler of the newest
#                                    release whatever GATEWAY_LEADER_KUBE_VERSION says (each kept
#                                    when set; not built with a GATEWAY_LEADER_TEST_KUBECONFIG
#                                    cluster): testkit's simulated nodes
#   GATEWAY_LEADER_KWOK              kwok, its Stages beside it (kept when set; not built with a
#                                    GATEWAY_LEADER_TEST_KUBECONFIG cluster): the simulated nodes'
#                                    fake Node and Pod statuses
#   GATEWAY_LEADER_CONFORMANCE       the upstream Gateway API conformance suite's test binary
#                                    (kept when set), for tests/conformance.rs
# SERVERS_WITHOUT_APISERVER=1, SERVERS_WITHOUT_ETCD=1 and SERVERS_WITHOUT_CRDS=1 skip one (the
# demo on an existing cluster); SERVERS_WITHOUT_CONTOUR=1 skips Contour, Envoy Gateway and the
# conformance suite (the demo runs none of them); SERVERS_WITHOUT_SIMULATED_NODES=1 skips the
# controllers and kwok.

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
  if [ -z "${GATEWAY_LEADER_TEST_KUBECONFIG:-}" ] \
    && [ "${SERVERS_WITHOUT_SIMULATED_NODES:-0}" != 1 ]; then
    if [ -z "${GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER:-}" ] \
      || [ -z "${GATEWAY_LEADER_KUBE_SCHEDULER:-}" ]; then
      printf '[servers] making sure kube-controller-manager and kube-scheduler %s are built %s\n' \
        '(newest)' '(first run: about 4 minutes)' >&2
      local controllers
      controllers=$(scripts/build-kube-apiserver.sh newest controllers | tail -n 1)
      GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER=${GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER:-$controllers/kube-controller-manager}
      GATEWAY_LEADER_KUBE_SCHEDULER=${GATEWAY_LEADER_KUBE_SCHEDULER:-$controllers/kube-scheduler}
      export GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER GATEWAY_LEADER_KUBE_SCHEDULER
    fi
    if [ -z "${GATEWAY_LEADER_KWOK:-}" ]; then
      GATEWAY_LEADER_KWOK=$(scripts/build-kwok.sh | tail -n 1)
      export GATEWAY_LEADER_KWOK
    fi
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
  if [ -z "${GATEWAY_LEADER_CONFORMANCE:-}" ] && [ "${SERVERS_WITHOUT_CONTOUR:-0}" != 1 ]; then
    printf '[servers] making sure the Gateway API conformance suite is built (first run: about 4 minutes)\n' >&2
    GATEWAY_LEADER_CONFORMANCE=$(scripts/build-conformance.sh | tail -n 1)
    export GATEWAY_LEADER_CONFORMANCE
  fi
}
