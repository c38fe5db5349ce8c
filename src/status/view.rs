//! What `status` says of one reading of the lock: a pure function of the lock's [`Inspection`],
//! the instant it was read and what this process saw before (for `--watch`).

use std::time::{Duration, SystemTime};

use leader_lock::backend::{Fact, Inspection, LockError, ObservedRecord};
use leader_lock::Term;
use tokio::time::Instant;

/// The lock's state, as `status` reports it (and as its exit code says).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// A holder's record whose lease has not run out by the lock's view.
    Held,
    /// Nobody holds it: no record, a released one, or one whose lease ran out.
    Free,
    /// The record is gone without a release, and a whole lease has not passed yet since its
    /// holder was last known live: nobody may take it yet (docs/leader-election.md).
    Vanished,
    /// The lock's server could not be read.
    Unreachable,
}

impl State {
    /// The name in the output.
    pub fn name(self) -> &'static str {
        match self {
            State::Held => "held",
            State::Free => "free",
            State::Vanished => "vanished",
            State::Unreachable => "unreachable",
        }
    }
}

/// Why a lock is free (or, for a server's restart, vanished).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reason {
    /// Its last holder released it.
    Released,
    /// A record is there, but its lease ran out by the lock's view (nobody renews it).
    Expired,
    /// No record, and the server kept nothing of a holder: never held, or (a Kubernetes Lease)
    /// deleted before this process saw it.
    NoRecord,
    /// The record vanished, and a lease has passed since.
    Lapsed,
    /// (`vanished`) No record and no trace, on a server restarted less than a lease ago that
    /// lost its data with the restart: a live holder's record may have gone with it.
    Restarted,
}

impl Reason {
    /// The name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Reason::Released => "released",
            Reason::Expired => "expired",
            Reason::NoRecord => "no-record",
            Reason::Lapsed => "lapsed",
            Reason::Restarted => "restarted",
        }
    }
}

/// Whose clock says when the record expires.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Basis {
    /// The server counts the record's TTL (etcd's lease, Redis's PTTL).
    ServerTtl,
    /// The record's renew time plus its lease duration, as the holder recorded them (a
    /// Kubernetes Lease, whose server keeps no clock).
    RenewTime,
}

impl Basis {
    /// The name in the output.
    pub fn name(self) -> &'static str {
        match self {
            Basis::ServerTtl => "server-ttl",
            Basis::RenewTime => "renew-time",
        }
    }
}

/// The holder of a record that is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Former {
    /// Its holder string; empty when the server kept only its term (a released Lease).
    pub holder: String,
    /// Its term.
    pub term: Term,
    /// Whether it released the lock.
    pub released: bool,
}

/// One reading of the lock, as `status` prints it.
#[derive(Debug, Clone, PartialEq)]
pub struct View {
    /// The lock (`LeaderLock::describe`).
    pub lock: String,
    /// The backend's name.
    pub backend: String,
    /// Its state.
    pub state: State,
    /// Why it is free.
    pub reason: Option<Reason>,
    /// The holder, while a record names one.
    pub holder: Option<String>,
    /// Its term.
    pub term: Option<Term>,
    /// When the holder acquired the lock (its clock).
    pub acquired: Option<SystemTime>,
    /// When it last renewed (its clock).
    pub renewed: Option<SystemTime>,
    /// The lease duration it recorded.
    pub lease_duration: Option<Duration>,
    /// When the record expires by the lock's view, and by whose clock.
    pub expires: Option<(SystemTime, Basis)>,
    /// The holder of a record that is gone.
    pub former: Option<Former>,
    /// When a vanished record's hold-off ends.
    pub free_at: Option<SystemTime>,
    /// What the lock keeps of its history.
    pub history: Vec<Fact>,
    /// When the lock was read (this process's clock).
    pub observed_at: SystemTime,
    /// Why it could not be read.
    pub error: Option<String>,
}

/// A reading with no record: the fields a state without one leaves empty.
fn empty(lock: &str, backend: &str, state: State, now: SystemTime) -> View {
    View {
        lock: lock.to_string(),
        backend: backend.to_string(),
        state,
        reason: None,
        holder: None,
        term: None,
        acquired: None,
        renewed: None,
        lease_duration: None,
        expires: None,
        former: None,
        free_at: None,
        history: Vec::new(),
        observed_at: now,
        error: None,
    }
}

