//! Upgraded connections (`kubectl exec`, `attach`, `port-forward`, and the pods, services and
//! nodes `proxy` subresources over SPDY/3.1 or WebSocket) through the leader's proxy.
//!
//! A request for one is gated like any write (`super::forward`): refused unsent by a replica
//! without a valid leadership, sent under a permit by the leader, the `101` awaited before the
//! permit's deadline. Then:
//!
//! 1. The caller gets the apiserver's `101` with its headers (`Upgrade`, `Sec-WebSocket-*`,
//!    `X-Stream-Protocol-Version`), and the bytes are copied both ways.
//! 2. The copying stops, and both connections are closed, the moment this replica no longer
//!    validly leads in the permit's term: the elector published another state, or the validity
//!    deadline passed without a renewal ([`crate::validity::ended`], which also stops `exec`'s
//!    command). Renewals of that term keep the stream open.
//! 3. Each write towards the apiserver checks that validity first, so a process thawed after
//!    the deadline (SIGSTOP, a paused VM) sends nothing more before the stream is cut.
//! 4. The permit is held while the stream is open, so a graceful release waits for it, but no
//!    longer than the proxy's drain: at the drain's deadline the streams still open are cut.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::{self, HeaderValue};
use http::{Request, Response};
use http_body_util::{BodyExt, Empty};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use leader_lock::{LeaderState, Term, WritePermit};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio_util::task::task_tracker::TaskTrackerToken;
use tracing::{debug, info, warn};

use super::body::ProxyBody;
use super::classify::Verb;
use super::exchange::{strip_hop_by_hop, Recorder, Shared};
use super::pool::PoolBody;
use crate::metrics::ProxyOutcome;
use crate::validity::{ended, still_valid};

/// A caller's request for an upgraded connection.
pub(super) struct Asked {
    /// The caller's end of the connection, once the proxy has answered `101`.
    downstream: OnUpgrade,
    /// The protocols it asked for (`SPDY/3.1`, `websocket`).
    protocol: HeaderValue,
}

// === impl Asked ===

impl Asked {
    /// The upgrade `req` asks for, if any; taken before its body is.
    pub(super) fn take<B>(req: &mut Request<B>) -> Option<Asked> {
        let protocol = req.headers().get(header::UPGRADE)?.clone();
        Some(Asked {
            downstream: hyper::upgrade::on(req),
            protocol,
        })
    }

    /// Asks the apiserver for the same upgrade: the request for it has lost the hop-by-hop
    /// headers of the caller's connection.
    pub(super) fn ask<B>(&self, upstream: &mut Request<B>) {
        let h = upstream.headers_mut();
        h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
        h.insert(header::UPGRADE, self.protocol.clone());
    }
}

/// Answers the caller with the apiserver's `101` (`resp`) and relays the stream in a task of its
/// own, under `permit` (held until the stream ends) and `token` (the drain's count of gated
/// exchanges).
pub(super) fn relay(
    shared: &Arc<Shared>,
    verb: Verb,
    mut resp: Response<PoolBody>,
    asked: Asked,
    permit: WritePermit,
    token: TaskTrackerToken,
) -> Response<ProxyBody> {
    let upstream = hyper::upgrade::on(&mut resp);
    let (mut parts, _empty) = resp.into_parts();
    let protocol = parts
        .headers
        .get(header::UPGRADE)
        .cloned()
        .unwrap_or_else(|| asked.protocol.clone());
    strip_hop_by_hop(&mut parts.headers);
    parts
        .headers
        .insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    parts.headers.insert(header::UPGRADE, protocol);
    // What the client's connection left there is of no use to the caller's.
    parts.extensions = http::Extensions::new();
    let record = Recorder {
        metrics: shared.metrics.clone(),
        verb,
        outcome: ProxyOutcome::Upgraded,
    };
    tokio::spawn(stream(
        shared.clone(),
        upstream,
        asked.downstream,
        permit,
        token,
        record,
    ));
    Response::from_parts(parts, Empty::new().map_err(|e| match e {}).boxed_unsync())
}

/// Copies the stream both ways until one end closes it, the leadership of the permit's term
/// ends, or the proxy's drain cuts it; then closes both ends.
async fn stream(
    shared: Arc<Shared>,
    upstream: OnUpgrade,
    downstream: OnUpgrade,
    permit: WritePermit,
    _token: TaskTrackerToken,
    mut record: Recorder,
) {
    let term = permit.term;
    let mut rx = shared.leadership.subscribe();
    let fenced_rx = rx.clone();
    let copy = async move {
        let (up, down) =
            tokio::try_join!(async { upstream.await.map_err(io::Error::other) }, async {
                downstream.await.map_err(io::Error::other)
            },)?;
        let mut up = Fenced {
            inner: TokioIo::new(up),
            rx: fenced_rx,
            term,
        };
        let mut down = TokioIo::new(down);
        tokio::io::copy_bidirectional(&mut down, &mut up).await
    };
    tokio::select! {
        biased;
        why = ended(&mut rx, term) => {
            record.outcome = ProxyOutcome::UpgradeCut;
            warn!(term = %term, why, "upgraded stream cut: its leadership ended");
        }
        () = shared.cut_streams.cancelled() => {
            record.outcome = ProxyOutcome::UpgradeCut;
            info!(term = %term, "upgraded stream cut: the proxy drained");
        }
        copied = copy => match copied {
            Ok((sent, received)) => debug!(term = %term, sent, received, "upgraded stream closed"),
            Err(e) => debug!(term = %term, error = %e, "upgraded stream ended"),
        },
    }
    // Both connections were dropped with `copy`; the permit and the token go last.
    drop(permit);
}

/// The apiserver's end of an upgraded stream: a write goes only while the leadership of `term`
/// is valid now, whatever the timers have noticed.
struct Fenced<T> {
    inner: T,
    rx: watch::Receiver<LeaderState>,
    term: Term,
}

// === impl Fenced ===

impl<T> Fenced<T> {
    fn check(&self) -> io::Result<()> {
        still_valid(&self.rx.borrow(), self.term)
            .map(|_| ())
            .map_err(|why| io::Error::new(io::ErrorKind::BrokenPipe, why))
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Fenced<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Fenced<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use leader_lock::Leadership;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::Instant;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn nothing_goes_to_the_apiserver_once_the_validity_passed_unrenewed() {
        let valid_until = Instant::now() + Duration::from_secs(3);
        let (script, leadership) = Leadership::scripted(LeaderState::Leader {
            term: Term(1),
            valid_until,
        });
        let (near, mut apiserver) = tokio::io::duplex(64);
        let mut up = Fenced {
            inner: near,
            rx: leadership.subscribe(),
            term: Term(1),
        };
        up.write_all(b"sent").await.expect("valid: sent");
        let mut got = [0u8; 4];
        apiserver.read_exact(&mut got).await.expect("arrived");
        assert_eq!(&got, b"sent");
        // No timer has to notice: the write itself looks at the clock (a process thawed after
        // the deadline).
        tokio::time::advance(Duration::from_secs(3)).await;
        let e = up.write_all(b"late").await.expect_err("past the deadline");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        // Another term is another leadership.
        script.publish(LeaderState::Leader {
            term: Term(2),
            valid_until: Instant::now() + Duration::from_secs(3),
        });
        let e = up.write_all(b"late").await.expect_err("another term");
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        drop(up);
        let mut rest = Vec::new();
        apiserver.read_to_end(&mut rest).await.expect("closed");
        assert!(rest.is_empty(), "{rest:?}");
    }
}
