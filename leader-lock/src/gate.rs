//! The write gate: a tower [`Layer`] that lets a client's mutating requests out only under a
//! valid leadership.
//!
//! Any controller, not only the status writer, can put its API client behind the gate:
//!
//! - every request whose method is not `GET`, `HEAD` or `OPTIONS` (so `POST`, `PUT`, `PATCH`,
//!   `DELETE` and any other method: the gate fails closed) takes a [`WritePermit`] from
//!   [`Leadership::check`] first; without one it is refused with [`GateError::NotLeader`] and
//!   **not sent**: the inner service is never called;
//! - the permit is checked again ([`WritePermit::check`]) right before the request is handed to
//!   the inner service, with no `.await` in between;
//! - the inner service's future is dropped at the permit's validity deadline, which cancels the
//!   request, and the call fails with [`GateError::Deadline`];
//! - the permit goes down the stack in the request's extensions, where [`DeadlineBody`] right
//!   above the connection pool binds the body to it: the connection's task cannot read (so
//!   send) the body after the deadline, even when this future is not polled at it (a process
//!   frozen with the request queued on a connection, thawed after the deadline);
//! - the permit lives until the response future completes, so a graceful release waits for the
//!   writes in flight;
//! - reads and watches (`GET`, `HEAD`, `OPTIONS`) pass through untouched and take no permit.
//!
//! client-go 0.38's own gate (KEP-6361, `LeaderElector.WriteGate`, a Go transport wrapper)
//! refuses writes while its elector is not leading and cancels those in flight when it stops;
//! this gate also bounds every write by the monotonic validity deadline, as the safety rule in
//! docs/leader-election.md requires (that page compares the two point by point).
//!
//! # Where the check sits
//!
//! "Right before it goes out" means right before this layer's inner service is called. With
//! kube-rs, [`ClientBuilder::with_layer`] wraps the *whole* default stack, so the gate runs
//! before kube's own layers (base URI, retry, auth with its token refresh, tracing) and before
//! the connection pool; those may still await after the check. The deadline bounds them all: the
//! whole inner future, retries and token refreshes included, is dropped at the permit's deadline.
//!
//! For a check after authentication as well, put a second `WriteGateLayer` innermost in a stack
//! built by hand (kube's `Client::new` with `ConfigExt::auth_layer`, see leader-lock-kubernetes'
//! `gated_client`). The outer gate stores its permit in the request's extensions; a gate that finds
//! one there checks *that* permit instead of taking a new one (so a write already in flight may
//! finish during a graceful release, and each retry of it is checked again).
//!
//! # Writing the term the gate checks
//!
//! A gate from [`WriteGateLayer::new`] takes a permit per request, so a write that stamps a term
//! into what it sends (an annotation, a fencing token) cannot know which term the gate will check:
//! between the caller's [`Leadership::check`] and the request, this replica may have lost the lock
//! and won it again under a new term. A gate from [`WriteGateLayer::for_permit`] takes none: every
//! mutating request goes out under the permit it was given, and is refused once that permit's
//! leadership ended, so what was stamped is the term that was checked. Inner layers read the
//! permit (and its [`term`](WritePermit::term)) from the request's extensions.
//! leader-lock-kubernetes' `permit_client` builds a kube client on it.
//!
//! # Keep the lock's own requests out
//!
//! Only the controller's client is gated. The lock (the Lease, the etcd or Redis client) and the
//! leadership Events use their own, ungated client: a gated client must never be given to the
//! lock, as a leader could not renew once its validity lapsed and a follower could never acquire.
//!
//! [`ClientBuilder::with_layer`]: https://docs.rs/kube/latest/kube/client/struct.ClientBuilder.html#method.with_layer

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use http::{Method, Request};
use pin_project_lite::pin_project;
use tokio::time::{sleep_until, Sleep};
use tower_layer::Layer;
use tower_service::Service;

use crate::leadership::{Leadership, NotLeader, WritePermit};
use crate::record::Term;

/// The error type of a [`WriteGate`]: the inner service's error or a [`GateError`], boxed, as
/// tower's `BoxError` (kube's `ClientBuilder` wants `Into<BoxError>`). Downcast it to
/// [`GateError`] to tell a gate refusal from a failure of the request itself.
type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Why the gate did not let a request out, or cut it short.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GateError {
    /// The request was refused and not sent: this replica may not write now.
    #[error("{method} {path} not sent: {reason}")]
    NotLeader {
        /// The request's method.
        method: Method,
        /// The request's path.
        path: String,
        /// Why leadership is not valid.
        reason: NotLeader,
    },
    /// The request was cancelled (its future dropped) at the validity deadline of its permit.
    /// It may or may not have reached the server.
    #[error("{method} {path} cancelled at the validity deadline of term {term}")]
    Deadline {
        /// The request's method.
        method: Method,
        /// The request's path.
        path: String,
        /// The term the request ran under.
        term: Term,
    },
}

