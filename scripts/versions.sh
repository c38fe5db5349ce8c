# Sourced by the scripts that build or fetch the test servers and peers: every version they pin,
# in one place. testkit asks those scripts (`--cached`) rather than reading this file.

# kube-apiserver, from k8s.io/kubernetes and its staging modules (scripts/build-kube-apiserver.sh).
# Newest: the current Kubernetes release. Oldest: the one the binary builds k8s-openapi for
# (feature `v1_32` in the root Cargo.toml, k8s-openapi 0.28's `earliest`), at the newest patch
# release the Go module proxy serves.
KUBE_NEWEST=v1.37.2
KUBE_OLDEST=v1.32.13

# etcd and etcdctl, from go.etcd.io/etcd/{server,etcdctl}/v3 (scripts/build-etcd.sh): the 3.6 line,
# which Kubernetes 1.37 is tested with. The apiservers and the etcd backend's tests run on it.
ETCD_VERSION=v3.6.16

# The Gateway API standard-channel CRDs the status writer targets, from sigs.k8s.io/gateway-api's
# config/crd/standard/ (scripts/gateway-api-crds.sh). Both releases are served: the tests install
# the newest beside the newest apiserver and the oldest beside the oldest apiserver
# (scripts/servers.sh), so every status suite runs on both bundles. v1.7.0's module says `go 1.27.0`,
# and Go will not even download a module whose go line is newer than itself: hence GO_NEEDED.
GATEWAY_API_VERSION=v1.7.0
GATEWAY_API_OLDEST=v1.5.1

# The Go peers in testkit/peers/ (their go.mod pins the same versions; scripts/build-peers.sh).
CLIENT_GO_VERSION=v0.37.2
CONTROLLER_RUNTIME_VERSION=v0.25.3
# The client-go of the gated peer in testkit/peers/next/ (its own go.mod pins it): KEP-6361's
# leader election recovery and write gate (LeaderElectionConfig.Recovery, LeaderElector.WriteGate)
# are new in 0.38, served so far as a pre-release. Once 0.38.x is out, the peers above move to it
# and next/ folds into them.
CLIENT_GO_NEXT_VERSION=v0.38.0-beta.0

# Go: what the builds need (the newest `go` line among the modules above), and the toolchain a
# Go 1.21+ that is older than that fetches through the module proxy (GOTOOLCHAIN).
GO_NEEDED=1.27.0
GO_TOOLCHAIN=go1.27.4
# The oldest installed Go that can fetch a toolchain by itself.
GO_FETCHES_TOOLCHAINS=1.21.0

# helm, from helm.sh/helm/v4/cmd/helm (scripts/build-helm.sh): the newest v4 release the Go module
# proxy serves. The chart's tests (tests/helm_chart.rs) lint and render with it.
HELM_VERSION=v4.3.2

# Contour, from github.com/projectcontour/contour/cmd/contour (scripts/build-contour.sh): a real
# Gateway API controller that tests/contour/ runs behind `gateway-leader proxy`. The newest
# release the Go module proxy serves; its go.mod names the Gateway API release it was built
# against (v1.3.0 for v1.33.8), which the build records beside the binary.
CONTOUR_VERSION=v1.33.8

# Envoy Gateway, from github.com/envoyproxy/gateway/cmd/envoy-gateway
# (scripts/build-envoy-gateway.sh): the second real Gateway API controller that
# tests/envoy_gateway/ runs behind `gateway-leader proxy`. The newest release the Go module proxy
# serves; built against Gateway API v1.6.1 and client-go v0.36 (the tests give it the CRDs of
# GATEWAY_API_VERSION).
ENVOY_GATEWAY_VERSION=v1.9.1

# The upstream Gateway API conformance suite (sigs.k8s.io/gateway-api/conformance, at
# GATEWAY_API_VERSION; scripts/build-conformance.sh) needs sigs.k8s.io/gateway-api-conformance-images
# v0.2.0 for its echo servers' clients (traffic only). The module proxy lists v0.2.0 but answers 403
# for its zip, and serves v0.1.0, whose packages the suite compiles against: the build replaces it.
CONFORMANCE_IMAGES_VERSION=v0.1.0

# kwok ("Kubernetes WithOut Kubelet"), from sigs.k8s.io/kwok/cmd/kwok (scripts/build-kwok.sh): the
# newest release the Go module proxy serves. testkit's simulated nodes run it beside a
# kube-controller-manager and a kube-scheduler, so that Deployments get Pods that are bound and
# Ready in the API while no container runs (the upstream conformance suite's readiness checks).
KWOK_VERSION=v0.8.0
