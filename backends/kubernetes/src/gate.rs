//! The write gate on a kube client, for a controller's own writes.

use kube::{Client, Config};
use leader_lock::{Leadership, WriteGateLayer};

use crate::client::client_builder;

/// A client for a controller's writes: [`client_builder`]'s stack (auth, retry, TLS, `TCP_NODELAY`) behind a
/// [`WriteGateLayer`], so every mutating request goes out only under a valid `leadership`, is
/// refused unsent otherwise ([`GateError::NotLeader`](leader_lock::GateError::NotLeader)) and is
/// cancelled at the validity deadline ([`GateError::Deadline`](leader_lock::GateError::Deadline)).
/// Reads and watches pass. A refusal comes back as `kube::Error::Service`; downcast its source to
/// [`GateError`](leader_lock::GateError).
///
/// Only the controller's client is gated. The [`LeaseLock`](crate::LeaseLock) and the leadership
/// Events ([`spawn_leader_events`](crate::spawn_leader_events)) keep their own, ungated client:
/// never give them a gated one, or a leader could not renew once its validity lapsed and a
/// follower could never acquire.
///
/// The gate is the outermost layer, so its check runs before kube's auth layer (which may await
/// a token refresh), its retry layer and the connection pool; the deadline bounds all of them.
/// The second example shows a stack with a second check after authentication.
///
/// # Errors
/// As [`client_builder`]: a proxy is set, or the TLS or auth settings could not be used.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, Patch, PatchParams};
/// use leader_lock::{Elector, ElectorConfig, GateError, Identity, Timing};
/// use leader_lock_kubernetes::{gated_client, LeaseLock};
///
/// let config = kube::Config::infer().await?;
/// // The lock gets an ungated client of its own.
/// let lock = LeaseLock::new(kube::Client::try_from(config.clone())?, "default", "my-controller");
/// let elector = Elector::spawn(
///     Arc::new(lock),
///     ElectorConfig {
///         identity: Identity::new("pod-a"),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     },
/// )?;
/// // The controller writes through the gate.
/// let client = gated_client(config, elector.leadership())?;
/// let api: Api<ConfigMap> = Api::default_namespaced(client);
/// let patch = Patch::Merge(serde_json::json!({ "data": { "k": "v" } }));
/// match api.patch("state", &PatchParams::default(), &patch).await {
///     Ok(_) => {}
///     Err(kube::Error::Service(e)) if e.downcast_ref::<GateError>().is_some() => {
///         // Not leading (or the write outlived the leadership): it was not sent, or cancelled.
///     }
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
///
/// A stack built by hand with a second, innermost gate: the outer one takes the permit and
/// bounds the whole call; the inner one checks that same permit again after authentication (and
/// before each retry, were a retry layer put above it), right before the request reaches the
/// connection pool.
///
/// ```no_run
/// # async fn run(leadership: leader_lock::Leadership) -> Result<(), Box<dyn std::error::Error>> {
/// use hyper_util::client::legacy::{connect::HttpConnector, Client as HyperClient};
/// use hyper_util::rt::TokioExecutor;
/// use kube::client::ConfigExt;
/// use leader_lock::WriteGateLayer;
/// use tower::{BoxError, ServiceBuilder};
///
/// let config = kube::Config::infer().await?;
/// let mut http = HttpConnector::new();
/// http.enforce_http(false);
/// http.set_nodelay(true);
/// let https = config.rustls_https_connector_with_connector(http)?;
/// let gate = WriteGateLayer::new(leadership);
/// let service = ServiceBuilder::new()
///     .layer(gate.clone())
///     .layer(config.base_uri_layer())
///     .option_layer(config.auth_layer()?)
///     .layer(gate)
///     .map_err(BoxError::from)
///     .service(HyperClient::builder(TokioExecutor::new()).build(https));
/// let client = kube::Client::new(service, config.default_namespace);
/// # let _ = client;
/// # Ok(())
/// # }
/// ```
pub fn gated_client(config: Config, leadership: Leadership) -> Result<Client, kube::Error> {
    Ok(client_builder(config)?
        .with_layer(&WriteGateLayer::new(leadership))
        .build())
}