/// A [`Layer`] that puts a [`WriteGate`] around a service: mutating requests go out only under
/// a valid [`Leadership`] and are cancelled at its deadline.
///
/// Every request whose method is not `GET`, `HEAD` or `OPTIONS` takes a [`WritePermit`] first;
/// without one it is refused with [`GateError::NotLeader`] and not sent. The permit is checked
/// again right before the inner service is called, the inner future is dropped at the permit's
/// deadline ([`GateError::Deadline`]), and the permit lives until the response completes, so a
/// graceful release waits for the writes in flight. Reads and watches pass untouched. A gate
/// that finds an outer gate's permit in the request's extensions checks that permit instead of
/// taking its own, so a second, innermost gate can check again after authentication.
///
/// Give it only to the controller's client, never to the lock's: a leader could not renew once
/// its validity lapsed, and a follower could never acquire.
///
/// # Examples
///
/// With kube-rs, add it to the controller's client with
/// `ClientBuilder::try_from(config)?.with_layer(&WriteGateLayer::new(leadership)).build()`;
/// leader-lock-kubernetes' `gated_client` does that, and its docs show a compiled example.
///
/// A runnable one, with a stand-in for the HTTP client:
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::sync::Arc;
/// use leader_lock::{Elector, ElectorConfig, Identity, MemoryStore, Timing};
/// use leader_lock::gate::GateError;
/// use leader_lock::WriteGateLayer;
/// use tower::{service_fn, Layer, ServiceExt};
///
/// let elector = Elector::spawn(
///     Arc::new(MemoryStore::new().lock("x")),
///     ElectorConfig {
///         identity: Identity::new("pod-a"),
///         timing: Timing::default(),
///         release_on_shutdown: true,
///     },
/// )?;
/// let http = service_fn(|req: http::Request<()>| async move {
///     Ok::<_, std::convert::Infallible>(format!("{} sent", req.method()))
/// });
/// let client = WriteGateLayer::new(elector.leadership()).layer(http);
/// let patch = || http::Request::patch("/api/v1/namespaces/a/configmaps/b").body(());
///
/// // Not leading yet: the write is refused and not sent; a read passes.
/// let refused = client.clone().oneshot(patch()?).await.expect_err("refused");
/// assert!(matches!(refused.downcast_ref(), Some(GateError::NotLeader { .. })));
/// let get = http::Request::get("/api/v1/namespaces/a/configmaps/b").body(())?;
/// assert_eq!(client.clone().oneshot(get).await.ok().as_deref(), Some("GET sent"));
///
/// // Leading: the write goes out, bounded by the leadership's validity.
/// drop(elector.leadership().wait_leader().await?); // the gate takes its own permit
/// assert_eq!(client.oneshot(patch()?).await.ok().as_deref(), Some("PATCH sent"));
/// assert!(elector.shutdown().await?);
/// # Ok(())
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct WriteGateLayer {
    permits: Permits,
}

/// The service of a [`WriteGateLayer`]: forwards reads, gates everything else.
#[derive(Debug, Clone)]
pub struct WriteGate<S> {
    inner: S,
    permits: Permits,
}

/// Where a gate's permits come from when a request carries none.
#[derive(Debug, Clone)]
enum Permits {
    /// One per request, from [`Leadership::check`].
    Take(Leadership),
    /// Always this one ([`WriteGateLayer::for_permit`]).
    Given(WritePermit),
}

