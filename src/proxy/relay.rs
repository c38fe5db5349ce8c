//! The proxy's sender: other programs' requests to the apiserver, with this replica's
//! credentials, over the proxy's HTTP/2 pool (`pool.rs`).

use http::{Request, Response};
use hyper_util::rt::TokioExecutor;
use kube::client::{Body, ConfigExt};
use kube::Config;
use leader_lock_kubernetes::stack::{layers, tcp_connector, with_timeouts};
use tower::util::BoxCloneSyncService;
use tower::{BoxError, Service, ServiceExt};

use super::pool::Multiplexed;
pub use super::pool::PoolBody;

/// A sender of other programs' requests to the apiserver, for a proxy: the pool's connections
/// and kube's layers (base URI, authentication, extra headers; a gated write's body
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

/// kube's layers over the pool: HTTP/2 for the long-running requests
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::*;

    /// An apiserver that cannot be reached costs the watches waiting for a connection one
    /// connect timeout together, not one each in turn.
    #[tokio::test]
    async fn the_watches_waiting_for_a_dial_that_fails_fail_with_it() {
        leader_lock_kubernetes::install_crypto_provider();
        // Accepts connections and never answers: the TLS handshake waits for the timeout.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("its address");
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((s, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                held.push(s);
            }
        });
        let mut config = kube::Config::new(format!("https://{addr}").parse().expect("a URL"));
        config.connect_timeout = Some(Duration::from_secs(1));
        config.accept_invalid_certs = true;
        let client = RelayClient::new(config).expect("a client");
        let watches = (0..5).map(|_| {
            let client = client.clone();
            async move {
                let req = Request::get("/api/v1/configmaps?watch=true")
                    .body(kube::client::Body::empty())
                    .expect("a request");
                client.send(req).await.map(|r| r.status())
            }
        });
        let answers = futures::future::join_all(watches).await;
        assert!(answers.iter().all(Result::is_err), "{answers:?}");
        assert_eq!(accepted.load(Ordering::SeqCst), 1, "{answers:?}");
        silent.abort();
    }
}
