//! What the handover tests share: the lock's keys, a follower's candidacy as the server holds
//! it, the key's history through a watch of the test's own, and the contenders' usual start.

use std::collections::VecDeque;
use std::time::Duration;

use etcd_client::{EventType, KeyValue, WatchOptions, WatchStream};
use leader_lock::conformance::{patience, wait_following, wait_leader, SplitBrainChecker};
use leader_lock::{Elector, LeaderState, Term, Timing};
use leader_lock_etcd::DEFAULT_KEY_PREFIX;
use serde_json::Value;
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

pub fn key(name: &str) -> String {
    format!("{DEFAULT_KEY_PREFIX}{name}")
}

pub fn candidacy(name: &str, holder: &str) -> String {
    format!("{}#candidates/{holder}", key(name))
}

/// `holder`'s candidacy as the server holds it, waiting for it within `limit`: a follower
/// registers on its first attempt, which may end after its watch has already shown it the
/// holder (and so after `wait_following` returns).
pub async fn registered(
    raw: &mut etcd_client::Client,
    name: &str,
    holder: &str,
    limit: Duration,
) -> KeyValue {
    let key = candidacy(name, holder);
    let now = raw
        .get(key.as_str(), None)
        .await
        .expect("get the candidacy");
    if let Some(kv) = now.kvs().first() {
        return kv.clone();
    }
    let rev = now.header().expect("a header").revision();
    let options = WatchOptions::new().with_start_revision(rev + 1);
    let mut stream = raw
        .watch(key.as_str(), Some(options))
        .await
        .expect("watch the candidacy");
    let deadline = Instant::now() + limit;
    loop {
        let msg = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("{holder} did not register as a candidate in time"))
            .expect("the watch works")
            .expect("the watch stays open");
        let put = msg
            .events()
            .iter()
            .filter(|ev| ev.event_type() == EventType::Put)
            .find_map(|ev| ev.kv());
        if let Some(kv) = put {
            return kv.clone();
        }
    }
}

/// One change of the key as the server recorded it.
#[derive(Debug, Clone)]
pub struct Change {
    pub put: bool,
    pub kv: KeyValue,
}

impl Change {
    pub fn value(&self) -> Value {
        serde_json::from_slice(self.kv.value()).unwrap_or(Value::Null)
    }

    pub fn holder(&self) -> String {
        self.value()["holder"].as_str().unwrap_or("").to_string()
    }
}

/// The key's changes from a revision on, in order, through a watch of the test's own.
pub struct History {
    stream: WatchStream,
    pending: VecDeque<Change>,
}

impl History {
    /// Watches `name`'s key from the revision after the server's current one.
    pub async fn from_now(raw: &mut etcd_client::Client, name: &str) -> Self {
        let now = raw.get(key(name), None).await.expect("get");
        let rev = now.header().expect("a header").revision();
        let options = WatchOptions::new().with_start_revision(rev + 1);
        let stream = raw.watch(key(name), Some(options)).await.expect("watch");
        History {
            stream,
            pending: VecDeque::new(),
        }
    }

    /// The next change, within `limit`.
    pub async fn next(&mut self, limit: Duration) -> Change {
        let deadline = Instant::now() + limit;
        loop {
            if let Some(c) = self.pending.pop_front() {
                return c;
            }
            let msg = tokio::time::timeout_at(deadline, self.stream.message())
                .await
                .expect("a change of the key within the deadline")
                .expect("the watch works")
                .expect("the watch stays open");
            for ev in msg.events() {
                let kv = ev.kv().expect("an event's key-value").clone();
                self.pending.push_back(Change {
                    put: ev.event_type() == EventType::Put,
                    kv,
                });
            }
        }
    }

    /// The next change that is not a renew by `holder` (renews before the release are no part
    /// of the handover).
    pub async fn next_not_renewed_by(&mut self, holder: &str, limit: Duration) -> Change {
        loop {
            let c = self.next(limit).await;
            if !(c.put && c.holder() == holder) {
                return c;
            }
        }
    }
}

/// Electors `a`, leading on `name` (its term returned), and `b`, following, both watched by
/// `checker`.
pub async fn a_leads_b_follows(
    server: &EtcdServer,
    name: &str,
    timing: Timing,
    checker: &SplitBrainChecker,
) -> (Elector, Elector, Term) {
    let a = super::contender_with(server, name, "a", timing).await;
    checker.watch(a.leadership());
    let term = wait_leader(&a.leadership(), patience(&timing), "a").await;
    let b = super::contender_with(server, name, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience(&timing), "b").await;
    (a, b, term)
}

pub fn term_of(e: &Elector) -> Option<Term> {
    match e.leadership().state() {
        LeaderState::Leader { term, .. } => Some(term),
        _ => None,
    }
}

/// `a` led and released, and its release handed the key to `b`, who followed (and so
/// registered) before it.
pub async fn a_releases_with_b_following(server: &EtcdServer, name: &str) -> super::Contenders {
    use leader_lock::backend::Attempt;
    let (la, lb) = super::two_locks(server, name).await;
    let (a, b) = (super::candidate("a"), super::candidate("b"));
    let Ok(Attempt::Leader { term: old, .. }) = la.try_acquire_or_renew(&a).await else {
        panic!("a leads an empty lock");
    };
    assert!(matches!(
        lb.try_acquire_or_renew(&b).await,
        Ok(Attempt::Follower { .. })
    ));
    assert!(la.release(&a, old).await.expect("a releases"), "released");
    super::Contenders {
        la,
        lb,
        a,
        b,
        term: old,
    }
}
