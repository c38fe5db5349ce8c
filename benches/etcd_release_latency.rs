//! Graceful handover latency on one throwaway etcd: ours beside `etcdctl elect`.
//!
//! - Ours: from `Elector::shutdown()` on the leader to the follower's `check()` passing. Each
//!   round starts a fresh follower (its own connection), lets it settle, then stops the leader.
//! - `etcdctl elect`: from SIGINT to the leading `etcdctl elect` (it resigns: deletes its key and
//!   revokes its session) to the waiting one printing its proposal, i.e. elected.
//!
//! Rounds alternate between the two on the same server. `ROUNDS` (default 200) sets the count;
//! `LOAD=N` adds N tasks that write to another key without pause during the rounds.
//!
//! Run: `cargo bench --bench etcd_release_latency` (needs `etcd` and `etcdctl`
//! from `scripts/build-etcd.sh`).

use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_etcd::{EtcdConfig, EtcdLock};
use testkit::etcd::EtcdServer;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};
use tokio::time::Instant;

const LOCK: &str = "bench";
const LIMIT: Duration = Duration::from_secs(30);

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    rt.block_on(run());
}

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

async fn run() {
    let rounds = env_usize("ROUNDS", 200);
    let load = env_usize("LOAD", 0);
    let server = EtcdServer::start().await.expect("etcd starts");
    let endpoint = server.endpoint();
    let etcdctl = testkit::built::etcdctl().expect("etcdctl is needed for the comparison");

    let stop = Arc::new(AtomicBool::new(false));
    let mut writers = Vec::new();
    for i in 0..load {
        let (stop, endpoint) = (stop.clone(), endpoint.clone());
        writers.push(tokio::spawn(async move {
            let mut c = etcd_client::Client::connect([endpoint], None)
                .await
                .expect("load client");
            let key = format!("/load/{i}");
            while !stop.load(Ordering::Relaxed) {
                let _ = c.put(key.as_str(), "x".repeat(64), None).await;
            }
        }));
    }

    let mut ours = Vec::with_capacity(rounds);
    let mut theirs = Vec::with_capacity(rounds);
    let mut leader = contender(&endpoint, 0).await;
    // The permit is dropped at once: a held one would hold up the next shutdown.
    drop(
        tokio::time::timeout(LIMIT, leader.leadership().wait_leader())
            .await
            .expect("first leader in time")
            .expect("first leader"),
    );
    let mut ctl_leader = elect(&etcdctl, &endpoint, 0).await;
    wait_elected(&mut ctl_leader).await;

    for round in 1..=rounds {
        // Ours.
        let follower = contender(&endpoint, round).await;
        settle().await;
        let started = Instant::now();
        leader.shutdown().await.expect("release");
        let permit = tokio::time::timeout(LIMIT, follower.leadership().wait_leader())
            .await
            .expect("handover in time")
            .expect("the follower leads");
        ours.push(started.elapsed());
        drop(permit);
        leader = follower;

        // etcdctl elect.
        let mut ctl_follower = elect(&etcdctl, &endpoint, round).await;
        wait_campaigning(&endpoint, 2).await;
        settle().await;
        let started = Instant::now();
        let pid = ctl_leader.child.id().expect("etcdctl runs") as i32;
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(pid),
            nix::sys::signal::Signal::SIGINT,
        )
        .expect("SIGINT");
        wait_elected(&mut ctl_follower).await;
        theirs.push(started.elapsed());
        let _ = ctl_leader.child.wait().await;
        ctl_leader = ctl_follower;
    }
    stop.store(true, Ordering::Relaxed);
    for w in writers {
        let _ = w.await;
    }
    leader.abort().await;
    let _ = ctl_leader.child.kill().await;

    println!(
        "graceful handover on one etcd ({}), load writers: {load}",
        etcd_version()
    );
    report("gateway-leader (shutdown -> follower check ok)", &mut ours);
    report("etcdctl elect (SIGINT -> follower elected)", &mut theirs);
}

fn etcd_version() -> String {
    std::process::Command::new("etcd")
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.lines().next().map(str::to_string))
        .unwrap_or_else(|| "etcd".into())
}

/// Let a new contender connect, read, watch and (ours) grant its spare lease.
async fn settle() {
    tokio::time::sleep(Duration::from_millis(150)).await;
}

async fn contender(endpoint: &str, i: usize) -> Elector {
    let mut config = EtcdConfig::new(vec![endpoint.to_string()]);
    config.request_timeout = Some(Duration::from_secs(5));
    let lock = EtcdLock::connect(config, LOCK).await.expect("connects");
    Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new(format!("bench-{i}")),
            timing: Timing::default(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

struct Ctl {
    child: Child,
    stdout: tokio::io::Lines<BufReader<ChildStdout>>,
    proposal: String,
}

async fn elect(etcdctl: &std::path::Path, endpoint: &str, i: usize) -> Ctl {
    let proposal = format!("p{i}");
    let mut child = Command::new(etcdctl)
        .env("ETCDCTL_API", "3")
        .arg(format!("--endpoints={endpoint}"))
        .arg("elect")
        .arg("ctl-bench")
        .arg(&proposal)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("etcdctl starts");
    let stdout = BufReader::new(child.stdout.take().expect("piped")).lines();
    Ctl {
        child,
        stdout,
        proposal,
    }
}

/// Waits until the process prints its proposal: `etcdctl elect` does so once elected.
async fn wait_elected(c: &mut Ctl) {
    tokio::time::timeout(LIMIT, async {
        while let Some(line) = c.stdout.next_line().await.expect("reads etcdctl") {
            if line == c.proposal {
                return;
            }
        }
        panic!("etcdctl elect ended before being elected");
    })
    .await
    .expect("etcdctl elected in time");
}

/// Waits until `n` campaigners have their keys (the follower is queued behind the leader).
async fn wait_campaigning(endpoint: &str, n: usize) {
    let mut c = etcd_client::Client::connect([endpoint], None)
        .await
        .expect("client");
    tokio::time::timeout(LIMIT, async {
        loop {
            let r = c
                .get(
                    "ctl-bench/",
                    Some(etcd_client::GetOptions::new().with_prefix()),
                )
                .await
                .expect("get");
            if r.kvs().len() >= n {
                return;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("campaigners queued in time");
}

fn report(what: &str, samples: &mut [Duration]) {
    samples.sort();
    let pick = |q: f64| {
        let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
        samples[i].as_secs_f64() * 1000.0
    };
    println!(
        "{what}: n={} p50={:.2}ms p90={:.2}ms p99={:.2}ms max={:.2}ms",
        samples.len(),
        pick(0.50),
        pick(0.90),
        pick(0.99),
        pick(1.0)
    );
}
