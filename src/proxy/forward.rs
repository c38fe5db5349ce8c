//! One request through the proxy: classified, gated when it writes, sent with the replica's own
//! client, its response streamed back.
//!
//! # A gated request
//!
//! 1. A permit from the leadership, or a 503 `Status` at once: nothing is read beyond the
//!    request's head and nothing reaches the apiserver.
//! 2. The body, read whole (up to [`MAX_BODY`], the apiserver's own limit) before the permit's
//!    deadline; a body still arriving at the deadline is never sent. kube's request body cannot
//!    wrap a stream, and a write the apiserver would accept fits in memory.
//! 3. The permit checked again right before the request is handed to the client, with no
//!    `.await` between; the permit rides in the request's extensions, where the client's
//!    innermost layer (`DeadlineBody`) stops the connection's task from sending the body after
//!    the deadline, even in a process thawed after it.
//! 4. The response's head awaited until the deadline (then a 504: the write may or may not have
//!    landed), its body streamed and cut at the deadline; the permit is held until that body
//!    ends, so a graceful release waits for the exchange. A `101` to an upgrade is relayed as a
//!    stream fenced by the leadership's validity ([`super::upgrade`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderName};
use http::{Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::body::Incoming;
use leader_lock::gate::GateError;
use leader_lock::leadership::NotLeader;
use leader_lock::{LeaderState, WritePermit};
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, timeout, timeout_at, Instant, Sleep};
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, warn};

use super::body::{BoxError, ProxyBody};
use super::classify::{classify, Verb};
use super::election_lease::Route;
use super::exchange::{strip_hop_by_hop, Recorder, Shared};
use super::pool::PoolBody;
use super::status::status;
use super::upgrade::{self, Asked};
use crate::metrics::ProxyOutcome;

/// The largest request body the proxy reads: the apiserver's own default
/// (`--max-request-body-bytes`, 3 MiB), which refuses larger ones anyway.
pub const MAX_BODY: usize = 3 * 1024 * 1024;
/// How long a read's body (rare: most reads have none) may take to arrive.
const READ_BODY_TIMEOUT: Duration = Duration::from_secs(60);

/// Answers one request; never fails (every failure is an HTTP answer).
pub(super) async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<ProxyBody>, std::convert::Infallible> {
    let arrived = Instant::now();
    if let Some(election) = &shared.election {
        match election.route(req.method(), req.uri().path()) {
            Some(Route::Item) => {
                let verb = classify(
                    req.method(),
                    req.uri().path(),
                    req.uri().query(),
                    req.headers(),
                );
                shared.count(verb, ProxyOutcome::Election);
                return Ok(election.answer(req).await);
            }
            Some(Route::Create) => {
                return Ok(create_in_election_namespace(&shared, req, arrived).await)
            }
            None => {}
        }
    }
    let verb = classify(
        req.method(),
        req.uri().path(),
        req.uri().query(),
        req.headers(),
    );
    Ok(if verb.gated() {
        gated(&shared, verb, req, arrived).await
    } else {
        pass(&shared, verb, req, arrived).await
    })
}

/// A create among the Leases of the controller's election: answered here when it is that
/// election's Lease, gated and forwarded otherwise (its body read first, to tell).
async fn create_in_election_namespace(
    shared: &Arc<Shared>,
    req: Request<Incoming>,
    arrived: Instant,
) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    let body = match timeout(READ_BODY_TIMEOUT, Limited::new(body, MAX_BODY).collect()).await {
        Ok(Ok(c)) => c.to_bytes(),
        Ok(Err(e)) => {
            shared.count(Verb::Create, ProxyOutcome::Rejected);
            return body_error(&e);
        }
        Err(_) => {
            shared.count(Verb::Create, ProxyOutcome::Rejected);
            return status(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                "the request body did not arrive in time",
            );
        }
    };
    if let Some(election) = shared.election.as_ref() {
        let content_type = parts
            .headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok());
        if election.names_it(content_type, &body) {
            shared.count(Verb::Create, ProxyOutcome::Election);
            return election.already_exists();
        }
    }
    let req = Request::from_parts(parts, Full::new(body));
    gated(shared, Verb::Create, req, arrived).await
}

