//! The `gateway-leader` command: see `gateway-leader --help` and the README.

use std::process::ExitCode;

/// mimalloc instead of glibc's malloc: a computation of every status allocates and frees each
/// desired status anew, and glibc spent about a third of it in `malloc`/`free`
/// (`cargo bench -p gateway-leader-status --bench compute`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
    gateway_leader::main_with_args(std::env::args_os())
}
