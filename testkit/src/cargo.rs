//! Binaries and examples of this workspace, built on demand, for tests that run them: a test of
//! `gateway-leader-bench` starts `gateway-leader` replicas, a backend's tests run its examples,
//! and cargo sets `CARGO_BIN_EXE_*` only for the test's own package's binaries.

use std::path::PathBuf;
use std::process::{Command, ExitStatus, Stdio};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use tokio::io::{AsyncBufReadExt, BufReader, Lines};
use tokio::process::{Child, ChildStdout};

/// Builds `bin` of workspace package `package` (a no-op when it is fresh) and returns its path.
///
/// It asks cargo (`$CARGO`, as cargo sets it for tests, else `cargo` on the PATH) rather than
/// guessing the target dir, so a binary left over from an older build is never used. Cargo holds
/// no lock while tests run, so this works inside `cargo test`.
///
/// A caller built with the release profile (`cargo bench`, `cargo test --release`) gets a release
/// build, so that a benchmark never times a debug binary.
pub fn workspace_binary(package: &str, bin: &str) -> Result<PathBuf> {
    build(package, "--bin", bin)
}

/// Builds example `example` of workspace package `package`, as [`workspace_binary`] builds a
/// binary, and returns its path.
pub fn workspace_example(package: &str, example: &str) -> Result<PathBuf> {
    build(package, "--example", example)
}

/// `cargo build -p <package> <kind> <name>`, and the executable cargo reports for it.
fn build(package: &str, kind: &str, name: &str) -> Result<PathBuf> {
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
        .args([kind, name]);
    // A test inherits the variables cargo sets for the crate under test. Build scripts that
    // watch one (ring's watches CARGO_MANIFEST_DIR) would see it change between this build and
    // a build from a shell, and each would rebuild half the tree for the other.
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy();
        if is_crate_variable(&key) {
            cmd.env_remove(&*key);
        }
    }
    if release {
        cmd.arg("--release");
    }
    let what = format!("cargo build -p {package} {kind} {name}");
    let out = cmd
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .stdin(Stdio::null())
        .stderr(Stdio::inherit())
        .output()
        .with_context(|| format!("running {what} ({})", cargo.to_string_lossy()))?;
    if !out.status.success() {
        bail!("{what} failed ({})", out.status);
    }
    for line in String::from_utf8_lossy(&out.stdout).lines() {
        let Ok(msg) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        if msg["reason"] == "compiler-artifact" && msg["target"]["name"] == name {
            if let Some(exe) = msg["executable"].as_str() {
                return Ok(PathBuf::from(exe));
            }
        }
    }
    bail!("{what} named no executable")
}

/// A variable cargo sets for the crate it builds or runs, rather than one that configures cargo.
fn is_crate_variable(key: &str) -> bool {
    key.starts_with("CARGO_PKG_")
        || key.starts_with("CARGO_BIN_")
        || matches!(
            key,
            "CARGO_MANIFEST_DIR"
                | "CARGO_MANIFEST_PATH"
                | "CARGO_CRATE_NAME"
                | "CARGO_PRIMARY_PACKAGE"
                | "CARGO_TARGET_TMPDIR"
                | "CARGO_RUSTC_CURRENT_DIR"
                | "OUT_DIR"
        )
}

/// A program of this workspace running as a child process, its stdout read line by line: start
/// it, wait for what it prints, stop it as an operator would. Killed if dropped while running.
pub struct Running {
    child: Child,
    stdout: Lines<BufReader<ChildStdout>>,
    /// Every stdout line read so far.
    seen: Vec<String>,
}

impl Running {
    /// Starts `cmd` with stdout piped (stdin closed, stderr as `cmd` says).
    pub fn spawn(mut cmd: tokio::process::Command) -> Result<Running> {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.as_std().get_program()))?;
        let stdout = child.stdout.take().context("the child's stdout")?;
        Ok(Running {
            child,
            stdout: BufReader::new(stdout).lines(),
            seen: Vec::new(),
        })
    }

    /// Reads stdout until a line satisfies `pred` and returns it; fails when stdout ends or
    /// `limit` passes first.
    pub async fn wait_for_line(
        &mut self,
        limit: Duration,
        what: &str,
        pred: impl Fn(&str) -> bool,
    ) -> Result<String> {
        let found = tokio::time::timeout(limit, async {
            while let Some(line) = self.stdout.next_line().await? {
                self.seen.push(line.clone());
                if pred(&line) {
                    return Ok(Some(line));
                }
            }
            Ok::<_, std::io::Error>(None)
        })
        .await;
        match found {
            Ok(Ok(Some(line))) => Ok(line),
            Ok(Ok(None)) => bail!("{what}: stdout ended first; it printed {:?}", self.seen),
            Ok(Err(e)) => Err(e).with_context(|| format!("{what}: reading stdout")),
            Err(_) => bail!(
                "{what}: not printed within {limit:?}; it printed {:?}",
                self.seen
            ),
        }
    }

    /// Sends `signal` (SIGTERM for a graceful stop), then waits up to `limit` for the exit;
    /// returns the exit status and every stdout line.
    pub async fn stop(
        mut self,
        signal: Signal,
        limit: Duration,
    ) -> Result<(ExitStatus, Vec<String>)> {
        let pid = self.child.id().context("the child has already exited")?;
        let pid = i32::try_from(pid).context("a pid fits an i32")?;
        kill(Pid::from_raw(pid), signal).with_context(|| format!("sending {signal}"))?;
        let rest = tokio::time::timeout(limit, async {
            while let Some(line) = self.stdout.next_line().await? {
                self.seen.push(line);
            }
            self.child.wait().await
        })
        .await;
        match rest {
            Ok(Ok(status)) => Ok((status, self.seen)),
            Ok(Err(e)) => Err(e).context("waiting for the child"),
            Err(_) => bail!(
                "no exit within {limit:?} of {signal}; it printed {:?}",
                self.seen
            ),
        }
    }
}

/// Runs an elector example (`etcd_elector`, `redis_elector`) with `arg` (its server) until it
/// prints that it leads and that it works under that leadership; runs `while_leading` with the
/// term it printed; then stops it with SIGTERM and checks that it exited 0 saying it released.
pub async fn run_elector_example<F, Fut>(
    package: &str,
    example: &str,
    arg: &str,
    limit: Duration,
    while_leading: F,
) -> Result<()>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let mut cmd = tokio::process::Command::new(workspace_example(package, example)?);
    cmd.arg(arg);
    let mut running = Running::spawn(cmd)?;
    let leading = running
        .wait_for_line(limit, "leading", |l| l.starts_with("leading under term "))
        .await?;
    let term = leading
        .trim_start_matches("leading under term ")
        .to_string();
    while_leading(term.clone()).await;
    let working = format!("working under term {term}");
    running
        .wait_for_line(limit, "working", |l| l == working)
        .await?;
    let (status, out) = running.stop(Signal::SIGTERM, limit).await?;
    if !status.success() || out.last().map(String::as_str) != Some("released: true") {
        bail!("{example} did not stop cleanly ({status}); it printed {out:?}");
    }
    Ok(())
}
