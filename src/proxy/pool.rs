//! A connection pool that sends long-running requests (watches, followed logs) over HTTP/2, as
//! client-go does: a proxy's many watches share a few TLS connections to the apiserver instead of
//! holding one each. The other requests take the HTTP/1.1 pool: they gain nothing from sharing
//! a connection, and kube-apiserver answers a GET or a large list sooner over HTTP/1.1
//! (docs/benchmarks.md, "The Kubernetes API proxy").
//!
//! hyper-util's pool puts every HTTP/2 request on one connection per host, where requests past
//! the server's `SETTINGS_MAX_CONCURRENT_STREAMS` (100 on kube-apiserver unless
//! `--http2-max-streams-per-connection` says otherwise) wait for a stream to close: a 101st
//! watch would hang until another one ends. This pool opens another connection when every one it
//! has carries as many streams as its server allows, as Go's HTTP/2 transport does.
//!
//! A server that does not negotiate `h2` (an HTTP/1.1-only load balancer, a plain `http://`
//! URL) gets every request on the HTTP/1.1 pool, from then on; so does every request that asks
//! for an upgrade (`kubectl exec`, port-forward), which HTTP/2 does not have.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http2;
use hyper_util::client::legacy::connect::Connection;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use pin_project_lite::pin_project;
use tower::{BoxError, Service, ServiceExt};
use tracing::debug;

/// How much of one stream's response the pool buffers before the apiserver must wait for it to
/// be read: what a client that stops reading its watch costs. hyper's own default is 2 MiB.
const STREAM_WINDOW: u32 = 1024 * 1024;
/// The connection's window: large enough that streams whose readers stall cannot use it up
/// and stall the other streams of the connection (Go's transport uses 1 GB for the same
/// reason); what is buffered stays bounded by [`STREAM_WINDOW`] per stream.
const CONNECTION_WINDOW: u32 = 1024 * 1024 * 1024;
/// A connection with open streams whose peer sent nothing for this long is pinged, and closed
/// when the ping is not answered within [`PING_TIMEOUT`]: client-go's `ReadIdleTimeout` and
/// `PingTimeout`, so that a dead apiserver does not leave watches hanging.
const PING_INTERVAL: Duration = Duration::from_secs(30);
/// See [`PING_INTERVAL`].
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A request's body as the pool gets it.
type ReqBody = leader_lock::gate::DeadlineBody<kube::client::Body>;

/// HTTP/2 connections from `connector` (whose TLS offers `h2`) for long-running requests, and
/// `fallback`, an HTTP/1.1 pool, for the others and for a server that does not negotiate `h2`.
///
/// Cloned for every request (tower's `Service::call` takes `&mut self`): one reference count.
pub struct Multiplexed<C, F> {
    shared: Arc<Shared<C, F>>,
}

impl<C, F> Clone for Multiplexed<C, F> {
    fn clone(&self) -> Self {
        Multiplexed {
            shared: self.shared.clone(),
        }
    }
}

struct Shared<C, F> {
    connector: C,
    fallback: F,
    connections: Mutex<Vec<Connection2>>,
    /// One dial at a time: requests that found no free stream wait for it and share the new
    /// connection instead of each opening one.
    dialing: tokio::sync::Mutex<()>,
    /// When the last dial failed, and why: the requests that waited for that dial fail with it
    /// rather than each trying again in turn, one connect timeout after another.
    failed: Mutex<Option<(std::time::Instant, String)>>,
    /// The server did not negotiate HTTP/2.
    http1: AtomicBool,
}

struct Connection2 {
    send: http2::SendRequest<ReqBody>,
    /// The streams open on it.
    open: Arc<AtomicUsize>,
    /// How many the server allows at once, as its last `SETTINGS` said.
    max: Arc<AtomicUsize>,
}

/// A stream open on a connection; its place there is freed when this is dropped.
struct Stream(Arc<AtomicUsize>);

impl Drop for Stream {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

// === impl Multiplexed ===

impl<C, F> Multiplexed<C, F> {
    pub fn new(connector: C, fallback: F) -> Self {
        Multiplexed {
            shared: Arc::new(Shared {
                connector,
                fallback,
                connections: Mutex::new(Vec::new()),
                dialing: tokio::sync::Mutex::new(()),
                failed: Mutex::new(None),
                http1: AtomicBool::new(false),
            }),
        }
    }
}

impl<C, F> Shared<C, F> {
    /// A stream on a connection that has room for one more, the first such.
    fn take(&self) -> Option<(http2::SendRequest<ReqBody>, Stream)> {
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        connections.retain(|c| !c.send.is_closed());
        connections.iter().find_map(|c| {
            // The server's limit as it stands: it may lower it while the connection lives.
            let max = c.max.load(Ordering::Acquire);
            c.open
                .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                    (n < max).then_some(n + 1)
                })
                .ok()
                .map(|_| (c.send.clone(), Stream(c.open.clone())))
        })
    }

    fn add(&self, send: http2::SendRequest<ReqBody>, max: Arc<AtomicUsize>) -> Stream {
        let open = Arc::new(AtomicUsize::new(1));
        let mut connections = self.connections.lock().unwrap_or_else(|p| p.into_inner());
        connections.push(Connection2 {
            send,
            open: open.clone(),
            max,
        });
        Stream(open)
    }
}

