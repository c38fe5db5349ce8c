//! The split-brain checker: exact validity intervals from every contender's published states.

use std::fmt;
use std::sync::{Mutex, MutexGuard};

use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::leadership::Stamped;
use crate::{LeaderState, Leadership, Term};

/// Records every state each contender publishes, with the instant it took effect, and checks
/// their leaderships exactly.
///
/// A `Leader { term, valid_until }` published at `p` lets `check()` pass during
/// `[p, min(valid_until, next publication))`. Those intervals are compared exactly: two
/// contenders' leaderships may not overlap by any amount, and terms, ordered by the start of their
/// leadership, never go back; they strictly increase when the contender changes, and a contender
/// never leads again under a lower term than it had.
///
/// A contender counts from the moment it is [`watch`](Self::watch)ed: watch it before it can lead.
#[derive(Debug, Default)]
pub struct SplitBrainChecker {
    contenders: Mutex<Vec<Contender>>,
}

#[derive(Debug)]
struct Contender {
    rx: mpsc::UnboundedReceiver<Stamped>,
    log: Vec<Stamped>,
}

/// One interval during which a contender's `check()` could pass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Interval {
    /// Which contender (the index [`SplitBrainChecker::watch`] returned).
    pub contender: usize,
    /// The term it led under.
    pub term: Term,
    /// When the leadership was published.
    pub start: Instant,
    /// When it stopped passing `check()`: its validity deadline, or the next publication.
    pub end: Instant,
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "contender {} term {} for {:?}",
            self.contender,
            self.term,
            self.end - self.start
        )
    }
}

fn guard<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The intervals of one contender's log, in order; consecutive ones of one term (renewals) merge.
fn intervals(contender: usize, log: &[Stamped]) -> Vec<Interval> {
    let mut out: Vec<Interval> = Vec::new();
    for (i, (at, state)) in log.iter().enumerate() {
        let LeaderState::Leader { term, valid_until } = state else {
            continue;
        };
        let end = match log.get(i + 1) {
            Some((next, _)) => (*valid_until).min(*next),
            None => *valid_until,
        };
        if end <= *at {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.term == *term && last.end >= *at => last.end = last.end.max(end),
            _ => out.push(Interval {
                contender,
                term: *term,
                start: *at,
                end,
            }),
        }
    }
    out
}

/// Every violation among `all` (the intervals of all contenders).
fn violations(mut all: Vec<Interval>) -> Vec<String> {
    all.sort_by_key(|i| (i.start, i.contender));
    let mut found = Vec::new();
    for (n, a) in all.iter().enumerate() {
        for b in &all[n + 1..] {
            if b.start >= a.end {
                break;
            }
            if a.contender != b.contender {
                found.push(format!(
                    "two valid leaders at once: {a} and {b} overlap by {:?}",
                    a.end.min(b.end) - b.start
                ));
            }
        }
    }
    for w in all.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        if a.contender != b.contender && b.term <= a.term {
            found.push(format!(
                "the term did not increase on a change of holder: {a}, then {b}"
            ));
        }
        if a.contender == b.contender && b.term < a.term {
            found.push(format!("a contender's term went backwards: {a}, then {b}"));
        }
    }
    for (n, a) in all.iter().enumerate() {
        if let Some(b) = all[n + 1..]
            .iter()
            .find(|b| b.contender != a.contender && b.term == a.term)
        {
            found.push(format!("one term, two holders: {a} and {b}"));
        }
    }
    found
}

impl SplitBrainChecker {
    /// A checker with no contenders yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a contender to watch; returns its index.
    pub fn watch(&self, l: Leadership) -> usize {
        let (first, rx) = l.record();
        let mut c = guard(&self.contenders);
        c.push(Contender {
            rx,
            log: vec![first],
        });
        c.len() - 1
    }

    /// Every state contender `i` published so far, with the instant it took effect.
    pub fn history(&self, i: usize) -> Vec<(Instant, LeaderState)> {
        let mut c = guard(&self.contenders);
        let Some(c) = c.get_mut(i) else {
            return Vec::new();
        };
        while let Ok(s) = c.rx.try_recv() {
            c.log.push(s);
        }
        c.log.clone()
    }

    /// Every leadership interval so far, ordered by start.
    pub fn intervals(&self) -> Vec<Interval> {
        let n = guard(&self.contenders).len();
        let mut all: Vec<Interval> = (0..n)
            .flat_map(|i| intervals(i, &self.history(i)))
            .collect();
        all.sort_by_key(|i| (i.start, i.contender));
        all
    }