pin_project! {
    /// The response future of a [`WriteGate`]: the inner service's future, bounded by the
    /// permit's deadline for a gated request, holding the permit until it completes.
    ///
    /// # Cancel safety
    /// Dropping it drops the request and the permit.
    pub struct WriteGateFuture<F> {
        #[pin]
        state: State<F>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F> {
        /// A read: the inner future, untouched.
        Pass { #[pin] fut: F },
        /// A write under a permit.
        Gated {
            #[pin]
            fut: F,
            #[pin]
            deadline: Sleep,
            permit: WritePermit,
            method: Method,
            path: String,
        },
        /// Refused before the inner service was called.
        Refused { error: GateError },
        /// Completed: the inner future and the permit are dropped.
        Done,
    }
}

/// Whether a method only reads: the gate lets these pass without a permit. Everything else is a
/// write, known method or not.
fn is_read(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

// === impl WriteGateLayer ===

impl WriteGateLayer {
    /// A gate that takes a permit from `leadership` for each mutating request.
    pub fn new(leadership: Leadership) -> Self {
        WriteGateLayer {
            permits: Permits::Take(leadership),
        }
    }

    /// A gate that sends every mutating request under `permit` and takes no permit of its own:
    /// each is refused, unsent, once [`WritePermit::check`] fails (the leadership `permit` was
    /// taken under ended, even if this replica leads again under a new term, or its deadline
    /// passed) and cancelled at `permit`'s deadline. For a write that carries `permit.term` in
    /// what it sends: the term it carries is the one the gate checks.
    ///
    /// The gate holds `permit` for as long as it lives, and a held permit delays a graceful
    /// release ([`Elector::shutdown`](crate::Elector::shutdown)): build it for one write and
    /// drop it with the write.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use leader_lock::{Leadership, WriteGateLayer, WritePermit};
    /// use leader_lock::leadership::NotLeader;
    /// use tower::{service_fn, Layer, ServiceExt};
    ///
    /// // A stand-in for the HTTP client: it answers with the term of the request's permit.
    /// let http = service_fn(|req: http::Request<String>| async move {
    ///     let permit = req.extensions().get::<WritePermit>().expect("a gated write");
    ///     Ok::<_, std::convert::Infallible>(format!("{} under term {}", req.body(), permit.term))
    /// });
    /// let leadership = Leadership::always_leader();
    /// let sent = leadership
    ///     .run(|permit| async move {
    ///         let body = format!("written by term {}", permit.term); // stamped into the write
    ///         let client = WriteGateLayer::for_permit(permit).layer(http);
    ///         let req = http::Request::put("/objects/a").body(body).expect("a request");
    ///         client.oneshot(req).await.map_err(|e| e.to_string())
    ///     })
    ///     .await?;
    /// assert_eq!(sent, "written by term disabled under term disabled");
    /// # Ok(())
    /// # }
    /// ```
    #[must_use = "a layer gates nothing until it wraps a service"]
    pub fn for_permit(permit: WritePermit) -> Self {
        WriteGateLayer {
            permits: Permits::Given(permit),
        }
    }
}

impl<S> Layer<S> for WriteGateLayer {
    type Service = WriteGate<S>;

    fn layer(&self, inner: S) -> WriteGate<S> {
        WriteGate {
            inner,
            permits: self.permits.clone(),
        }
    }
}

// === impl WriteGate ===

impl<S> WriteGate<S> {
    /// The gated service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B> Service<Request<B>> for WriteGate<S>
where
    S: Service<Request<B>>,
    S::Error: Into<BoxError>,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = WriteGateFuture<S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        if is_read(req.method()) {
            return WriteGateFuture::new(State::Pass {
                fut: self.inner.call(req),
            });
        }
        let refuse = |req: &Request<B>, reason| {
            WriteGateFuture::new(State::Refused {
                error: GateError::NotLeader {
                    method: req.method().clone(),
                    path: req.uri().path().to_owned(),
                    reason,
                },
            })
        };
        // 1. A permit: the one a gate further out took for this request, else this gate's own
        //    (the one it was given, or a new one).
        let permit = match (req.extensions().get::<WritePermit>(), &self.permits) {
            (Some(outer), _) => outer.clone(),
            (None, Permits::Given(permit)) => permit.clone(),
            (None, Permits::Take(leadership)) => match leadership.check() {
                Ok(p) => p,
                Err(reason) => return refuse(&req, reason),
            },
        };
        // 2. Checked again right before the inner call; nothing awaits between the two.
        if let Err(reason) = permit.check() {
            return refuse(&req, reason);
        }
        let method = req.method().clone();
        let path = req.uri().path().to_owned();
        let deadline = sleep_until(permit.valid_until);
        // For a gate further in (after authentication, say), and for each retry of the request.
        req.extensions_mut().insert(permit.clone());
        // 3. Sent; cancelled at the deadline.
        WriteGateFuture::new(State::Gated {
            fut: self.inner.call(req),
            deadline,
            permit,
            method,
            path,
        })
    }
}

// === impl WriteGateFuture ===

impl<F> WriteGateFuture<F> {
    fn new(state: State<F>) -> Self {
        WriteGateFuture { state }
    }
}

impl<F, T, E> Future for WriteGateFuture<F>
where
    F: Future<Output = Result<T, E>>,
    E: Into<BoxError>,
{
    type Output = Result<T, BoxError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut state = self.project().state;
        let out = match state.as_mut().project() {
            StateProj::Pass { fut } => return fut.poll(cx).map_err(Into::into),
            StateProj::Gated {
                fut,
                deadline,
                permit,
                method,
                path,
            } => match fut.poll(cx) {
                // The response first: one that is already here was sent in time, and saying
                // "cancelled" would hide a write that landed.
                Poll::Ready(r) => r.map_err(Into::into),
                Poll::Pending if deadline.poll(cx).is_pending() => return Poll::Pending,
                Poll::Pending => Err(GateError::Deadline {
                    method: method.clone(),
                    path: std::mem::take(path),
                    term: permit.term,
                }
                .into()),
            },
            StateProj::Refused { error } => Err(error.clone().into()),
            StateProj::Done => Err("WriteGateFuture polled after completion".into()),
        };
        // Drops the request (cancelling it at the deadline) and the permit now, not when the
        // caller gets round to dropping this future.
        state.set(State::Done);
        Poll::Ready(out)
    }
}

mod body;
#[cfg(test)]
mod tests;

pub use body::DeadlineBody;
