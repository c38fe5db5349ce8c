//! `cargo bench --bench failover`: a short fixed run of `gateway-leader-bench run` (every backend,
//! graceful and crash, 5 rounds each, watch beside poll), for a quick look after a change.
//! The full run is `gateway-leader-bench run`; see docs/benchmarks.md.
//!
//! Timing claims live here and in `gateway-leader-bench run`, never in timed tests.

use std::process::{Command, ExitCode};

fn main() -> ExitCode {
    // `cargo bench` passes `--bench` (and any filter): this fixed configuration takes none.
    let out = std::env::temp_dir().join("gateway-leader-bench-failover");
    // Both built by name, not by `CARGO_BIN_EXE_*`: this bench needs neither to be its own
    // package's binary.
    let built = testkit::workspace_binary("gateway-leader", "gateway-leader").and_then(|b| {
        testkit::workspace_binary("gateway-leader-bench", "gateway-leader-bench").map(|c| (b, c))
    });
    let (binary, bench) = match built {
        Ok(b) => b,
        Err(e) => {
            eprintln!("cannot build gateway-leader and gateway-leader-bench: {e:#}");
            return ExitCode::FAILURE;
        }
    };
    let status = Command::new(bench)
        .args(["run", "--lock-backend", "all"])
        .arg("--binary")
        .arg(binary)
        .args(["--scenario", "graceful", "--scenario", "crash"])
        .args(["--rounds", "5", "--replicas", "3", "--steady", "3s"])
        .arg("--out")
        .arg(&out)
        .status();
    match status {
        Ok(s) if s.success() => ExitCode::SUCCESS,
        Ok(s) => {
            eprintln!("gateway-leader-bench run failed: {s}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("cannot run gateway-leader-bench: {e}");
            ExitCode::FAILURE
        }
    }
}
