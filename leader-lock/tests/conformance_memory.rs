//! The conformance suite on the in-memory lock.

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::{
    Attempt, Candidate, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::conformance::{Harness, HarnessError, Protect, Tamper};
use leader_lock::{MemoryStore, Term, Timing};

struct Memory {
    store: MemoryStore,
}

#[async_trait::async_trait]
impl Harness for Memory {
    fn timing(&self) -> Timing {
        Timing::new(
            Duration::from_millis(1500),
            Duration::from_millis(1000),
            Duration::from_millis(200),
        )
        .expect("valid timing")
    }

    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        Ok(Arc::new(self.store.lock(name)))
    }

    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        let ttl = Duration::from_secs(2);
        let raw = match case {
            Tamper::WrongTypes => {
                r#"{"holder":7,"term":"x","lease_ms":"long","acquired_ms":[],"renewed_ms":{}}"#
            }
            Tamper::MissingFields => r#"{"holder":"intruder_1"}"#,
            Tamper::NegativeDuration => {
                r#"{"holder":"intruder_1","term":1,"lease_ms":-5,"acquired_ms":0,"renewed_ms":0}"#
            }
            Tamper::HugeDuration => {
                concat!(
                    r#"{"holder":"intruder_1","term":1,"lease_ms":18446744073709551615,"#,
                    r#""acquired_ms":0,"renewed_ms":0}"#
                )
            }
            Tamper::RenewInFuture => {
                concat!(
                    r#"{"holder":"intruder_1","term":1,"lease_ms":1000,"#,
                    r#""acquired_ms":0,"renewed_ms":99999999999999}"#
                )
            }
            Tamper::EmptyHolder => {
                r#"{"holder":"","term":1,"lease_ms":1000,"acquired_ms":0,"renewed_ms":0}"#
            }
            Tamper::Garbage => "\u{0}\u{1}not json at all",
        };
        // The store's TTL is the server's: whatever the value says, it holds for `ttl` from the
        // write, so from our return a little less (the suite measures from the return).
        let sent = tokio::time::Instant::now();
        self.store.put_raw(name, raw, ttl);
        Ok(Protect::For(ttl.saturating_sub(sent.elapsed())))
    }

    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        self.store.vanish(name);
        Ok(())
    }
}

async fn memory() -> Memory {
    Memory {
        store: MemoryStore::new(),
    }
}

leader_lock::conformance_suite!(memory);

/// The memory harness with locks whose change stream never opens: followers only poll.
struct Polling(Memory);

/// A lock without a watch.
struct NoWatch(Arc<dyn LeaderLock>);

#[async_trait::async_trait]
impl LeaderLock for NoWatch {
    fn describe(&self) -> String {
        "no-watch".into()
    }
    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.0.try_acquire_or_renew(c).await
    }
    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.0.release(c, term).await
    }
    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.0.get().await
    }
    async fn watch(&self) -> Result<LockEventStream, LockError> {
        Err(LockError::unavailable("no watch"))
    }
}

#[async_trait::async_trait]
impl Harness for Polling {
    fn timing(&self) -> Timing {
        self.0.timing()
    }
    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        Ok(Arc::new(NoWatch(self.0.lock(name).await?)))
    }
    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        self.0.tamper(name, case).await
    }
    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        self.0.vanish(name).await
    }
}

/// The suite can fail: a handover found by polling instead of the watch misses the bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_prompt_release_case_fails_a_lock_without_a_watch() {
    let h = Polling(memory().await);
    let outcome =
        tokio::spawn(async move { leader_lock::conformance::graceful_release_is_prompt(&h).await })
            .await;
    let panic = outcome.expect_err("the case must fail without a watch");
    let message = panic
        .into_panic()
        .downcast::<String>()
        .map(|m| *m)
        .unwrap_or_default();
    assert!(
        message.contains("not below half the retry period"),
        "failed for another reason: {message}"
    );
}
