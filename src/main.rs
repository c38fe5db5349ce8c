//! The `gateway-leader` command: see `gateway-leader --help` and the README.

use std::process::ExitCode;

fn main() -> ExitCode {
    gateway_leader::main_with_args(std::env::args_os())
}
