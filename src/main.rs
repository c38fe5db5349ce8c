//! The `gateway-leader` command: see `gateway-leader --help` and the README.

use std::process::ExitCode;

// jemalloc, not glibc's malloc: less resident memory at tens of thousands of routes, where the
// stores' small allocations and the watch events' transient ones interleave (docs/benchmarks.md,
// "The allocator").
#[global_allocator]
static ALLOC: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> ExitCode {
    // The program, not a library it links, picks rustls' crypto provider for the process: kube
    // and redis build their TLS configs from the process default, which rustls cannot choose by
    // itself once a dependency compiles in a second provider. etcd-client names ring per client.
    let _ = rustls::crypto::ring::default_provider().install_default();
    gateway_leader::main_with_args(std::env::args_os())
}
