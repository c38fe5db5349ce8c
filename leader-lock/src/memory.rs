//! The in-memory lock: a [`MemoryStore`] of locks with server-side TTLs, each client a
//! [`MemoryLock`]. For tests, examples, and trying the elector without a server.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::broadcast;
use tokio::time::Instant;
use tokio_stream::wrappers::BroadcastStream;

use crate::lock::{Attempt, LeaderLock, LockError, LockEvent, LockEventStream};
use crate::observe::ObservedRecord;
use crate::record::{Candidate, LockRecord, Term};

/// The value the in-memory lock stores, as JSON text, so garbage can be planted in tests.
#[derive(Debug, Serialize, Deserialize)]
struct Stored {
    holder: String,
    term: u64,
    lease_ms: u64,
    acquired_ms: u64,
    renewed_ms: u64,
}

#[derive(Debug, Default)]
struct Slot {
    /// The raw value and when the "server" expires it.
    value: Option<(String, Instant)>,
    /// The value was deleted by hand (or lost) rather than released or expired. Clients cannot
    /// tell a deletion from a release by the missing value alone; this stands for what a real
    /// backend shows them (Kubernetes keeps a released Lease with an empty holder).
    vanished: bool,
    /// The fencing counter; never reset.
    counter: u64,
    version: u64,
}

#[derive(Debug, Default)]
struct Inner {
    slots: HashMap<String, Slot>,
    watchers: HashMap<String, broadcast::Sender<LockEvent>>,
}

/// An in-process "server" of locks with server-side TTLs: for tests, examples, and trying the
/// elector without a server. Clones share the store; each [`lock`](Self::lock) is one client.
///
/// # Examples
///
/// Two replicas of one controller: one leads, and the other takes over once it hands over.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
///
/// let store = MemoryStore::new();
/// let replica = |name: &str| {
///     let config = ElectorConfig {
///         identity: Identity::new(name),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     };
///     Elector::spawn(Arc::new(store.lock("my-controller")), config)
/// };
/// let a = replica("a")?;
/// drop(a.leadership().wait_leader().await?);
/// let b = replica("b")?;
/// assert!(!b.leadership().is_leader(), "a leads");
/// a.shutdown().await?; // released: b need not wait for the lease to expire
/// drop(b.leadership().wait_leader().await?);
/// b.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone, Default)]
pub struct MemoryStore {
    inner: Arc<Mutex<Inner>>,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// A lock named `name` in this store.
    pub fn lock(&self, name: &str) -> MemoryLock {
        MemoryLock {
            store: self.clone(),
            name: name.to_string(),
            seen: Arc::default(),
        }
    }

    fn guard(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere must not poison every other test's lock.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Plants a raw value that expires after `ttl`, as a tampering or foreign writer would.
    #[cfg(feature = "test-util")]
    pub fn put_raw(&self, name: &str, raw: &str, ttl: Duration) {
        let mut g = self.guard();
        let slot = g.slots.entry(name.to_string()).or_default();
        slot.value = Some((raw.to_string(), Instant::now() + ttl));
        slot.vanished = false;
        slot.version += 1;
        Self::notify(&mut g, name, None);
    }

    /// Deletes the lock record by hand, as an operator, an eviction or a lost server state would:
    /// no release. Watchers see it gone. The fencing counter survives.
    #[cfg(feature = "test-util")]
    pub fn vanish(&self, name: &str) {
        let mut g = self.guard();
        let slot = g.slots.entry(name.to_string()).or_default();
        slot.value = None;
        slot.vanished = true;
        slot.version += 1;
        Self::notify(&mut g, name, Some(LockEvent::Changed(None)));
    }

    /// Drops every value, as a restarted server without persistence would (counters survive).
    /// Each lost value counts as vanished, not released.
    #[cfg(feature = "test-util")]
    pub fn wipe_values(&self) {
        let mut g = self.guard();
        for slot in g.slots.values_mut() {
            if slot.value.take().is_some() {
                slot.vanished = true;
            }
        }
    }

    fn notify(g: &mut Inner, name: &str, ev: Option<LockEvent>) {
        if let Some(tx) = g.watchers.get(name) {
            let _ = tx.send(ev.unwrap_or(LockEvent::Resynced));
        }
    }

    fn parse(raw: &str, version: u64) -> Result<LockRecord, LockError> {
        let s = Self::decode(raw)?;
        if s.holder.is_empty() {
            return Err(LockError::malformed("empty holder"));
        }
        Ok(LockRecord {
            holder: s.holder,
            term: Term(s.term),
            lease_duration: Duration::from_millis(s.lease_ms),
            acquire_time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(s.acquired_ms)),
            renew_time: Some(SystemTime::UNIX_EPOCH + Duration::from_millis(s.renewed_ms)),
            version: version.to_string(),
        })
    }

    /// The stored JSON as a [`Stored`]. The message says what is wrong and the JSON error
    /// stays the source alone, so that a chain of errors ([`LockError::chain`]) shows it once.
    fn decode(raw: &str) -> Result<Stored, LockError> {
        serde_json::from_str(raw)
            .map_err(|e| LockError::malformed_from("the stored value is not a lock record", e))
    }

    /// A [`Stored`] as the JSON the store keeps; the JSON error, if any, is the source alone.
    fn encode(s: &Stored) -> Result<String, LockError> {
        serde_json::to_string(s)
            .map_err(|e| LockError::malformed_from("the lock record cannot be encoded", e))
    }
}

