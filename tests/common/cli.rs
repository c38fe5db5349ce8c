//! Running the binary for the command-line tests: a clean environment for settings, bounded
//! runs, and the checks every usage error must pass.

use std::ffi::OsStr;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The binary with `args` and a clean environment for settings: no `GATEWAY_LEADER_*`, pod or
/// `RUST_LOG` variables, and no kubeconfig to find, unless the test sets them.
pub fn command(args: &[&str], env: &[(&str, &OsStr)]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway-leader"));
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        let ours = k.to_str().is_some_and(|k| {
            k.starts_with("GATEWAY_LEADER_")
                || ["POD_NAME", "POD_NAMESPACE", "KUBECONFIG", "RUST_LOG"].contains(&k)
        });
        if ours {
            cmd.env_remove(k);
        }
    }
    cmd.env("HOME", "/nonexistent");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd
}

pub fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let env: Vec<(&str, &OsStr)> = env.iter().map(|(k, v)| (*k, OsStr::new(v))).collect();
    run_os(args, &env)
}

pub fn run_os(args: &[&str], env: &[(&str, &OsStr)]) -> Output {
    command(args, env).output().expect("the binary runs")
}

/// Runs the binary in an empty environment under a 1 GiB address-space limit and kills it after
/// 20 s, so that a check that does not work fails the test instead of hanging it or exhausting
/// the machine's memory.
pub fn run_bounded(args: &[&str]) -> Output {
    let mut child = Command::new("/bin/sh")
        .args(["-c", "ulimit -v 1048576 && exec \"$0\" \"$@\""])
        .arg(env!("CARGO_BIN_EXE_gateway-leader"))
        .args(args)
        .env_clear()
        .env("HOME", "/nonexistent")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("sh runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().expect("wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("gateway-leader {args:?} still ran after 20 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().expect("output")
}

pub fn path_str(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 temp path")
}

/// Writes `text` to the file `name` in `dir`; returns its path.
pub fn write(dir: &tempfile::TempDir, name: &str, text: &str) -> String {
    let path = dir.path().join(name);
    std::fs::write(&path, text).expect("write");
    path_str(&path).to_string()
}

/// Runs `args` with `--print-config`, which must succeed; returns what it printed.
pub fn print_config(args: &[&str], env: &[(&str, &str)]) -> String {
    let o = run(&[args, &["--print-config"]].concat(), env);
    assert!(o.status.success(), "{}", stderr(&o));
    stdout(&o)
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
pub fn assert_usage_error(o: &Output, needles: &[&str]) {
    let err = stderr(o);
    assert_eq!(
        o.status.code(),
        Some(2),
        "exit code 2 expected; stderr: {err}"
    );
    for n in needles {
        assert!(err.contains(n), "stderr should mention {n:?}: {err}");
    }
    assert_eq!(
        err.trim().lines().count(),
        1,
        "one clear message expected: {err}"
    );
}
