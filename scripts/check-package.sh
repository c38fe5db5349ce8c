#!/usr/bin/env bash
# Packages the library crates as crates.io would get them: metadata complete, every file in the
# package, and each crate building on its own from the packaged sources (interdependent workspace
# crates are packaged together, so a crate's dependency on another resolves to that package).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo package --locked --allow-dirty \
    -p leader-lock \
    -p leader-lock-kubernetes \
    -p leader-lock-etcd \
    -p leader-lock-redis \
    -p gateway-leader-status \
    "$@"
