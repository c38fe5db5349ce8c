//! The last check of a write: its body refuses to be read after the permit's deadline.
//!
//! The gate ([`WriteGate`](super::WriteGate)) drops a write's future at the validity deadline,
//! but only once that future is polled again, and an HTTP client does not write requests from
//! the caller's future: hyper hands each one to the task of its connection. A process frozen
//! (SIGSTOP, a VM pause) with a request queued there finds, when it thaws, the connection task
//! and the deadline's timer runnable together; if the connection task runs first, the request
//! goes out after the deadline. So the body, which that task reads to send it, checks the
//! deadline itself: past it, reading fails, the client aborts the request, and the server never
//! gets a whole request to act on. A write with an empty body (hyper does not read it) has only
//! the gate's own deadline; kube sends a body with every write, deletes included.
//!
//! [`DeadlineBody::bound`] wraps a request's body with the deadline of the permit a
//! [`WriteGate`](super::WriteGate) put in its extensions. Put it right above the connection pool,
//! under the gate (leader-lock-kubernetes' `client_builder` does). A write guarded only by
//! [`WritePermit::run`] carries no permit in its request and is not bound here: `run` drops it at
//! the deadline when its task gets to run, which a frozen process does late.

use std::pin::Pin;
use std::task::{Context, Poll};

use http::Request;
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tokio::time::Instant;

use super::{is_read, BoxError, GateError};
use crate::leadership::WritePermit;

/// What a bound body says when it is read too late.
#[derive(Debug, Clone)]
struct Bound {
    until: Instant,
    error: GateError,
}

pin_project! {
    /// A request body that cannot be read after a deadline: see the [module](self) docs.
    ///
    /// # Examples
    ///
    /// Between a client's own layers and its connection pool, with tower's `map_request`:
    ///
    /// ```
    /// use http::Request;
    /// use leader_lock::gate::DeadlineBody;
    ///
    /// fn bound(req: Request<String>) -> Request<DeadlineBody<String>> {
    ///     DeadlineBody::bound(req)
    /// }
    /// # let _ = bound(Request::new(String::new()));
    /// ```
    #[derive(Debug)]
    pub struct DeadlineBody<B> {
        #[pin]
        inner: B,
        bound: Option<Bound>,
    }
}

impl<B> DeadlineBody<B> {
    /// `req` with its body bound by the deadline of the permit in its extensions (none for a
    /// read, or for a request no gate let through).
    pub fn bound(req: Request<B>) -> Request<DeadlineBody<B>> {
        let bound = if is_read(req.method()) {
            None
        } else {
            req.extensions().get::<WritePermit>().map(|p| Bound {
                until: p.valid_until,
                error: GateError::Deadline {
                    method: req.method().clone(),
                    path: req.uri().path().to_owned(),
                    term: p.term,
                },
            })
        };
        req.map(|inner| DeadlineBody { inner, bound })
    }

    /// The deadline after which the body cannot be read, if any.
    pub fn deadline(&self) -> Option<Instant> {
        self.bound.as_ref().map(|b| b.until)
    }
}

impl<B> Body for DeadlineBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = B::Data;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let this = self.project();
        if let Some(b) = this.bound {
            // The clock, not a timer: a timer fires only once the runtime gets round to it.
            if Instant::now() >= b.until {
                return Poll::Ready(Some(Err(b.error.clone().into())));
            }
        }
        this.inner.poll_frame(cx).map_err(Into::into)
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
    use std::future::poll_fn;
    use std::time::Duration;

    use http::Method;

    use super::*;
    use crate::leadership::{LeaderState, Leadership, Scripted};
    use crate::record::Term;

    fn request(method: Method, body: &str) -> Request<String> {
        let mut req = Request::new(body.to_string());
        *req.method_mut() = method;
        *req.uri_mut() = http::Uri::from_static("/api/v1/namespaces/a/configmaps/b");
        req
    }

    type Data = <String as Body>::Data;

    fn leading(term: u64, valid_for: Duration) -> (Scripted, Leadership) {
        Leadership::scripted(LeaderState::Leader {
            term: Term(term),
            valid_until: Instant::now() + valid_for,
        })
    }

    async fn read(body: &mut DeadlineBody<String>) -> Option<Result<Frame<Data>, BoxError>> {
        poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await
    }

    #[tokio::test(start_paused = true)]
    async fn a_gated_write_s_body_is_read_before_its_permit_s_deadline_and_refused_after() {
        let (_script, leadership) = leading(5, Duration::from_secs(10));
        let permit = leadership.check().expect("leading");
        let mut sent = request(Method::PATCH, "{}");
        sent.extensions_mut().insert(permit.clone());
        let mut on_time = DeadlineBody::bound(sent).into_body();
        assert_eq!(on_time.deadline(), Some(permit.valid_until));
        assert!(matches!(read(&mut on_time).await, Some(Ok(_))));

        let mut late = request(Method::PUT, "{}");
        late.extensions_mut().insert(permit.clone());
        let mut late = DeadlineBody::bound(late).into_body();
        tokio::time::sleep(Duration::from_secs(10)).await;
        // The deadline itself is too late, as for `WritePermit::check`.
        let e = match read(&mut late).await {
            Some(Err(e)) => e,
            other => panic!("read after the deadline: {other:?}"),
        };
        assert!(
            matches!(
                e.downcast_ref::<GateError>(),
                Some(GateError::Deadline { term: Term(5), method, .. }) if method == Method::PUT
            ),
            "{e}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_writes_that_carry_a_permit_are_bound() {
        let (_script, leadership) = leading(7, Duration::from_secs(10));
        let permit = leadership.check().expect("leading");
        let mut read = request(Method::GET, "");
        read.extensions_mut().insert(permit.clone());
        assert_eq!(DeadlineBody::bound(read).into_body().deadline(), None);
        let free = DeadlineBody::bound(request(Method::DELETE, "{}")).into_body();
        assert_eq!(free.deadline(), None, "no gate let it through");
        let mut gated = request(Method::POST, "{}");
        gated.extensions_mut().insert(permit.clone());
        assert_eq!(
            DeadlineBody::bound(gated).into_body().deadline(),
            Some(permit.valid_until)
        );
    }
}
