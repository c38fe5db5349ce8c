//! The pieces every client of this crate is built from, for a program that needs a transport of
//! its own on the same stack (an HTTP/2 pool, say): the TCP connector with `TCP_NODELAY`,
//! `config`'s timeouts around a connector, and kube's layers over a pool.
//! [`client_builder`](crate::client_builder) puts them together over hyper's HTTP/1.1 pool.

use http::{Request, Response};
use hyper_rustls::HttpsConnector;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ConfigExt};
use kube::Config;
use leader_lock::gate::DeadlineBody;
use tower::retry::RetryLayer;
use tower::{BoxError, Service, ServiceBuilder};

/// A TCP connector with `TCP_NODELAY`, refusing a proxy in `config`.
pub fn tcp_connector(config: &Config) -> Result<HttpConnector, kube::Error> {
    if let Some(proxy) = &config.proxy_url {
        // What `Client::try_from` answers in a build without kube's `http-proxy`/`socks5`.
        return Err(kube::Error::ProxyProtocolDisabled {
            proxy_url: proxy.clone(),
            protocol_feature: "kube/http-proxy",
        });
    }
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    Ok(http)
}

/// `connector` with `config`'s connect, read and write timeouts.
pub fn with_timeouts(
    config: &Config,
    connector: HttpsConnector<HttpConnector>,
) -> TimeoutConnector<HttpsConnector<HttpConnector>> {
    let mut connector = TimeoutConnector::new(connector);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    connector
}

/// kube's layers (base URI, retry, authentication, extra headers) over `pool`, whose requests'
/// bodies are bound by their permits' deadlines.
pub fn layers<P, B>(
    config: &Config,
    pool: P,
) -> Result<
    impl Service<Request<Body>, Response = Response<B>, Error = BoxError, Future: Send>
        + Clone
        + Send
        + Sync
        + 'static,
    kube::Error,
>
where
    P: Service<Request<DeadlineBody<Body>>, Response = Response<B>> + Clone + Send + Sync + 'static,
    P::Future: Send + 'static,
    P::Error: Into<BoxError>,
    B: Send + 'static,
{
    Ok(ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(|e: P::Error| -> BoxError { e.into() })
        // Innermost: the connection's task reads a write's body only before its deadline.
        .map_request(DeadlineBody::bound)
        .service(pool))
}
