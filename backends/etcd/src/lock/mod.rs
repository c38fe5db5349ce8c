//! The lock itself: [`EtcdLock`], and the protocol over its parts (`Inner`): one attempt
//! (`attempt.rs`, with `acquire.rs` and `renew.rs`), the release and a follower's withdrawal
//! (`release.rs`), and the take of a key handed to us (`take.rs`).

mod acquire;
mod attempt;
mod release;
mod renew;
mod take;

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::GetResponse;
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, Inspection, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::{Term, Timing};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::client::Conn;
use crate::config::MIN_LEASE;
use crate::held::Holding;
use crate::keys::Keys;
use crate::knowledge::Observed;
use crate::spare::{Spare, Usage};
use crate::successor::{self, Succession};
use crate::value::record;
use crate::watch::{self, Feeds};

/// A lock on etcd; one per process and lock name.
pub struct EtcdLock {
    /// The lock's parts, shared with its spare keeper and the choice of a successor.
    inner: Arc<Inner>,
    /// Keeps a spare lease ready for the next acquire; aborted on drop.
    spare_keeper: JoinHandle<()>,
}

/// The lock's parts, shared by [`EtcdLock`], its spare keeper and the tasks that choose a
/// successor ahead. Each part is a type of its own behind its own lock (or none, when fixed);
/// only the protocol in this module reaches into more than one of them.
pub(crate) struct Inner {
    /// The members and the deadline of each request.
    conn: Conn,
    /// The lock key, its release marker and the candidates' prefix.
    keys: Keys,
    /// What we hold; its lock is taken for a whole attempt, release or withdrawal.
    holding: Mutex<Holding>,
    /// What we know of the key, fed by our requests and the watch.
    observed: Observed,
    /// The spare lease and the candidacy on it.
    spare: Spare,
    /// The successor a release would hand the key to.
    succession: Succession,
    /// When an elector last used the lock.
    usage: Usage,
}

impl EtcdLock {
    /// A lock over `conn` on `keys`, its spare keeper started.
    pub(crate) fn new(conn: Conn, keys: Keys) -> Self {
        let inner = Arc::new(Inner {
            conn,
            keys,
            holding: Mutex::new(Holding::default()),
            observed: Observed::default(),
            spare: Spare::default(),
            succession: Succession::default(),
            usage: Usage::new(),
        });
        let spare_keeper = tokio::spawn(keep_spare(Arc::downgrade(&inner)));
        EtcdLock {
            inner,
            spare_keeper,
        }
    }

    /// The full key of the lock (`<prefix><name>`).
    pub fn key(&self) -> &str {
        &self.inner.keys.text
    }

    /// The key of the release marker (`<prefix><name>#released`), which holds the last term
    /// released gracefully.
    pub fn release_marker_key(&self) -> String {
        String::from_utf8_lossy(&self.inner.keys.marker).into_owned()
    }

    /// The deadline of each request, as it applies now: the config's
    /// [`request_timeout`](crate::EtcdConfig::request_timeout), else a quarter of the renew
    /// deadline of the timing the elector validated the lock with (before that, of the default
    /// timing's: 2.5 s).
    pub fn request_timeout(&self) -> Duration {
        self.inner.conn.timeout()
    }
}

impl Drop for EtcdLock {
    fn drop(&mut self) {
        self.spare_keeper.abort();
        // A follower going away frees its spare lease at once instead of leaving it to expire.
        // The held lease is left alone: dropping without a release is a crash by design.
        if tokio::runtime::Handle::try_current().is_ok() {
            self.inner.spare.let_go(&self.inner.conn);
        }
    }
}

/// Keeps the spare lease alive (`Spare::tend`) until the lock is dropped.
async fn keep_spare(inner: Weak<Inner>) {
    loop {
        let period = match inner.upgrade() {
            None => return,
            Some(i) => i.spare.period().await,
        };
        tokio::time::sleep(period).await;
        let Some(i) = inner.upgrade() else { return };
        i.spare.tend(&i.conn, &i.keys, &i.usage).await;
    }
}

