#!/usr/bin/env bash
# A live failover demo on this machine: a throwaway etcd (or Redis) on a free loopback port, three
# `gateway-leader run` replicas, then a graceful stop (SIGTERM) and a crash (SIGKILL) of the leader.
# It prints who leads under which fencing term and how long each handover took.
#
#   scripts/demo.sh            # etcd
#   scripts/demo.sh redis      # Redis (a fresh Redis first waits one lease: see docs/redis.md)
#
# Installs etcd-server / redis-server and the build's needs with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/.."
backend=${1:-etcd}
case "$backend" in etcd|redis) ;; *) echo "usage: scripts/demo.sh [etcd|redis]" >&2; exit 2 ;; esac

say() { printf '\033[1m[demo]\033[0m %s\n' "$*"; }
. scripts/packages.sh
ensure_packages

say "building gateway-leader (release)"
cargo build --release --quiet
bin=target/release/gateway-leader

work=$(mktemp -d -t gateway-leader-demo-XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
# A short lease so the crash case finishes quickly; the defaults are 15s/10s/2s.
timing=(--lease-duration 5s --renew-deadline 3s --retry-period 1s)
if [ "$backend" = etcd ]; then
  peer=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  etcd --name demo --data-dir "$work/etcd" \
    --listen-client-urls "http://127.0.0.1:$port" --advertise-client-urls "http://127.0.0.1:$port" \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "demo=http://127.0.0.1:$peer" >"$work/server.log" 2>&1 &
  pids+=($!)
  lock=(--lock-backend etcd --etcd-endpoints "http://127.0.0.1:$port")
else
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" >"$work/server.log" 2>&1 &
  pids+=($!)
  lock=(--lock-backend redis --redis-url "redis://127.0.0.1:$port")
fi
say "$backend on 127.0.0.1:$port"
for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break; sleep 0.1; done

declare -A rpid
start_replica() {
  "$bin" run "${lock[@]}" "${timing[@]}" --leader-election-identity "$1" --log-format json \
    2>"$work/$1.log" &
  rpid[$1]=$!
  pids+=($!)
  # No job-control chatter when the demo kills a replica on purpose.
  disown "$!"
}
for r in replica-a replica-b replica-c; do start_replica "$r"; done

# Prints "<replica> <term> <timestamp>" of the newest "leading" line among the given replicas.
leader_of() {
  python3 - "$work" "$@" <<'PY'
import json, sys
work, names = sys.argv[1], sys.argv[2:]
best = None
for n in names:
    try:
        lines = open(f"{work}/{n}.log").read().splitlines()
    except FileNotFoundError:
        continue
    for l in lines:
        try:
            j = json.loads(l)
        except ValueError:
            continue
        if j.get("message") == "leadership: leading" and (best is None or j["timestamp"] > best[2]):
            best = (n, j.get("term"), j["timestamp"])
if best:
    print(*best)
PY
}
wait_leader() {
  local deadline=$((SECONDS + 60)) l
  while [ $SECONDS -lt $deadline ]; do
    l=$(leader_of "$@")
    [ -n "$l" ] && { echo "$l"; return; }
    sleep 0.05
  done
  echo "no leader within 60s; logs in $work" >&2; exit 1
}
ms_between() { python3 -c 'import sys,datetime as d; f=lambda s: d.datetime.fromisoformat(s.replace("Z","+00:00")); print(round((f(sys.argv[2])-f(sys.argv[1])).total_seconds()*1000,1))' "$1" "$2"; }

read -r leader term at < <(wait_leader replica-a replica-b replica-c)
say "$leader leads with fencing term $term"
sleep 2

others=(); for r in replica-a replica-b replica-c; do [ "$r" != "$leader" ] && others+=("$r"); done
stop_at=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
say "graceful stop: SIGTERM to $leader"
kill -TERM "${rpid[$leader]}"
read -r leader2 term2 at2 < <(wait_leader "${others[@]}")
say "$leader2 leads with term $term2, $(ms_between "$stop_at" "$at2") ms after the SIGTERM"

sleep 2
rest=(); for r in "${others[@]}"; do [ "$r" != "$leader2" ] && rest+=("$r"); done
crash_at=$(date -u +%Y-%m-%dT%H:%M:%S.%6NZ)
say "crash: SIGKILL to $leader2 (the others must wait for its lease, ${timing[1]}, to run out)"
kill -KILL "${rpid[$leader2]}"
read -r leader3 term3 at3 < <(wait_leader "${rest[@]}")
say "$leader3 leads with term $term3, $(ms_between "$crash_at" "$at3") ms after the crash"
say "done; terms went $term -> $term2 -> $term3"