/// A lock in a [`MemoryStore`]: server-side expiry, atomic compare-and-set, watch by broadcast.
///
/// A record that vanished without a release (`MemoryStore::vanish`, feature `test-util`) is not
/// free: a client that last saw a live holder takes it only after that holder's lease duration,
/// counted from when it found the record gone; and a leader whose record vanished gets a
/// follower's answer instead of recreating it.
#[derive(Debug, Clone)]
pub struct MemoryLock {
    store: MemoryStore,
    name: String,
    /// What this client last saw; clones share it, as clones are one client.
    seen: Arc<Mutex<ObservedRecord>>,
}

impl MemoryLock {
    /// The store this lock lives in.
    pub fn store(&self) -> &MemoryStore {
        &self.store
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    fn seen(&self) -> MutexGuard<'_, ObservedRecord> {
        self.seen.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[async_trait]
impl LeaderLock for MemoryLock {
    fn describe(&self) -> String {
        format!("memory lock {}", self.name)
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let now = Instant::now();
        let me = c.holder();
        let mut g = self.store.guard();
        let slot = g.slots.entry(self.name.clone()).or_default();
        if let Some((raw, expires)) = &slot.value {
            if *expires > now {
                let left = *expires - now;
                let parsed = MemoryStore::parse(raw, slot.version);
                if let Ok(rec) = &parsed {
                    self.seen().observe(rec, now);
                }
                return match parsed {
                    Ok(rec) if rec.holder == me => {
                        let mut s = MemoryStore::decode(raw)?;
                        s.renewed_ms = millis(SystemTime::now());
                        s.lease_ms = c.lease_duration.as_millis() as u64;
                        let raw = MemoryStore::encode(&s)?;
                        slot.value = Some((raw, now + c.lease_duration));
                        slot.version += 1;
                        Ok(Attempt::leader(rec.term))
                    }
                    Ok(rec) => Ok(Attempt::Follower {
                        holder: Some(rec.holder),
                        term: Some(rec.term),
                        retry_after: Some(left),
                    }),
                    // Foreign or damaged: respected until the server expires it.
                    Err(_) => Ok(Attempt::Follower {
                        holder: None,
                        term: None,
                        retry_after: Some(left),
                    }),
                };
            }
        }
        if slot.vanished && slot.value.is_none() {
            let mut seen = self.seen();
            seen.gone(None, now, c.lease_duration);
            if let Some((_, until)) = seen.hold_off(now) {
                // Gone without a release: its holder may still believe it leads. A leader whose
                // own record vanished hears this too, and steps down instead of recreating it.
                return Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(until - now),
                });
            }
        }
        slot.counter += 1;
        let term = Term(slot.counter);
        let t = millis(SystemTime::now());
        let stored = Stored {
            holder: me,
            term: term.0,
            lease_ms: c.lease_duration.as_millis() as u64,
            acquired_ms: t,
            renewed_ms: t,
        };
        let raw = MemoryStore::encode(&stored)?;
        slot.value = Some((raw.clone(), now + c.lease_duration));
        slot.vanished = false;
        slot.version += 1;
        let version = slot.version;
        let rec = MemoryStore::parse(&raw, version).ok();
        if let Some(rec) = &rec {
            self.seen().observe(rec, now);
        }
        MemoryStore::notify(&mut g, &self.name, Some(LockEvent::Changed(rec)));
        Ok(Attempt::leader(term))
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let me = c.holder();
        let mut g = self.store.guard();
        let Some(slot) = g.slots.get_mut(&self.name) else {
            return Ok(false);
        };
        let ours = match &slot.value {
            Some((raw, exp)) if *exp > Instant::now() => MemoryStore::parse(raw, slot.version)
                .map(|r| r.holder == me && r.term == term)
                .unwrap_or(false),
            _ => false,
        };
        if ours {
            slot.value = None;
            slot.vanished = false;
            slot.version += 1;
            MemoryStore::notify(&mut g, &self.name, Some(LockEvent::Changed(None)));
        }
        Ok(ours)
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let g = self.store.guard();
        match g.slots.get(&self.name) {
            Some(Slot {
                value: Some((raw, exp)),
                version,
                ..
            }) if *exp > Instant::now() => MemoryStore::parse(raw, *version).map(Some),
            _ => Ok(None),
        }
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let mut g = self.store.guard();
        let rx = g
            .watchers
            .entry(self.name.clone())
            .or_insert_with(|| broadcast::channel(64).0)
            .subscribe();
        // A lagged receiver missed events: report a resync so the elector looks again.
        Ok(BroadcastStream::new(rx)
            .map(|r| Ok(r.unwrap_or(LockEvent::Resynced)))
            .boxed())
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    /// A record that is not JSON: the message says so, and the JSON error is only the source,
    /// so that the chain a log line shows names it once.
    #[tokio::test]
    async fn the_cause_is_in_the_source_not_twice() {
        let store = MemoryStore::new();
        store.put_raw("x", "not json", Duration::from_secs(10));
        let e = store
            .lock("x")
            .get()
            .await
            .expect_err("garbage is no record");
        assert!(matches!(e, LockError::Malformed { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "malformed lock record: the stored value is not a lock record"
        );
        let source = e.source().expect("the JSON error is kept").to_string();
        assert!(!source.is_empty());
        assert_eq!(
            e.chain().to_string(),
            format!("malformed lock record: the stored value is not a lock record: {source}")
        );
    }
}
