//! The backend-independent conformance suite against a real etcd.

mod common;

use std::sync::Arc;
use std::time::Duration;

use etcd_client::PutOptions;
use leader_lock::backend::LeaderLock;
use leader_lock::conformance::{Harness, HarnessError, Protect, Tamper};
use leader_lock::Timing;
use leader_lock_etcd::{EtcdLock, DEFAULT_KEY_PREFIX};
use testkit::etcd::EtcdServer;
use tokio::time::Instant;

struct Etcd {
    server: EtcdServer,
}

/// The TTL of planted values.
const TAMPER_TTL: i64 = 3;

#[async_trait::async_trait]
impl Harness for Etcd {
    fn timing(&self) -> Timing {
        common::timing()
    }

    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        Ok(common::lock(&self.server, name).await)
    }

    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        let raw: &[u8] = match case {
            Tamper::WrongTypes => br#"{"holder":7,"leaseDurationSeconds":"long","acquireTime":[]}"#,
            Tamper::MissingFields => br#"{"holder":"intruder_1"}"#,
            Tamper::NegativeDuration => br#"{"holder":"intruder_1","leaseDurationSeconds":-5}"#,
            Tamper::HugeDuration => {
                br#"{"holder":"intruder_1","leaseDurationSeconds":18446744073709551615}"#
            }
            Tamper::RenewInFuture => concat!(
                r#"{"holder":"intruder_1","leaseDurationSeconds":1,"#,
                r#""acquireTime":"2999-01-01T00:00:00Z"}"#
            )
            .as_bytes(),
            Tamper::EmptyHolder => br#"{"holder":"","leaseDurationSeconds":3}"#,
            Tamper::Garbage => b"\x00\x01\xffnot json at all",
        };
        let mut client = common::raw_client(&self.server).await;
        // The lease starts at the grant, so what is left of it is measured from just before.
        let granted = Instant::now();
        let lease = client.lease_grant(TAMPER_TTL, None).await?;
        let key = format!("{DEFAULT_KEY_PREFIX}{name}");
        client
            .put(key, raw, Some(PutOptions::new().with_lease(lease.id())))
            .await?;
        let ttl = Duration::from_secs(TAMPER_TTL.unsigned_abs());
        Ok(Protect::For(ttl.saturating_sub(granted.elapsed())))
    }

    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        // The key as the lock itself names it, prefix included.
        let key = EtcdLock::connect(common::config(&self.server), name)
            .await?
            .key()
            .to_string();
        let mut client = common::raw_client(&self.server).await;
        let deleted = client.delete(key, None).await?;
        if deleted.deleted() != 1 {
            return Err(format!("no lock key to delete for {name}").into());
        }
        Ok(())
    }
}

async fn etcd() -> Etcd {
    common::init_tracing();
    Etcd {
        server: EtcdServer::start().await.expect("etcd starts"),
    }
}

leader_lock::conformance_suite!(etcd);