impl Inner {
    /// Reads the lock key.
    async fn read(&self) -> Result<GetResponse, LockError> {
        self.conn.read(&self.keys.key).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let current = self.read().await?;
        match current.kvs().first() {
            None => Ok(None),
            Some(kv) => record(kv).map(Some).map_err(LockError::malformed),
        }
    }

    /// Replays the key's history from `from` up to `until` into what we know (`watch::replay`).
    async fn replay(&self, from: i64, until: i64) -> Result<(), LockError> {
        watch::replay(&self.conn, &self.keys, &self.observed, from, until).await
    }

    /// Chooses `me`'s successor ahead when `Succession::due` claimed it: a release then hands
    /// over at once, without the reads of `successor::look_up`, if the choice is at most a third
    /// of the TTL old. Renewing every retry period, a leader keeps its choice that fresh whenever
    /// the retry period is at most a sixth of the TTL, or at most a third and every renew
    /// chooses (the bench's 1 s of 4 s). Two reads per choice (with one live candidate), sent
    /// after the attempt, never delaying it.
    async fn choose_ahead(&self, me: &str) {
        let checked = Instant::now();
        let made = successor::look_up(&self.conn, &self.keys, me).await;
        self.succession.settle(made, checked);
    }
}

#[async_trait]
impl LeaderLock for EtcdLock {
    fn describe(&self) -> String {
        format!(
            "etcd key {} at {}",
            self.inner.keys.text,
            self.inner.conn.endpoints()
        )
    }

    /// The timing rules of [`EtcdConfig::validate`](crate::EtcdConfig::validate), with the
    /// config's request timeout or, when it gave none, a quarter of `timing`'s renew deadline,
    /// which the lock's requests time out at from then on.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        let timeout = self.inner.conn.deadline();
        crate::config::check_timing(timing, timeout.under(timing))?;
        timeout.adopt(timing);
        Ok(())
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let attempt = self.inner.try_acquire_or_renew(c).await;
        if let (Ok(Attempt::Leader { .. }), Ok(ttl)) = (&attempt, whole_seconds(c.lease_duration)) {
            // Off the attempt's path, so that its reads never delay its answer; from the
            // attempt that made us leader on, so that even a short leadership hands over at once.
            let holder = c.holder();
            if self.inner.succession.due(ttl, &holder) {
                let inner = Arc::clone(&self.inner);
                tokio::spawn(async move { inner.choose_ahead(&holder).await });
            }
        }
        attempt
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }

    async fn withdraw(&self, c: &Candidate) -> Result<(), LockError> {
        self.inner.withdraw(&c.holder()).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }

    /// The record and its lease's TTL, the key's revisions (`createRevision`, `modRevision`,
    /// `version`, `lease`) and the release marker (`releasedTerm`); with the key gone, its last
    /// version from the key's history, released or vanished (`inspect.rs`).
    async fn inspect(&self) -> Result<Inspection, LockError> {
        crate::inspect::inspect(&self.inner.conn, &self.inner.keys).await
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let feeds = Feeds {
            observed: self.inner.observed.clone(),
            succession: self.inner.succession.clone(),
            usage: self.inner.usage.clone(),
        };
        watch::open(&self.inner.conn, &self.inner.keys, feeds).await
    }
}

/// Failures another try may not meet: a member's fault, a timeout, or the lock's own "try again".
fn retryable(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_))
}

fn whole_seconds(d: Duration) -> Result<i64, LockError> {
    if d.subsec_nanos() != 0 || d < MIN_LEASE {
        return Err(LockError::refused(format!(
            "lease-duration {d:?} must be a whole number of seconds, at least {MIN_LEASE:?}, \
             for etcd"
        )));
    }
    i64::try_from(d.as_secs())
        .map_err(|_| LockError::refused(format!("lease-duration {d:?} is too long for etcd")))
}
