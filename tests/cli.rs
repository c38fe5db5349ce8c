//! The command line: bad input exits 2 with one clear message, before any backend is touched.

mod common;

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use common::cli::*;

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
fn worker_threads_are_a_bounded_count_and_tokio_s_variable_is_not_read() {
    for bad in ["0", "257", "many", " 2x"] {
        let o = run(&["proxy", "--worker-threads", bad], &[]);
        assert_usage_error(&o, &["--worker-threads", "from 1 to 256"]);
    }
    let o = run(&["run"], &[("GATEWAY_LEADER_WORKER_THREADS", "0")]);
    assert_usage_error(&o, &["GATEWAY_LEADER_WORKER_THREADS", "from 1 to 256"]);
    let o = run(&["proxy", "--worker-threads", "3", "--print-config"], &[]);
    assert!(
        stdout(&o).contains("worker_threads = \"3\""),
        "{}",
        stdout(&o)
    );
    // tokio panics on this value when it reads the variable itself (exit 101); the runtime is
    // always given its thread count instead, so the command runs and its code comes back.
    for threads in [&[][..], &["--worker-threads", "2"]] {
        let mut args = vec![
            "exec",
            "--leader-election-disable",
            "--exec-restart",
            "never",
            "--lock-backend",
            "redis",
            "--health-addr",
            "127.0.0.1:0",
        ];
        args.extend_from_slice(threads);
        args.extend_from_slice(&["--", "/bin/sh", "-c", "exit 7"]);
        let o = run(&args, &[("TOKIO_WORKER_THREADS", "many")]);
        assert_eq!(o.status.code(), Some(7), "{threads:?}: {}", stderr(&o));
    }
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
fn precedence_is_flag_then_env_then_file_then_default() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = &write(
        &dir,
        "c.toml",
        "lock_backend = \"etcd\"\nlease_duration = \"20s\"\nrenew_deadline = 12\n\
         leader_election_identity = \"from-file\"\n",
    );
    let out = print_config(&["run", "--config", path], &[]);
    assert!(out.contains("lock_backend = \"etcd\""), "{out}");
    assert!(out.contains("lease_duration = \"20s\""), "{out}");
    assert!(out.contains("retry_period = \"2s\""), "default kept: {out}");
    let out = print_config(
        &["run", "--config", path, "--lease-duration", "30s"],
        &[
            ("GATEWAY_LEADER_LEASE_DURATION", "25s"),
            ("GATEWAY_LEADER_LEADER_ELECTION_IDENTITY", "from-env"),
        ],
    );
    assert!(out.contains("lease_duration = \"30s\""), "flag wins: {out}");
    assert!(
        out.contains("leader_election_identity = \"from-env\""),
        "env beats file: {out}"
    );
}

#[test]
fn print_config_redacts_secrets() {
    let out = print_config(
        &["run", "--lock-backend", "redis"],
        &[("GATEWAY_LEADER_REDIS_PASSWORD", "s3cret")],
    );
    assert!(!out.contains("s3cret"), "{out}");
    assert!(out.contains("redis_password = \"<redacted>\""), "{out}");
}

#[test]
fn non_utf8_environment_variables() {
    let bad = OsStr::from_bytes(b"\xff\xfe");
    // Not ours: ignored, whatever it holds.
    let o = run_os(&["run", "--print-config"], &[("SOME_UNRELATED_VAR", bad)]);
    assert!(o.status.success(), "{}", stderr(&o));
    for var in [
        "GATEWAY_LEADER_LOCK_BACKEND",
        "GATEWAY_LEADER_NOT_A_SETTING",
        "POD_NAME",
        "POD_NAMESPACE",
    ] {
        let o = run_os(&["run", "--print-config"], &[(var, bad)]);
        assert_usage_error(&o, &[var, "not valid UTF-8"]);
    }
}