/// A read: forwarded on every replica, its response streamed.
async fn pass(
    shared: &Shared,
    verb: Verb,
    req: Request<Incoming>,
    arrived: Instant,
) -> Response<ProxyBody> {
    let (parts, body) = req.into_parts();
    let body = match timeout(READ_BODY_TIMEOUT, read_body(body)).await {
        Ok(Ok(b)) => b,
        Ok(Err(answer)) => {
            shared.count(verb, ProxyOutcome::Rejected);
            return answer;
        }
        Err(_) => {
            shared.count(verb, ProxyOutcome::Rejected);
            return status(
                StatusCode::REQUEST_TIMEOUT,
                "Timeout",
                "the request body did not arrive in time",
            );
        }
    };
    let upstream = upstream_request(parts, body);
    let sent = Instant::now();
    match shared.client.send(upstream).await {
        Ok(resp) => {
            shared.count(verb, ProxyOutcome::Forwarded);
            shared.metrics.proxy_added(sent.duration_since(arrived));
            downstream_response(resp, |b| b.map_err(Into::into).boxed_unsync())
        }
        Err(e) => {
            shared.count(verb, ProxyOutcome::Failed);
            unreachable_apiserver(&e)
        }
    }
}

/// A write (or anything not known to be a read): only under a permit, bounded by its deadline.
async fn gated<B>(
    shared: &Arc<Shared>,
    verb: Verb,
    mut req: Request<B>,
    arrived: Instant,
) -> Response<ProxyBody>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    // 1. A permit, before anything of the body is read.
    let permit = match shared.leadership.check() {
        Ok(p) => p,
        Err(reason) => {
            shared.count(verb, ProxyOutcome::Refused);
            shared.refusals.note(&req, verb, &reason);
            let mut resp = refusal(shared, &reason, "");
            if !req.body().is_end_stream() {
                // The body is left unread: the connection cannot carry another request.
                resp.headers_mut()
                    .insert(header::CONNECTION, http::HeaderValue::from_static("close"));
            }
            return resp;
        }
    };
    let token = shared.gated.token();
    {
        let mut latest = shared
            .latest_deadline
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if latest.is_none_or(|t| t < permit.valid_until) {
            *latest = Some(permit.valid_until);
        }
    }
    let upgrade = Asked::take(&mut req);
    // 2. The whole body before the deadline.
    let (mut parts, body) = req.into_parts();
    let body = match timeout_at(permit.valid_until, read_body(body)).await {
        Ok(Ok(b)) => b,
        Ok(Err(answer)) => {
            shared.count(verb, ProxyOutcome::Rejected);
            return answer;
        }
        Err(_) => {
            shared.count(verb, ProxyOutcome::Cut);
            warn!(term = %permit.term, method = %parts.method, path = parts.uri.path(),
                "write cut: its body was still arriving at the end of the leadership's \
                 validity; nothing was sent");
            return refusal(
                shared,
                &NotLeader::Expired {
                    term: permit.term,
                    ago: Duration::ZERO,
                },
                "; the request body was still arriving at the end of the leadership's \
                 validity, and nothing of it was sent",
            );
        }
    };
    // 3. Checked again right before it goes; nothing awaits between this and `send`'s first
    //    poll, and the client's innermost layer checks the permit's deadline as it writes.
    if let Err(reason) = permit.check() {
        shared.count(verb, ProxyOutcome::Refused);
        return refusal(shared, &reason, "");
    }
    parts.extensions.insert(permit.clone());
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let mut upstream = upstream_request(parts, body);
    if let Some(asked) = &upgrade {
        asked.ask(&mut upstream);
    }
    let sent = Instant::now();
    // 4. The response's head before the deadline; its body cut at it.
    let cut = |shared: &Shared| {
        shared.count(verb, ProxyOutcome::Cut);
        warn!(term = %permit.term, %method, path, "write cut at the end of the leadership's \
            validity while waiting for the apiserver: it may or may not have been applied");
        status(
            StatusCode::GATEWAY_TIMEOUT,
            "Timeout",
            &format!(
                "{} {path} was cut at the end of the validity of term {} of {}: it may or may \
                 not have been applied",
                method, permit.term, shared.identity
            ),
        )
    };
    match timeout_at(permit.valid_until, shared.client.send(upstream)).await {
        Err(_) => cut(shared),
        // Over HTTP/2 the deadline's error ends the body's stream, not the request, whose own
        // error then does not name it: past the deadline, any failure is the cut.
        Ok(Err(e)) if caused_by_deadline(&e) || Instant::now() >= permit.valid_until => cut(shared),
        Ok(Err(e)) => {
            shared.count(verb, ProxyOutcome::Failed);
            unreachable_apiserver(&e)
        }
        Ok(Ok(resp)) => {
            shared.metrics.proxy_added(sent.duration_since(arrived));
            if let Some(asked) =
                upgrade.filter(|_| resp.status() == StatusCode::SWITCHING_PROTOCOLS)
            {
                return upgrade::relay(shared, verb, resp, asked, permit, token);
            }
            let record = Recorder {
                metrics: shared.metrics.clone(),
                verb,
                outcome: ProxyOutcome::Forwarded,
            };
            downstream_response(resp, move |b| {
                PermitBody {
                    deadline: sleep_until(permit.valid_until),
                    inner: b,
                    held: Some(Held {
                        permit,
                        _token: token,
                        record,
                    }),
                }
                .boxed_unsync()
            })
        }
    }
}