/// The view of a lock that could not be read.
pub fn unreachable(lock: &str, backend: &str, e: &LockError, now: SystemTime) -> View {
    View {
        error: Some(e.chain().to_string()),
        ..empty(lock, backend, State::Unreachable, now)
    }
}

/// What this process has seen of the lock across readings (`--watch`): a record that vanished
/// is held off by the rule every backend shares, from when this process found it gone, when the
/// server kept no trace of it (a deleted Lease).
#[derive(Debug, Default)]
pub struct Seen {
    observed: ObservedRecord,
    /// A hold-off of this process's own ran: once over, the lock is free because it lapsed.
    held_off: bool,
}

impl Seen {
    /// The view of `i`, read at `now` (`wall` on the wall clock); `fallback` is the configured
    /// lease duration, for a record that gave none.
    pub fn view(
        &mut self,
        lock: &str,
        backend: &str,
        i: Inspection,
        now: Instant,
        wall: SystemTime,
        fallback: Duration,
    ) -> View {
        let mut v = empty(lock, backend, State::Free, wall);
        v.history = i.history;
        if let Some(r) = i.record {
            self.held_off = false;
            self.observed.observe(&r, now);
            let expires = match (i.server_ttl, r.renew_time) {
                (Some(ttl), _) => Some((wall + ttl, Basis::ServerTtl)),
                (None, Some(renewed)) => Some((renewed + r.lease_duration, Basis::RenewTime)),
                (None, None) => None,
            };
            let lapsed = expires.is_some_and(|(at, _)| at <= wall);
            v.state = if lapsed { State::Free } else { State::Held };
            v.reason = lapsed.then_some(Reason::Expired);
            v.holder = Some(r.holder);
            v.term = Some(r.term);
            v.acquired = r.acquire_time;
            v.renewed = r.renew_time;
            v.lease_duration = Some(r.lease_duration);
            v.expires = expires;
            return v;
        }
        match i.last_holder {
            Some(h) => {
                // The server's trace decides: a release, a hold-off by its view, or a lease over.
                self.observed.clear();
                self.held_off = false;
                v.former = Some(Former {
                    holder: h.holder,
                    term: h.term,
                    released: h.released,
                });
                match (h.released, h.held_off_for) {
                    (true, _) => v.reason = Some(Reason::Released),
                    (false, Some(left)) => {
                        v.state = State::Vanished;
                        v.free_at = Some(wall + left);
                    }
                    (false, None) => v.reason = Some(Reason::Lapsed),
                }
            }
            None => {
                // No trace on the server: only what this process saw can tell a vanished record,
                // or a restart that lost the server's data (a lease counted from it, as a
                // candidate's own lease, the way the Redis lock's acquire counts it).
                self.observed.gone(None, now, fallback);
                let restart = i
                    .server_uptime
                    .filter(|up| *up < fallback)
                    .map(|up| now + (fallback - up));
                match (self.observed.hold_off(now), restart) {
                    (Some((r, until)), restart) => {
                        self.held_off = true;
                        v.state = State::Vanished;
                        v.former = Some(Former {
                            holder: r.holder.clone(),
                            term: r.term,
                            released: false,
                        });
                        let until = restart.map_or(until, |r| r.max(until));
                        v.free_at = Some(wall + (until - now));
                    }
                    (None, Some(until)) => {
                        self.held_off = true;
                        v.state = State::Vanished;
                        v.reason = Some(Reason::Restarted);
                        v.free_at = Some(wall + (until - now));
                    }
                    (None, None) => {
                        v.reason = Some(if self.held_off {
                            Reason::Lapsed
                        } else {
                            Reason::NoRecord
                        });
                    }
                }
            }
        }
        v
    }
}

/// When a reading can change by itself, without a write: a held record's expiry, a vanished
/// one's end of hold-off.
pub fn next_change(v: &View) -> Option<SystemTime> {
    match v.state {
        State::Held => v.expires.map(|(at, _)| at),
        State::Vanished => v.free_at,
        _ => None,
    }
}

/// Whether two readings differ in what `--watch` reports: the state, its reason, the holder or
/// the term. A renewal is no change.
pub fn changed(a: &View, b: &View) -> bool {
    (a.state, a.reason, &a.holder, a.term) != (b.state, b.reason, &b.holder, b.term)
}

#[cfg(test)]
mod tests {
    use leader_lock::backend::{LastHolder, LockRecord};

    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    fn record(renewed: SystemTime) -> LockRecord {
        LockRecord {
            holder: "pod-a_1".into(),
            term: Term(7),
            lease_duration: S(15),
            acquire_time: Some(renewed - S(60)),
            renew_time: Some(renewed),
            version: "42".into(),
        }
    }

