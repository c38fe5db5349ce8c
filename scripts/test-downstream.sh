#!/usr/bin/env bash
# Builds tests/downstream/ (the library crates as a crate outside this workspace uses them, with
# k8s-openapi's `latest` where the workspace picks `v1_32`) and runs its test, two electors on a
# real kube-apiserver. Run by .ci/run after scripts/test.sh.
#
# It starts from the workspace's Cargo.lock and builds into the workspace's target dir, so every
# crate the two share at the same version and features is reused; what k8s-openapi's version
# feature reaches (k8s-openapi, kube, gateway-api, the library crates, testkit) is built again,
# beside the workspace's builds rather than over them. Extra arguments go to `cargo test`.
set -euo pipefail
cd "$(dirname "$0")/.."

say() { printf '[test-downstream] %s\n' "$*" >&2; }

. scripts/servers.sh
ensure_servers

# Outside the workspace, so `cargo fmt --all` does not see it.
cargo fmt --manifest-path tests/downstream/Cargo.toml -- --check

# A copy, not a lock file of its own: the versions are the workspace's, and nothing here can
# drift from them. Cargo drops what the crate does not use.
cp Cargo.lock tests/downstream/Cargo.lock
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
say "cargo test in tests/downstream (target dir $CARGO_TARGET_DIR)"
started=$SECONDS
cargo test --manifest-path tests/downstream/Cargo.toml "$@"
say "built and ran in $((SECONDS - started)) s"