#[test]
fn a_misspelt_environment_variable_is_refused_with_the_setting_it_resembles() {
    let o = run(
        &["run", "--print-config"],
        &[("GATEWAY_LEADER_LEASE_DURATON", "30s")],
    );
    assert_usage_error(
        &o,
        &[
            "GATEWAY_LEADER_LEASE_DURATON",
            "did you mean GATEWAY_LEADER_LEASE_DURATION?",
        ],
    );
    // What `gateway-leader exec` gives its command, and the repository's tooling: no typos.
    let o = run(
        &["run", "--print-config"],
        &[
            ("GATEWAY_LEADER_TERM", "4"),
            ("GATEWAY_LEADER_IDENTITY", "pod-a_1"),
            ("GATEWAY_LEADER_KUBE_VERSION", "oldest"),
            ("GATEWAY_LEADER_METRICS_SERVICE_HOST", "10.0.0.1"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
}

#[test]
fn credentials_in_urls_are_refused_and_never_echoed() {
    let refused = |args: &[&str], env: &[(&str, &str)], needles: &[&str]| {
        let o = run(args, env);
        assert_usage_error(&o, needles);
        assert!(!stderr(&o).contains("SECRET"), "{}", stderr(&o));
    };
    let redis = ["run", "--lock-backend", "redis"];
    refused(
        &[
            &redis[..],
            &["--redis-url", "redis://user:SECRET@127.0.0.1:6379"],
        ]
        .concat(),
        &[],
        &[
            "redis-url",
            "--redis-username",
            "--redis-password-file",
            "GATEWAY_LEADER_REDIS_PASSWORD",
        ],
    );
    // Malformed, and still not echoed.
    refused(
        &redis,
        &[("GATEWAY_LEADER_REDIS_URL", "redis:u:SECRET@127.0.0.1")],
        &["redis-url"],
    );
    refused(
        &[
            "run",
            "--lock-backend",
            "etcd",
            "--etcd-endpoints",
            "http://127.0.0.1:2379,http://u:SECRET@127.0.0.1:2380",
        ],
        &[],
        &[
            "etcd-endpoints",
            "--etcd-username",
            "GATEWAY_LEADER_ETCD_PASSWORD",
        ],
    );
    // A parse error in the file does not echo the offending line either.
    let dir = tempfile::tempdir().expect("tempdir");
    let f = write(&dir, "c.toml", "redis_password = \"SECRET\n");
    refused(&["run", "--config", &f], &[], &["--config", "line 1"]);
    // A URL of a backend not in use is not checked, but never printed with its password.
    let out = print_config(
        &[
            "run",
            "--redis-url",
            "redis://user:SECRET@127.0.0.1:6379",
            "--etcd-endpoints",
            "http://u:SECRET@127.0.0.1:2379,http://127.0.0.1:2380",
        ],
        &[],
    );
    assert!(!out.contains("SECRET"), "{out}");
    assert!(
        out.contains("redis_url = \"redis://***@127.0.0.1:6379\"")
            && out.contains("etcd_endpoints = \"http://***@127.0.0.1:2379,http://127.0.0.1:2380\""),
        "{out}"
    );
}

#[test]
fn log_filter_typos_are_refused() {
    for bad in [
        "debgu",
        "gateway_leader=verbose",
        "info,",
        "gateway-leader=debug",
    ] {
        let o = run(&["run", "--log-level", bad], &[]);
        assert_usage_error(
            &o,
            &[
                "--log-level",
                "GATEWAY_LEADER_LOG_LEVEL",
                "error, warn, info, debug, trace, off",
                "target=level",
            ],
        );
    }
    print_config(
        &["run", "--log-level", "gateway_leader::run=DEBUG,warn"],
        &[],
    );
}

#[test]
fn a_malformed_rust_log_falls_back_to_the_setting_with_a_warning() {
    let mut r = common::Replica::start_with_env(
        "rust-log",
        &["--leader-election-disable"],
        &[("RUST_LOG", "debgu")],
    );
    let warned = r.wait_for("ignoring RUST_LOG", Duration::from_secs(20));
    assert_eq!(warned.json["rust_log"], "\"debgu\"", "{:?}", warned.json);
    // The setting's default, info, is in force: info lines are not lost.
    r.wait_for("starting gateway-leader", Duration::from_secs(20));
}

#[test]
fn empty_values_are_errors_wherever_they_come_from() {
    let empty = |args: &[&str], env: &[(&str, &str)], setting: &str| {
        let o = run(&[args, &["--print-config"]].concat(), env);
        assert_usage_error(&o, &[setting, "empty"]);
    };
    empty(
        &["run"],
        &[("GATEWAY_LEADER_RELEASE_ON_SHUTDOWN", "")],
        "GATEWAY_LEADER_RELEASE_ON_SHUTDOWN",
    );
    empty(
        &["run", "--leader-election-identity", ""],
        &[],
        "--leader-election-identity",
    );
    empty(
        &["run"],
        &[("GATEWAY_LEADER_LOCK_BACKEND", " ")],
        "--lock-backend",
    );
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = write(&dir, "c.yaml", "leader_election_identity:\n");
    empty(
        &["run", "--config", &yaml],
        &[],
        "--leader-election-identity",
    );
    let toml = write(&dir, "c.toml", "release_on_shutdown = \"\"\n");
    empty(&["run", "--config", &toml], &[], "--release-on-shutdown");
    let o = run(&["run", "--print-config"], &[("POD_NAME", "")]);
    assert_usage_error(&o, &["POD_NAME", "1 to 253 bytes"]);
}

#[test]
fn tls_files_must_be_pem_of_the_right_kind() {
    let dir = tempfile::tempdir().expect("tempdir");
    let junk = &write(&dir, "junk.pem", "not a certificate\n");
    let etcd = [
        "run",
        "--lock-backend",
        "etcd",
        "--etcd-endpoints",
        "https://127.0.0.1:2379",
    ];
    let o = run(&[&etcd[..], &["--etcd-ca-file", junk]].concat(), &[]);
    assert_usage_error(&o, &["etcd-ca-file", junk, "no PEM certificate"]);
    let o = run(
        &[
            &etcd[..],
            &["--etcd-cert-file", junk, "--etcd-key-file", junk],
        ]
        .concat(),
        &[],
    );
    assert_usage_error(&o, &["etcd-cert-file", junk]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--redis-url",
            "rediss://127.0.0.1:6380",
            "--redis-ca-file",
            junk,
        ],
        &[],
    );
    assert_usage_error(&o, &["redis-ca-file", junk, "no PEM certificate"]);
    // Any file setting is a regular file, whatever the backend.
    let o = run(&["run", "--etcd-ca-file", "/dev/zero"], &[]);
    assert_usage_error(&o, &["--etcd-ca-file", "/dev/zero", "not a regular file"]);
}

#[test]
fn the_kubeconfig_and_its_context_are_checked_at_startup() {
    let dir = tempfile::tempdir().expect("tempdir");
    let broken = &write(&dir, "broken", "clusters: [\n");
    let o = run(&["run", "--print-config", "--kubeconfig", broken], &[]);
    assert_usage_error(&o, &["--kubeconfig", broken, "not a kubeconfig"]);
    // Found through KUBECONFIG, with any backend: the status writer needs Kubernetes too.
    let o = run(
        &["run", "--print-config", "--lock-backend", "redis"],
        &[("KUBECONFIG", broken)],
    );
    assert_usage_error(&o, &["KUBECONFIG", broken, "not a kubeconfig"]);
    let good = &write(
        &dir,
        "good",
        "apiVersion: v1\nkind: Config\n\
         clusters: [{name: c, cluster: {server: \"https://127.0.0.1:6443\"}}]\n\
         users: [{name: u, user: {token: t}}]\n\
         contexts: [{name: ctx, context: {cluster: c, user: u}}]\n\
         current-context: ctx\n",
    );
    print_config(&["run", "--kubeconfig", good], &[]);
    let o = run(
        &["run", "--kubeconfig", good, "--kube-context", "nope"],
        &[],
    );
    assert_usage_error(&o, &["--kube-context", "\"nope\"", "\"ctx\""]);
    let o = run(&["run", "--kube-context", "ctx"], &[]);
    assert_usage_error(&o, &["--kube-context", "no kubeconfig"]);
}

#[test]
fn durations_are_bounded() {
    let o = run(&["run", "--retry-period", "1ns"], &[]);
    assert_usage_error(&o, &["--retry-period", "at least 100ms"]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--lease-duration",
            "500000000years",
        ],
        &[],
    );
    assert_usage_error(&o, &["--lease-duration", "at most 3600s"]);
    // The tests' own short timings stay valid.
    print_config(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--lease-duration",
            "2s",
            "--renew-deadline",
            "1500ms",
            "--retry-period",
            "300ms",
        ],
        &[],
    );
}