/// The request for the apiserver: path and query only (the client's base URI adds the rest),
/// without the caller's credentials and the headers of the caller's connection.
fn upstream_request(
    mut parts: http::request::Parts,
    body: kube::client::Body,
) -> Request<kube::client::Body> {
    let path_and_query = parts
        .uri
        .path_and_query()
        .cloned()
        .unwrap_or_else(|| http::uri::PathAndQuery::from_static("/"));
    parts.uri = path_and_query.into();
    let h = &mut parts.headers;
    strip_hop_by_hop(h);
    // The replica's credentials replace the caller's, whoever it claims to be.
    h.remove(header::AUTHORIZATION);
    let impersonation: Vec<HeaderName> = h
        .keys()
        .filter(|k| k.as_str().starts_with("impersonate-"))
        .cloned()
        .collect();
    for k in impersonation {
        h.remove(k);
    }
    // The client sets these for the body it sends and the server it sends to.
    h.remove(header::HOST);
    h.remove(header::CONTENT_LENGTH);
    h.remove(header::EXPECT);
    Request::from_parts(parts, body)
}

/// The apiserver's response for the caller: status, headers (less the hop-by-hop ones) and
/// body as they came.
fn downstream_response(
    resp: Response<PoolBody>,
    body: impl FnOnce(PoolBody) -> ProxyBody,
) -> Response<ProxyBody> {
    let (mut parts, b) = resp.into_parts();
    strip_hop_by_hop(&mut parts.headers);
    Response::from_parts(parts, body(b))
}

/// The request body, whole, for kube's client; an answer for the caller when it cannot be.
async fn read_body<B>(body: B) -> Result<kube::client::Body, Response<ProxyBody>>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    if body.is_end_stream() {
        return Ok(kube::client::Body::empty());
    }
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(c) => Ok(kube::client::Body::from(c.to_bytes())),
        Err(e) => Err(body_error(&e)),
    }
}

/// The answer to a request body that could not be read whole.
fn body_error(e: &BoxError) -> Response<ProxyBody> {
    if e.downcast_ref::<LengthLimitError>().is_some() {
        status(
            StatusCode::PAYLOAD_TOO_LARGE,
            "RequestEntityTooLarge",
            &format!("the request body is larger than {MAX_BODY} bytes"),
        )
    } else {
        status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the request body could not be read: {e}"),
        )
    }
}

/// A 503 for a write this replica may not make now: names this replica, the holder it last saw
/// and the term, and asks for no wait (`status`), so the caller has the error at once.
fn refusal(shared: &Shared, reason: &NotLeader, more: &str) -> Response<ProxyBody> {
    let seen = match shared.leadership.state() {
        LeaderState::Follower { holder, term } => format!(
            "; the holder it last saw is {} (term {})",
            holder.as_deref().unwrap_or("unknown"),
            term.map_or_else(|| "unknown".to_string(), |t| t.to_string())
        ),
        LeaderState::Leader { term, .. } => format!("; it leads under term {term}"),
        LeaderState::Starting => "; it has not seen the lock yet".to_string(),
        LeaderState::Stopped => "; it is stopping".to_string(),
    };
    let ago = shared
        .leadership
        .last_sighting()
        .map(|at| format!(", {:.1} s ago", at.elapsed().as_secs_f64()))
        .unwrap_or_default();
    // The holder is named once, below.
    let reason = match reason {
        NotLeader::Follower { .. } => "it is not the leader".to_string(),
        other => other.to_string(),
    };
    status(
        StatusCode::SERVICE_UNAVAILABLE,
        "ServiceUnavailable",
        &format!(
            "gateway-leader proxy of {}: write not sent, this replica may not write now \
             ({reason}){seen}{ago}{more}; send writes through the leader's proxy",
            shared.identity
        ),
    )
}

