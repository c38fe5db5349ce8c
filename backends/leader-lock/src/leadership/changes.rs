//! The changes of a leadership (a new term, the end of one), without its renewals.

use std::pin::Pin;
use std::task::{ready, Context, Poll};

use futures::Stream;
use tokio_stream::wrappers::WatchStream;

use super::LeaderState;
use crate::record::Term;

/// A change of this replica's leadership: what [`Leadership::changes`](super::Leadership::changes)
/// yields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum LeadershipChange {
    /// This replica leads under a new term: it became leader, or leads again after it lost the
    /// lock (client-go's `OnStartedLeading`).
    StartedLeading {
        /// The new term.
        term: Term,
    },
    /// This replica no longer leads under `term`: another replica took over, the validity
    /// lapsed without a renewal, or the elector stopped (client-go's `OnStoppedLeading`). It
    /// always comes before the next [`StartedLeading`](Self::StartedLeading).
    StoppedLeading {
        /// The term that ended.
        term: Term,
    },
}

/// A [`Stream`] of [`LeadershipChange`]s; see [`Leadership::changes`](super::Leadership::changes).
///
/// It is `Send + Sync + Unpin`, as kube-runtime's `Controller::reconcile_all_on` asks of its
/// trigger.
#[derive(Debug)]
#[must_use = "streams do nothing unless polled"]
pub struct LeadershipChanges {
    states: WatchStream<LeaderState>,
    /// The term we lead under, as last yielded.
    leading: Option<Term>,
    /// The start of a term whose predecessor's end was yielded first.
    next: Option<LeadershipChange>,
}

// === impl LeadershipChange ===

impl LeadershipChange {
    /// The term that started or stopped.
    pub fn term(&self) -> Term {
        match self {
            LeadershipChange::StartedLeading { term }
            | LeadershipChange::StoppedLeading { term } => *term,
        }
    }
}

// === impl LeadershipChanges ===

impl LeadershipChanges {
    pub(super) fn new(states: WatchStream<LeaderState>) -> Self {
        LeadershipChanges {
            states,
            leading: None,
            next: None,
        }
    }
}

impl Stream for LeadershipChanges {
    type Item = LeadershipChange;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<LeadershipChange>> {
        let this = self.get_mut();
        if let Some(change) = this.next.take() {
            return Poll::Ready(Some(change));
        }
        loop {
            let Some(state) = ready!(Pin::new(&mut this.states).poll_next(cx)) else {
                // The elector is gone: a leadership still open ends here, then the stream does.
                let end = this.leading.take();
                return Poll::Ready(end.map(|term| LeadershipChange::StoppedLeading { term }));
            };
            let now = state.term();
            let change = match (this.leading, now) {
                // A renewal (the deadline moved), or still not leading: nothing to tell.
                (before, now) if before == now => continue,
                (None, Some(term)) => LeadershipChange::StartedLeading { term },
                (Some(term), None) => LeadershipChange::StoppedLeading { term },
                // A new term published straight over the old one (the channel keeps only the
                // latest state): the old one's end first, then the new one's start.
                (Some(old), Some(new)) => {
                    this.next = Some(LeadershipChange::StartedLeading { term: new });
                    LeadershipChange::StoppedLeading { term: old }
                }
                (None, None) => continue,
            };
            this.leading = now;
            return Poll::Ready(Some(change));
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use futures::StreamExt;
    use tokio::time::Instant;

    use super::*;
    use crate::leadership::Leadership;

    fn leader(term: u64, valid_for: Duration) -> LeaderState {
        LeaderState::Leader {
            term: Term(term),
            valid_until: Instant::now() + valid_for,
        }
    }

    fn follower() -> LeaderState {
        LeaderState::Follower {
            holder: Some("pod-b".into()),
            term: Some(Term(2)),
        }
    }

    fn started(term: u64) -> Option<LeadershipChange> {
        Some(LeadershipChange::StartedLeading { term: Term(term) })
    }

    fn stopped(term: u64) -> Option<LeadershipChange> {
        Some(LeadershipChange::StoppedLeading { term: Term(term) })
    }

    /// The next change, or `None` when none comes within a (paused) minute.
    async fn next(changes: &mut LeadershipChanges) -> Option<LeadershipChange> {
        tokio::time::timeout(Duration::from_secs(60), changes.next())
            .await
            .ok()
            .flatten()
    }

    #[test]
    fn the_stream_can_be_a_kube_runtime_trigger() {
        fn trigger<T: Stream + Send + Sync + Unpin + 'static>() {}
        trigger::<LeadershipChanges>();
    }

    #[tokio::test(start_paused = true)]
    async fn renewals_yield_nothing_and_each_term_starts_and_stops_once() {
        let (script, leadership) = Leadership::scripted(LeaderState::Starting);
        let mut changes = leadership.changes();
        script.publish(follower());
        script.publish(leader(3, Duration::from_secs(10)));
        assert_eq!(next(&mut changes).await, started(3));
        for _ in 0..5 {
            tokio::time::advance(Duration::from_secs(2)).await;
            script.publish(leader(3, Duration::from_secs(10)));
            assert_eq!(next(&mut changes).await, None, "a renewal is no change");
        }
        script.publish(follower());
        assert_eq!(next(&mut changes).await, stopped(3));
        script.publish(LeaderState::Follower {
            holder: Some("pod-c".into()),
            term: Some(Term(4)),
        });
        assert_eq!(next(&mut changes).await, None, "another follower state");
        script.publish(leader(5, Duration::from_secs(10)));
        assert_eq!(next(&mut changes).await, started(5));
        script.publish(LeaderState::Stopped);
        assert_eq!(next(&mut changes).await, stopped(5));
        drop(script);
        drop(leadership);
        assert_eq!(changes.next().await, None, "ends with the elector");
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_that_replaced_the_last_one_unseen_ends_it_first() {
        let (script, leadership) = Leadership::scripted(leader(3, Duration::from_secs(10)));
        let mut changes = leadership.changes();
        assert_eq!(next(&mut changes).await, started(3), "leading already");
        // Lost and won again before the stream looked: it sees only the new term.
        script.publish(follower());
        script.publish(leader(4, Duration::from_secs(10)));
        assert_eq!(next(&mut changes).await, stopped(3));
        assert_eq!(next(&mut changes).await, started(4));
        assert_eq!(next(&mut changes).await, None);
        assert_eq!(started(4).map(|c| c.term()), Some(Term(4)));
    }

    #[tokio::test(start_paused = true)]
    async fn a_leadership_open_when_the_elector_goes_away_is_ended() {
        let (script, leadership) = Leadership::scripted(leader(7, Duration::from_secs(10)));
        let mut changes = leadership.changes();
        assert_eq!(next(&mut changes).await, started(7));
        drop(script);
        drop(leadership);
        assert_eq!(changes.next().await, stopped(7));
        assert_eq!(changes.next().await, None);
    }
}