    fn view(seen: &mut Seen, i: Inspection, now: Instant, wall: SystemTime) -> View {
        seen.view("lock", "kubernetes", i, now, wall, S(15))
    }

    #[test]
    fn a_record_is_held_until_its_expiry_by_the_server_or_by_its_renew_time() {
        let wall = SystemTime::now();
        let now = Instant::now();
        let mut seen = Seen::default();
        let v = view(
            &mut seen,
            Inspection::of_record(Some(record(wall - S(5)))),
            now,
            wall,
        );
        assert_eq!((v.state, v.reason), (State::Held, None));
        assert_eq!(v.expires, Some((wall + S(10), Basis::RenewTime)));
        let ttl = Inspection::of_record(Some(record(wall - S(5)))).with_server_ttl(Some(S(3)));
        let v = view(&mut seen, ttl, now, wall);
        assert_eq!(v.expires, Some((wall + S(3), Basis::ServerTtl)));
        let v = view(
            &mut seen,
            Inspection::of_record(Some(record(wall - S(20)))),
            now,
            wall,
        );
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::Expired)));
    }

    #[test]
    fn the_servers_trace_tells_a_release_from_a_vanished_record() {
        let wall = SystemTime::now();
        let now = Instant::now();
        let gone = |released, held_off_for| {
            Inspection::of_record(None).with_last_holder(Some(LastHolder {
                holder: "pod-a_1".into(),
                term: Term(7),
                released,
                held_off_for,
            }))
        };
        let mut seen = Seen::default();
        let v = view(&mut seen, gone(false, Some(S(4))), now, wall);
        assert_eq!((v.state, v.free_at), (State::Vanished, Some(wall + S(4))));
        assert_eq!(next_change(&v), Some(wall + S(4)));
        let v = view(&mut seen, gone(true, None), now, wall);
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::Released)));
        let v = view(&mut seen, gone(false, None), now, wall);
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::Lapsed)));
    }

    #[test]
    fn without_a_trace_only_a_record_seen_before_makes_its_loss_a_vanish() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let v = view(&mut seen, Inspection::of_record(None), t0, wall);
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::NoRecord)));
        view(
            &mut seen,
            Inspection::of_record(Some(record(wall))),
            t0,
            wall,
        );
        let v = view(&mut seen, Inspection::of_record(None), t0 + S(1), wall);
        assert_eq!(v.state, State::Vanished, "{v:?}");
        assert_eq!(
            v.free_at,
            Some(wall + S(15)),
            "a lease from when it was found gone"
        );
        assert_eq!(v.former.as_ref().map(|f| f.term), Some(Term(7)));
        // Read again later with nothing seen in between: the same hold-off, then free.
        let v = view(&mut seen, Inspection::of_record(None), t0 + S(10), wall);
        assert_eq!(v.state, State::Vanished);
        let v = view(&mut seen, Inspection::of_record(None), t0 + S(16), wall);
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::Lapsed)));
    }

    #[test]
    fn an_empty_lock_on_a_server_restarted_within_a_lease_is_not_free_yet() {
        let wall = SystemTime::now();
        let t0 = Instant::now();
        let mut seen = Seen::default();
        let restarted = |up| Inspection::of_record(None).with_server_uptime(Some(S(up)));
        let v = view(&mut seen, restarted(4), t0, wall);
        assert_eq!(
            (v.state, v.reason),
            (State::Vanished, Some(Reason::Restarted))
        );
        assert_eq!(v.free_at, Some(wall + S(11)), "a lease from the restart");
        let v = view(&mut seen, restarted(15), t0 + S(11), wall);
        assert_eq!((v.state, v.reason), (State::Free, Some(Reason::Lapsed)));
    }

    #[test]
    fn a_renewal_is_no_change_a_new_holder_or_state_is() {
        let wall = SystemTime::now();
        let now = Instant::now();
        let mut seen = Seen::default();
        let a = view(
            &mut seen,
            Inspection::of_record(Some(record(wall))),
            now,
            wall,
        );
        let b = view(
            &mut seen,
            Inspection::of_record(Some(record(wall + S(2)))),
            now,
            wall,
        );
        assert!(!changed(&a, &b));
        let mut other = record(wall);
        other.term = Term(8);
        let c = view(&mut seen, Inspection::of_record(Some(other)), now, wall);
        assert!(changed(&b, &c));
    }
}
