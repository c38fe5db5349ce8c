//! The write gate on a kube client, for a controller's own writes.

use http::Request;
use kube::client::Body;
use kube::{Client, Config};
use leader_lock::{Leadership, WriteGateLayer, WritePermit};
use tower::Layer;

use crate::client::client_builder;

/// A client for a controller's writes: [`client_builder`]'s stack (auth, retry, TLS,
/// `TCP_NODELAY`) behind a [`WriteGateLayer`], so every mutating request goes out only under a
/// valid `leadership`, is refused unsent otherwise ([`GateError::NotLeader`]) and is cancelled at
/// the validity deadline ([`GateError::Deadline`]). Reads and watches pass. A refusal comes back
/// as `kube::Error::Service`; downcast its source to [`GateError`].
///
/// [`GateError`]: leader_lock::gate::GateError
/// [`GateError::NotLeader`]: leader_lock::gate::GateError::NotLeader
/// [`GateError::Deadline`]: leader_lock::gate::GateError::Deadline
///
/// Only the controller's client is gated. The [`LeaseLock`](crate::LeaseLock) and the leadership
/// Events ([`spawn_leader_events`](crate::spawn_leader_events)) keep their own, ungated
/// [`client`](crate::client()) of the same `config`:
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
/// use leader_lock::{Elector, ElectorConfig, Identity, Timing};
/// use leader_lock::gate::GateError;
/// use leader_lock_kubernetes::{client, gated_client, LeaseLock};
///
/// let config = kube::Config::infer().await?;
/// // The lock gets an ungated client of its own, from the same config.
/// let lock = LeaseLock::new(client(config.clone())?, "default", "my-controller");
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

/// A client whose every mutating request goes out under `permit`: the write gate checks that
/// permit, not one of its own, so a write that carries `permit.term` (in an annotation, say)
/// carries the term the gate checked. Each mutating request is refused, unsent, once `permit`'s
/// leadership has ended ([`GateError::NotLeader`]), even when this replica leads again under a
/// new term, and is cancelled at `permit`'s deadline ([`GateError::Deadline`]); reads pass. With
/// [`Leadership::run`], a refusal comes back as `GuardedError::NotLeader`.
///
/// [`GateError::NotLeader`]: leader_lock::gate::GateError::NotLeader
/// [`GateError::Deadline`]: leader_lock::gate::GateError::Deadline
///
/// `client` is the controller's client: the [`gated_client`] (or a [`client`](crate::client()))
/// of the same `kube::Config`; the connection pool of either binds the body of each write to
/// `permit`'s deadline, so it cannot leave later even from a process that was frozen. Over any
/// other kube client the deadline still cancels the call.
///
/// The client holds `permit`, and a held permit delays a graceful release: build one per write,
/// inside the write, and drop it with the write.
///
/// # Panics
/// Outside a Tokio runtime (the client's buffer runs on a task of its own, as every kube client's).
///
/// # Examples
///
/// ```no_run
/// # async fn run(writes: kube::Client, leadership: leader_lock::Leadership)
/// #     -> Result<(), Box<dyn std::error::Error>> {
/// use k8s_openapi::api::core::v1::ConfigMap;
/// use kube::api::{Api, Patch, PatchParams};
/// use leader_lock::leadership::GuardedError;
/// use leader_lock_kubernetes::permit_client;
/// use serde_json::json;
///
/// // `writes` is the controller's `gated_client`.
/// let written = leadership
///     .run(|permit| {
///         let api: Api<ConfigMap> = Api::default_namespaced(permit_client(&writes, &permit));
///         let stamp = json!({ "metadata": { "annotations": {
///             "example.dev/leader-term": permit.term.to_string(),
///         } } });
///         async move {
///             api.patch("state", &PatchParams::default(), &Patch::Merge(stamp)).await
///         }
///     })
///     .await;
/// match written {
///     Ok(_) => {}                             // written under the term it names
///     Err(GuardedError::NotLeader(_) | GuardedError::Deadline { .. }) => {} // not ours to write
///     Err(e) => return Err(e.into()),
/// }
/// # Ok(())
/// # }
/// ```
#[must_use = "the client sends nothing unless used for the write"]
pub fn permit_client(client: &Client, permit: &WritePermit) -> Client {
    let inner = client.clone();
    let send = tower::service_fn(move |req: Request<Body>| {
        let inner = inner.clone();
        async move { inner.send(req).await }
    });
    let gated = WriteGateLayer::for_permit(permit.clone()).layer(send);
    Client::new(gated, client.default_namespace())
}
