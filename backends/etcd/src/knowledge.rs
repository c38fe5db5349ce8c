//! What one contender knows about the lock key, timed on its own monotonic clock.
//!
//! Both the watch stream and the lock's own requests feed it; each observation says as of which
//! etcd revision it holds, and older news never overwrites newer. From it come the two waits of
//! docs/etcd.md: a record that stops changing is stale `lease` after it was first seen, and a
//! record that vanished without a release is free `lease` after its last version was first seen
//! (the rule every backend shares, `leader_lock::backend::vanished_free_at`).

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leader_lock::backend::vanished_free_at;
use tokio::time::Instant;

use crate::value::{term, StoredValue};

/// What a version of the key held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Content {
    /// A record of ours whose holder rewrites it on every renew (it carries `renewTime`).
    Heartbeat,
    /// A record of ours without `renewTime`: from a version that renews with keep-alives only,
    /// or a key handed over by a release that its successor has not renewed yet. Never stale:
    /// waited for until etcd deletes it, and a deletion counts from when it is seen.
    Legacy,
    /// Anything else: never taken over, waited out until etcd deletes it.
    Foreign,
}

/// One version of the key, as this process first saw it.
#[derive(Debug, Clone)]
pub(crate) struct Version {
    pub create_rev: i64,
    pub mod_rev: i64,
    /// The lease the version is on (0: none).
    pub lease: i64,
    /// Its bytes, for a successor that takes a key handed to it without reading it again.
    pub value: Vec<u8>,
    pub content: Content,
    /// When this process first saw this version (never before etcd wrote it).
    pub first_seen: Instant,
}

/// The last holder of ours seen alive; kept after its record vanished, until that is resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct HolderSeen {
    /// Its term (`value::term`): the create revision of its record, or the revision of the
    /// handover write that made it the holder.
    pub term: i64,
    /// `name_incarnation`.
    pub holder: String,
    /// The lease duration it recorded.
    pub lease_duration: Duration,
}

/// The key's fields that matter here, from a read, a watch event or our own write.
#[derive(Debug, Clone)]
pub(crate) struct Seen<'a> {
    pub create_rev: i64,
    pub mod_rev: i64,
    pub lease: i64,
    pub value: &'a [u8],
}

impl<'a> From<&'a etcd_client::KeyValue> for Seen<'a> {
    fn from(kv: &'a etcd_client::KeyValue) -> Self {
        Seen {
            create_rev: kv.create_revision(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
            value: kv.value(),
        }
    }
}

/// What the lock knows of the key ([`Knowledge`]) behind its own lock, shared with the watch
/// that feeds it. Never held across a request.
#[derive(Clone, Default)]
pub(crate) struct Observed(Arc<Mutex<Knowledge>>);

impl Observed {
    /// The knowledge, for one decision or update.
    pub(crate) fn lock(&self) -> MutexGuard<'_, Knowledge> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// The state: present (with its version), gone (since when it counts), or never seen.
#[derive(Debug, Default)]
pub(crate) struct Knowledge {
    /// The etcd revision this knowledge is current as of.
    known_rev: i64,
    /// The version believed present (`None`: gone or never seen).
    current: Option<Version>,
    /// The last holder of ours seen alive, kept after its record vanished until it is resolved.
    holder: Option<HolderSeen>,
    /// Set once the key was seen gone: the instant its last holder's wait counts from.
    gone_since: Option<Instant>,
}

impl Knowledge {
    /// The key holds `kv` as of revision `as_of` (a read's header, an event's revision).
    pub fn present(&mut self, as_of: i64, kv: Seen<'_>, now: Instant) {
        if as_of < self.known_rev {
            return;
        }
        self.known_rev = as_of;
        if self
            .current
            .as_ref()
            .is_some_and(|v| v.mod_rev == kv.mod_rev)
        {
            return;
        }
        self.set_version(kv, now);
    }

    fn set_version(&mut self, kv: Seen<'_>, now: Instant) {
        let content = match StoredValue::parse(kv.value) {
            Ok(v) => {
                self.holder = Some(HolderSeen {
                    term: term(&v, kv.create_rev, kv.mod_rev),
                    lease_duration: v.lease_duration(),
                    holder: v.holder.clone(),
                });
                if v.renew_time.is_some() {
                    Content::Heartbeat
                } else {
                    Content::Legacy
                }
            }
            Err(_) => Content::Foreign,
        };
        self.current = Some(Version {
            create_rev: kv.create_rev,
            mod_rev: kv.mod_rev,
            lease: kv.lease,
            value: kv.value.to_vec(),
            content,
            first_seen: now,
        });
        self.gone_since = None;
    }

