#!/usr/bin/env bash
# Prints the path of a promtool, which tests/monitoring/ runs the alert rules' unit tests with
# (`promtool test rules`); fetches one when there is none.
#
# Usage:   promtool=$(scripts/install-promtool.sh | tail -n1)
#
# The promtool on PATH is used when there is one. Otherwise Debian's (or Ubuntu's) prometheus
# package is downloaded with apt-get (no root needed once the package lists are current) and
# only its promtool is unpacked into
# ${GATEWAY_LEADER_CACHE_DIR:-$HOME/.cache/gateway-leader}/promtool-<version>/, once; later runs
# reuse it. The package is not installed: that would start a Prometheus server on port 9090,
# gateway-leader's own default port. Progress goes to stderr; the last line of stdout is the path.
set -euo pipefail

say() { printf '[install-promtool] %s\n' "$*" >&2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if command -v promtool >/dev/null 2>&1 && promtool --version >/dev/null 2>&1; then
  command -v promtool
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  say "no promtool on PATH and no apt-get: install promtool (it comes with Prometheus," \
    "https://prometheus.io/download/) and run again, or set GATEWAY_LEADER_PROMTOOL"
  exit 1
fi

candidate() { apt-cache policy prometheus 2>/dev/null | awk '/Candidate:/ { print $2 }'; }
version=$(candidate)
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  . "$here/packages.sh"
  say "updating the package lists to find Debian's prometheus package"
  as_root apt-get update -q >&2
  version=$(candidate)
fi
if [ -z "$version" ] || [ "$version" = "(none)" ]; then
  say "apt has no prometheus package here; install promtool by hand, or set GATEWAY_LEADER_PROMTOOL"
  exit 1
fi

cache="${GATEWAY_LEADER_CACHE_DIR:-${HOME:?HOME is not set}/.cache/gateway-leader}/promtool-${version//[:+~]/_}"
if [ -x "$cache/promtool" ] && "$cache/promtool" --version >/dev/null 2>&1; then
  echo "$cache/promtool"
  exit 0
fi

work=$(mktemp -d -t gateway-leader-promtool-XXXXXX)
trap 'rm -rf "$work"' EXIT
# apt-get download fetches as its own user (_apt), which must be able to write here.
chmod 0755 "$work"
say "downloading prometheus $version with apt-get to unpack its promtool into $cache"
(cd "$work" && apt-get download -q "prometheus=$version" >&2)
dpkg-deb -x "$work"/prometheus_*.deb "$work/root"
mkdir -p "$cache"
install -m 0755 "$work/root/usr/bin/promtool" "$cache/promtool"
"$cache/promtool" --version >/dev/null || { say "the unpacked $cache/promtool does not run"; exit 1; }
say "installed $("$cache/promtool" --version 2>&1 | head -n1)"
echo "$cache/promtool"
