//! Waits on leadership states, each with a deadline that panics with what it waited for.

use std::time::Duration;

use crate::{LeaderState, Leadership, Term};

/// Waits until `pred` holds for the leadership's state, or panics after `limit`.
///
/// # Cancel safety
/// Cancel safe: it only watches the leadership's state.
pub async fn wait_state(
    l: &Leadership,
    limit: Duration,
    what: &str,
    pred: impl Fn(&LeaderState) -> bool,
) -> LeaderState {
    let mut rx = l.subscribe();
    let r = tokio::time::timeout(limit, async {
        loop {
            let s = rx.borrow_and_update().clone();
            if pred(&s) {
                return s;
            }
            if rx.changed().await.is_err() {
                return rx.borrow().clone();
            }
        }
    })
    .await;
    match r {
        Ok(s) if pred(&s) => s,
        Ok(s) => panic!("elector stopped before {what}; last state {s:?}"),
        Err(_) => panic!(
            "timed out after {limit:?} waiting for {what}; state {:?}",
            l.state()
        ),
    }
}

/// Waits until any of `contenders` passes `check()`; returns its index and term.
///
/// # Cancel safety
/// Cancel safe: it only watches the leaderships' states; a permit it takes to look is dropped
/// at once.
pub async fn wait_any_leader(
    contenders: &[Leadership],
    limit: Duration,
    what: &str,
) -> (usize, Term) {
    let found = tokio::time::timeout(limit, async {
        let mut changes: Vec<_> = contenders.iter().map(Leadership::subscribe).collect();
        loop {
            if let Some(hit) = contenders
                .iter()
                .enumerate()
                .find_map(|(i, l)| l.check().ok().map(|p| (i, p.term)))
            {
                return hit;
            }
            // Any contender's next publication. When every elector is gone nothing can change:
            // wait for the deadline instead of spinning.
            let next: Vec<_> = changes
                .iter_mut()
                .map(|rx| Box::pin(rx.changed()))
                .collect();
            if next.is_empty() || futures::future::select_ok(next).await.is_err() {
                std::future::pending::<()>().await;
            }
        }
    })
    .await;
    found.unwrap_or_else(|_| panic!("{what}: nobody led within {limit:?}"))
}

/// Waits until the contender follows a known holder; returns the holder.
///
/// # Cancel safety
/// Cancel safe: it only watches the leadership's state.
pub async fn wait_following(l: &Leadership, limit: Duration, who: &str) -> String {
    let s = wait_state(l, limit, &format!("{who} to follow a known holder"), |s| {
        matches!(
            s,
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    match s {
        LeaderState::Follower {
            holder: Some(h), ..
        } => h,
        other => panic!("{who}: unexpected state {other:?}"),
    }
}

/// Waits until `check()` passes; returns the term.
///
/// # Cancel safety
/// Cancel safe: it only watches the leadership's state; the permit it gets is dropped at once.
pub async fn wait_leader(l: &Leadership, limit: Duration, who: &str) -> Term {
    let r = tokio::time::timeout(limit, l.wait_leader()).await;
    match r {
        Ok(Ok(p)) => p.term,
        Ok(Err(e)) => panic!("{who} never led: {e}"),
        Err(_) => panic!("{who} did not lead within {limit:?}; state {:?}", l.state()),
    }
}