/// Whether `req` holds its stream open for as long as its caller wants: a watch (`?watch=true`,
/// or a path under `/watch/`) or a followed log (`?follow=true`); not an upgrade, which HTTP/2
/// does not have.
fn long_running<B>(req: &Request<B>) -> bool {
    if req.method() != http::Method::GET || req.headers().contains_key(http::header::UPGRADE) {
        return false;
    }
    let uri = req.uri();
    let flag = |name: &str| {
        uri.query().is_some_and(|q| {
            q.split('&').any(|pair| {
                // The values Go's `strconv.ParseBool`, which the apiserver uses, takes as true.
                pair.split_once('=').is_some_and(|(k, v)| {
                    k == name && matches!(v, "1" | "t" | "T" | "true" | "TRUE" | "True")
                })
            })
        })
    };
    let mut segments = uri.path().split('/').filter(|s| !s.is_empty());
    let watch_path = match segments.next() {
        Some("api") => segments.nth(1) == Some("watch"),
        Some("apis") => segments.nth(2) == Some("watch"),
        _ => false,
    };
    watch_path || flag("watch") || flag("follow")
}

/// Where a connection for `uri` goes: its scheme and authority.
fn origin(uri: &Uri) -> Result<Uri, BoxError> {
    let mut parts = http::uri::Parts::default();
    parts.scheme = uri.scheme().cloned();
    parts.authority = uri.authority().cloned();
    parts.path_and_query = Some(http::uri::PathAndQuery::from_static("/"));
    Ok(Uri::from_parts(parts)?)
}

impl<C, F> Multiplexed<C, F>
where
    C: Service<Uri> + Clone + Send + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
    F: Service<Request<ReqBody>, Response = Response<Incoming>> + Clone + Send + 'static,
    F::Future: Send,
    F::Error: Into<BoxError>,
{
    async fn send(self, req: Request<ReqBody>) -> Result<Response<PoolBody>, BoxError> {
        let mut req = req;
        // A connection that closes between `take` and the send gives the request back: one
        // more go, on a connection made for it if need be.
        for _ in 0..2 {
            if self.shared.http1.load(Ordering::Acquire) || !long_running(&req) {
                return self.fallback(req).await;
            }
            let (mut send, stream) = match self.shared.take() {
                Some(s) => s,
                None => match self.dial(req.uri()).await? {
                    Some(s) => s,
                    None => return self.fallback(req).await,
                },
            };
            match send.try_send_request(req).await {
                Ok(resp) => {
                    return Ok(resp.map(|inner| PoolBody {
                        inner,
                        _stream: Some(stream),
                    }))
                }
                Err(mut e) => match e.take_message() {
                    Some(back) => req = back,
                    None => return Err(e.into_error().into()),
                },
            }
        }
        Err("the apiserver closed two HTTP/2 connections in a row before a request went out".into())
    }

    /// A stream on a connection dialled for it, unless another request's dial made room first;
    /// `None` when the server does not speak HTTP/2.
    async fn dial(
        &self,
        uri: &Uri,
    ) -> Result<Option<(http2::SendRequest<ReqBody>, Stream)>, BoxError> {
        let waiting_since = std::time::Instant::now();
        let _dialing = self.shared.dialing.lock().await;
        if let Some(s) = self.shared.take() {
            return Ok(Some(s));
        }
        if self.shared.http1.load(Ordering::Acquire) {
            return Ok(None);
        }
        {
            let failed = self.shared.failed.lock().unwrap_or_else(|p| p.into_inner());
            if let Some((at, why)) = failed.as_ref().filter(|(at, _)| *at >= waiting_since) {
                let ago = at.elapsed();
                return Err(
                    format!("connecting to the apiserver failed {ago:?} ago: {why}").into(),
                );
            }
        }
        match self.connect(uri).await {
            Ok(s) => Ok(s),
            Err(e) => {
                let mut failed = self.shared.failed.lock().unwrap_or_else(|p| p.into_inner());
                *failed = Some((std::time::Instant::now(), e.to_string()));
                Err(e)
            }
        }
    }

    /// A new connection to `uri`'s server, and a stream on it; `None` when the server does not
    /// speak HTTP/2.
    async fn connect(
        &self,
        uri: &Uri,
    ) -> Result<Option<(http2::SendRequest<ReqBody>, Stream)>, BoxError> {
        let io = self
            .shared
            .connector
            .clone()
            .oneshot(origin(uri)?)
            .await
            .map_err(Into::into)?;
        if !io.connected().is_negotiated_h2() {
            debug!("the apiserver did not negotiate HTTP/2: sending over HTTP/1.1");
            self.shared.http1.store(true, Ordering::Release);
            return Ok(None);
        }
        let (send, connection) = http2::Builder::new(TokioExecutor::new())
            .timer(TokioTimer::new())
            .initial_stream_window_size(STREAM_WINDOW)
            .initial_connection_window_size(CONNECTION_WINDOW)
            .keep_alive_interval(PING_INTERVAL)
            .keep_alive_timeout(PING_TIMEOUT)
            .handshake(io)
            .await?;
        // The server's limit arrives in its first SETTINGS, which the connection's task reads
        // after the handshake (and may be changed later): published after each of its polls.
        let max = Arc::new(AtomicUsize::new(connection.current_max_send_streams()));
        let published = max.clone();
        tokio::spawn(async move {
            let mut connection = std::pin::pin!(connection);
            let ended = std::future::poll_fn(|cx| {
                let polled = connection.as_mut().poll(cx);
                published.store(connection.current_max_send_streams(), Ordering::Release);
                polled
            })
            .await;
            if let Err(e) = ended {
                debug!(error = %e, "an HTTP/2 connection to the apiserver ended");
            }
        });
        let stream = self.shared.add(send.clone(), max);
        Ok(Some((send, stream)))
    }

    async fn fallback(&self, req: Request<ReqBody>) -> Result<Response<PoolBody>, BoxError> {
        let resp = self
            .shared
            .fallback
            .clone()
            .oneshot(req)
            .await
            .map_err(Into::into)?;
        Ok(resp.map(|inner| PoolBody {
            inner,
            _stream: None,
        }))
    }
}

