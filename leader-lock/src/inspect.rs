//! What an operator's tool reads of a lock: the record, and what the lock's server keeps beside
//! it (its own expiry, its history, a trace of a holder whose record is gone).
//!
//! [`LeaderLock::inspect`](crate::backend::LeaderLock::inspect) answers with an [`Inspection`].
//! The elector never calls it: it is for reading a lock from outside (`gateway-leader status`),
//! and it only reads. Its default is [`Inspection::of_record`] over
//! [`get`](crate::backend::LeaderLock::get); a backend adds what its server keeps, under its own
//! names ([`Fact`]), so the trait stays free of any one backend's vocabulary.

use std::time::{Duration, SystemTime};

use crate::record::{LockRecord, Term};

/// One reading of a lock, as its server holds it.
///
/// `#[non_exhaustive]`: build one with [`Inspection::of_record`] and its `with_*` setters.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Inspection {
    /// The record, as [`get`](crate::backend::LeaderLock::get) reads it (`None`: no record).
    pub record: Option<LockRecord>,
    /// How long the server keeps the record unless its holder renews it, when the server
    /// counts that itself (etcd: the key's lease TTL; Redis: the key's PTTL). `None` where the
    /// server keeps no clock (a Kubernetes Lease: its record's renew time plus its lease
    /// duration say when it lapses).
    pub server_ttl: Option<Duration>,
    /// What the server keeps of the lock's history, under the backend's own names
    /// (`leaseTransitions`; `createRevision`, `modRevision`; the Redis term counter), in the
    /// order the backend gives them.
    pub history: Vec<Fact>,
    /// When there is no record: what the server kept of its last holder, if anything.
    pub last_holder: Option<LastHolder>,
    /// How long the server has certainly been up, where a restart loses the lock's state with
    /// everything else (Redis without persistence). A lock found empty, with no trace, on a
    /// server up for less than a lease may have lost a live holder's record: the rule of
    /// [`vanished_free_at`](crate::backend::vanished_free_at) counts a lease from the restart.
    /// `None` where a restart loses nothing (etcd, a Lease).
    pub server_uptime: Option<Duration>,
}

/// One named value a backend's server keeps about the lock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// The backend's own name for it, in camelCase (`leaseTransitions`, `modRevision`).
    pub name: &'static str,
    /// Its value.
    pub value: FactValue,
}

/// The value of a [`Fact`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FactValue {
    /// A count or a revision.
    Number(u64),
    /// A wall-clock time, as the server (or the holder that wrote it) recorded it.
    Time(SystemTime),
    /// Anything else, as text.
    Text(String),
}

/// The last holder of a lock whose record is gone, as the server remembers it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastHolder {
    /// Its holder string (`name_incarnation`).
    pub holder: String,
    /// Its term.
    pub term: Term,
    /// True when it released the lock; false when the record vanished (deleted, evicted, lost)
    /// or expired without a release.
    pub released: bool,
    /// For a record that vanished without a release: how long, by the server's view, until a
    /// whole lease has passed since the holder was last known live (the rule of
    /// [`vanished_free_at`](crate::backend::vanished_free_at)). `None` when that has passed, or
    /// for a release.
    pub held_off_for: Option<Duration>,
}

// === impl Inspection ===

impl Inspection {
    /// An inspection that knows the record and nothing else: the default of
    /// [`LeaderLock::inspect`](crate::backend::LeaderLock::inspect).
    pub fn of_record(record: Option<LockRecord>) -> Self {
        Inspection {
            record,
            ..Inspection::default()
        }
    }

    /// Sets [`server_ttl`](Self::server_ttl).
    #[must_use]
    pub fn with_server_ttl(mut self, ttl: Option<Duration>) -> Self {
        self.server_ttl = ttl;
        self
    }

    /// Adds a [`Fact`] to [`history`](Self::history).
    #[must_use]
    pub fn with_fact(mut self, name: &'static str, value: FactValue) -> Self {
        self.history.push(Fact { name, value });
        self
    }

    /// Sets [`server_uptime`](Self::server_uptime).
    #[must_use]
    pub fn with_server_uptime(mut self, uptime: Option<Duration>) -> Self {
        self.server_uptime = uptime;
        self
    }

    /// Sets [`last_holder`](Self::last_holder).
    #[must_use]
    pub fn with_last_holder(mut self, last: Option<LastHolder>) -> Self {
        self.last_holder = last;
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_inspection_knows_the_record_only() {
        let i = Inspection::of_record(None);
        assert_eq!(i, Inspection::default());
        let i = i
            .with_server_ttl(Some(Duration::from_secs(3)))
            .with_fact("term", FactValue::Number(7));
        assert_eq!(i.history[0].name, "term");
        assert_eq!(i.server_ttl, Some(Duration::from_secs(3)));
    }
}
