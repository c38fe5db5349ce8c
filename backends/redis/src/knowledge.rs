//! What one client knows about the lock, on its own monotonic clock, shared by its attempts and
//! its watch streams.
//!
//! Two rules rest on it (docs/redis.md, "Vanished records" and "Follower cost"):
//! - a record that vanished without a release is not free until a lease has passed since this
//!   client last knew it to be live;
//! - while a watch hears every change (every acquire, renew and release publishes a message), a
//!   follower's attempt is answered from what the watch heard, without a round trip.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use leader_lock::backend::LockRecord;
use leader_lock::Term;
use tokio::time::Instant;

use crate::value::MAX_TERM;

/// The latest live record this client saw (one it did not see released).
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The record.
    pub rec: LockRecord,
    /// The last instant the record was known to be live: when a reply or message showing it
    /// arrived (its arrival, not its sending: later is the safe side).
    pub at: Instant,
    /// When the record lapses unless renewed: the key's TTL as last seen, counted from `at`.
    pub until: Instant,
    /// When an attempt found the lock gone, with no release seen and no watch that would have
    /// heard the renewals since `at`: the lease is counted from then.
    pub vanished: Option<Instant>,
}

/// How to run a follower's attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Plan {
    /// A watch heard every change since the holder was last seen live, and its lease has not
    /// run out: the answer is known without asking the server.
    Follow {
        holder: String,
        term: Term,
        retry_after: Duration,
    },
    /// Ask the server; the guard says what the script does with a missing key.
    Ask(Guard),
}

/// What the acquire script does when the lock key is missing and the server kept no state of
/// its last holder (all of it flushed, failed over or lost): the client's own knowledge decides.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Guard {
    /// The client saw no live holder it has to wait for: take the lock.
    Free,
    /// A holder may still believe it is valid for this long: wait.
    Wait(Duration),
    /// A holder was live when last seen, and it may have renewed unseen since then: the lease
    /// has to be counted from the moment the lock is found gone (the script answers "vanished").
    Unknown,
}

impl Guard {
    /// The script argument: `''`, a number of milliseconds, or `'?'`.
    pub fn arg(self) -> String {
        match self {
            Guard::Free => String::new(),
            Guard::Wait(d) => ceil_ms(d).max(1).to_string(),
            Guard::Unknown => "?".into(),
        }
    }
}

pub(crate) fn ceil_ms(d: Duration) -> u64 {
    let ms = d.as_nanos().div_ceil(1_000_000);
    u64::try_from(ms).unwrap_or(u64::MAX)
}

#[derive(Debug, Default)]
struct State {
    seen: Option<Seen>,
    /// The last lease seen released; a late reply that still shows it live is ignored.
    released: Option<(String, Term)>,
    /// Open subscriptions: id → the instant from which each hears every change.
    subs: HashMap<u64, Instant>,
    /// The term each holder of this process last led under: a renew expects exactly it.
    held: HashMap<String, Term>,
    /// Every holder this process campaigned as.
    candidates: HashSet<String>,
    /// The highest term seen; a new term is always above it.
    max_term: u64,
}

impl State {
    fn covered(&self, s: &Seen) -> bool {
        self.subs.values().any(|since| *since <= s.at)
    }
}

/// Shared by a [`RedisLock`](crate::RedisLock) and its watch tasks.
#[derive(Debug, Default)]
pub(crate) struct Knowledge {
    state: Mutex<State>,
    next_sub: AtomicU64,
}

impl Knowledge {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Notes a record seen live at `at`, whose key had `ttl` left then.
    pub fn saw(&self, rec: &LockRecord, at: Instant, ttl: Duration) {
        let mut st = self.lock();
        st.saw_term(rec.term);
        if st.released.as_ref().is_some_and(|(_, t)| rec.term <= *t) {
            // A reply sent before a release and read after it: that lease is over (terms only
            // grow, so every lease up to the released one is).
            return;
        }
        let until = at + rec.lease_duration.min(ttl);
        match &mut st.seen {
            Some(s) if s.rec.holder == rec.holder && s.rec.term == rec.term => {
                if at >= s.at {
                    s.at = at;
                    s.rec = rec.clone();
                }
                s.until = s.until.max(until);
                s.vanished = None;
            }
            // An older view of another holder than the one already seen: keep the newer one.
            Some(s) if at < s.at => {}
            seen => {
                *seen = Some(Seen {
                    rec: rec.clone(),
                    at,
                    until,
                    vanished: None,
                })
            }
        }
    }

