//! The split-brain checker: proves from the replicas' own logs that no two of them held a valid
//! leadership at once and that no write of an older term came after a newer term's first write.
//!
//! # What the logs give, and what is checked
//!
//! Every instant is the replica's `mono_ms` (`CLOCK_MONOTONIC`, one clock for the machine).
//!
//! - A **leadership** of replica R under term T starts at R's `leadership: leading` line. It
//!   ends at the earliest of: its validity deadline (`valid_until_mono_ms` of that line or of
//!   the latest `leadership: renewed` line, logged at debug), R's next `leadership: following`
//!   or `leadership: stopped` line, and the instant the bench sent R a SIGKILL.
//! - Two leaderships of different replicas **overlap** when each starts before the other ends.
//!   No tolerance is added: the documented margin (`lease-duration − renew-deadline`) is what
//!   keeps a follower's takeover after the old leader's deadline even though the lease is timed
//!   by the server (etcd, Redis) or by the follower's own clock (Kubernetes), so with that
//!   margin holding, valid leaderships never overlap at all. The report gives the smallest gap
//!   seen between consecutive leaderships of different replicas, to compare with the margin.
//! - A **late write**: a `status written` line of term T logged after the first `status written`
//!   line of a newer term. A write is logged when its request has completed, so this compares
//!   completions.
//! - Terms must grow: a leadership that starts after another replica's must carry a higher term,
//!   and one of the same replica must not carry a lower one. The same term again is the same
//!   holder taking its own record back (say after a renew failed while the server restarted):
//!   the holder did not change, so neither does the term (docs/leader-election.md).
//!
//! The logger stamps a line when it sees the change, a little after it happened: a leadership's
//! logged start is slightly late and its logged end slightly late too. A renew published in the
//! instant before a SIGSTOP or SIGKILL may not reach the log; then the deadline used is the
//! previous one, a retry period early.
//!
//! # Other programs on the same Lease
//!
//! [`check_mixed`] reads the Go peers' lines too (client-go's elector, a controller-runtime
//! manager; [`testkit::replica::peer`]): a peer's leadership runs from its `started leading`
//! line until its last renewal was sent plus the renew deadline, its release was sent, its
//! `stopped leading` line or its SIGKILL. The rules are the same; what breaks one is blamed on the
//! leadership that started later (it took the lock while another was valid) or on the
//! writer: a violation when that is one of ours, a *finding* when it is a peer's (they are
//! counted and reported, not failures: client-go takes a deleted Lease at once, for one). A
//! Lease deleted by hand restarts `leaseTransitions` when a peer (or a replica of ours started
//! since) creates it again, so terms are compared only between leaderships and writes of the
//! same *epoch*, the time between two deletions.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use gateway_leader_log::Event;
use testkit::replica::Record;

/// One leadership as the logs show it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Interval {
    /// The replica.
    pub replica: usize,
    /// The term.
    pub term: u64,
    /// Its logged start (`CLOCK_MONOTONIC` ms).
    pub start: f64,
    /// Its end (`CLOCK_MONOTONIC` ms), as defined in the module docs.
    pub end: f64,
}

/// What the checker found.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Every leadership seen.
    pub leaderships: usize,
    /// Every status write seen.
    pub writes: usize,
    /// Each violation, in words.
    pub violations: Vec<String>,
    /// What other programs on the lock did that ours may never do ([`check_mixed`]), in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub findings: Vec<String>,
    /// The smallest gap (ms) from a leadership's end to the next start of another replica's
    /// leadership; negative would be an overlap. `None` with fewer than two leaderships.
    pub min_gap_ms: Option<f64>,
}

