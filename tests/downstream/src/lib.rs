//! A controller's replica written against the library crates from outside their workspace, with
//! a Kubernetes version of its own (k8s-openapi's `latest`, see Cargo.toml): both clients from one
//! `kube::Config`, an elector on a Lease, and writes under one permit that carry its term.
//! `tests/elector.rs` runs two of them on a real kube-apiserver.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, Patch, PatchParams};
use kube::{Client, Config};
use leader_lock::leadership::GuardedError;
use leader_lock::{Elector, ElectorConfig, Identity, Leadership, Timing};
use leader_lock_kubernetes::{client, gated_client, permit_client, LeaseLock};
use serde_json::json;

/// The annotation a replica stamps its term into.
pub const TERM: &str = "example.dev/term";

/// The field manager of the Lease and of the writes.
const MANAGER: &str = "downstream";

// Whether this build's k8s-openapi is the one `latest` names (1.36 for k8s-openapi 0.28).
k8s_openapi::k8s_if_1_36! {
    const LATEST: bool = true;
}
k8s_openapi::k8s_if_le_1_35! {
    const LATEST: bool = false;
}

/// Whether this build's k8s-openapi is the one `latest` names (1.36 for k8s-openapi 0.28).
pub fn built_for_latest() -> bool {
    LATEST
}

/// One replica: its elector and the gated client of its writes.
pub struct Replica {
    /// The elector on the Lease.
    pub elector: Elector,
    writes: Client,
    namespace: String,
}

impl Replica {
    /// Starts a replica named `identity` on the Lease `lease` in `config`'s namespace.
    ///
    /// # Errors
    /// The clients cannot be built, or the Lease refuses the timing.
    pub fn start(
        config: Config,
        lease: &str,
        identity: &str,
    ) -> Result<Replica, Box<dyn std::error::Error + Send + Sync>> {
        let namespace = config.default_namespace.clone();
        let lock =
            LeaseLock::new(client(config.clone())?, &namespace, lease).with_field_manager(MANAGER);
        let timing = Timing::new(
            Duration::from_secs(3),
            Duration::from_secs(2),
            Duration::from_millis(400),
        )?;
        let elector = Elector::spawn(
            Arc::new(lock),
            ElectorConfig {
                identity: Identity::new(identity),
                timing,
                release_on_shutdown: true,
            },
        )?;
        let writes = gated_client(config, elector.leadership())?;
        Ok(Replica {
            elector,
            writes,
            namespace,
        })
    }

    /// This replica's leadership.
    pub fn leadership(&self) -> Leadership {
        self.elector.leadership()
    }

    /// Stamps the term of its permit on the ConfigMap `name`, under that permit only.
    ///
    /// # Errors
    /// `GuardedError::NotLeader` while following; the server's error otherwise.
    pub async fn stamp(&self, name: &str) -> Result<ConfigMap, GuardedError<kube::Error>> {
        self.leadership()
            .run(|permit| {
                let api: Api<ConfigMap> =
                    Api::namespaced(permit_client(&self.writes, &permit), &self.namespace);
                let stamp =
                    json!({ "metadata": { "annotations": { TERM: permit.term.to_string() } } });
                let pp = PatchParams {
                    field_manager: Some(MANAGER.to_string()),
                    ..PatchParams::default()
                };
                async move { api.patch(name, &pp, &Patch::Merge(stamp)).await }
            })
            .await
    }
}

/// What the status crate offers builds here too, against the same k8s-openapi.
pub fn status_writer_config() -> gateway_leader_status::WriterConfig {
    gateway_leader_status::WriterConfig::default().with_controller_name("example.dev/downstream")
}