#[test]
fn names_are_plain_ascii_and_bounded_in_bytes() {
    let long = "a".repeat(254);
    for id in ["pod\u{202e}evil", "pod\u{200b}a", "pod a", "pöd", &long] {
        let o = run(&["run", "--leader-election-identity", id], &[]);
        assert_usage_error(
            &o,
            &[
                "--leader-election-identity",
                "253 bytes",
                "'-', '.', '_', ':'",
            ],
        );
    }
    // Invisible characters are shown escaped, so the message itself cannot spoof anything.
    let o = run(
        &["run", "--leader-election-identity", "pod\u{202e}evil"],
        &[],
    );
    assert!(stderr(&o).contains("pod\\u{202e}evil"), "{}", stderr(&o));
    let o = run(&["run", "--print-config"], &[("POD_NAME", "pod\u{202e}")]);
    assert_usage_error(&o, &["POD_NAME", "\\u{202e}"]);
    print_config(&["run", "--leader-election-identity", "pod-0.ns_1:a"], &[]);
    let o = run(&["run", "--leader-election-lock-name", "lock\u{202e}"], &[]);
    assert_usage_error(&o, &["--leader-election-lock-name"]);
    let o = run(
        &["run", "--print-config"],
        &[("POD_NAMESPACE", "ns\u{200b}")],
    );
    assert_usage_error(&o, &["POD_NAMESPACE", "DNS-1123 label"]);
    let o = run(&["run", "--controller-name", "example.net/\u{202e}x"], &[]);
    assert_usage_error(&o, &["--controller-name", "253 bytes"]);
    let o = run(
        &[
            "run",
            "--lock-backend",
            "redis",
            "--redis-key-prefix",
            "gl\u{200b}",
        ],
        &[],
    );
    assert_usage_error(&o, &["redis-key-prefix", "128 bytes"]);
}

