use std::time::Duration;

use tokio::time::Instant;

use crate::record::LockRecord;

/// Tracks when a record was last seen to change, on this process's monotonic clock.
///
/// Backends without a server-side TTL (Kubernetes) take over a lease only once its record has
/// been seen unchanged for its lease duration; the holder's wall clock is never trusted.
#[derive(Debug, Default, Clone)]
pub struct ObservedRecord {
    last: Option<(LockRecord, Instant)>,
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

    /// Forgets the observation (the record is gone).
    pub fn clear(&mut self) {
        self.last = None;
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

    #[test]
    fn expiry_moves_only_when_the_lease_changes() {
        let t0 = Instant::now();
        let mut o = ObservedRecord::default();
        o.observe(&rec("a", 1, "1"), t0);
        let e0 = o.expires_at(Duration::from_secs(1)).expect("observed");
        assert_eq!(e0, t0 + Duration::from_secs(15));
        o.observe(&rec("a", 1, "2"), t0 + Duration::from_secs(5));
        assert_eq!(o.expires_at(Duration::from_secs(1)), Some(e0));
        o.observe(&rec("a", 2, "3"), t0 + Duration::from_secs(6));
        assert_eq!(
            o.expires_at(Duration::from_secs(1)),
            Some(t0 + Duration::from_secs(21))
        );
    }
}
