//! `gateway-leader status` on each backend's real server: a lock that is free, held by a real
//! `gateway-leader run` replica, vanished (its record deleted by hand while held), released and
//! unreachable, each with its exit code; `-o json` parses; bad settings exit 2 before the lock is
//! touched; and `--watch` prints one line per change and ends cleanly on SIGTERM.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use gateway_leader_log::message;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::DeleteParams;
use kube::Api;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use common::cli::command;
use common::{blocking, Replica};

/// Generous: replicas, watches and a busy 2-core machine.
const PATIENCE: Duration = Duration::from_secs(90);

/// The timing every process of these tests runs with: a lease long enough that a one-off
/// `status` lands inside the hold-off after a record is deleted, on a busy machine.
const TIMING: [&str; 6] = [
    "--lease-duration",
    "10s",
    "--renew-deadline",
    "6s",
    "--retry-period",
    "2s",
];

/// Where the lock is, and how to delete its record behind its holder's back.
enum Lock {
    Kubernetes { ns: String },
    Etcd(testkit::etcd::EtcdServer),
    Redis(testkit::redis::RedisServer),
}

const LOCK: &str = "status-lock";

impl Lock {
    /// The settings naming the lock, for `status` and `run` alike.
    async fn args(&self) -> Vec<String> {
        let mut args = common::gateway::kubeconfig_args().await;
        args.extend(TIMING.map(String::from));
        args.extend(["--leader-election-lock-name".into(), LOCK.into()]);
        match self {
            Lock::Kubernetes { ns } => args.extend([
                "--lock-backend".into(),
                "kubernetes".into(),
                "--leader-election-namespace".into(),
                ns.clone(),
            ]),
            Lock::Etcd(s) => args.extend([
                "--lock-backend".into(),
                "etcd".into(),
                "--etcd-endpoints".into(),
                s.endpoint(),
            ]),
            Lock::Redis(s) => args.extend([
                "--lock-backend".into(),
                "redis".into(),
                "--redis-url".into(),
                s.url(),
            ]),
        }
        args
    }

    /// The same settings with the server at a closed loopback port.
    async fn unreachable_args(&self, dir: &tempfile::TempDir) -> Vec<String> {
        let closed = format!("127.0.0.1:{}", testkit::free_port().expect("a free port"));
        let mut args = self.args().await;
        match self {
            Lock::Kubernetes { .. } => {
                let s = common::gateway::apiserver().await;
                let text = std::fs::read_to_string(s.kubeconfig_path()).expect("kubeconfig");
                let url = s.url();
                let host = url.trim_start_matches("https://").trim_end_matches('/');
                let moved = text.replace(host, &closed);
                assert_ne!(moved, text, "the kubeconfig names {host}");
                let path = common::cli::write(dir, "closed.kubeconfig", &moved);
                let i = args.iter().position(|a| a == "--kubeconfig").expect("set");
                args[i + 1] = path;
            }
            Lock::Etcd(_) => {
                let i = args
                    .iter()
                    .position(|a| a == "--etcd-endpoints")
                    .expect("set");
                args[i + 1] = format!("http://{closed}");
            }
            Lock::Redis(_) => {
                let i = args.iter().position(|a| a == "--redis-url").expect("set");
                args[i + 1] = format!("redis://{closed}");
            }
        }
        args
    }

    /// Deletes the record by hand, as an operator or a stray script would.
    async fn delete_record(&self) {
        match self {
            Lock::Kubernetes { ns } => {
                let client = common::gateway::admin(common::gateway::apiserver().await);
                let api: Api<Lease> = Api::namespaced(client, ns);
                api.delete(LOCK, &DeleteParams::default())
                    .await
                    .expect("the Lease is deleted");
            }
            Lock::Etcd(s) => {
                let mut c = etcd_client::Client::connect([s.endpoint()], None)
                    .await
                    .expect("etcd client");
                let r = c
                    .delete(format!("/gateway-leader/{LOCK}"), None)
                    .await
                    .expect("etcd del");
                assert_eq!(r.deleted(), 1, "the key was there");
            }
            Lock::Redis(s) => {
                let client = redis::Client::open(s.url()).expect("the Redis URL");
                let mut con = client
                    .get_multiplexed_async_connection()
                    .await
                    .expect("redis connection");
                let n: i64 = redis::cmd("DEL")
                    .arg(format!("gateway-leader:{{{LOCK}}}:holder"))
                    .query_async(&mut con)
                    .await
                    .expect("redis DEL");
                assert_eq!(n, 1, "the key was there");
            }
        }
    }