impl<C, F> Service<Request<ReqBody>> for Multiplexed<C, F>
where
    C: Service<Uri> + Clone + Send + Sync + 'static,
    C::Response: hyper::rt::Read + hyper::rt::Write + Connection + Unpin + Send + 'static,
    C::Future: Send,
    C::Error: Into<BoxError>,
    F: Service<Request<ReqBody>, Response = Response<Incoming>> + Clone + Send + Sync + 'static,
    F::Future: Send,
    F::Error: Into<BoxError>,
{
    type Response = Response<PoolBody>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<ReqBody>) -> Self::Future {
        Box::pin(self.clone().send(req))
    }
}

pin_project! {
    /// The body of a response from the apiserver, as its bytes arrive. A response that came
    /// over HTTP/2 holds its stream's place on the connection until this is dropped.
    pub struct PoolBody {
        #[pin]
        inner: Incoming,
        _stream: Option<Stream>,
    }
}

impl Body for PoolBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(uri: &str) -> Request<()> {
        Request::get(uri).body(()).expect("a request")
    }

    #[test]
    fn watches_and_followed_logs_are_long_running_and_other_requests_are_not() {
        for uri in [
            "https://a/api/v1/namespaces/n/configmaps?watch=true&resourceVersion=0",
            "https://a/apis/gateway.networking.k8s.io/v1/gateways?allowWatchBookmarks=true&watch=1",
            "https://a/api/v1/watch/namespaces/n/pods",
            "https://a/apis/apps/v1/watch/deployments",
            "https://a/api/v1/namespaces/n/pods/p/log?follow=true",
        ] {
            assert!(long_running(&get(uri)), "{uri}");
        }
        for uri in [
            "https://a/api/v1/namespaces/n/configmaps",
            "https://a/api/v1/namespaces/n/configmaps?watch=false",
            "https://a/api/v1/namespaces/n/configmaps?xwatch=true",
            "https://a/api/v1/namespaces/watch/configmaps",
            "https://a/apis/watch/v1/things",
            "https://a/api/v1/namespaces/n/pods/p/log",
            "https://a/version",
        ] {
            assert!(!long_running(&get(uri)), "{uri}");
        }
        let mut upgrade = get("https://a/api/v1/namespaces/n/pods/p/exec?command=sh&watch=true");
        upgrade.headers_mut().insert(
            http::header::UPGRADE,
            http::HeaderValue::from_static("SPDY/3.1"),
        );
        assert!(!long_running(&upgrade));
        let post = Request::post("https://a/api/v1/namespaces/n/configmaps?watch=true")
            .body(())
            .expect("a request");
        assert!(!long_running(&post));
    }
}