    /// Notes a release of `holder`'s lease `term`.
    pub fn released(&self, holder: &str, term: Term) {
        let mut st = self.lock();
        st.saw_term(term);
        if st.seen.as_ref().is_some_and(|s| s.rec.term <= term) {
            st.seen = None;
        }
        st.released = Some((holder.to_string(), term));
    }

    /// Notes that `me` won the lock: whatever holder was seen before is history.
    pub fn won(&self, me: &str, term: Term) {
        let mut st = self.lock();
        st.saw_term(term);
        st.held.insert(me.to_string(), term);
        if st.seen.as_ref().is_some_and(|s| s.rec.holder != me) {
            st.seen = None;
        }
    }

    /// Decides how `me` (not holding the lock, as far as it knows) attempts at `now`.
    pub fn plan(&self, me: &str, now: Instant) -> Plan {
        let mut st = self.lock();
        let Some(s) = st.seen.clone() else {
            return Plan::Ask(Guard::Free);
        };
        if s.rec.holder == me {
            // Our own record: we know we do not lead, nobody else may believe it is theirs.
            return Plan::Ask(Guard::Free);
        }
        if let Some(v) = s.vanished {
            let end = v + s.rec.lease_duration;
            if now < end {
                return Plan::Ask(Guard::Wait(end - now));
            }
            st.seen = None;
            return Plan::Ask(Guard::Free);
        }
        if st.covered(&s) {
            if now < s.until {
                return Plan::Follow {
                    holder: s.rec.holder.clone(),
                    term: s.rec.term,
                    retry_after: s.until - now,
                };
            }
            // Heard every change, and no renew for the whole lease: its holder is done.
            return Plan::Ask(Guard::Free);
        }
        Plan::Ask(Guard::Unknown)
    }

    /// The script found the lock gone with no trace on the server, after `plan` said
    /// [`Guard::Unknown`]: counts the lease from `at` (only the first time) and returns the wait.
    pub fn vanished(&self, at: Instant) -> Option<(LockRecord, Duration)> {
        let mut st = self.lock();
        let s = st.seen.as_mut()?;
        let v = *s.vanished.get_or_insert(at);
        let end = v + s.rec.lease_duration;
        Some((s.rec.clone(), end.saturating_duration_since(Instant::now())))
    }

    /// The latest live record seen, if any.
    pub fn current(&self) -> Option<Seen> {
        self.lock().seen.clone()
    }

    /// Registers a subscription that hears every change from `since` on; returns its guard.
    pub fn subscribed(self: &Arc<Self>, since: Instant) -> Subscription {
        let id = self.next_sub.fetch_add(1, Ordering::Relaxed);
        self.lock().subs.insert(id, since);
        Subscription {
            knowledge: self.clone(),
            id,
        }
    }

    /// The term `me` leads under, as far as this process knows.
    pub fn held(&self, me: &str) -> Option<Term> {
        self.lock().held.get(me).copied()
    }

    /// Forgets that `me` leads; returns the term it held.
    pub fn drop_held(&self, me: &str) -> Option<Term> {
        self.lock().held.remove(me)
    }

    /// Notes that `me` campaigns through this client.
    pub fn candidate(&self, me: &str) {
        let mut st = self.lock();
        if !st.candidates.contains(me) {
            st.candidates.insert(me.to_string());
        }
    }

    /// True when `holder` is one of our candidates that does not know it holds `term`: an
    /// acquire whose reply was lost (timed out, connection dropped) was applied after all.
    pub fn unaware_holder(&self, holder: &str, term: Term) -> bool {
        let st = self.lock();
        st.candidates.contains(holder) && st.held.get(holder) != Some(&term)
    }

    /// The lowest term this client may hand out: above every term it has seen.
    pub fn floor(&self) -> u64 {
        match self.lock().max_term {
            0 => 0,
            t => t.saturating_add(1),
        }
    }

    /// Notes a term seen anywhere (a record, a message, a reply).
    pub fn saw_term(&self, term: Term) {
        self.lock().saw_term(term);
    }
}

impl State {
    fn saw_term(&mut self, term: Term) {
        if term.0 <= MAX_TERM {
            self.max_term = self.max_term.max(term.0);
        }
    }
}

/// A subscription counted as hearing every change until it is dropped.
#[derive(Debug)]
pub(crate) struct Subscription {
    knowledge: Arc<Knowledge>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.knowledge.lock().subs.remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rec(holder: &str, term: u64, version: &str) -> LockRecord {
        LockRecord {
            holder: holder.into(),
            term: Term(term),
            lease_duration: Duration::from_secs(2),
            acquire_time: None,
            renew_time: None,
            version: version.into(),
        }
    }

    const LEASE: Duration = Duration::from_secs(2);

