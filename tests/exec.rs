//! `gateway-leader exec` as processes on a real lock: two replicas whose commands append their
//! term and a timestamp to one file every 100 ms never run at the same time, across a partition
//! of the leader and a graceful handover (on etcd, with no Kubernetes at all); `--exec-restart never` exits with the command's code;
//! bad input exits 2.
//!
//! What is judged is the file the commands wrote, not our logs.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use gateway_leader_log::{message, Event};
use testkit::proxy::BlackholeProxy;

use common::Replica;

/// Generous: the machine is busy.
const PATIENCE: Duration = Duration::from_secs(90);

/// Short enough for the partition to end a leadership quickly; whole seconds for etcd.
const TIMING: [&str; 6] = [
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "2s",
    "--retry-period",
    "500ms",
];

/// The command: a `start` line, a `tick` line every 100 ms and an `end` line on SIGTERM, each
/// `IDENTITY TERM PID EVENT NANOSECONDS` (wall clock: one host). It stops by itself once its
/// gateway-leader is gone, so that a failing test leaves nothing behind.
///
/// SIGTERM goes to the whole process group, so it can kill `date` inside a tick's command
/// substitution: a line whose clock came back empty is not written (the trap's `end` follows).
const WRITER: &str = r#"id="$GATEWAY_LEADER_IDENTITY $GATEWAY_LEADER_TERM $$"
line() { t=$(date +%s%N) && [ -n "$t" ] && echo "$id $1 $t" >> "$EXEC_TEST_FILE"; }
trap 'line end; exit 0' TERM
line start
i=0
while kill -0 "$PPID" 2>/dev/null && [ "$i" -lt 6000 ]; do
  line tick
  sleep 0.1
  i=$((i + 1))
done
line end"#;

/// `gateway-leader exec <args> -- sh -c WRITER` as `name`, writing to `file`.
fn start_writer(name: &str, args: &[&str], file: &Path) -> Replica {
    let exe = Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
    let mut cmd = testkit::replica::Replica::command(exe, "exec", name, args);
    // No Kubernetes configuration to find: a test that wants one passes --kubeconfig.
    cmd.env("RUST_LOG", "info")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent")
        .env("EXEC_TEST_FILE", file)
        .args(["--", "sh", "-c", WRITER]);
    Replica::spawn(name, cmd)
}

/// One run of the command, as the file shows it.
#[derive(Debug, Clone)]
struct Run {
    identity: String,
    term: u64,
    first_ns: u128,
    last_ns: u128,
    ended: bool,
}

/// Every run in the file, by when it started.
fn runs(file: &Path) -> Vec<Run> {
    let text = std::fs::read_to_string(file).unwrap_or_default();
    // A last line without its newline may still be being written: it is read next time.
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    let mut runs: BTreeMap<(String, u64, u32), Run> = BTreeMap::new();
    for line in whole.lines() {
        let f: Vec<&str> = line.split_whitespace().collect();
        let [identity, term, pid, event, ns] = f[..] else {
            panic!("a line the command does not write: {line:?}");
        };
        let term: u64 = term.parse().unwrap_or_else(|_| panic!("term in {line:?}"));
        let pid: u32 = pid.parse().unwrap_or_else(|_| panic!("pid in {line:?}"));
        let ns: u128 = ns.parse().unwrap_or_else(|_| panic!("time in {line:?}"));
        let run = runs
            .entry((identity.to_string(), term, pid))
            .or_insert(Run {
                identity: identity.to_string(),
                term,
                first_ns: ns,
                last_ns: ns,
                ended: false,
            });
        run.first_ns = run.first_ns.min(ns);
        run.last_ns = run.last_ns.max(ns);
        run.ended |= event == "end";
    }
    let mut runs: Vec<Run> = runs.into_values().collect();
    runs.sort_by_key(|r| r.first_ns);
    runs
}

/// Panics unless each run's lines, from its first to its last, come before the next run's
/// first line, and each run is a newer term than the one before.
fn assert_one_at_a_time(runs: &[Run]) {
    for pair in runs.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        assert!(
            before.last_ns < after.first_ns,
            "two commands ran at once: {before:#?} and {after:#?}"
        );
        assert!(before.term < after.term, "terms went back: {runs:#?}");
    }
}