    /// The (contender, term) leaderships seen so far, in order.
    pub fn leaders(&self) -> Vec<(usize, Term)> {
        let mut out: Vec<(usize, Term)> = Vec::new();
        for i in self.intervals() {
            if out.last() != Some(&(i.contender, i.term)) {
                out.push((i.contender, i.term));
            }
        }
        out
    }

    /// What is wrong so far: overlaps, and terms that did not increase as they must.
    pub fn violations(&self) -> Vec<String> {
        violations(self.intervals())
    }

    /// Panics on any violation; returns the leaderships seen.
    ///
    /// # Cancel safety
    /// Cancel safe: it completes at its first poll.
    pub async fn finish(self) -> Vec<(usize, Term)> {
        let v = self.violations();
        assert!(v.is_empty(), "split brain: {}", v.join("; "));
        self.leaders()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::leadership::Publisher;

    fn leader(term: u64, valid_for: Duration) -> LeaderState {
        LeaderState::Leader {
            term: Term(term),
            valid_until: Instant::now() + valid_for,
        }
    }

    const FOLLOWER: LeaderState = LeaderState::Follower {
        holder: None,
        term: None,
    };

    fn contenders(n: usize) -> (SplitBrainChecker, Vec<std::sync::Arc<Publisher>>) {
        let checker = SplitBrainChecker::new();
        let publishers = (0..n)
            .map(|_| {
                let (p, l) = Publisher::channel(LeaderState::Starting);
                checker.watch(l);
                p
            })
            .collect();
        (checker, publishers)
    }

    #[tokio::test(start_paused = true)]
    async fn an_overlap_of_one_microsecond_is_caught() {
        let (checker, p) = contenders(2);
        p[0].publish(leader(1, Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1) - Duration::from_micros(1)).await;
        p[1].publish(leader(2, Duration::from_secs(1)));
        let v = checker.violations();
        assert_eq!(v.len(), 1, "{v:?}");
        assert!(v[0].contains("overlap by 1µs"), "{v:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn back_to_back_leaderships_and_early_step_downs_are_fine() {
        let (checker, p) = contenders(2);
        p[0].publish(leader(1, Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(1)).await;
        p[1].publish(leader(2, Duration::from_secs(10)));
        tokio::time::advance(Duration::from_millis(100)).await;
        // Stepping down ends the interval before its deadline.
        p[1].publish(FOLLOWER);
        p[0].publish(leader(3, Duration::from_secs(10)));
        assert_eq!(checker.violations(), Vec::<String>::new());
        assert_eq!(
            checker.leaders(),
            vec![(0, Term(1)), (1, Term(2)), (0, Term(3))]
        );
        checker.finish().await;
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_merge_into_one_leadership() {
        let (checker, p) = contenders(1);
        for _ in 0..3 {
            p[0].publish(leader(4, Duration::from_secs(1)));
            tokio::time::advance(Duration::from_millis(500)).await;
        }
        let i = checker.intervals();
        assert_eq!(i.len(), 1, "{i:?}");
        assert_eq!(i[0].end - i[0].start, Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn a_regression_by_the_same_contender_is_caught() {
        let (checker, p) = contenders(2);
        p[0].publish(leader(5, Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(2)).await;
        p[0].publish(leader(3, Duration::from_secs(1)));
        let v = checker.violations();
        assert!(
            v.iter().any(|m| m.contains("went backwards")),
            "same contender, lower term: {v:?}"
        );
        // The same term again after a gap (a renewal after a failed one) is fine.
        let (checker, p) = contenders(1);
        p[0].publish(leader(5, Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(2)).await;
        p[0].publish(leader(5, Duration::from_secs(1)));
        assert_eq!(checker.violations(), Vec::<String>::new());
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_that_does_not_increase_on_a_change_of_holder_is_caught() {
        let (checker, p) = contenders(2);
        p[0].publish(leader(5, Duration::from_secs(1)));
        tokio::time::advance(Duration::from_secs(2)).await;
        p[1].publish(leader(5, Duration::from_secs(1)));
        let v = checker.violations();
        assert!(v.iter().any(|m| m.contains("did not increase")), "{v:?}");
        assert!(
            v.iter().any(|m| m.contains("one term, two holders")),
            "{v:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_leadership_already_expired_when_published_counts_for_nothing() {
        let (checker, p) = contenders(2);
        p[0].publish(LeaderState::Leader {
            term: Term(1),
            valid_until: Instant::now(),
        });
        p[1].publish(leader(2, Duration::from_secs(1)));
        assert_eq!(checker.leaders(), vec![(1, Term(2))]);
    }
}