    /// The key was deleted at revision `rev`; `prev` is the version deleted (a watch event's
    /// previous key-value), when etcd still had it.
    pub fn deleted(&mut self, rev: i64, prev: Option<Seen<'_>>, now: Instant) {
        if rev <= self.known_rev {
            return;
        }
        let known_version = match (&self.current, &prev) {
            (Some(v), Some(p)) => v.mod_rev == p.mod_rev,
            _ => false,
        };
        if !known_version {
            match prev {
                // A version we never saw counts as first seen now: that only makes us wait longer.
                Some(p) => self.set_version(p, now),
                None => self.current = None,
            }
        }
        // The holder's last renew wrote the deleted version no later than we first saw it, and a
        // holder never renews a record that is not its own last write (nor a foreign value).
        // A legacy holder renews without writing, so its wait counts from now.
        let since = match &self.current {
            Some(v) if matches!(v.content, Content::Heartbeat | Content::Foreign) => v.first_seen,
            _ => now,
        };
        self.known_rev = rev;
        self.current = None;
        self.gone_since = Some(since);
    }

    /// A read as of `as_of` found the key missing. Returns the revision to replay the key's
    /// history from when we believed it present and do not know how it went.
    pub fn absent(&mut self, as_of: i64) -> Option<i64> {
        if as_of <= self.known_rev {
            return None;
        }
        match &self.current {
            Some(v) => Some(v.mod_rev + 1),
            None => {
                self.known_rev = as_of;
                None
            }
        }
    }

    /// The key went missing by `as_of` and its history is lost (compacted): wait from now.
    pub fn absent_unexplained(&mut self, as_of: i64, now: Instant) {
        if as_of <= self.known_rev {
            return;
        }
        self.known_rev = as_of;
        self.current = None;
        self.gone_since = Some(now);
    }

    /// The holder of `term` released the lock gracefully: nothing to wait for.
    pub fn released(&mut self, term: i64) {
        if self.holder.as_ref().is_some_and(|h| h.term == term) {
            self.holder = None;
        }
    }

    /// We deleted a stale record ourselves: its holder can claim nothing any more.
    pub fn forget_holder(&mut self) {
        self.holder = None;
    }

    /// The version we believe the key holds.
    pub fn current(&self) -> Option<&Version> {
        self.current.as_ref()
    }

    /// The last holder seen alive.
    pub fn holder(&self) -> Option<&HolderSeen> {
        self.holder.as_ref()
    }

    /// Whether the key, as we believe it now, is a record of ours naming `holder`.
    pub fn names(&self, holder: &str) -> bool {
        self.current
            .as_ref()
            .is_some_and(|v| v.content != Content::Foreign)
            && self.holder.as_ref().is_some_and(|h| h.holder == holder)
    }

    /// How long to wait for a holder's record: its lease or ours, whichever is longer.
    pub fn wait(&self, own_lease: Duration) -> Duration {
        self.holder
            .as_ref()
            .map_or(own_lease, |h| h.lease_duration.max(own_lease))
    }

    /// When the present record counts as stale (a heartbeat record that stopped changing).
    pub fn stale_at(&self, own_lease: Duration) -> Option<Instant> {
        match &self.current {
            Some(v) if v.content == Content::Heartbeat => Some(v.first_seen + self.wait(own_lease)),
            _ => None,
        }
    }

