//! What the Lease lock has seen of its Lease: each sighting (its record, the highest term, when
//! it was last there) and each absence, told apart from a deletion under a live holder.

use k8s_openapi::api::coordination::v1::Lease;
use leader_lock::backend::{LockError, LockRecord};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::{spec, term_of, Inner};

impl Inner {
    /// Notes a Lease seen now (read or watch event) and returns its record.
    pub(super) fn observe(&self, lease: &Lease) -> LockRecord {
        let rec = spec::record(lease, self.clamp());
        let transitions = spec::transitions(lease);
        let mut s = self.state();
        match s.highest {
            Some(h) if transitions < h => {
                // Only a deleted and recreated Lease goes back; warn once per reset.
                if s.observed.record().is_none_or(|r| r.term > rec.term) {
                    warn!(
                        lease = %format!("{}/{}", self.namespace, self.name),
                        term = %rec.term,
                        highest_term = %term_of(h),
                        holder = %rec.holder,
                        "Lease term reset: leaseTransitions went back (the Lease was deleted and \
                         recreated); a new holder we write continues above the highest term seen"
                    );
                }
            }
            _ => s.highest = Some(transitions),
        }
        let now = Instant::now();
        s.observed.observe(&rec, now);
        s.present_at = Some(now);
        rec
    }

    /// The `leaseTransitions` a new holder writes over `current`: one more, and above every
    /// value this client has seen, so a recreated Lease does not make our terms go back. Never 0:
    /// term 0 is no leadership.
    pub(super) fn next_transitions(&self, current: i32) -> Result<i32, LockError> {
        let floor = self.state().highest.unwrap_or(0).max(current);
        floor.checked_add(1).ok_or_else(|| {
            LockError::malformed(format!(
                "{}: leaseTransitions is at its int32 maximum",
                self.what("take")
            ))
        })
    }

    /// Notes that the Lease is gone (404, an empty list, a delete event with its final state);
    /// `asked` is when the request that found it absent was sent (none for a watch event, which
    /// the watch delivers in order).
    ///
    /// A release leaves the Lease in place with an empty holder, so a Lease that disappears under
    /// a holder was deleted (by an operator, a namespace cleanup, a restore): its holder may still
    /// believe it leads. Nobody may take it for that holder's lease duration from now, ourselves
    /// included when it was ours; and we never renew a Lease we did not find. An absence older
    /// than a sighting says nothing (see `State::present_at`): a deletion since that sighting
    /// comes again, as the watch's delete event or the next read.
    pub(super) fn gone(&self, last: Option<&Lease>, asked: Option<Instant>) {
        let last = last.map(|l| spec::record(l, self.clamp()));
        let mut s = self.state();
        if let (Some(asked), Some(present)) = (asked, s.present_at) {
            if present >= asked {
                debug!(
                    lease = %format!("{}/{}", self.namespace, self.name),
                    "an answer that the Lease is absent, older than a sighting of it; ignored"
                );
                return;
            }
        }
        s.own = None;
        s.watched = None;
        let now = Instant::now();
        let before = s.observed.hold_off(now).map(|(_, until)| until);
        let fallback = s.fallback;
        s.observed.gone(last.as_ref(), now, fallback);
        if let Some((rec, until)) = s.observed.hold_off(now) {
            if before != Some(until) {
                warn!(
                    lease = %format!("{}/{}", self.namespace, self.name),
                    holder = %rec.holder,
                    term = %rec.term,
                    hold_off = ?(until - now),
                    "Lease deleted under a live holder, without a release; nobody takes it before \
                     that holder's lease duration has passed"
                );
            }
        }
    }
}
