//! Standing aside and campaigning again: the [`Candidacy`] switch and what the loop does when
//! it is withdrawn.

use std::sync::Arc;

use tokio::sync::watch;
use tracing::{info, warn};

use super::decide::not_leading;
use super::Run;
use crate::clock;
use crate::lock::LockError;

/// Whether an [`Elector`](super::Elector) campaigns; cheap to clone, shared by its clones.
///
/// A withdrawn candidacy attempts nothing. A leader that withdraws stops publishing its
/// leadership at once (every `check()` fails from then on), waits for the permits in flight
/// (no longer than the validity they were given), then releases the lock so that a follower
/// takes over at once, as a graceful shutdown does; a follower withdraws its candidacy from the
/// lock ([`LeaderLock::withdraw`](crate::backend::LeaderLock::withdraw)). Either way it keeps following: the holder it publishes stays
/// current while its watch runs. [`resume`](Self::resume) makes it attempt at once.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
///
/// let config = ElectorConfig {
///     identity: Identity::new("pod-a"),
///     timing: Timing::default(),
///     release_on_shutdown: true,
/// };
/// let elector = Elector::spawn(Arc::new(MemoryStore::new().lock("x")), config)?;
/// let leadership = elector.leadership();
/// drop(leadership.wait_leader().await?);
/// let candidacy = elector.candidacy();
/// candidacy.withdraw(); // what it serves is down: let another replica lead
/// let mut states = leadership.subscribe();
/// states.wait_for(|_| !leadership.is_leader()).await?;
/// candidacy.resume(); // back: campaign again
/// drop(leadership.wait_leader().await?);
/// elector.shutdown().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct Candidacy(Arc<watch::Sender<bool>>);

impl Candidacy {
    /// The switch of an elector whose loop reads `campaigning`.
    pub(super) fn new(campaigning: watch::Sender<bool>) -> Candidacy {
        Candidacy(Arc::new(campaigning))
    }
}

impl Candidacy {
    /// Stands aside: a leader hands the lock over (see the type's docs), a follower stops
    /// attempting. Does nothing when already withdrawn.
    pub fn withdraw(&self) {
        self.0.send_if_modified(|c| std::mem::replace(c, false));
    }

    /// Campaigns again, with an attempt at once. Does nothing when campaigning already.
    pub fn resume(&self) {
        self.0.send_if_modified(|c| !std::mem::replace(c, true));
    }

    /// Whether the elector campaigns.
    pub fn is_campaigning(&self) -> bool {
        *self.0.borrow()
    }
}

impl Run {
    /// A withdrawn candidacy: a leader stops publishing its leadership, waits for the permits
    /// in flight (until their validity ends at the latest), then releases; a follower withdraws
    /// from the lock. Cancelled by a shutdown, it leaves `held` for the shutdown's release.
    pub(super) async fn stand_aside(&mut self) {
        let Some(h) = self.held else {
            info!("candidacy withdrawn; not campaigning");
            if let Err(e) = self.timed(self.lock.withdraw(&self.candidate)).await {
                warn!(error = %e.chain(), "withdrawing the candidacy failed; it ends with its lease");
            }
            return;
        };
        info!(term = %h.term, "candidacy withdrawn; handing the lock over once the writes in \
            flight are done");
        self.publisher.publish(not_leading());
        self.leadership.wait_in_flight(h.valid_until).await;
        match self.timed(self.lock.release(&self.candidate, h.term)).await {
            Ok(released) => info!(term = %h.term, released, lock = %self.lock.describe(),
                mono_ms = clock::mono_ms(), "released leadership"),
            Err(e) => warn!(term = %h.term, error = %e.chain(),
                "release failed; the lease will expire on its own"),
        }
        self.held = None;
    }

    /// A lock request bounded by the renew deadline, as every attempt is.
    async fn timed<T>(
        &self,
        request: impl std::future::Future<Output = Result<T, LockError>>,
    ) -> Result<T, LockError> {
        let limit = self.timing.renew_deadline;
        tokio::time::timeout(limit, request)
            .await
            .unwrap_or(Err(LockError::Timeout(limit)))
    }
}
