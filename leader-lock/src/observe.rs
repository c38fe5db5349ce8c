//! What a client has seen of a lock record, on its own monotonic clock, and the rule for a
//! record that vanished without a release.

use std::time::Duration;

use tokio::time::Instant;

use crate::record::LockRecord;
use crate::timing::MAX_LEASE_DURATION;

/// When a lock whose record vanished without a release may be taken: `last_live` plus the
/// holder's `lease_duration` (`fallback` when the record gave none), the lease never counted
/// above [`MAX_LEASE_DURATION`].
///
/// The rule of docs/leader-election.md ("Who may write"), the same on every backend: a record
/// deleted by hand, evicted, or lost with the server's state is not free, because its holder may
/// still believe it leads until its last renew plus its renew deadline, and nobody can ask it. So
/// the lock stays held for a whole lease after the holder was last known to be live.
///
/// `last_live` is the latest instant, on this process's monotonic clock, at which the backend
/// can tell the holder may have renewed: when the record's last version was first seen, if it
/// knows that version was the holder's last write (a delete event that carries it); otherwise
/// the instant the loss was found, since a read that finds nothing cannot rule out a renewal
/// since the previous read. Earlier is unsafe, later only waits longer. `fallback` is the
/// caller's own lease duration, for a record that recorded none (or a backend that reads none).
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use leader_lock::backend::vanished_free_at;
/// use tokio::time::Instant;
///
/// let found_gone = Instant::now();
/// let lease = Duration::from_secs(15);
/// assert_eq!(vanished_free_at(found_gone, lease, lease), found_gone + lease);
/// // A record that gave no lease duration is held for the caller's own.
/// let own = Duration::from_secs(10);
/// assert_eq!(vanished_free_at(found_gone, Duration::ZERO, own), found_gone + own);
/// ```
pub fn vanished_free_at(
    last_live: Instant,
    lease_duration: Duration,
    fallback: Duration,
) -> Instant {
    let lease = if lease_duration.is_zero() {
        fallback
    } else {
        lease_duration
    };
    last_live + lease.min(MAX_LEASE_DURATION)
}

/// Tracks when a record was last seen to change, on this process's monotonic clock, and when a
/// record that vanished may be taken.
///
/// Backends without a server-side TTL (Kubernetes) take over a lease only once its record has
/// been seen unchanged for its lease duration; the holder's wall clock is never trusted.
///
/// A record that vanishes without a release is not free ([`vanished_free_at`]):
/// [`gone`](Self::gone) starts a hold-off of the holder's lease duration from the moment the
/// disappearance was seen, and [`hold_off`](Self::hold_off) says until when nobody may take the
/// lock. The Kubernetes lock and the in-memory one keep one per client.
#[derive(Debug, Default, Clone)]
pub struct ObservedRecord {
    last: Option<(LockRecord, Instant)>,
    /// The live record that vanished, and the end of its hold-off.
    vanished: Option<(LockRecord, Instant)>,
}

fn same_lease(a: &LockRecord, b: &LockRecord) -> bool {
    a.holder == b.holder
        && a.term == b.term
        && a.lease_duration == b.lease_duration
        && a.acquire_time == b.acquire_time
        && a.renew_time == b.renew_time
}

impl ObservedRecord {
    /// Notes a read of the record at `now`; the observation time moves only when the lease changed.
    pub fn observe(&mut self, record: &LockRecord, now: Instant) {
        match &mut self.last {
            Some((prev, _)) if same_lease(prev, record) => {
                // Keep the time of the first sighting; only the version may have moved.
                prev.version = record.version.clone();
            }
            _ => self.last = Some((record.clone(), now)),
        }
    }

    /// Forgets everything, the hold-off of a vanished record included.
    pub fn clear(&mut self) {
        self.last = None;
        self.vanished = None;
    }

    /// The record is gone without a release, as seen at `now`.
    ///
    /// `last` is its final state when the backend tells it (a delete event), else the record last
    /// observed counts. If that record had a holder, nobody may take the lock for its lease
    /// duration (`fallback` when it recorded none) from `now`: the moment the loss was seen
    /// stands for the last sighting, since a watch reports it at the deletion and a poll that
    /// finds nothing cannot rule out a renewal since the previous poll. A hold-off under way is
    /// kept when nothing new was seen in between.
    pub fn gone(&mut self, last: Option<&LockRecord>, now: Instant, fallback: Duration) {
        let observed = self.last.take().map(|(r, _)| r);
        let Some(rec) = last.cloned().or(observed).filter(|r| !r.is_free()) else {
            return;
        };
        let until = vanished_free_at(now, rec.lease_duration, fallback);
        self.vanished = Some((rec, until));
    }