    /// The history fact every reading of a held lock has on this backend.
    fn history_key(&self) -> &'static str {
        match self {
            Lock::Kubernetes { .. } => "leaseTransitions",
            Lock::Etcd(_) => "createRevision",
            Lock::Redis(_) => "termCounter",
        }
    }
}

/// What a one-off `status` printed, and its exit code.
struct Ran {
    code: Option<i32>,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Ran {
    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", self.stdout, self.stderr))
    }
}

/// Runs `gateway-leader status <args>` to its end (killed after [`PATIENCE`]).
fn status(args: &[String], extra: &[&str]) -> Ran {
    let mut all: Vec<&str> = vec!["status"];
    all.extend(args.iter().map(String::as_str));
    all.extend(extra);
    let started = Instant::now();
    let mut child = command(&all, &[])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the binary runs");
    while child.try_wait().expect("wait").is_none() {
        if started.elapsed() > PATIENCE {
            let _ = child.kill();
            panic!("gateway-leader {all:?} still ran after {PATIENCE:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let took = started.elapsed();
    let o = child.wait_with_output().expect("output");
    Ran {
        code: o.status.code(),
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
        took,
    }
}

/// `status -o json`, which must exit with `code`; its object.
fn status_json(args: &[String], code: i32) -> Value {
    let r = status(args, &["-o", "json"]);
    assert_eq!(
        r.code,
        Some(code),
        "stdout: {}\nstderr: {}",
        r.stdout,
        r.stderr
    );
    r.json()
}

/// A running `status --watch -o json`: its lines as JSON objects, as they come.
struct Watch {
    child: Child,
    lines: mpsc::Receiver<Value>,
    seen: Vec<Value>,
}

impl Watch {
    fn start(args: &[String]) -> Watch {
        let mut all: Vec<&str> = vec!["status", "--watch", "-o", "json"];
        all.extend(args.iter().map(String::as_str));
        let mut child = command(&all, &[])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the binary runs");
        let out = child.stdout.take().expect("piped");
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                eprintln!("status --watch: {line}");
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("a --watch line is not JSON ({e}): {line}"));
                if tx.send(v).is_err() {
                    return;
                }
            }
        });
        Watch {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits for a line that satisfies `hit`; returns it.
    fn wait(&mut self, what: &str, hit: impl Fn(&Value) -> bool) -> Value {
        let deadline = Instant::now() + PATIENCE;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(v) => {
                    self.seen.push(v.clone());
                    if hit(&v) {
                        return v;
                    }
                }
                Err(_) => panic!(
                    "no --watch line {what} within {PATIENCE:?}: {:?}",
                    self.seen
                ),
            }
        }
    }

    /// SIGTERM: it must exit 0 at once; returns every line it printed.
    fn stop(mut self) -> Vec<Value> {
        let pid = Pid::from_raw(i32::try_from(self.child.id()).expect("a pid"));
        kill(pid, Signal::SIGTERM).expect("SIGTERM");
        let deadline = Instant::now() + PATIENCE;
        let code = loop {
            if let Some(s) = self.child.try_wait().expect("wait") {
                break s.code();
            }
            assert!(Instant::now() < deadline, "--watch ran on after SIGTERM");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(code, Some(0), "--watch ends cleanly on SIGTERM");
        self.seen.extend(self.lines.iter());
        std::mem::take(&mut self.seen)
    }
}

