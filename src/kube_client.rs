//! The replica's Kubernetes client: one configuration, loaded once, for every client built
//! from it (the lock's, the status writer's, the proxy's relay).

use anyhow::Context;
use leader_lock::Identity;

use crate::config::KubeSettings;
use crate::program::user_agent;

/// A connected Kubernetes client and the configuration it was built from.
#[derive(Clone)]
pub struct KubeClient {
    /// The client, ungated: each user gates its own writes on the leadership.
    pub client: kube::Client,
    /// The configuration [`client`](Self::client) was built from, for a client of another
    /// shape (the proxy's, over HTTP/2).
    pub config: kube::Config,
}

// === impl KubeClient ===

impl KubeClient {
    /// Loads the configuration `kube` names (a kubeconfig and context, else the pod's service
    /// account) with this replica's user agent, and builds the client.
    ///
    /// # Errors
    /// No configuration can be found or used (a kubeconfig that does not parse, TLS settings
    /// that cannot be used).
    pub async fn connect(kube: &KubeSettings, identity: &Identity) -> anyhow::Result<Self> {
        let config = kube
            .client_options()
            .with_user_agent(user_agent(identity))
            .load()
            .await
            .context("connecting to Kubernetes")?;
        let client = leader_lock_kubernetes::client(config.clone()).with_context(|| {
            format!(
                "connecting to Kubernetes: a client for {}",
                config.cluster_url
            )
        })?;
        Ok(KubeClient { client, config })
    }

    /// The namespace the configuration defaults to (the kubeconfig context's, or the pod's).
    pub fn default_namespace(&self) -> &str {
        &self.config.default_namespace
    }
}
