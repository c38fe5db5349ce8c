//! The conformance suite on the in-memory lock.

use std::sync::Arc;
use std::time::Duration;

use leader_lock::conformance::{Harness, HarnessError, Protect, Tamper};
use leader_lock::{LeaderLock, MemoryStore, Timing};

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
                r#"{"holder":"intruder_1","term":1,"lease_ms":18446744073709551615,"acquired_ms":0,"renewed_ms":0}"#
            }
            Tamper::RenewInFuture => {
                r#"{"holder":"intruder_1","term":1,"lease_ms":1000,"acquired_ms":0,"renewed_ms":99999999999999}"#
            }
            Tamper::EmptyHolder => {
                r#"{"holder":"","term":1,"lease_ms":1000,"acquired_ms":0,"renewed_ms":0}"#
            }
            Tamper::Garbage => "\u{0}\u{1}not json at all",
        };
        // The store's TTL is the server's: whatever the value says, it holds for `ttl`.
        self.store.put_raw(name, raw, ttl);
        Ok(Protect::For(ttl))
    }
}

async fn memory() -> Memory {
    Memory {
        store: MemoryStore::new(),
    }
}

leader_lock::conformance_suite!(memory);
