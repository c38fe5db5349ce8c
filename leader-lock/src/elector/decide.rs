//! The one decision of the elector, from one attempt's outcome: whether we lead, until when,
//! what to publish, and when to look again. No I/O, so the safety rules sit in one place that
//! unit tests drive with exact instants.

use std::time::Duration;

use tokio::time::Instant;

use crate::leadership::LeaderState;
use crate::lock::{Attempt, LockError};
use crate::record::Term;
use crate::timing::Timing;

/// Our leadership while we hold the lock.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Held {
    pub(super) term: Term,
    /// The instant the last successful attempt was sent, plus the renew deadline.
    pub(super) valid_until: Instant,
}

/// What [`decide`] knows besides the attempt itself.
#[derive(Debug, Clone, Copy)]
pub(super) struct Context {
    pub(super) timing: Timing,
    pub(super) held: Option<Held>,
    /// The latest term the lock reported (ours or another holder's).
    pub(super) last_term: Option<Term>,
    /// Whether a change stream would wake us on a change (then followers poll once a lease).
    pub(super) watch_healthy: bool,
    /// Whether nothing was published yet.
    pub(super) starting: bool,
    /// This attempt's follower poll interval (`Timing::jittered_retry`).
    pub(super) jittered_retry: Duration,
}

/// What an attempt's outcome means, for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Note {
    Became(Term),
    Renewed(Term),
    /// The lock answered with another term of ours while we led.
    NewTerm {
        old: Term,
        term: Term,
    },
    Lost {
        term: Term,
        holder: Option<String>,
    },
    Following,
    /// The attempt failed; `stepped_down` when our validity ended meanwhile.
    Failed {
        stepped_down: Option<Term>,
    },
    /// The lock granted a term that is no real leadership.
    NotElected(Term),
    /// The reply came after the validity it would grant had ended.
    TooLate(Term),
}

/// The outcome of one attempt: the next state of the loop, and what to publish and log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Decision {
    pub(super) held: Option<Held>,
    pub(super) publish: Option<LeaderState>,
    pub(super) next: Instant,
    pub(super) last_term: Option<Term>,
    /// The term the lock went back from, when it went back.
    pub(super) regressed_from: Option<Term>,
    pub(super) note: Note,
}

/// A term lower than the latest one seen: the one it went back from.
pub(super) fn regression(last: Option<Term>, now: Term) -> Option<Term> {
    last.filter(|l| now < *l)
}

pub(super) fn not_leading() -> LeaderState {
    LeaderState::Follower {
        holder: None,
        term: None,
    }
}

/// Decides from one attempt, sent at `sent` and answered at `now`. No I/O: the safety rules in
/// one place, for the loop and for unit tests.
pub(super) fn decide(
    c: &Context,
    sent: Instant,
    now: Instant,
    result: &Result<Attempt, LockError>,
) -> Decision {
    let t = c.timing;
    let failed = |stepped_down: Option<Term>| {
        let mut d = Decision {
            held: c.held,
            publish: None,
            next: now + c.jittered_retry,
            last_term: c.last_term,
            regressed_from: None,
            note: Note::Failed { stepped_down },
        };
        match c.held {
            // Past its validity a leader stops at once; it keeps trying at the retry period.
            Some(h) if now >= h.valid_until => {
                d.held = None;
                d.publish = Some(not_leading());
                d.note = Note::Failed {
                    stepped_down: Some(h.term),
                };
                d.next = now + t.retry_period;
            }
            // Still valid: keep trying to renew at the retry period.
            Some(_) => d.next = now + t.retry_period,
            None if c.starting => d.publish = Some(not_leading()),
            None => {}
        }
        d
    };
    match result {
        Ok(Attempt::Leader { term, .. }) if !term.is_elected() => {
            let mut d = failed(None);
            d.note = Note::NotElected(*term);
            d
        }
        Ok(Attempt::Leader { term, held_from }) => {
            let term = *term;
            // A hold the backend made sure of before we asked counts from then (never later).
            let from = held_from.map_or(sent, |at| at.min(sent));
            let valid_until = from + t.renew_deadline;
            let regressed_from = regression(c.last_term, term);
            if now >= valid_until {
                // As a failure: a leader's validity ended too (it was sent before this one).
                let mut d = failed(None);
                d.next = now;
                d.last_term = Some(term);
                d.regressed_from = regressed_from;
                d.note = Note::TooLate(term);
                return d;
            }
            let note = match c.held {
                Some(h) if h.term == term => Note::Renewed(term),
                Some(h) => Note::NewTerm { old: h.term, term },
                None => Note::Became(term),
            };
            Decision {
                held: Some(Held { term, valid_until }),
                publish: Some(LeaderState::Leader { term, valid_until }),
                // Due a retry period after the hold began, so that the renew still comes a
                // `renew_deadline - retry_period` before the validity ends.
                next: from + t.retry_period,
                last_term: Some(term),
                regressed_from,
                note,
            }
        }
        Ok(Attempt::Follower {
            holder,
            term,
            retry_after,
        }) => {
            let fallback = if c.watch_healthy {
                t.lease_duration
            } else {
                c.jittered_retry
            };
            Decision {
                held: None,
                publish: Some(LeaderState::Follower {
                    holder: holder.clone(),
                    term: *term,
                }),
                next: now + retry_after.map_or(fallback, |r| r.min(fallback)),
                last_term: term.or(c.last_term),
                regressed_from: term.and_then(|t| regression(c.last_term, t)),
                note: match c.held {
                    Some(h) => Note::Lost {
                        term: h.term,
                        holder: holder.clone(),
                    },
                    None => Note::Following,
                },
            }
        }
        Err(_) => failed(None),
    }
}
