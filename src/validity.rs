//! The end of one leadership, as the things that must stop with it see it: `exec`'s command and
//! the proxy's upgraded streams (exec, attach, port-forward) wait here for the same end.
//!
//! A leadership of term T ends when the elector publishes anything else (lost, the renew
//! deadline passed, the record vanished, another term, stopped) or, without waiting for the
//! elector, when its validity deadline passes without a renewal that moves it.

use leader_lock::{LeaderState, Term};
use tokio::sync::watch;
use tokio::time::Instant;

/// Waits until this replica's leadership of `term` ends; returns why. Renewals of `term` move
/// the deadline it waits for.
///
/// # Cancel safety
/// Cancel safe: it only waits (a change it took out of `rx` is judged again on the next call).
pub(crate) async fn ended(rx: &mut watch::Receiver<LeaderState>, term: Term) -> &'static str {
    // The state may have moved since the caller looked.
    let mut valid_until = match still_valid(&rx.borrow_and_update(), term) {
        Ok(until) => until,
        Err(why) => return why,
    };
    loop {
        tokio::select! {
            biased;
            changed = rx.changed() => {
                if changed.is_err() {
                    return "the elector stopped";
                }
                match still_valid(&rx.borrow_and_update(), term) {
                    Ok(until) => valid_until = until,
                    Err(why) => return why,
                }
            }
            // Not left to the elector: the deadline is the end, whenever the elector gets round
            // to publishing it.
            () = tokio::time::sleep_until(valid_until) => {
                match still_valid(&rx.borrow(), term) {
                    Ok(until) => valid_until = until,
                    Err(why) => return why,
                }
            }
        }
    }
}

/// The validity deadline of `term` in `state`, or why that leadership is over.
pub(crate) fn still_valid(state: &LeaderState, term: Term) -> Result<Instant, &'static str> {
    match state {
        LeaderState::Leader {
            term: t,
            valid_until,
        } if *t == term => {
            if Instant::now() < *valid_until {
                Ok(*valid_until)
            } else {
                Err("its validity deadline passed without a renewal")
            }
        }
        LeaderState::Leader { .. } => Err("another term began"),
        // The elector says why in its own log line (lost, not renewed in time, the record
        // vanished).
        LeaderState::Follower { .. } | LeaderState::Starting => Err("this replica no longer leads"),
        LeaderState::Stopped => Err("the elector stopped"),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leader_lock::Leadership;

    use super::*;

    fn leader(term: u64, valid_for: Duration) -> LeaderState {
        LeaderState::Leader {
            term: Term(term),
            valid_until: Instant::now() + valid_for,
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_term_ends_at_its_deadline_unless_renewed_and_at_any_other_state() {
        let second = Duration::from_secs(1);
        let (script, leadership) = Leadership::scripted(leader(1, 3 * second));
        let mut rx = leadership.subscribe();
        let end = tokio::spawn(async move { (ended(&mut rx, Term(1)).await, Instant::now()) });
        let started = Instant::now();
        // Renewed twice, each before the deadline: still open.
        for _ in 0..2 {
            tokio::time::sleep(2 * second).await;
            assert!(!end.is_finished());
            script.publish(leader(1, 3 * second));
        }
        // Not renewed again: over at the last deadline, with no other state published.
        let (why, at) = end.await.expect("no panic");
        assert_eq!(why, "its validity deadline passed without a renewal");
        assert_eq!(at - started, 7 * second);

        for (state, want) in [
            (leader(2, 3 * second), "another term began"),
            (
                LeaderState::Follower {
                    holder: None,
                    term: None,
                },
                "this replica no longer leads",
            ),
            (LeaderState::Stopped, "the elector stopped"),
        ] {
            let (script, leadership) = Leadership::scripted(leader(1, 3 * second));
            let mut rx = leadership.subscribe();
            let end = tokio::spawn(async move { ended(&mut rx, Term(1)).await });
            tokio::task::yield_now().await;
            script.publish(state);
            assert_eq!(end.await.expect("no panic"), want);
        }
        // Already over when it is asked.
        let (_script, leadership) = Leadership::scripted(leader(2, 3 * second));
        assert_eq!(
            ended(&mut leadership.subscribe(), Term(1)).await,
            "another term began"
        );
    }
}
