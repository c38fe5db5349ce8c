#!/bin/sh
# A Helm post-renderer: reads the manifests a chart rendered on stdin and writes them on stdout
# with `gateway-leader proxy` added to the chart's Deployment (deploy/components/proxy-sidecar),
# as the install directory says: ./install beside this script (nginx-gateway-fabric's chart,
# release ngf in nginx-gateway), or the directory given as the first argument.
#
#   Helm 3:  helm install ngf oci://ghcr.io/nginx/charts/nginx-gateway-fabric -n nginx-gateway \
#              --set nginxGateway.replicas=2 --post-renderer ./kustomize.sh
#   Helm 4:  helm plugin install .        # once; this directory is the plugin gateway-leader-proxy
#            helm install ... --post-renderer gateway-leader-proxy [--post-renderer-args DIR]
#
# Needs kubectl 1.27 or later (kustomize v5), or KUBECTL naming one. docs/sidecar.md, "Adding
# the proxy to an existing controller".
set -eu

here=$(cd "$(dirname "$0")" && pwd -P)
install=$(cd "${1:-$here/install}" && pwd -P)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cat >"$work/helm-output.yaml"
# kustomize reaches another directory only as a kustomization: a link makes the install
# directory one of this throwaway kustomization's.
ln -s "$install" "$work/install"
cat >"$work/kustomization.yaml" <<'KUSTOMIZATION'
apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources:
  - helm-output.yaml
components:
  - install
KUSTOMIZATION
"${KUBECTL:-kubectl}" kustomize "$work"