/// A 502 for a request that did not get an answer from the apiserver.
fn unreachable_apiserver(e: &BoxError) -> Response<ProxyBody> {
    debug!(error = %e, "the apiserver did not answer");
    status(
        StatusCode::BAD_GATEWAY,
        "InternalError",
        &format!("the apiserver did not answer the proxy: {e}"),
    )
}

/// Whether the client failed because the body's permit expired (`DeadlineBody`).
fn caused_by_deadline(e: &BoxError) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(e.as_ref());
    while let Some(c) = cause {
        if c.downcast_ref::<GateError>().is_some() {
            return true;
        }
        cause = c.source();
    }
    false
}

/// What a gated response holds until its body ends.
struct Held {
    permit: WritePermit,
    _token: TaskTrackerToken,
    record: Recorder,
}

pin_project! {
    /// A gated response's body: streamed while the permit is valid, cut (an error, which makes
    /// the server abort the response) when it is still pending at the deadline. Holds the
    /// permit until it ends.
    struct PermitBody<B> {
        #[pin]
        inner: B,
        #[pin]
        deadline: Sleep,
        held: Option<Held>,
    }
}

impl<B> Body for PermitBody<B>
where
    B: Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.project();
        // What has arrived was sent in time: deliver it before looking at the clock.
        match this.inner.poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => Poll::Ready(Some(Ok(frame))),
            Poll::Ready(end) => {
                // Ended (or failed): the permit goes now, not when the server drops the body.
                this.held.take();
                Poll::Ready(end.map(|r| r.map_err(Into::into)))
            }
            Poll::Pending => {
                if this.held.is_none() || this.deadline.poll(cx).is_pending() {
                    return Poll::Pending;
                }
                let Some(mut held) = this.held.take() else {
                    return Poll::Pending;
                };
                held.record.outcome = ProxyOutcome::Cut;
                warn!(term = %held.permit.term, "response cut at the end of the leadership's \
                    validity");
                Poll::Ready(Some(Err(GateError::Deadline {
                    method: http::Method::GET,
                    path: String::new(),
                    term: held.permit.term,
                }
                .into())))
            }
        }
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

    #[test]
    fn the_caller_s_credentials_and_connection_headers_stay_behind() {
        let req = Request::post("http://127.0.0.1:8001/api/v1/namespaces/a/configmaps?dryRun=All")
            .header(header::AUTHORIZATION, "Bearer theirs")
            .header("Impersonate-User", "admin")
            .header("Impersonate-Group", "system:masters")
            .header("Impersonate-Extra-scopes", "x")
            .header("Impersonate-Uid", "1")
            .header(header::CONNECTION, "keep-alive, X-Private")
            .header("X-Private", "1")
            .header("Keep-Alive", "timeout=5")
            .header(header::TRANSFER_ENCODING, "chunked")
            .header(header::HOST, "127.0.0.1:8001")
            .header(header::CONTENT_TYPE, "application/vnd.kubernetes.protobuf")
            .header(header::ACCEPT, "application/cbor")
            .header("Warning", "kept")
            .body(())
            .expect("a request");
        let (parts, ()) = req.into_parts();
        let out = upstream_request(parts, kube::client::Body::empty());
        assert_eq!(
            out.uri().to_string(),
            "/api/v1/namespaces/a/configmaps?dryRun=All"
        );
        let h = out.headers();
        for gone in [
            "authorization",
            "impersonate-user",
            "impersonate-group",
            "impersonate-extra-scopes",
            "impersonate-uid",
            "connection",
            "x-private",
            "keep-alive",
            "transfer-encoding",
            "host",
        ] {
            assert!(!h.contains_key(gone), "{gone} forwarded: {h:?}");
        }
        assert_eq!(
            h[header::CONTENT_TYPE],
            "application/vnd.kubernetes.protobuf"
        );
        assert_eq!(h[header::ACCEPT], "application/cbor");
        assert_eq!(h["warning"], "kept");
    }
}
