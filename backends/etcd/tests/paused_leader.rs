//! A leader process frozen (SIGSTOP) past its lease: after SIGCONT it must never pass `check()`
//! under its old term once another contender leads, and it must step down.
//!
//! The test binary runs itself as the frozen contender (`CONTENDER_ENDPOINT` set): the test
//! process cannot stop itself, and the contender needs its own process to be frozen whole.

mod common;

use std::process::Command;
use std::sync::Arc;
use std::time::Duration;

use leader_lock::conformance::{patience, wait_following, wait_leader};
use leader_lock::{Elector, ElectorConfig, Identity, LeaderState};
use leader_lock_etcd::EtcdLock;
use testkit::etcd::EtcdServer;
use testkit::{wait_until, ServerProcess};

const ENDPOINT_VAR: &str = "CONTENDER_ENDPOINT";
const LOCK: &str = "paused";

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    match std::env::var(ENDPOINT_VAR) {
        Ok(endpoint) => rt.block_on(contender(endpoint)),
        Err(_) => {
            println!("\nrunning 1 test");
            let started = std::time::Instant::now();
            rt.block_on(paused_leader_steps_down());
            println!("test paused_leader_steps_down ... ok\n");
            // The summary line libtest prints, so runners that read it count this test too.
            println!(
                "test result: ok. 1 passed; 0 failed; 0 ignored; 0 measured; 0 filtered out; \
                 finished in {:.2}s\n",
                started.elapsed().as_secs_f64()
            );
        }
    }
}

/// The child: an elector that reports every change of `check()` and of its state on stdout.
async fn contender(endpoint: String) {
    let mut config = leader_lock_etcd::EtcdConfig::new(vec![endpoint]);
    config.request_timeout = Some(Duration::from_millis(1000));
    let lock = EtcdLock::connect(config, LOCK).await.expect("connects");
    let elector = Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new("frozen"),
            timing: common::timing(),
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    let l = elector.leadership();
    let (mut last_check, mut last_state) = (String::new(), String::new());
    loop {
        let check = match l.check() {
            Ok(p) => format!("CHECK ok {}", p.term),
            Err(_) => "CHECK fail".to_string(),
        };
        if check != last_check {
            println!("{check}");
            last_check = check;
        }
        let state = match l.state() {
            LeaderState::Leader { term, .. } => format!("STATE leader {term}"),
            LeaderState::Follower { holder, .. } => {
                format!("STATE follower {}", holder.unwrap_or_default())
            }
            other => format!("STATE {other:?}"),
        };
        if state != last_state {
            println!("{state}");
            last_state = state;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn paused_leader_steps_down() {
    let timing = common::timing();
    let server = EtcdServer::start().await.expect("etcd starts");
    let mut cmd = Command::new(std::env::current_exe().expect("own path"));
    cmd.env(ENDPOINT_VAR, server.endpoint());
    let dir = ServerProcess::temp_dir("contender").expect("temp dir");
    let frozen = ServerProcess::spawn("contender", cmd, dir).expect("contender starts");

    let mut t1 = None;
    wait_until(patience(&timing), "the contender to lead", || {
        t1 = frozen
            .log()
            .lines()
            .find_map(|l| l.strip_prefix("CHECK ok ").map(str::to_string));
        std::future::ready(t1.is_some())
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; contender log:\n{}", frozen.log()));
    let t1: u64 = t1.and_then(|t| t.parse().ok()).expect("a term");

    let b = common::contender(&server, LOCK, "b").await;
    wait_following(&b.leadership(), patience(&timing), "b").await;

    frozen.pause().expect("SIGSTOP");
    let paused = tokio::time::Instant::now();
    let t2 = wait_leader(
        &b.leadership(),
        patience(&timing),
        "b while the leader is frozen",
    )
    .await;
    let took = paused.elapsed();
    assert!(t2.0 > t1, "the term increases ({t1} -> {t2})");
    assert!(
        took >= timing.renew_deadline,
        "b led {took:?} after the freeze, before the frozen leader's validity could have ended"
    );
    eprintln!(
        "b took over {took:?} after the leader froze (lease {:?})",
        timing.lease_duration
    );

    let before = frozen.log().len();
    frozen.resume().expect("SIGCONT");
    let me = b.candidate().holder();
    let follows = format!("STATE follower {me}");
    wait_until(patience(&timing), "the thawed leader to follow b", || {
        std::future::ready(frozen.log()[before..].contains(&follows))
    })
    .await
    .unwrap_or_else(|e| panic!("{e}; contender log:\n{}", frozen.log()));
    // Watch it a while longer: it must stay a follower.
    tokio::time::sleep(timing.lease_duration * 2).await;
    let after = frozen.log()[before..].to_string();
    assert!(
        !after.contains("CHECK ok"),
        "the thawed leader passed check() after resuming:\n{after}"
    );
    assert!(
        b.leadership().check().map(|p| p.term) == Ok(t2),
        "b still leads under its term"
    );
    eprintln!("contender output after SIGCONT:\n{after}");
    b.abort().await;
}