/// Builds the leaderships from the events of one lane (every replica of one lock), with the
/// instants the bench killed replicas at (`replica -> mono ms`).
pub fn leaderships(events: &[Record], killed: &BTreeMap<usize, f64>) -> Vec<Interval> {
    let mut by_replica: BTreeMap<usize, Vec<&Record>> = BTreeMap::new();
    for e in events {
        by_replica.entry(e.replica).or_default().push(e);
    }
    let mut out = Vec::new();
    for (replica, mut evs) in by_replica {
        evs.sort_by(|a, b| a.mono_ms.total_cmp(&b.mono_ms));
        let death = killed.get(&replica).copied().unwrap_or(f64::INFINITY);
        let mut open: Option<Interval> = None;
        let close = |i: Interval, at: f64, out: &mut Vec<Interval>| {
            let end = i.end.min(at).min(death);
            out.push(Interval { end, ..i });
        };
        for e in evs {
            match &e.what {
                Event::Leading { term, valid_until } => {
                    if let Some(i) = open.take() {
                        close(i, e.mono_ms, &mut out);
                    }
                    open = Some(Interval {
                        replica,
                        term: *term,
                        start: e.mono_ms,
                        end: *valid_until,
                    });
                }
                Event::Renewed { term, valid_until } => {
                    if let Some(i) = open.as_mut().filter(|i| i.term == *term) {
                        i.end = i.end.max(*valid_until);
                    }
                }
                Event::Following { .. } | Event::Stopped => {
                    if let Some(i) = open.take() {
                        close(i, e.mono_ms, &mut out);
                    }
                }
                // Ours log the release after the leadership's `stopped` line, which ended it;
                // client-go releases first and calls back afterwards: the release, once sent,
                // ends the leadership.
                Event::Released {
                    released: true,
                    sent: Some(sent),
                    ..
                } => {
                    if let Some(i) = open.take() {
                        close(i, *sent, &mut out);
                    }
                }
                // A write, a sweep, an endpoint or an unsent release says nothing of who leads.
                _ => {}
            }
        }
        if let Some(i) = open.take() {
            close(i, f64::INFINITY, &mut out);
        }
    }
    out.sort_by(|a, b| a.start.total_cmp(&b.start));
    out
}

/// Checks one lane's events; see the module docs for the rules.
pub fn check(events: &[Record], killed: &BTreeMap<usize, f64>) -> Verdict {
    check_mixed(events, killed, &Mixed::default())
}

/// Who else is on the lock, for [`check_mixed`].
#[derive(Debug, Clone, Default)]
pub struct Mixed {
    /// The replicas that are Go peers, not ours.
    pub peers: BTreeSet<usize>,
    /// When the lock record was deleted by hand (`CLOCK_MONOTONIC` ms).
    pub deletions: Vec<f64>,
}

impl Mixed {
    /// The epoch of instant `at`: how many deletions came before it.
    fn epoch(&self, at: f64) -> usize {
        self.deletions.iter().filter(|d| **d <= at).count()
    }

    /// Where a break of the rules by `replica` goes: a finding for a peer, else a violation.
    fn blame<'v>(&self, v: &'v mut Verdict, replica: usize) -> &'v mut Vec<String> {
        if self.peers.contains(&replica) {
            &mut v.findings
        } else {
            &mut v.violations
        }
    }

    fn who(&self, replica: usize) -> &'static str {
        if self.peers.contains(&replica) {
            "peer"
        } else {
            "replica"
        }
    }
}

