//! Helpers for the Redis backend's own tests (kept apart from `common`, whose `Harness` impl
//! belongs to the conformance suite).
#![allow(dead_code)]

use std::collections::HashSet;
use std::time::Duration;

use leader_lock::backend::{Attempt, Candidate, LeaderLock};
use leader_lock::{Identity, Term, Timing};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

/// A candidate with a fresh incarnation and the lease of `timing`.
pub fn candidate(name: &str, timing: &Timing) -> Candidate {
    Candidate {
        identity: Identity::new(name),
        lease_duration: timing.lease_duration,
    }
}

/// Attempts until `c` leads, sleeping whatever `retry_after` says (a fresh server refuses a
/// missing lock for a lease after it started); panics after `limit`.
pub async fn acquire(lock: &dyn LeaderLock, c: &Candidate, limit: Duration) -> Term {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        match lock.try_acquire_or_renew(c).await.expect("attempt") {
            Attempt::Leader { term, .. } => return term,
            Attempt::Follower { retry_after, .. } => {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{} never got the lock within {limit:?}",
                    c.holder()
                );
                let wait = retry_after.unwrap_or(Duration::from_millis(100));
                tokio::time::sleep(wait.max(Duration::from_millis(5))).await;
            }
        }
    }
}

/// The client name of the connections [`raw`] opens: [`client_addrs`] leaves named connections
/// out, closed or not yet.
const TEST_CLIENT: &str = "gateway-leader-test";

/// Runs one raw command on a fresh connection and returns its reply.
pub async fn raw<T: redis::FromRedisValue>(url: &str, args: &[&str]) -> T {
    let mut conn = redis::Client::open(url)
        .expect("url")
        .get_multiplexed_async_connection()
        .await
        .expect("raw connection");
    let mut cmd = redis::cmd(args[0]);
    for a in &args[1..] {
        cmd.arg(*a);
    }
    let (reply,): (T,) = redis::pipe()
        .cmd("CLIENT")
        .arg("SETNAME")
        .arg(TEST_CLIENT)
        .ignore()
        .add_command(cmd)
        .query_async(&mut conn)
        .await
        .unwrap_or_else(|e| panic!("{args:?}: {e}"));
    reply
}

/// The `addr=` of every client connected to the server right now that a lock may have opened:
/// not the test's own ([`raw`]'s, named, and a [`Monitor`]'s), not a Sentinel's (named
/// `sentinel-…`), not a replica's replication link (flag `S`). The lock names no connection.
pub async fn client_addrs(url: &str) -> HashSet<String> {
    let list: String = raw(url, &["CLIENT", "LIST"]).await;
    list.lines()
        .filter(|l| {
            l.contains(" name= ") && !l.contains(" flags=S ") && !l.contains(" cmd=monitor ")
        })
        .filter_map(|l| {
            l.split(' ')
                .find_map(|f| f.strip_prefix("addr="))
                .map(str::to_string)
        })
        .collect()
}

/// A `MONITOR` connection: every command the server runs, with the client that sent it.
pub struct Monitor {
    rx: mpsc::UnboundedReceiver<(String, String)>,
    task: tokio::task::JoinHandle<()>,
}

impl Monitor {
    /// Starts monitoring the plain (non-TLS, no auth) server on `port`.
    pub async fn start(port: u16) -> Monitor {
        let mut stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .expect("monitor connects");
        stream.write_all(b"MONITOR\r\n").await.expect("MONITOR");
        let mut lines = BufReader::new(stream).lines();
        let first = lines.next_line().await.expect("reply").expect("open");
        assert_eq!(first, "+OK", "MONITOR refused");
        let (tx, rx) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            // `+1700000000.123456 [0 127.0.0.1:50000] "EVALSHA" "…" …`
            while let Ok(Some(line)) = lines.next_line().await {
                let Some(open) = line.find('[') else { continue };
                let Some(close) = line[open..].find(']') else {
                    continue;
                };
                let who = &line[open + 1..open + close];
                let addr = who.split(' ').nth(1).unwrap_or("").to_string();
                let cmd = line[open + close + 1..]
                    .trim()
                    .split(' ')
                    .next()
                    .unwrap_or("")
                    .trim_matches('"')
                    .to_ascii_uppercase();
                if tx.send((addr, cmd)).is_err() {
                    return;
                }
            }
        });
        Monitor { rx, task }
    }

    /// Everything seen since the last call: (client address, command name).
    pub fn drain(&mut self) -> Vec<(String, String)> {
        let mut v = Vec::new();
        while let Ok(x) = self.rx.try_recv() {
            v.push(x);
        }
        v
    }
}

impl Drop for Monitor {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// How many times the server ran `command` (lower case, as `INFO commandstats` names it).
pub async fn command_calls(url: &str, command: &str) -> u64 {
    let info: String = raw(url, &["INFO", "commandstats"]).await;
    let prefix = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(prefix.as_str()))
        .and_then(|rest| rest.split(',').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Waits until the server has run `SUBSCRIBE` `n` times (each watch sends two as it opens);
/// panics after `limit`.
pub async fn wait_subscribes(url: &str, n: u64, limit: Duration) {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let seen = command_calls(url, "subscribe").await;
        if seen >= n {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "{seen} SUBSCRIBE commands, not {n}, within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