/// Waits until the file shows a run that satisfies `hit`; panics as soon as two runs overlap.
fn wait_run(file: &Path, what: &str, hit: impl Fn(&Run) -> bool) -> Run {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let all = runs(file);
        assert_one_at_a_time(&all);
        if let Some(r) = all.into_iter().find(|r| hit(r)) {
            return r;
        }
        assert!(
            Instant::now() < deadline,
            "no run {what} after {PATIENCE:?}: {:#?}",
            runs(file)
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn is(run: &Run, name: &str) -> bool {
    run.identity.starts_with(&format!("{name}_"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commands_never_run_at_once_across_a_partition_and_a_graceful_handover() {
    let etcd = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts");
    let upstream = format!("127.0.0.1:{}", etcd.client_port())
        .parse()
        .expect("an address");
    // Replica a reaches etcd through a proxy the test can cut; b reaches it directly. Neither
    // is given a Kubernetes configuration (start_writer leaves none to find): exec on an etcd
    // lock needs no cluster.
    let cut = BlackholeProxy::start(upstream).await.expect("proxy");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("runs");
    let args = |endpoint: String| {
        let mut a: Vec<String> = ["--lock-backend", "etcd", "--etcd-endpoints"]
            .map(String::from)
            .to_vec();
        a.push(endpoint);
        a.extend(TIMING.map(String::from));
        a
    };
    let a_args = args(format!("http://{}", cut.addr()));
    let b_args = args(etcd.endpoint());
    let file2 = file.clone();
    tokio::task::spawn_blocking(move || {
        let file = file2;
        let a_args: Vec<&str> = a_args.iter().map(String::as_str).collect();
        let b_args: Vec<&str> = b_args.iter().map(String::as_str).collect();
        let mut a = start_writer("exec-a", &a_args, &file);
        let first = wait_run(&file, "of a", |r| is(r, "exec-a"));
        let mut b = start_writer("exec-b", &b_args, &file);
        b.wait_for(message::FOLLOWING, PATIENCE);

        // 1. a loses etcd: its leadership ends at its renew deadline and its command with it;
        //    b takes over once the lease has expired on the server.
        cut.cut();
        let second = wait_run(&file, "of b", |r| is(r, "exec-b"));
        assert!(second.term > first.term, "{first:?} then {second:?}");
        wait_run(&file, "of a that ended", |r| is(r, "exec-a") && r.ended);
        let healed = std::time::SystemTime::now();
        cut.heal();
        a.wait_match("a following b", PATIENCE, |l| {
            l.at >= healed
                && matches!(&l.event, Some(Event::Following { holder: Some(h), .. })
                    if h.starts_with("exec-b_"))
        });

        // 2. b is stopped gracefully: its command first, then the lock, which a takes.
        b.terminate();
        let third = wait_run(&file, "of a again", |r| {
            is(r, "exec-a") && r.term > second.term
        });
        assert_eq!(
            b.wait_exit(PATIENCE),
            Some(0),
            "b exits cleanly after SIGTERM"
        );
        let runs_then = runs(&file);
        let b_run = runs_then.iter().find(|r| is(r, "exec-b")).expect("b's run");
        eprintln!(
            "a's command started {:.1} ms after b's wrote its end",
            (third.first_ns.saturating_sub(b_run.last_ns)) as f64 / 1e6
        );
        a.terminate();
        assert_eq!(
            a.wait_exit(PATIENCE),
            Some(0),
            "a exits cleanly after SIGTERM"
        );
        drop(a);
        drop(b);
    })
    .await
    .expect("scenario");

    // One command at a time, over the whole scenario.
    let all = runs(&file);
    assert!(all.len() >= 3, "{all:#?}");
    assert_one_at_a_time(&all);
    assert!(
        all.iter().all(|r| r.ended),
        "every command was stopped by SIGTERM: {all:#?}"
    );
}

/// `gateway-leader exec <args>`, with no settings, kubeconfig or log filter from the caller's
/// environment, waited for.
fn exec(args: &[&str]) -> Output {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway-leader"));
    cmd.arg("exec").args(args);
    testkit::replica::clear_settings(&mut cmd)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .env("HOME", "/nonexistent");
    cmd.output().expect("the binary runs")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_restart_never_exec_exits_with_the_commands_code() {
    let kube = common::gateway::kubeconfig_args().await;
    let kube: Vec<&str> = kube.iter().map(String::as_str).collect();
    let once = [
        "--leader-election-disable",
        "--health-addr",
        "127.0.0.1:0",
        "--exec-restart",
        "never",
    ];
    let run = |script: &str| {
        let args = [&kube[..], &once[..], &["--", "sh", "-c", script]].concat();
        exec(&args)
    };
    let o =
        tokio::task::block_in_place(|| run(r#"test "$GATEWAY_LEADER_TERM" = disabled && exit 7"#));
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // A command killed by a signal: 128 + its number, as shells give it (SIGUSR1 is 10).
    let o = tokio::task::block_in_place(|| run("kill -USR1 $$"));
    assert_eq!(
        o.status.code(),
        Some(128 + 10),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

#[test]
fn exec_without_a_command_or_with_one_that_cannot_run_exits_2() {
    for args in [&[][..], &["--exec-grace", "1s"], &["--"]] {
        let o = exec(args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("<COMMAND>"), "{args:?}: {err}");
    }
    let o = exec(&["--", "/nonexistent/command"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("/nonexistent/command is not an executable file"),
        "{err}"
    );
    let o = exec(&["--exec-grace", "16s", "--", "sh"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("--exec-grace") && err.contains("15s"), "{err}");
    // The command's kubeconfig must point at the proxy, and Kubernetes clients dial only TCP.
    let o = exec(&["--proxy-listen", "unix:/tmp/gl.sock", "--", "sh"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--proxy-listen") && err.contains("TCP"),
        "{err}"
    );
    // The command's election is answered by the proxy, which exec runs only when asked to.
    let o = exec(&["--proxy-election-lease", "ns/ctl", "--", "sh"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("--proxy-election-lease") && err.contains("--proxy-listen"),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_proxy_the_commands_kubernetes_writes_go_through_it() {
    let kube = common::gateway::kubeconfig_args().await;
    let kube: Vec<&str> = kube.iter().map(String::as_str).collect();
    let dir = tempfile::tempdir().expect("tempdir");
    let seen = dir.path().join("kubeconfig-path");
    let name = format!("exec-proxy-{}", std::process::id());
    // The command creates a ConfigMap with the KUBECONFIG it was given, and notes where it was.
    let script = format!(
        r#"echo "$KUBECONFIG" > "{seen}" &&
           grep -q "server: http://127.0.0.1:" "$KUBECONFIG" &&
           "{kubectl}" --kubeconfig "$KUBECONFIG" create configmap {name} -n default"#,
        seen = seen.display(),
        kubectl = common::deploy::kubectl().display(),
    );
    let args = [
        &kube[..],
        &[
            "--leader-election-disable",
            "--health-addr",
            "127.0.0.1:0",
            "--proxy-listen",
            "127.0.0.1:0",
            "--exec-restart",
            "never",
            "--",
            "sh",
            "-c",
            &script,
        ],
    ]
    .concat();
    let o = tokio::task::block_in_place(|| exec(&args));
    assert_eq!(
        o.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // On the server, written by kubectl through the proxy.
    let server = Command::new(common::deploy::kubectl())
        .args(&kube[..])
        .args(["get", "configmap", &name, "-n", "default", "-o", "name"])
        .output()
        .expect("kubectl runs");
    assert!(
        server.status.success(),
        "the ConfigMap is on the server: {}",
        String::from_utf8_lossy(&server.stderr)
    );
    let given = std::fs::read_to_string(&seen).expect("the command noted its KUBECONFIG");
    assert!(
        !Path::new(given.trim()).exists(),
        "the kubeconfig is removed on exit: {given}"
    );
}