    /// The vanished record and the instant it may be taken, while that is still ahead of `now`.
    pub fn hold_off(&self, now: Instant) -> Option<(&LockRecord, Instant)> {
        self.vanished
            .as_ref()
            .filter(|(_, until)| now < *until)
            .map(|(r, until)| (r, *until))
    }

    /// The last observed record.
    pub fn record(&self) -> Option<&LockRecord> {
        self.last.as_ref().map(|(r, _)| r)
    }

    /// When the observed lease expires on our clock: first sighting + its lease duration, with
    /// `fallback` used for a duration that is zero or implausible.
    pub fn expires_at(&self, fallback: Duration) -> Option<Instant> {
        self.last.as_ref().map(|(r, seen)| {
            let d = if r.lease_duration.is_zero() {
                fallback
            } else {
                r.lease_duration
            };
            *seen + d
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Term;

    fn rec(holder: &str, renew: u64, version: &str) -> LockRecord {
        LockRecord {
            holder: holder.into(),
            term: Term(1),
            lease_duration: Duration::from_secs(15),
            acquire_time: None,
            renew_time: Some(std::time::UNIX_EPOCH + Duration::from_secs(renew)),
            version: version.into(),
        }
    }

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn a_vanished_live_record_is_held_off_for_its_lease_from_when_it_was_found_gone() {
        let t0 = Instant::now();
        let mut o = ObservedRecord::default();
        o.observe(&rec("a", 1, "1"), t0);
        let gone_at = t0 + S(4);
        o.gone(None, gone_at, S(1));
        assert_eq!(o.record(), None, "the observation is forgotten");
        let (r, until) = o.hold_off(gone_at).expect("held off");
        assert_eq!(r.holder, "a");
        assert_eq!(until, gone_at + S(15), "its lease duration from the loss");
        assert!(o.hold_off(until - Duration::from_millis(1)).is_some());
        assert_eq!(o.hold_off(until).map(|(_, u)| u), None, "free at the end");
        // Found gone again by a later read, with nothing seen in between: the hold-off stays.
        o.gone(None, gone_at + S(5), S(1));
        assert_eq!(o.hold_off(gone_at).map(|(_, u)| u), Some(until));
    }

    #[test]
    fn a_delete_event_gives_the_final_record() {
        let t0 = Instant::now();
        let mut o = ObservedRecord::default();
        o.observe(&rec("a", 1, "1"), t0);
        let mut last = rec("b", 2, "2");
        last.lease_duration = S(30);
        o.gone(Some(&last), t0 + S(1), S(1));
        let (r, until) = o.hold_off(t0 + S(1)).expect("held off");
        assert_eq!((r.holder.as_str(), until), ("b", t0 + S(31)));
    }

    #[test]
    fn a_released_or_unknown_record_is_free_at_once() {
        let t0 = Instant::now();
        let mut o = ObservedRecord::default();
        o.gone(None, t0, S(15));
        assert!(o.hold_off(t0).is_none(), "never saw a holder");
        o.observe(&rec("", 1, "1"), t0);
        o.gone(None, t0, S(15));
        assert!(o.hold_off(t0).is_none(), "released: nobody to wait for");
        let mut zero = rec("a", 1, "1");
        zero.lease_duration = Duration::ZERO;
        o.gone(Some(&zero), t0, S(7));
        assert_eq!(o.hold_off(t0).map(|(_, u)| u), Some(t0 + S(7)), "fallback");
        let mut huge = rec("a", 1, "1");
        huge.lease_duration = Duration::from_secs(u64::MAX / 4);
        o.gone(Some(&huge), t0, S(7));
        assert_eq!(
            o.hold_off(t0).map(|(_, u)| u),
            Some(t0 + MAX_LEASE_DURATION),
            "capped"
        );
        o.clear();
        assert!(o.hold_off(t0).is_none());
    }

    #[test]
    fn expiry_moves_only_when_the_lease_changes() {
        let t0 = Instant::now();
        let mut o = ObservedRecord::default();
        o.observe(&rec("a", 1, "1"), t0);
        let e0 = o.expires_at(Duration::from_secs(1)).expect("observed");
        assert_eq!(e0, t0 + Duration::from_secs(15));
        o.observe(&rec("a", 1, "2"), t0 + Duration::from_secs(5));
        assert_eq!(o.expires_at(Duration::from_secs(1)), Some(e0));
        assert_eq!(
            o.record().map(|r| (r.holder.as_str(), r.version.as_str())),
            Some(("a", "2")),
            "the latest version of the same lease"
        );
        o.observe(&rec("a", 2, "3"), t0 + Duration::from_secs(6));
        assert_eq!(
            o.expires_at(Duration::from_secs(1)),
            Some(t0 + Duration::from_secs(21))
        );
    }
}
