//! The backend-independent conformance suite against a real kube-apiserver.
//!
//! The API validates Lease types, so some tampered records are "the closest the API allows":
//! wrong types become a holder with odd characters, a negative or zero duration becomes a missing
//! one, garbage becomes a Lease without a spec.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::LeaderLock;
use leader_lock::conformance::{Harness, HarnessError, Protect, Tamper};
use leader_lock::Timing;
use serde_json::json;
use testkit::kube::KubeApiServer;

struct Kube {
    server: &'static KubeApiServer,
    namespace: String,
}

#[async_trait::async_trait]
impl Harness for Kube {
    fn timing(&self) -> Timing {
        common::timing()
    }

    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        Ok(Arc::new(common::lock(self.server, &self.namespace, name)))
    }

    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        let ours = self.timing().lease_duration;
        let (s, ns) = (self.server, self.namespace.as_str());
        let spec = |v: serde_json::Value| json!({ "spec": v });
        let protect = match case {
            Tamper::WrongTypes => {
                // The API refuses wrong types outright; check that, then plant odd characters.
                let refused = common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({
                        "holderIdentity": 7,
                        "leaseDurationSeconds": "long",
                        "leaseTransitions": []
                    })),
                )
                .await;
                assert!(refused.is_err(), "the API accepted wrong types");
                common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({
                        "holderIdentity": "intr\u{1}der ☃ \"_\n",
                        "leaseDurationSeconds": 2
                    })),
                )
                .await?;
                Protect::For(Duration::from_secs(2))
            }
            Tamper::MissingFields => {
                common::put_raw(s, ns, name, spec(json!({"holderIdentity": "intruder_1"}))).await?;
                Protect::For(ours)
            }
            Tamper::NegativeDuration => {
                let refused = common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({"holderIdentity": "intruder_1", "leaseDurationSeconds": -5})),
                )
                .await;
                if refused.is_err() {
                    // Validation refuses <= 0; the closest is no duration at all.
                    common::put_raw(
                        s,
                        ns,
                        name,
                        spec(json!({"holderIdentity": "intruder_1", "leaseTransitions": 3})),
                    )
                    .await?;
                }
                Protect::For(ours)
            }
            Tamper::HugeDuration => {
                common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({"holderIdentity": "intruder_1", "leaseDurationSeconds": i32::MAX})),
                )
                .await?;
                Protect::For(common::TEST_MAX_LEASE)
            }
            Tamper::RenewInFuture => {
                common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({
                        "holderIdentity": "intruder_1",
                        "leaseDurationSeconds": 2,
                        "acquireTime": "2999-01-01T00:00:00.000000Z",
                        "renewTime": "2999-01-01T00:00:00.000000Z",
                    })),
                )
                .await?;
                Protect::For(Duration::from_secs(2))
            }
            Tamper::EmptyHolder => {
                common::put_raw(
                    s,
                    ns,
                    name,
                    spec(json!({"holderIdentity": "", "leaseDurationSeconds": 100})),
                )
                .await?;
                Protect::Nothing
            }
            Tamper::Garbage => {
                common::put_raw(
                    s,
                    ns,
                    name,
                    json!({"metadata": {"annotations": {"junk": "\u{0}\u{1}not a record"}}}),
                )
                .await?;
                Protect::Nothing
            }
        };
        Ok(protect)
    }

    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        common::delete_lease(self.server, &self.namespace, name).await?;
        Ok(())
    }
}

async fn kube() -> Kube {
    common::init_tracing();
    let server = common::server().await;
    server
        .create_namespace("conformance")
        .await
        .expect("namespace");
    Kube {
        server,
        namespace: "conformance".into(),
    }
}

leader_lock::conformance_suite!(kube);
