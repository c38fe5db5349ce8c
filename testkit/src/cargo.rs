//! A binary of another package of this workspace, built on demand, for tests that run it: a test
//! of `gateway-leader-bench` starts `gateway-leader` replicas, and cargo sets `CARGO_BIN_EXE_*`
//! only for the test's own package.

use std::path::PathBuf;
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Builds `bin` of workspace package `package` (a no-op when it is fresh) and returns its path.
///
/// It asks cargo (`$CARGO`, as cargo sets it for tests, else `cargo` on the PATH) rather than
/// guessing the target dir, so a binary left over from an older build is never used. Cargo holds
/// no lock while tests run, so this works inside `cargo test`.
///
/// A caller built with the release profile (`cargo bench`, `cargo test --release`) gets a release
/// build, so that a benchmark never times a debug binary.
pub fn workspace_binary(package: &str, bin: &str) -> Result<PathBuf> {
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let release = std::env::current_exe()
        .ok()
        .and_then(|exe| {
            // target/<profile>/deps/<test-or-bench>
            let profile = exe.parent()?.parent()?.file_name()?.to_owned();
            Some(profile == "release")
        })
        .unwrap_or(false);
    let mut cmd = Command::new(&cargo);
    cmd.args(["build", "--quiet", "--message-format=json", "-p", package])
        .args(["--bin", bin]);
    if release {
        cmd.arg("--release");
    }
    let out = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {} build -p {package}", cargo.to_string_lossy()))?;
    if !out.status.success() {
        bail!(
            "cargo build -p {package} --bin {bin} failed ({})",
            out.status
        );
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == bin {
            if let Some(exe) = msg["executable"].as_str() {
                return Ok(PathBuf::from(exe));
            }
        }
    }
    bail!("cargo build -p {package} --bin {bin} named no executable")
}
