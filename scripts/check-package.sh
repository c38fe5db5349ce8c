#!/usr/bin/env bash
# Packages the library crates as crates.io would get them: metadata complete, every file in the
# package, and each crate building on its own from the packaged sources (interdependent workspace
# crates are packaged together, so a crate's dependency on another resolves to that package).
set -euo pipefail
cd "$(dirname "$0")/.."
crates=(leader-lock leader-lock-kubernetes leader-lock-etcd leader-lock-redis gateway-leader-log gateway-leader-status)
# Cargo unpacks the packages of its local overlay registry under $CARGO_HOME/registry/src/-<hash>/
# and, as for any registry, never unpacks the same name and version again: a second run would
# verify against the first run's sources. Those dirs (named `-<hash>`, never crates.io's) are
# removed for our crates first.
for c in "${crates[@]}"; do
  rm -rf "${CARGO_HOME:-$HOME/.cargo}"/registry/src/-*/"$c"-[0-9]*
done
# Cargo also takes a registry package of a name and version it has built before as unchanged,
# whatever its sources now say; these are our own, changed since, so a warm target dir would
# verify a crate against the previous run's build of its workspace dependencies (seen: a new
# trait method "not a member" of the old build). Their build fingerprints go too.
target="${CARGO_TARGET_DIR:-target}"
for c in "${crates[@]}"; do
  rm -rf "$target"/debug/.fingerprint/"$c"-[0-9a-f]*
done
# Each crate is verified alone, without its dev-dependencies, and the library crates leave the
# Kubernetes version of k8s-openapi to the program that links them: the version it must pick,
# given as k8s-openapi's build script allows, is the binary's (the root Cargo.toml).
export K8S_OPENAPI_ENABLED_VERSION=1.32
args=()
for c in "${crates[@]}"; do args+=(-p "$c"); done
cargo package --locked --allow-dirty "${args[@]}" "$@"
