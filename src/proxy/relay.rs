//! The proxy's sender: other programs' requests to the apiserver, with this replica's
//! credentials, over the pool of [`super::pool`].

use http::{Request, Response};
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use kube::Config;
use leader_lock_kubernetes::stack::{layers, tcp_connector, with_timeouts};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

use super::pool::{Multiplexed, PoolBody};

/// A sender of other programs' requests to the apiserver, for a proxy: the pool's
/// connections ([`super::pool`]) and kube's layers (base URI, authentication, extra headers; a gated write's body
/// bound by its permit's deadline), with two things left out that a proxy must not have or
/// need not pay for:
///
/// - **retries**: a 429 or 503 goes back to the caller as the apiserver sent it, `Retry-After`
///   included, and the caller's own client retries (client-go does). A proxy that retried as
///   well would multiply the attempts and hold the caller past its own timeouts.
/// - **a task between the caller and the connection**: kube's `Client` hands every request to
///   a `tower::Buffer` worker task and back, two more wakes a request; here the caller's task
///   drives the request to the connection itself.
///
/// The answer's body streams as the apiserver sends it ([`PoolBody`]); an upgrade (`kubectl
/// exec`) is taken with [`hyper::upgrade::on`] on the response.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let config = kube::Config::infer().await?;
/// let relay = gateway_leader::proxy::relay::RelayClient::new(config)?;
/// let req = http::Request::get("/version").body(kube::client::Body::empty())?;
/// let resp = relay.send(req).await?;
/// println!("{}", resp.status());
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RelayClient {
    service: BoxCloneSyncService<Request<Body>, Response<PoolBody>, BoxError>,
}

impl RelayClient {
    /// A relay with `config`'s server, TLS and credentials; `config.default_retry` is ignored.
    ///
    /// # Errors
    /// As `leader_lock_kubernetes::client_builder`: a proxy is set, or the TLS or auth settings
    /// could not be used.
    pub fn new(mut config: Config) -> Result<Self, kube::Error> {
        config.default_retry = false;
        Ok(RelayClient {
            service: BoxCloneSyncService::new(multiplexed(&config)?),
        })
    }

    /// Sends `request` (its URI a path and query: the base URI is the configuration's) and
    /// returns the apiserver's answer, whatever its status; `Err` when none came (the
    /// connection failed, or a gated body's permit expired before it was sent).
    ///
    /// # Errors
    /// No answer from the apiserver, as above.
    pub async fn send(&self, request: Request<Body>) -> Result<Response<PoolBody>, BoxError> {
        self.service.clone().oneshot(request).await
    }
}

impl std::fmt::Debug for RelayClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RelayClient").finish_non_exhaustive()
    }
}

/// kube's layers over the pool ([`super::pool`]): HTTP/2 for the long-running requests
/// when the server negotiates it, HTTP/1.1 for the others.
fn multiplexed(
    config: &Config,
) -> Result<
    impl Service<Request<Body>, Response = Response<PoolBody>, Error = BoxError, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static,
    kube::Error,
> {
    let http = tcp_connector(config)?;
    let fallback =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(with_timeouts(
            config,
            config.rustls_https_connector_with_connector(http.clone())?,
        ));
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        // As kube's own connector resolves it.
        let name = rustls::pki_types::ServerName::try_from(name.clone()).map_err(|e| {
            kube::Error::RustlsTls(kube::client::RustlsTlsError::InvalidServerName(e))
        })?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(name));
    }
    let h2 = with_timeouts(config, builder.enable_all_versions().wrap_connector(http));
    layers(config, Multiplexed::new(h2, fallback))
}