/// Checks the events of every program on one lock, ours and the peers `mixed` names; see the
/// module docs for the rules and for whom each break is blamed on.
pub fn check_mixed(events: &[Record], killed: &BTreeMap<usize, f64>, mixed: &Mixed) -> Verdict {
    let ls = leaderships(events, killed);
    let mut v = Verdict {
        leaderships: ls.len(),
        ..Verdict::default()
    };
    for (i, a) in ls.iter().enumerate() {
        for b in &ls[i + 1..] {
            // Sorted by start: b starts at or after a.
            if a.replica != b.replica && b.start < a.end {
                let line = format!(
                    "two valid leaders: {} {} (term {}) until {:.1} ms and {} {} (term {}) from \
                     {:.1} ms, {:.1} ms at once",
                    mixed.who(a.replica),
                    a.replica,
                    a.term,
                    a.end,
                    mixed.who(b.replica),
                    b.replica,
                    b.term,
                    b.start,
                    a.end.min(b.end) - b.start
                );
                mixed.blame(&mut v, b.replica).push(line);
            }
        }
        // Terms grow from each leadership to the next (one report per regression, not one per
        // later leadership). A process that steps down and takes its own record back before
        // anyone else held it keeps its term: the holder did not change.
        if let Some(b) = ls.get(i + 1) {
            let same_epoch = mixed.epoch(a.start) == mixed.epoch(b.start);
            if same_epoch && (b.term < a.term || (b.term == a.term && b.replica != a.replica)) {
                let line = format!(
                    "term did not grow: {} {} led under term {} from {:.1} ms, after {} {} \
                     under term {}",
                    mixed.who(b.replica),
                    b.replica,
                    b.term,
                    b.start,
                    mixed.who(a.replica),
                    a.replica,
                    a.term
                );
                mixed.blame(&mut v, b.replica).push(line);
            }
        }
        if let Some(next) = ls[i + 1..].iter().find(|b| b.replica != a.replica) {
            let gap = next.start - a.end;
            v.min_gap_ms = Some(v.min_gap_ms.map_or(gap, |g: f64| g.min(gap)));
        }
    }
    let writes: Vec<(&Record, u64)> = events
        .iter()
        .filter_map(|e| match e.what {
            Event::Written { term, .. } => Some((e, term)),
            _ => None,
        })
        .collect();
    v.writes = writes.len();
    // The first write of each term, per epoch.
    let mut first: BTreeMap<(usize, u64), f64> = BTreeMap::new();
    for (e, term) in &writes {
        let f = first
            .entry((mixed.epoch(e.mono_ms), *term))
            .or_insert(e.mono_ms);
        *f = f.min(e.mono_ms);
    }
    for (e, term) in &writes {
        let epoch = mixed.epoch(e.mono_ms);
        // The newest term whose first write came before this one.
        if let Some(((_, newer), at)) = first
            .range((epoch, term.saturating_add(1))..(epoch + 1, 0))
            .rfind(|(_, at)| **at < e.mono_ms)
        {
            let line = format!(
                "late write: {} {} wrote under term {term} at {:.1} ms, after term {newer}'s \
                 first write at {at:.1} ms",
                mixed.who(e.replica),
                e.replica,
                e.mono_ms
            );
            mixed.blame(&mut v, e.replica).push(line);
        }
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(replica: usize, mono_ms: f64, what: Event) -> Record {
        Record {
            replica,
            mono_ms,
            what,
        }
    }
    fn lead(term: u64, valid_until: f64) -> Event {
        Event::Leading { term, valid_until }
    }
    fn write(term: u64) -> Event {
        Event::Written {
            term,
            object_kind: "HTTPRoute".into(),
            namespace: "n".into(),
            name: "r".into(),
        }
    }

    #[test]
    fn a_clean_handover_passes() {
        let events = vec![
            ev(0, 0.0, lead(1, 2000.0)),
            ev(
                0,
                900.0,
                Event::Renewed {
                    term: 1,
                    valid_until: 2900.0,
                },
            ),
            ev(0, 5.0, write(1)),
            ev(0, 1000.0, Event::Stopped),
            // The release follows the stop; the leadership ended at the stop.
            ev(
                0,
                1004.0,
                Event::Released {
                    term: 1,
                    released: true,
                    sent: Some(1003.0),
                },
            ),
            ev(1, 1010.0, lead(2, 3010.0)),
            ev(1, 1020.0, write(2)),
        ];
        let v = check(&events, &BTreeMap::new());
        assert!(v.violations.is_empty(), "{:?}", v.violations);
        assert_eq!((v.leaderships, v.writes), (2, 2));
        assert_eq!(v.min_gap_ms, Some(10.0));
    }

    #[test]
    fn a_frozen_leaders_deadline_and_a_kill_end_its_leadership() {
        // Replica 0 froze with its deadline at 2900; replica 1 took over at 4000.
        let events = vec![
            ev(0, 0.0, lead(1, 2000.0)),
            ev(
                0,
                900.0,
                Event::Renewed {
                    term: 1,
                    valid_until: 2900.0,
                },
            ),
            ev(1, 4000.0, lead(2, 6000.0)),
            ev(
                0,
                5000.0,
                Event::Following {
                    term: None,
                    holder: None,
                },
            ),
        ];
        assert!(check(&events, &BTreeMap::new()).violations.is_empty());
        // Killed at 1500, another leads from 1600: fine though its deadline was later.
        let events = vec![ev(0, 0.0, lead(1, 2000.0)), ev(1, 1600.0, lead(2, 3600.0))];
        let killed = BTreeMap::from([(0, 1500.0)]);
        assert!(check(&events, &killed).violations.is_empty());
    }

    #[test]
    fn overlaps_late_writes_and_old_terms_are_violations() {
        let events = vec![
            ev(0, 0.0, lead(1, 2000.0)),
            ev(1, 1500.0, lead(2, 3500.0)),
            ev(1, 1600.0, write(2)),
            ev(0, 1700.0, write(1)),
        ];
        let v = check(&events, &BTreeMap::new());
        assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
        assert!(v.violations[0].starts_with("two valid leaders"));
        assert!(v.violations[1].starts_with("late write"));
        let events = vec![ev(0, 0.0, lead(5, 100.0)), ev(1, 200.0, lead(4, 300.0))];
        let v = check(&events, &BTreeMap::new());
        assert!(v.violations[0].starts_with("term did not grow"));
        // The same replica going back counts too, and one regression is one report.
        let events = vec![
            ev(0, 0.0, lead(5, 100.0)),
            ev(
                0,
                150.0,
                Event::Following {
                    term: None,
                    holder: None,
                },
            ),
            ev(0, 200.0, lead(3, 300.0)),
            ev(
                0,
                350.0,
                Event::Following {
                    term: None,
                    holder: None,
                },
            ),
            ev(1, 400.0, lead(4, 500.0)),
            ev(
                1,
                550.0,
                Event::Following {
                    term: None,
                    holder: None,
                },
            ),
            ev(2, 600.0, lead(4, 700.0)),
            ev(
                2,
                650.0,
                Event::Following {
                    term: None,
                    holder: None,
                },
            ),
            // Its own record taken back: the same holder, the same term.
            ev(2, 800.0, lead(4, 900.0)),
        ];
        let v = check(&events, &BTreeMap::new());
        assert_eq!(v.violations.len(), 2, "{:?}", v.violations);
        assert!(
            v.violations[0].contains("replica 0 led under term 3"),
            "{:?}",
            v.violations
        );
        assert!(
            v.violations[1].contains("replica 2 led under term 4"),
            "{:?}",
            v.violations
        );
    }

    #[test]
    fn a_peers_release_ends_its_leadership_before_its_callback() {
        // client-go writes the release, then calls OnStoppedLeading: the release counts.
        let events = vec![
            ev(5, 0.0, lead(3, 3000.0)),
            ev(
                5,
                1012.0,
                Event::Released {
                    term: 3,
                    released: true,
                    sent: Some(1000.0),
                },
            ),
            ev(0, 1008.0, lead(4, 4008.0)),
            ev(5, 1020.0, Event::Stopped),
        ];
        let mixed = Mixed {
            peers: BTreeSet::from([5]),
            deletions: Vec::new(),
        };
        let v = check_mixed(&events, &BTreeMap::new(), &mixed);
        assert!(v.violations.is_empty() && v.findings.is_empty(), "{v:?}");
    }

    #[test]
    fn a_break_is_blamed_on_who_started_later_or_wrote() {
        let mixed = Mixed {
            peers: BTreeSet::from([5, 6]),
            deletions: vec![500.0],
        };
        // A peer took over while one of ours was valid: a finding. One of ours took over while
        // a peer was valid: a violation.
        let events = vec![
            ev(0, 0.0, lead(1, 2000.0)),
            ev(5, 1500.0, lead(2, 3500.0)),
            ev(1, 3000.0, lead(3, 5000.0)),
        ];
        let v = check_mixed(&events, &BTreeMap::new(), &mixed);
        assert_eq!(v.findings.len(), 1, "{v:?}");
        assert!(v.findings[0].starts_with("two valid leaders: replica 0"));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(v.violations[0].contains("peer 5 (term 2) until 3500.0 ms and replica 1"));
        // After the deletion at 500 a peer recreates the Lease under term 0: no term rule
        // across epochs. A peer's write under an older term after a newer term's first write
        // is a finding; one of ours is a violation.
        let events = vec![
            ev(0, 0.0, lead(7, 400.0)),
            ev(0, 100.0, write(7)),
            ev(0, 450.0, Event::Stopped),
            ev(5, 600.0, lead(0, 800.0)),
            ev(5, 650.0, write(0)),
            ev(5, 900.0, Event::Stopped),
            ev(6, 1000.0, lead(1, 1200.0)),
            ev(6, 1050.0, write(1)),
            ev(5, 1100.0, write(0)),
            ev(6, 1300.0, Event::Stopped),
            ev(1, 1400.0, lead(2, 1600.0)),
            ev(1, 1450.0, write(2)),
            ev(0, 1500.0, write(1)),
        ];
        let v = check_mixed(&events, &BTreeMap::new(), &mixed);
        assert_eq!(v.findings.len(), 1, "{v:?}");
        assert!(v.findings[0].starts_with("late write: peer 5 wrote under term 0"));
        assert_eq!(v.violations.len(), 1, "{v:?}");
        assert!(v.violations[0].starts_with("late write: replica 0 wrote under term 1"));
    }
}
