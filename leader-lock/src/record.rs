use std::fmt;
use std::time::{Duration, SystemTime};

/// A fencing term: increases with every change of holder and never repeats for a lock.
///
/// A real leadership's term is at least 1. [`Term::DISABLED`] marks the permanent leadership of
/// [`Leadership::always_leader`](crate::Leadership::always_leader), which is no election at all;
/// it shows as `disabled`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Term(pub u64);

impl Term {
    /// The marker of a replica that runs without leader election (`Leadership::always_leader`).
    ///
    /// No backend can produce it (Kubernetes terms are `int32`, etcd revisions `int64`, Redis
    /// terms stay below 2^53), and the elector refuses it from a lock, so it never stands for a
    /// real leadership. It is no fencing value: never compare it with real terms.
    pub const DISABLED: Term = Term(u64::MAX);

    /// True for [`Term::DISABLED`].
    pub fn is_disabled(self) -> bool {
        self == Term::DISABLED
    }

    /// True for a term an election can grant: neither 0 nor [`Term::DISABLED`].
    pub fn is_elected(self) -> bool {
        self.0 != 0 && !self.is_disabled()
    }
}

impl fmt::Display for Term {
    /// The number, or `disabled` for [`Term::DISABLED`]: logs show the term as this text, so the
    /// `term` field has one JSON type (a string) in every line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_disabled() {
            f.write_str("disabled")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// Who a replica is: its configured name plus a per-process incarnation id.
///
/// The incarnation makes a restarted or duplicated process a different holder, so it never
/// "renews" a lease that another live process with the same name holds.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Identity {
    name: String,
    incarnation: String,
}

impl Identity {
    /// An identity with a fresh random incarnation id.
    pub fn new(name: impl Into<String>) -> Self {
        let incarnation = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
        Identity {
            name: name.into(),
            incarnation,
        }
    }

    /// An identity with a given incarnation (tests and tools that need a fixed value).
    pub fn with_incarnation(name: impl Into<String>, incarnation: impl Into<String>) -> Self {
        Identity {
            name: name.into(),
            incarnation: incarnation.into(),
        }
    }

    /// The name given to [`Identity::new`] (a pod's name, say), without the incarnation.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The per-process incarnation id.
    pub fn incarnation(&self) -> &str {
        &self.incarnation
    }

    /// The value stored in the lock: `name_incarnation`.
    pub fn holder(&self) -> String {
        format!("{}_{}", self.name, self.incarnation)
    }
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}_{}", self.name, self.incarnation)
    }
}

/// What a contender asks the lock for.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Who asks.
    pub identity: Identity,
    /// The lease duration to record.
    pub lease_duration: Duration,
}

impl Candidate {
    /// The holder string this candidate writes into the lock.
    pub fn holder(&self) -> String {
        self.identity.holder()
    }
}

/// The lock's current content, as a backend reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LockRecord {
    /// The holder (`name_incarnation`); empty once released.
    pub holder: String,
    /// The fencing term of the current (or last) leadership.
    pub term: Term,
    /// The lease duration the holder recorded.
    pub lease_duration: Duration,
    /// When the holder acquired the lock, by the holder's wall clock (informational only).
    pub acquire_time: Option<SystemTime>,
    /// When the holder last renewed, by the holder's wall clock (informational only).
    pub renew_time: Option<SystemTime>,
    /// The backend's own version: resourceVersion, mod revision or token.
    pub version: String,
}

impl LockRecord {
    /// True when nobody holds the lock (released or never held).
    pub fn is_free(&self) -> bool {
        self.holder.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_disabled_marker_is_no_elected_term_and_shows_as_such() {
        assert_eq!(Term::DISABLED.to_string(), "disabled");
        assert_eq!(Term(7).to_string(), "7");
        assert!(Term::DISABLED.is_disabled() && !Term(7).is_disabled());
        assert!(!Term::DISABLED.is_elected());
        assert!(!Term(0).is_elected(), "term 0 is not a real leadership");
        assert!(Term(1).is_elected() && Term(u64::MAX - 1).is_elected());
    }

    #[test]
    fn an_identity_shows_as_the_holder_it_writes() {
        let id = Identity::with_incarnation("pod-a", "5f3c9e1a");
        assert_eq!(id.name(), "pod-a");
        assert_eq!(id.incarnation(), "5f3c9e1a");
        assert_eq!(id.holder(), "pod-a_5f3c9e1a");
        assert_eq!(id.to_string(), id.holder());
        let c = Candidate {
            identity: id,
            lease_duration: Duration::from_secs(15),
        };
        assert_eq!(c.holder(), "pod-a_5f3c9e1a");
    }

    #[test]
    fn incarnations_differ() {
        let a = Identity::new("pod-a");
        let b = Identity::new("pod-a");
        assert_eq!(a.name(), b.name());
        assert_ne!(a.holder(), b.holder());
        assert!(a.holder().starts_with("pod-a_"));
        assert_eq!(a.incarnation().len(), 8);
    }
}
