#!/usr/bin/env bash
# Builds the gateway-leader binary with each lock backend alone (its Cargo features), and checks
# that such a build refuses the backends it left out at startup, naming the setting. A
# Kubernetes-only build must need neither protoc nor the etcd and Redis clients. Run by .ci/run;
# the default build (all three) is what scripts/test.sh tests.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[check-features] %s\n' "$*" >&2; }

for backend in kubernetes etcd redis; do
  say "cargo build -p gateway-leader --no-default-features --features $backend"
  if [ "$backend" = kubernetes ]; then
    # PROTOC pointing nowhere: etcd-client's build script would fail if it were compiled.
    PROTOC=/nonexistent cargo build -p gateway-leader --no-default-features --features "$backend"
    tree=$(PROTOC=/nonexistent cargo tree -p gateway-leader --no-default-features --features "$backend" -e normal --prefix none)
    # prost alone is no etcd client: the proxy encodes a controller's election Lease with it
    # (its runtime only: no build step, no protoc).
    if grep -qE '^(etcd-client|redis|tonic) ' <<<"$tree"; then
      say "a Kubernetes-only build links etcd or Redis clients:"
      grep -E '^(etcd-client|redis|tonic) ' <<<"$tree" | sort -u >&2
      exit 1
    fi
  else
    cargo build -p gateway-leader --no-default-features --features "$backend"
  fi
  other=redis
  [ "$backend" = redis ] && other=etcd
  set +e
  out=$(target/debug/gateway-leader run --lock-backend "$other" --print-config 2>&1)
  code=$?
  set -e
  if [ "$code" -ne 2 ] || ! grep -q "this build has no $other backend" <<<"$out"; then
    say "a $backend-only build must refuse --lock-backend $other with exit 2; got $code: $out"
    exit 1
  fi
  say "$backend alone: builds, and refuses --lock-backend $other: $out"
done
# With no backend at all the build must stop on the one message that names the features.
say "cargo build -p gateway-leader --no-default-features (must fail, naming the features)"
set +e
out=$(cargo build -p gateway-leader --no-default-features 2>&1)
code=$?
set -e
if [ "$code" -eq 0 ] || ! grep -q "needs at least one lock backend feature" <<<"$out"; then
  say "a build with no backend must stop naming the features; got $code:"
  printf '%s\n' "$out" | tail -n 20 >&2
  exit 1
fi
# Leave the default build in place for whoever runs the binary next.
cargo build -p gateway-leader
say "every backend builds alone"
