//! docs/operations.md's "Try it on this machine", run as written: the block between its
//! `BEGIN WALKTHROUGH` and `END WALKTHROUGH` markers goes to bash with `set -euo pipefail`, with
//! two substitutions only: this test's binaries instead of `cargo build --release ...`, and a dir
//! of its own instead of `.local`. It must show one holder, both conditions, one replica leading
//! and one following, and the leader's writes.

use std::path::Path;
use std::process::Command;

const DOC: &str = include_str!("../docs/operations.md");

fn block() -> String {
    let after = DOC
        .split("<!-- BEGIN WALKTHROUGH")
        .nth(1)
        .expect("docs/operations.md has a BEGIN WALKTHROUGH marker");
    let inside = after
        .split("<!-- END WALKTHROUGH")
        .next()
        .expect("an END WALKTHROUGH marker");
    let code = inside
        .split_once("```sh\n")
        .expect("a sh block after the marker")
        .1;
    code.rsplit_once("```")
        .expect("the block is closed")
        .0
        .to_string()
}

#[test]
fn the_operations_walkthrough_runs_as_written() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
    let bench = testkit::workspace_binary("gateway-leader-bench", "gateway-leader-bench")
        .expect("gateway-leader-bench builds");
    let bin_dirs =
        [exe, bench.as_path()].map(|b| b.parent().expect("the binary's dir").display().to_string());
    let first = "cargo build --release -p gateway-leader -p gateway-leader-bench && \
                 export PATH=$PWD/target/release:$PATH";
    let script = block();
    assert!(
        script.starts_with(first),
        "the walkthrough starts with the build: {script}"
    );
    // In the checkout, as `.local` is, so that the overlay's `../../deploy/base` holds.
    let dir = tempfile::Builder::new()
        .prefix(".walkthrough-")
        .tempdir_in(root)
        .expect("a dir in the checkout");
    let rel = dir
        .path()
        .strip_prefix(root)
        .expect("under the checkout")
        .display()
        .to_string();
    let script = script
        .replacen(
            first,
            &format!("export PATH={}:$PATH", bin_dirs.join(":")),
            1,
        )
        .replace(".local.log", &format!("{rel}/apiserver.log"))
        .replace(".local", &rel);
    let script =
        format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null; wait' EXIT\n{script}\n");
    let out = Command::new("bash")
        .arg("-c")
        .arg(&script)
        .current_dir(root)
        .env_remove("KUBECONFIG")
        .output()
        .expect("bash runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let logs: String = ["apiserver.log", "replica-1.log", "replica-2.log"]
        .iter()
        .map(|f| {
            let text = std::fs::read_to_string(dir.path().join(f)).unwrap_or_default();
            let tail: Vec<&str> = text.lines().rev().take(15).collect();
            format!(
                "--- {f} (last lines)\n{}\n",
                tail.into_iter().rev().collect::<Vec<_>>().join("\n")
            )
        })
        .collect();
    let report = format!(
        "script:\n{script}\nstdout:\n{stdout}\nstderr:\n{}\n{logs}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "the walkthrough failed: {report}");
    assert!(
        stdout.lines().any(|l| l.starts_with("holder: replica-")),
        "{report}"
    );
    assert!(
        stdout.contains("Accepted=True ResolvedRefs=True"),
        "{report}"
    );
    let status: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("leader_election_master_status"))
        .map(|l| l.rsplit(' ').next().unwrap_or_default())
        .collect();
    let mut sorted = status.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["0", "1"], "one leads, one follows: {report}");
    assert!(stdout.contains("status written"), "{report}");
    assert!(
        !stdout.contains('\u{1b}'),
        "a log written to a file has no colour codes: {report}"
    );
}