    #[tokio::test(start_paused = true)]
    async fn follows_locally_only_while_a_watch_hears_everything() {
        let k = Arc::new(Knowledge::default());
        let t0 = Instant::now();
        assert_eq!(k.plan("me", t0), Plan::Ask(Guard::Free));
        // Seen by an attempt, no watch: the server is asked, and a vanish is counted from when
        // it is found.
        k.saw(&rec("x", 5, "5.1"), t0, LEASE);
        assert_eq!(k.plan("me", t0), Plan::Ask(Guard::Unknown));
        assert_eq!(k.plan("x", t0), Plan::Ask(Guard::Free), "our own record");
        // A watch that came up before the sighting covers it.
        let sub = k.subscribed(t0);
        let t1 = t0 + Duration::from_millis(500);
        assert_eq!(
            k.plan("me", t1),
            Plan::Follow {
                holder: "x".into(),
                term: Term(5),
                retry_after: LEASE - Duration::from_millis(500)
            }
        );
        // A renew heard moves the end; the lease running out unheard frees it.
        k.saw(&rec("x", 5, "5.2"), t1, LEASE);
        assert!(
            matches!(k.plan("me", t1 + LEASE / 2), Plan::Follow { retry_after, .. } if retry_after == LEASE / 2)
        );
        assert_eq!(k.plan("me", t1 + LEASE), Plan::Ask(Guard::Free));
        // The watch breaks: nothing is known about renewals any more.
        drop(sub);
        assert_eq!(k.plan("me", t1), Plan::Ask(Guard::Unknown));
        // A new watch covers only sightings from its start on.
        let _sub = k.subscribed(t1 + Duration::from_millis(1));
        assert_eq!(k.plan("me", t1), Plan::Ask(Guard::Unknown));
        k.saw(&rec("x", 5, "5.3"), t1 + Duration::from_millis(2), LEASE);
        assert!(matches!(k.plan("me", t1), Plan::Follow { .. }));
    }

    #[tokio::test(start_paused = true)]
    async fn vanish_waits_one_lease_from_discovery() {
        let k = Knowledge::default();
        let t0 = Instant::now();
        k.saw(&rec("x", 5, "5.1"), t0, LEASE);
        tokio::time::advance(Duration::from_secs(10)).await;
        let found = Instant::now();
        let (r, wait) = k.vanished(found).expect("seen");
        assert_eq!((r.holder.as_str(), wait), ("x", LEASE));
        // Found again later: still counted from the first discovery, so it ends.
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!(
            k.vanished(Instant::now()).expect("seen").1,
            LEASE - Duration::from_millis(500)
        );
        assert_eq!(
            k.plan("me", Instant::now()),
            Plan::Ask(Guard::Wait(LEASE - Duration::from_millis(500)))
        );
        assert_eq!(k.plan("me", found + LEASE), Plan::Ask(Guard::Free));
        assert!(k.current().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn releases_and_stale_replies() {
        let k = Arc::new(Knowledge::default());
        let _sub = k.subscribed(Instant::now());
        let t0 = Instant::now();
        k.saw(&rec("x", 5, "5.1"), t0, LEASE);
        k.released("x", Term(5));
        assert_eq!(k.plan("me", t0), Plan::Ask(Guard::Free));
        // A reply read before the release but arriving after it does not bring it back.
        k.saw(&rec("x", 5, "5.1"), t0 + Duration::from_millis(1), LEASE);
        assert_eq!(k.plan("me", t0), Plan::Ask(Guard::Free));
        // An older view of a previous holder does not replace a newer one.
        k.saw(&rec("y", 7, "7.1"), t0 + Duration::from_millis(10), LEASE);
        k.saw(&rec("z", 6, "6.1"), t0 + Duration::from_millis(5), LEASE);
        assert_eq!(k.current().expect("seen").rec.holder, "y");
        // A key whose TTL is shorter than its recorded lease lapses with the TTL.
        k.saw(
            &rec("w", 8, "8.1"),
            t0 + Duration::from_millis(20),
            Duration::from_millis(300),
        );
        assert_eq!(
            k.current().expect("seen").until,
            t0 + Duration::from_millis(320)
        );
        assert_eq!(k.floor(), 9);
        // Winning forgets the other holder.
        k.won("me", Term(9));
        assert!(k.current().is_none());
        assert_eq!(k.held("me"), Some(Term(9)));
        k.candidate("me");
        assert!(!k.unaware_holder("me", Term(9)));
        assert!(k.unaware_holder("me", Term(10)));
        assert!(!k.unaware_holder("other", Term(10)));
    }
}
