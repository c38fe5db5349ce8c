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
