//! `gateway-leader-bench run`: bad input exits 2 with one line naming the flag, before any server
//! or replica starts.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The `gateway-leader` binary the bench's replicas run, built once if it is not fresh.
fn gateway_leader() -> &'static Path {
    static BIN: OnceLock<PathBuf> = OnceLock::new();
    BIN.get_or_init(|| {
        testkit::workspace_binary("gateway-leader", "gateway-leader")
            .expect("gateway-leader builds")
    })
}

fn bench(args: &[&str], out: &std::path::Path) -> (Option<i32>, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
        .arg("run")
        .arg("--binary")
        .arg(gateway_leader())
        .args(args)
        .arg("--out")
        .arg(out)
        .env("HOME", "/nonexistent")
        .output()
        .expect("the binary runs");
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn bad_input_exits_2_naming_the_flag_before_anything_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    for (args, needle) in [
        (&["--scenario", "nap"][..], "--scenario \"nap\""),
        (
            &["--lock-backend", "zookeeper"][..],
            "--lock-backend \"zookeeper\"",
        ),
        (&["--replicas", "1"][..], "--replicas 1"),
        (&["--rounds", "0"][..], "--rounds 0"),
        (
            &[
                "--lock-backend",
                "etcd",
                "--lease-duration",
                "1s",
                "--renew-deadline",
                "800ms",
                "--retry-period",
                "200ms",
            ][..],
            "below this backend's minimum",
        ),
        (&["--renew-deadline", "9s"][..], "renew-deadline"),
        (
            &["--lock-backend", "etcd", "--lease-duration", "4500ms"][..],
            "must be a whole number of seconds",
        ),
        (
            &["--redis-url", "redis://user:secret@127.0.0.1"][..],
            "redis",
        ),
        // The production topologies' scenarios run on their own lane only.
        (
            &["--scenario", "member-kill"][..],
            "--scenario member-kill: faults an etcd member; give --lock-backend etcd-cluster",
        ),
        (
            &[
                "--lock-backend",
                "etcd-cluster",
                "--scenario",
                "backend-restart",
            ][..],
            "--scenario backend-restart: not on etcd-cluster",
        ),
        (
            &["--scenario", "sentinel-failover", "--lock-backend", "redis"][..],
            "--scenario sentinel-failover: fails the Redis primary over",
        ),
        (
            &["--lock-backend", "redis-sentinel", "--scenario", "vanish"][..],
            "--scenario vanish: not on redis-sentinel",
        ),
    ] {
        let (code, stderr) = bench(args, &out);
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
        assert!(!out.exists(), "{args:?}: nothing may be created");
    }
}

#[test]
fn a_missing_gateway_leader_binary_is_named_before_anything_starts() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
        .args(["run", "--binary", "/nonexistent/gateway-leader", "--out"])
        .arg(&out)
        .output()
        .expect("the binary runs");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("--binary /nonexistent/gateway-leader: not a file"),
        "{stderr}"
    );
    assert!(!out.exists(), "nothing may be created");
}

/// The children of `pid`, from /proc.
fn children(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").expect("/proc").flatten() {
        let Ok(child) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ppid ...`; comm may hold spaces, so read after the last ')'.
        let ppid = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1))
            .and_then(|p| p.parse::<u32>().ok());
        if ppid == Some(pid) {
            out.push(child);
        }
    }
    out
}

#[test]
fn a_signalled_bench_stops_every_replica_and_server_it_started() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut bench = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
        .args(["run", "--lock-backend", "redis", "--scenario", "crash"])
        .arg("--binary")
        .arg(gateway_leader())
        .args(["--wakeup", "watch", "--rounds", "50", "--steady", "0s"])
        .arg("--out")
        .arg(dir.path().join("out"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("the binary runs");
    // Wait until the replicas run: the apiserver, redis-server and three replicas at least.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    let mut started = Vec::new();
    while std::time::Instant::now() < deadline {
        started = children(bench.id());
        if started.len() >= 5 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
    assert!(started.len() >= 5, "the bench started {started:?}");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(i32::try_from(bench.id()).expect("pid")),
        nix::sys::signal::Signal::SIGTERM,
    )
    .expect("SIGTERM");
    let status = bench.wait().expect("the bench exits");
    assert_eq!(
        status.code(),
        Some(1),
        "a stopped run is a failure at run time"
    );
    // Each child is gone (a zombie reaped by init counts as gone once it has no parent of ours).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let alive: Vec<u32> = started
            .iter()
            .copied()
            .filter(|p| {
                std::fs::read_to_string(format!("/proc/{p}/stat")).is_ok_and(|s| {
                    !s.rsplit_once(')')
                        .is_some_and(|(_, r)| r.trim_start().starts_with('Z'))
                })
            })
            .collect();
        if alive.is_empty() {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "still running after the bench stopped: {alive:?}"
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
}

#[test]
fn real_controllers_refuses_bad_input_naming_the_flag_and_the_accepted_values() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = dir.path().join("out");
    for (args, needle) in [
        (
            &["--controllers", "contour,istio"][..],
            "--controllers: \"istio\"; accepted: contour, envoy-gateway",
        ),
        (
            &["--modes", "proxied"][..],
            "--modes: \"proxied\"; accepted: native, fenced, driven",
        ),
        (
            &["--scenarios", "partition"][..],
            "--scenarios: \"partition\"; accepted: graceful, crash, freeze, churn",
        ),
        (&["--rounds", "0"][..], "--rounds 0"),
        (&["--controller-retry", "12s"][..], "--controller-retry"),
        (&["--lease-duration", "soon"][..], "--lease-duration soon"),
    ] {
        let o = Command::new(env!("CARGO_BIN_EXE_gateway-leader-bench"))
            .arg("real-controllers")
            .arg("--binary")
            .arg(gateway_leader())
            .args(args)
            .arg("--out")
            .arg(&out)
            .output()
            .expect("the binary runs");
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert_eq!(stderr.trim().lines().count(), 1, "{args:?}: {stderr}");
        assert!(!out.exists(), "{args:?}: nothing may be created");
    }
}