impl Drop for Watch {
    /// A test that fails part-way must not leave the watcher running (and holding the test's
    /// output open).
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn state(v: &Value) -> &str {
    v["state"].as_str().unwrap_or("")
}

/// The whole life of a lock on one backend, read by `status` at each step.
async fn life(lock: Lock) {
    let args = lock.args().await;
    let history_key = lock.history_key();
    let dir = tempfile::tempdir().expect("temp dir");
    let unreachable = lock.unreachable_args(&dir).await;
    blocking(|| {
        // Bad settings: exit 2, naming the setting, before anything is touched (the server of
        // the unreachable settings would have made it exit 5).
        let r = status(&unreachable, &["--lease-duration", "soon"]);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert!(r.stderr.contains("--lease-duration"), "{}", r.stderr);
        assert!(r.stdout.is_empty(), "{}", r.stdout);
        let r = status(&unreachable, &["--leader-election-disable"]);
        assert_eq!(r.code, Some(2), "{}", r.stderr);
        assert!(
            r.stderr.contains("--leader-election-disable"),
            "{}",
            r.stderr
        );
        let r = status(&args, &["-o", "yaml"]);
        assert_eq!(r.code, Some(2), "{}", r.stderr);

        // Unreachable: exit 5 within the bound (the renew deadline, with room for a busy
        // machine), never a hang.
        let r = status(&unreachable, &["-o", "json"]);
        assert_eq!(r.code, Some(5), "{}\n{}", r.stdout, r.stderr);
        let j = r.json();
        assert_eq!(state(&j), "unreachable");
        assert!(j["error"].as_str().is_some_and(|e| !e.is_empty()), "{j}");
        assert!(r.took < Duration::from_secs(30), "took {:?}", r.took);

        // Never held: free, except on a Redis that started less than a lease ago, which may
        // have lost a live holder's record with its data (the acquire script waits too).
        if let Lock::Redis(_) = &lock {
            let j = status_json(&args, 4);
            assert_eq!(
                (state(&j), j["reason"].as_str()),
                ("vanished", Some("restarted"))
            );
            assert!(j["freeAt"].is_string() && j["lastHolder"].is_null(), "{j}");
        } else {
            let j = status_json(&args, 3);
            assert_eq!(
                (state(&j), j["reason"].as_str()),
                ("free", Some("no-record"))
            );
            assert!(j["holder"].is_null() && j["term"].is_null(), "{j}");
        }
    });

    let mut watch = Watch::start(&args);
    let first = blocking(|| watch.wait("first reading", |_| true));
    assert!(matches!(state(&first), "free" | "vanished"), "{first}");

    // Held, by a real replica.
    let run_args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut a = blocking(|| {
        let mut a = Replica::start("status-a", &run_args);
        a.wait_for(message::LEADING, PATIENCE);
        a
    });
    let held = blocking(|| {
        let j = status_json(&args, 0);
        assert_eq!(state(&j), "held", "{j}");
        let holder = j["holder"].as_str().expect("a holder").to_string();
        assert!(holder.starts_with("status-a_"), "{j}");
        assert!(j["term"].as_u64().is_some_and(|t| t > 0), "{j}");
        assert!(
            j["expires"].is_string() && j["expiresBy"].is_string(),
            "{j}"
        );
        assert!(!j["history"][history_key].is_null(), "{j}");
        assert_eq!(j["leaseDurationSeconds"].as_f64(), Some(10.0), "{j}");
        // The block for people: aligned, one row per field.
        let r = status(&args, &[]);
        assert_eq!(r.code, Some(0), "{}", r.stderr);
        assert!(
            r.stdout.lines().any(|l| l == format!("holder   {holder}")),
            "{}",
            r.stdout
        );
        assert!(
            r.stdout.lines().any(|l| l.starts_with("expires ")),
            "{}",
            r.stdout
        );
        watch.wait("held by a", |v| {
            state(v) == "held" && v["holder"] == holder.as_str()
        });
        j
    });
    let term = held["term"].as_u64().expect("a term");

    // Vanished: the holder crashes (nothing released) and its record is deleted by hand; with
    // no replica left to take it back, the hold-off runs its whole lease. etcd and Redis keep a
    // trace a one-off reading finds; a deleted Lease leaves none, so a one-off reading says
    // free, and only `--watch`, which saw it held, knows it vanished.
    blocking(|| {
        a.kill();
        a.wait_exit(PATIENCE);
    });
    lock.delete_record().await;
    blocking(|| {
        let r = status(&args, &["-o", "json"]);
        let j = r.json();
        if let Lock::Kubernetes { .. } = &lock {
            assert_eq!(r.code, Some(3), "{j}");
            assert_eq!(
                j["reason"], "no-record",
                "a deleted Lease reads as never created: {j}"
            );
        } else {
            assert_eq!(r.code, Some(4), "{j}");
            assert_eq!(state(&j), "vanished", "{j}");
            assert_eq!(j["lastHolder"]["holder"], held["holder"], "{j}");
            assert_eq!(j["lastHolder"]["term"].as_u64(), Some(term), "{j}");
            assert_eq!(j["lastHolder"]["released"], false, "{j}");
            assert!(j["freeAt"].is_string(), "{j}");
        }
        let v = watch.wait("vanished", |v| state(v) == "vanished");
        assert_eq!(v["lastHolder"]["holder"], held["holder"], "{v}");
        assert!(v["freeAt"].is_string(), "{v}");
        // A lease later it is free, without a write: the watch's timer says so.
        watch.wait("lapsed", |v| v["reason"] == "lapsed");
    });

    // Held by another replica, then released by a graceful stop.
    let mut b = blocking(|| {
        let mut b = Replica::start("status-b", &run_args);
        b.wait_for(message::LEADING, PATIENCE);
        b
    });
    blocking(|| {
        watch.wait("held by b", |v| {
            state(v) == "held"
                && v["holder"]
                    .as_str()
                    .is_some_and(|h| h.starts_with("status-b_"))
        });
        b.terminate();
        assert_eq!(b.wait_exit(PATIENCE), Some(0));
        let j = status_json(&args, 3);
        assert_eq!(
            (state(&j), j["reason"].as_str()),
            ("free", Some("released")),
            "{j}"
        );
        assert_eq!(j["lastHolder"]["released"], true, "{j}");
        watch.wait("released", |v| v["reason"] == "released");
    });

    // One line per change: no two lines in a row say the same.
    let lines = blocking(|| watch.stop());
    let key = |v: &Value| {
        (
            v["state"].clone(),
            v["reason"].clone(),
            v["holder"].clone(),
            v["term"].clone(),
        )
    };
    for pair in lines.windows(2) {
        assert_ne!(
            key(&pair[0]),
            key(&pair[1]),
            "a line without a change: {lines:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_kubernetes() {
    let s = common::gateway::apiserver().await;
    let ns = "status-kube";
    s.create_namespace(ns).await.expect("namespace");
    life(Lock::Kubernetes { ns: ns.into() }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_etcd() {
    let server = testkit::etcd::EtcdServer::start()
        .await
        .expect("etcd starts (scripts/build-etcd.sh builds it)");
    life(Lock::Etcd(server)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_on_redis() {
    let server = testkit::redis::RedisServer::start()
        .await
        .expect("redis-server starts (apt-get install redis-server)");
    life(Lock::Redis(server)).await;
}

/// `--watch` rides out a server that goes away: one `unreachable` line per outage, a reading again
/// once it is back (not free until it has been up a lease: it lost its data), and SIGTERM ends it
/// cleanly while the server is still down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_watch_says_unreachable_once_and_reads_again_when_the_server_is_back() {
    let mut server = testkit::redis::RedisServer::start()
        .await
        .expect("redis-server starts (apt-get install redis-server)");
    // No kubeconfig: `status` on Redis needs no Kubernetes.
    let mut args: Vec<String> = TIMING.map(String::from).to_vec();
    args.extend([
        "--lock-backend".into(),
        "redis".into(),
        "--redis-url".into(),
        server.url(),
    ]);
    let mut watch = Watch::start(&args);
    blocking(|| watch.wait("free", |v| state(v) == "free"));
    let up = blocking(|| status_json(&args, 3));
    assert!(up["history"].is_object(), "{up}");
    server.kill();
    let down = blocking(|| watch.wait("unreachable", |v| state(v) == "unreachable"));
    assert!(down["error"].is_string(), "{down}");
    server
        .restart()
        .await
        .expect("redis restarts on the same port");
    // Back, without its data: not free until it has been up a lease.
    let back = blocking(|| watch.wait("a reading again", |v| state(v) != "unreachable"));
    assert_eq!(
        (state(&back), back["reason"].as_str()),
        ("vanished", Some("restarted")),
        "{back}"
    );
    blocking(|| watch.wait("free a lease later", |v| state(v) == "free"));
    server.kill();
    blocking(|| watch.wait("unreachable again", |v| state(v) == "unreachable"));
    // Stopped while the server is down, in the middle of its retries: still a clean exit 0.
    let lines = blocking(|| watch.stop());
    let unreachable = lines.iter().filter(|v| state(v) == "unreachable").count();
    assert_eq!(unreachable, 2, "one line per outage: {lines:?}");
}
