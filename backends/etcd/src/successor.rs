//! Which candidate a release hands the key to: chosen ahead while leading, so that the release
//! reads nothing first (docs/etcd.md, "Handover: one write").

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use etcd_client::{GetOptions, KeyValue};
use leader_lock::backend::LockError;
use tokio::time::Instant;
use tracing::debug;

use crate::client::Conn;
use crate::keys::Keys;
use crate::value::StoredValue;

/// A live candidate a release hands the key to.
#[derive(Clone)]
pub(crate) struct Successor {
    /// Its registration's key and mod revision, compared by the release transaction.
    pub(crate) key: Vec<u8>,
    pub(crate) mod_rev: i64,
    /// Its spare lease, which the key moves onto.
    pub(crate) lease: i64,
    /// Its registration's value.
    pub(crate) value: StoredValue,
}

impl Successor {
    /// The candidate a registration names, if it parses and is on a lease.
    pub(crate) fn of(kv: &KeyValue) -> Option<Self> {
        let value = StoredValue::parse(kv.value()).ok()?;
        (kv.lease() != 0).then(|| Successor {
            key: kv.key().to_vec(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
            value,
        })
    }

    /// The value that hands it the key now (`StoredValue::handed_to`).
    pub(crate) fn handed(&self) -> Vec<u8> {
        StoredValue::handed_to(&self.value).encode()
    }
}

/// The successor chosen ahead, fed by the leader's look-ups and by the registrations its watch
/// shows. Its own lock, never held across a request; shared with the watch.
#[derive(Clone, Default)]
pub(crate) struct Succession(Arc<Mutex<Choice>>);

/// The last choice made ahead, and whether one is under way.
#[derive(Default)]
pub(crate) struct Choice {
    /// The candidate chosen ahead, if one is.
    chosen: Option<Chosen>,
    /// A choice under way: no second one starts beside it.
    choosing: bool,
}

/// A live candidate chosen while leading, so that a release hands over without reads first.
struct Chosen {
    /// `None`: nobody was alive to hand over to (a release looks again).
    successor: Option<Successor>,
    /// When the look-up that chose it was sent.
    checked: Instant,
}

impl Succession {
    /// The choice, for the watch to feed a response's registrations in one go.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Choice> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `me`'s successor is due to be chosen ahead ([`look_up`], then
    /// [`settle`](Self::settle)): the last choice is older than a sixth of the TTL (or is `me`,
    /// registered while following) and none is under way. Claims the choice if so.
    pub(crate) fn due(&self, ttl: i64, me: &str) -> bool {
        let every = Duration::from_secs(ttl.unsigned_abs()) / 6;
        let mut choice = self.lock();
        let due = !choice.choosing
            && choice.chosen.as_ref().is_none_or(|c| {
                c.checked.elapsed() > every
                    || c.successor.as_ref().is_some_and(|s| s.value.holder == me)
            });
        choice.choosing |= due;
        due
    }

    /// Ends a choice [`due`](Self::due) claimed with the look-up sent at `checked`. A failed
    /// look-up keeps the last choice: it ages out, and a release looks again. A choice the watch
    /// made meanwhile is newer news than this look-up.
    pub(crate) fn settle(&self, made: Result<Option<Successor>, LockError>, checked: Instant) {
        let mut choice = self.lock();
        choice.choosing = false;
        if let Ok(successor) = made {
            if choice.chosen.as_ref().is_none_or(|c| c.checked <= checked) {
                choice.chosen = Some(Chosen { successor, checked });
            }
        }
    }

    /// The successor chosen ahead, if chosen at most a third of the TTL ago and not `me`; used
    /// once. A choice of nobody is not used: a candidate may have registered since.
    pub(crate) fn take_fresh(&self, ttl: i64, me: &str) -> Option<Successor> {
        let fresh = Duration::from_secs(ttl.unsigned_abs()) / 3;
        self.lock()
            .chosen
            .take()
            .filter(|c| c.checked.elapsed() <= fresh)
            .and_then(|c| c.successor)
            .filter(|s| s.value.holder != me)
    }
}

impl Choice {
    /// A registration the watch showed written just now: its candidate is alive now (it wrote
    /// it on a lease it had just granted), so it is the choice unless a fresh one is kept.
    pub(crate) fn registered(&mut self, kv: &KeyValue, now: Instant) {
        let Some(successor) = Successor::of(kv) else {
            return;
        };
        let fresh = Duration::from_secs(successor.value.lease_duration_seconds) / 3;
        let keep = self
            .chosen
            .as_ref()
            .is_some_and(|c| c.successor.is_some() && now.duration_since(c.checked) <= fresh);
        if !keep {
            self.chosen = Some(Chosen {
                successor: Some(successor),
                checked: now,
            });
        }
    }

    /// A registration the watch showed deleted: no longer a candidate to hand over to.
    pub(crate) fn withdrawn(&mut self, key: &[u8]) {
        if let Some(c) = self.chosen.as_mut() {
            if c.successor.as_ref().is_some_and(|s| s.key == key) {
                c.successor = None;
            }
        }
    }
}

/// The oldest live candidate other than `me`, if any: one range read on the candidates'
/// prefix and a time-to-live look-up per candidate until one is alive; no write.
///
/// Alive means its spare lease was kept alive within the spare keeper's period (a third of
/// its TTL) and a second of slack: a candidate whose process died still has a registration
/// until its lease runs out, and a key handed to it would wait out that lease and then a
/// lease more.
pub(crate) async fn look_up(
    conn: &Conn,
    keys: &Keys,
    me: &str,
) -> Result<Option<Successor>, LockError> {
    let prefix = keys.candidates.clone();
    let resp = conn
        .call("candidates get", |c| async move {
            c.kv_client()
                .get(prefix, Some(GetOptions::new().with_prefix()))
                .await
        })
        .await?;
    let mut candidates: Vec<&KeyValue> = resp.kvs().iter().collect();
    candidates.sort_by_key(|kv| kv.create_revision());
    for kv in candidates {
        let Some(candidate) = Successor::of(kv) else {
            continue;
        };
        let (lease, value) = (candidate.lease, &candidate.value);
        if value.holder == me {
            continue;
        }
        let ttl = conn
            .call("lease time-to-live", |c| async move {
                c.lease_client().time_to_live(lease, None).await
            })
            .await?;
        let granted = i64::try_from(value.lease_duration_seconds).unwrap_or(i64::MAX);
        if ttl.ttl() > 0 && ttl.granted_ttl() == granted && granted - ttl.ttl() <= granted / 3 + 1 {
            return Ok(Some(candidate));
        }
        debug!(
            key = %keys.text,
            candidate = %value.holder,
            lease,
            ttl = ttl.ttl(),
            granted = ttl.granted_ttl(),
            "passing over a candidate whose spare lease is not kept alive"
        );
    }
    Ok(None)
}