    /// When the key, believed gone, may be created: `None` while it is believed present.
    ///
    /// Free at once when no holder was ever seen alive (or it released); otherwise it vanished
    /// without a release, and the shared rule ([`vanished_free_at`]) counts the holder's wait
    /// from when the deleted version was first seen: the last instant it was known live.
    pub fn free_at(&self, own_lease: Duration, now: Instant) -> Option<Instant> {
        if self.current.is_some() {
            return None;
        }
        match (&self.holder, self.gone_since) {
            (None, _) | (_, None) => Some(now),
            (Some(_), Some(since)) => {
                Some(vanished_free_at(since, self.wait(own_lease), own_lease))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LEASE: Duration = Duration::from_secs(3);

    fn value(renew: bool) -> Vec<u8> {
        let mut v = StoredValue::new("a_1".into(), 5);
        if !renew {
            v.renew_time = None;
        }
        v.encode()
    }

    fn seen(value: &[u8], mod_rev: i64) -> Seen<'_> {
        Seen {
            create_rev: 10,
            mod_rev,
            lease: 0,
            value,
        }
    }

    #[test]
    fn a_vanished_heartbeat_record_waits_from_its_last_version() {
        let t0 = Instant::now();
        let v = value(true);
        let mut k = Knowledge::default();
        k.present(10, seen(&v, 10), t0);
        k.present(12, seen(&v, 12), t0 + Duration::from_secs(1));
        assert_eq!(k.stale_at(LEASE), Some(t0 + Duration::from_secs(6)));
        // The same version seen again does not move the clock.
        k.present(20, seen(&v, 12), t0 + Duration::from_secs(2));
        assert_eq!(k.stale_at(LEASE), Some(t0 + Duration::from_secs(6)));
        k.deleted(21, Some(seen(&v, 12)), t0 + Duration::from_secs(3));
        // The holder's 5 s lease is longer than ours.
        assert_eq!(
            k.free_at(LEASE, t0 + Duration::from_secs(3)),
            Some(t0 + Duration::from_secs(6))
        );
        // Older news is ignored.
        k.present(19, seen(&v, 12), t0 + Duration::from_secs(4));
        assert!(k.current().is_none());
        k.released(10);
        assert_eq!(
            k.free_at(LEASE, t0 + Duration::from_secs(4)),
            Some(t0 + Duration::from_secs(4))
        );
    }

    #[test]
    fn an_unseen_last_version_or_a_legacy_record_waits_from_now() {
        let t0 = Instant::now();
        let later = t0 + Duration::from_secs(2);
        let v = value(true);
        let mut k = Knowledge::default();
        k.present(10, seen(&v, 10), t0);
        k.deleted(15, Some(seen(&v, 14)), later);
        assert_eq!(
            k.free_at(LEASE, later),
            Some(later + Duration::from_secs(5))
        );

        let legacy = value(false);
        let mut k = Knowledge::default();
        k.present(10, seen(&legacy, 10), t0);
        assert_eq!(k.stale_at(LEASE), None, "legacy records are never stale");
        k.deleted(11, Some(seen(&legacy, 10)), later);
        assert_eq!(
            k.free_at(LEASE, later),
            Some(later + Duration::from_secs(5))
        );
    }

    #[test]
    fn a_key_handed_over_is_never_stale_and_its_holder_has_the_handover_term() {
        let t0 = Instant::now();
        let v = value(true);
        let mut k = Knowledge::default();
        k.present(10, seen(&v, 12), t0);
        assert_eq!(k.holder().map(|h| h.term), Some(10));
        let handed = StoredValue::handed_to(&StoredValue::candidate("b_2".into(), 5)).encode();
        k.present(20, seen(&handed, 20), t0 + Duration::from_secs(1));
        assert!(k.names("b_2") && !k.names("a_1"));
        assert_eq!(
            k.holder().map(|h| h.term),
            Some(20),
            "the handover write's revision"
        );
        assert_eq!(
            k.stale_at(LEASE),
            None,
            "its successor was timed by no write of its own"
        );
        // Deleted (say, its lease revoked): the wait counts from the deletion, not the write.
        let later = t0 + Duration::from_secs(9);
        k.deleted(21, Some(seen(&handed, 20)), later);
        assert_eq!(
            k.free_at(LEASE, later),
            Some(later + Duration::from_secs(5))
        );
    }

    #[test]
    fn a_missing_key_is_free_when_no_holder_was_seen() {
        let t0 = Instant::now();
        let mut k = Knowledge::default();
        assert_eq!(k.absent(5), None);
        assert_eq!(k.free_at(LEASE, t0), Some(t0));
        let v = value(true);
        k.present(6, seen(&v, 6), t0);
        assert_eq!(k.free_at(LEASE, t0), None);
        // A read finding it gone asks for the history after the version we saw.
        assert_eq!(k.absent(9), Some(7));
        k.absent_unexplained(9, t0 + Duration::from_secs(1));
        assert_eq!(
            k.free_at(LEASE, t0 + Duration::from_secs(1)),
            Some(t0 + Duration::from_secs(6))
        );
    }
}