#[test]
fn fencing_policy_input_is_checked_by_flag() {
    let base = [
        "fencing-policy",
        "--lock-name",
        "nginx-gateway-leader-election-lock",
        "--namespace",
        "nginx-gateway",
        "--service-account",
        "nginx-gateway",
    ];
    let ok = run(&base, &[]);
    assert!(ok.status.success(), "{}", stderr(&ok));
    assert!(stdout(&ok).contains("kind: ValidatingAdmissionPolicyBinding"));
    for (flag, bad, needle) in [
        ("--lock-name", "Lock", "DNS-1123 subdomain"),
        ("--namespace", "a.b", "DNS-1123 label"),
        ("--service-account", "sa'", "DNS-1123 subdomain"),
        ("--service-account-namespace", "", "DNS-1123 label"),
        (
            "--resource",
            "HTTPRoutes/status",
            "PLURAL[.GROUP][/SUBRESOURCE]",
        ),
    ] {
        let mut args = base.to_vec();
        match args.iter().position(|a| *a == flag) {
            Some(i) => args[i + 1] = bad,
            None => args.extend([flag, bad]),
        }
        assert_usage_error(&run(&args, &[]), &[flag, needle]);
    }
    let mut args = base.to_vec();
    let many = vec!["services"; 65];
    for r in &many {
        args.extend(["--resource", r]);
    }
    assert_usage_error(&run(&args, &[]), &["--resource", "at most 64"]);
    // A required flag missing is clap's usage error (with its hint to --help).
    let missing = run(&base[..5], &[]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        stderr(&missing).contains("--service-account"),
        "{}",
        stderr(&missing)
    );
}
