//! The command line: bad input exits 2 with one clear message, before any backend is touched.

use std::process::{Command, Output};

fn run(args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway-leader"));
    cmd.args(args);
    // A clean environment for settings: only what the test sets.
    for (k, _) in std::env::vars() {
        if k.starts_with("GATEWAY_LEADER_") || k == "POD_NAME" || k == "POD_NAMESPACE" {
            cmd.env_remove(k);
        }
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("the binary runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[track_caller]
fn assert_usage_error(o: &Output, needles: &[&str]) {
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

#[test]
fn unknown_backend_names_the_setting_and_the_choices() {
    let o = run(&["run", "--lock-backend", "nope"], &[]);
    assert_usage_error(
        &o,
        &["--lock-backend", "\"nope\"", "kubernetes, etcd, redis"],
    );
    let o = run(&["run"], &[("GATEWAY_LEADER_LOCK_BACKEND", "zookeeper")]);
    assert_usage_error(
        &o,
        &["GATEWAY_LEADER_LOCK_BACKEND", "kubernetes, etcd, redis"],
    );
}

#[test]
fn bad_durations_and_timing_rules() {
    let o = run(&["run", "--lease-duration", "soon"], &[]);
    assert_usage_error(&o, &["--lease-duration", "15s"]);
    let o = run(
        &["run", "--lease-duration", "5s", "--renew-deadline", "10s"],
        &[],
    );
    assert_usage_error(&o, &["lease-duration", "renew-deadline"]);
    let o = run(&["run", "--retry-period", "9s"], &[]);
    assert_usage_error(&o, &["renew-deadline", "retry-period"]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "kubernetes",
            "--lease-duration",
            "15500ms",
        ],
        &[],
    );
    assert_usage_error(&o, &["lease-duration", "whole"]);
}

#[test]
fn bad_lock_name_and_namespace() {
    let o = run(&["run", "--leader-election-lock-name", "Not_A_Name"], &[]);
    assert_usage_error(&o, &["--leader-election-lock-name", "DNS-1123"]);
    let o = run(&["run", "--leader-election-namespace", "a.b"], &[]);
    assert_usage_error(&o, &["--leader-election-namespace", "DNS-1123 label"]);
}

#[test]
fn unreadable_files_are_named() {
    let o = run(&["run", "--config", "/nonexistent/gl.toml"], &[]);
    assert_usage_error(&o, &["/nonexistent/gl.toml"]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--redis-password-file",
            "/nonexistent/pw",
        ],
        &[],
    );
    assert_usage_error(&o, &["--redis-password-file", "/nonexistent/pw"]);
}

#[test]
fn malformed_endpoints_are_refused() {
    let o = run(
        &[
            "run",
            "--lock-backend",
            "etcd",
            "--etcd-endpoints",
            "not a url",
        ],
        &[],
    );
    assert_usage_error(&o, &["etcd-endpoints"]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--redis-url",
            "http://x:1",
        ],
        &[],
    );
    assert_usage_error(&o, &["redis-url"]);
}

#[test]
fn unknown_keys_in_the_config_file_are_refused() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("c.yaml");
    std::fs::write(&f, "lease_durration: 20s\n").expect("write");
    let o = run(&["run", "--config", f.to_str().expect("utf-8")], &[]);
    assert_usage_error(&o, &["lease_durration"]);
}

#[test]
fn precedence_is_flag_then_env_then_file_then_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let f = dir.path().join("c.toml");
    std::fs::write(
        &f,
        "lock_backend = \"etcd\"\nlease_duration = \"20s\"\nrenew_deadline = 12\nleader_election_identity = \"from-file\"\n",
    )
    .expect("write");
    let path = f.to_str().expect("utf-8");
    let o = run(&["run", "--config", path, "--print-config"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("lock_backend = \"etcd\""), "{out}");
    assert!(out.contains("lease_duration = \"20s\""), "{out}");
    assert!(out.contains("retry_period = \"2s\""), "default kept: {out}");
    let o = run(
        &[
            "run",
            "--config",
            path,
            "--print-config",
            "--lease-duration",
            "30s",
        ],
        &[
            ("GATEWAY_LEADER_LEASE_DURATION", "25s"),
            ("GATEWAY_LEADER_LEADER_ELECTION_IDENTITY", "from-env"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("lease_duration = \"30s\""), "flag wins: {out}");
    assert!(
        out.contains("leader_election_identity = \"from-env\""),
        "env beats file: {out}"
    );
}

#[test]
fn print_config_redacts_secrets() {
    let dir = tempfile::tempdir().expect("tempdir");
    let pw = dir.path().join("pw");
    std::fs::write(&pw, "hunter2\n").expect("write");
    let o = run(
        &["run", "--lock-backend", "redis", "--print-config"],
        &[("GATEWAY_LEADER_REDIS_PASSWORD", "s3cret")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(!out.contains("s3cret"), "{out}");
    assert!(out.contains("redis_password = \"<redacted>\""), "{out}");
}
