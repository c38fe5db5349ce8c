use std::convert::Infallible;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::{Method, Request};
use tokio::sync::Notify;
use tokio::time::Instant;
use tower::{service_fn, Layer, Service, ServiceExt};

use super::{BoxError, GateError, WriteGateLayer};
use crate::leadership::{LeaderState, Leadership, NotLeader, WritePermit};
use crate::record::Term;

/// What the stand-in HTTP client saw: how many requests reached it, and whether the last one's
/// future was dropped before it finished.
#[derive(Clone, Default)]
struct Probe {
    calls: Arc<AtomicUsize>,
    dropped: Arc<AtomicBool>,
}

/// Sets its flag when dropped unfinished: the request was cancelled.
struct Cancelled(Arc<AtomicBool>);

impl Drop for Cancelled {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

impl Probe {
    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    /// A stand-in HTTP client that takes `delay` to answer with the term of the permit the
    /// request carries (none for a read).
    fn client(
        &self,
        delay: Duration,
    ) -> impl Service<Request<()>, Response = Option<Term>, Error = Infallible, Future: Send> + Clone
    {
        let probe = self.clone();
        service_fn(move |req: Request<()>| {
            probe.calls.fetch_add(1, Ordering::SeqCst);
            let term = req.extensions().get::<WritePermit>().map(|p| p.term);
            let flag = Cancelled(probe.dropped.clone());
            async move {
                tokio::time::sleep(delay).await;
                std::mem::forget(flag);
                Ok(term)
            }
        })
    }
}

fn request(method: Method) -> Request<()> {
    let mut req = Request::new(());
    *req.method_mut() = method;
    *req.uri_mut() = http::Uri::from_static("/api/v1/namespaces/a/configmaps/b");
    req
}

fn leader(term: u64, valid_for: Duration) -> LeaderState {
    LeaderState::Leader {
        term: Term(term),
        valid_until: Instant::now() + valid_for,
    }
}

fn follower() -> LeaderState {
    LeaderState::Follower {
        holder: Some("pod-b".into()),
        term: Some(Term(2)),
    }
}

fn gate_error(e: &BoxError) -> &GateError {
    e.downcast_ref::<GateError>()
        .unwrap_or_else(|| panic!("not a gate error: {e}"))
}

/// Whether the gate refused the request, unsent, because this replica follows.
fn refused_as_follower(e: &BoxError) -> bool {
    matches!(
        gate_error(e),
        GateError::NotLeader {
            reason: NotLeader::Follower { .. },
            ..
        }
    )
}

fn writes() -> Vec<Method> {
    let unknown = Method::from_bytes(b"PURGE").expect("a valid method token");
    vec![
        Method::POST,
        Method::PUT,
        Method::PATCH,
        Method::DELETE,
        Method::TRACE,
        unknown,
    ]
}

#[tokio::test(start_paused = true)]
async fn a_follower_s_writes_are_refused_and_never_reach_the_client() {
    let (_script, leadership) = Leadership::scripted(follower());
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership).layer(probe.client(Duration::ZERO));
    for method in writes() {
        let e = gate
            .clone()
            .oneshot(request(method.clone()))
            .await
            .unwrap_err();
        match gate_error(&e) {
            GateError::NotLeader {
                method: m,
                path,
                reason: NotLeader::Follower { holder },
            } => {
                assert_eq!(*m, method);
                assert_eq!(path, "/api/v1/namespaces/a/configmaps/b");
                assert_eq!(holder.as_deref(), Some("pod-b"));
            }
            other => panic!("{method}: {other:?}"),
        }
    }
    assert_eq!(probe.calls(), 0, "no refused write was sent");
}

#[tokio::test(start_paused = true)]
async fn reads_and_watches_pass_while_following_and_take_no_permit() {
    let (_script, leadership) = Leadership::scripted(follower());
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership.clone()).layer(probe.client(Duration::ZERO));
    for method in [Method::GET, Method::HEAD, Method::OPTIONS] {
        let r = gate.clone().oneshot(request(method)).await;
        assert_eq!(r.ok(), Some(None), "passed, without a permit");
    }
    assert_eq!(probe.calls(), 3);
}

#[tokio::test(start_paused = true)]
async fn a_leader_s_writes_go_out_under_its_term() {
    let (_script, leadership) = Leadership::scripted(leader(3, Duration::from_secs(10)));
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership).layer(probe.client(Duration::from_secs(1)));
    for method in writes() {
        let r = gate.clone().oneshot(request(method)).await;
        assert_eq!(r.ok(), Some(Some(Term(3))));
    }
    assert_eq!(probe.calls(), writes().len());
}

#[tokio::test(start_paused = true)]
async fn a_write_still_running_at_the_permit_s_deadline_is_cancelled_then() {
    let (_script, leadership) = Leadership::scripted(leader(5, Duration::from_secs(10)));
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership).layer(probe.client(Duration::from_secs(60)));
    let started = Instant::now();
    let e = gate.oneshot(request(Method::PATCH)).await.unwrap_err();
    assert!(
        matches!(
            gate_error(&e),
            GateError::Deadline { term: Term(5), method, .. } if method == Method::PATCH
        ),
        "{e}"
    );
    assert_eq!(Instant::now() - started, Duration::from_secs(10));
    assert_eq!(probe.calls(), 1);
    assert!(
        probe.dropped.load(Ordering::SeqCst),
        "the request was dropped by the deadline"
    );
}

#[tokio::test(start_paused = true)]
async fn a_renewal_does_not_extend_a_write_past_its_permit_s_deadline() {
    let (script, leadership) = Leadership::scripted(leader(5, Duration::from_secs(10)));
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership).layer(probe.client(Duration::from_secs(60)));
    let write = tokio::spawn(gate.oneshot(request(Method::PUT)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    script.publish(leader(5, Duration::from_secs(10)));
    let e = write.await.expect("task").unwrap_err();
    assert!(matches!(gate_error(&e), GateError::Deadline { .. }), "{e}");
    assert!(probe.dropped.load(Ordering::SeqCst));
}

#[tokio::test(start_paused = true)]
async fn a_new_term_s_writes_pass_after_a_lost_one() {
    let (script, leadership) = Leadership::scripted(leader(3, Duration::from_secs(10)));
    let probe = Probe::default();
    let gate = WriteGateLayer::new(leadership).layer(probe.client(Duration::ZERO));
    let r = gate.clone().oneshot(request(Method::POST)).await;
    assert_eq!(r.ok(), Some(Some(Term(3))));

    // Not renewed: the validity lapses and writes stop at once, before anyone says so.
    tokio::time::advance(Duration::from_secs(10)).await;
    let e = gate
        .clone()
        .oneshot(request(Method::POST))
        .await
        .unwrap_err();
    assert!(matches!(
        gate_error(&e),
        GateError::NotLeader {
            reason: NotLeader::Expired { term: Term(3), .. },
            ..
        }
    ));
    script.publish(follower());
    let e = gate
        .clone()
        .oneshot(request(Method::POST))
        .await
        .unwrap_err();
    assert!(matches!(gate_error(&e), GateError::NotLeader { .. }));
    assert_eq!(probe.calls(), 1);

    script.publish(leader(4, Duration::from_secs(10)));
    let r = gate.oneshot(request(Method::POST)).await;
    assert_eq!(r.ok(), Some(Some(Term(4))));
    assert_eq!(probe.calls(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_inner_gate_refuses_a_write_whose_leadership_ended_on_the_way_down() {
    let (script, leadership) = Leadership::scripted(leader(7, Duration::from_secs(10)));
    let probe = Probe::default();
    let innermost = WriteGateLayer::new(leadership.clone()).layer(probe.client(Duration::ZERO));
    // Between the two gates, a layer that awaits, as a token refresh in kube's auth layer can.
    let slow_auth = service_fn(move |req: Request<()>| {
        let mut next = innermost.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            next.ready().await?.call(req).await
        }
    });
    let gate = WriteGateLayer::new(leadership).layer(slow_auth);
    let write = tokio::spawn(gate.clone().oneshot(request(Method::PATCH)));
    tokio::task::yield_now().await;
    script.publish(follower());
    let e = write.await.expect("task").unwrap_err();
    assert!(refused_as_follower(&e), "{e}");
    assert_eq!(probe.calls(), 0, "refused after the await, unsent");

    // A new leadership: both gates pass, and the inner one checks the outer one's permit.
    script.publish(leader(8, Duration::from_secs(10)));
    let r = gate.oneshot(request(Method::PATCH)).await;
    assert_eq!(r.ok(), Some(Some(Term(8))));
    assert_eq!(probe.calls(), 1);
}

#[tokio::test]
async fn a_graceful_release_waits_for_the_writes_in_flight() {
    let leadership = Leadership::always_leader();
    let reached = Arc::new(Notify::new());
    let answer = Arc::new(Notify::new());
    let (r2, a2) = (reached.clone(), answer.clone());
    let http = service_fn(move |_: Request<()>| {
        let (reached, answer) = (r2.clone(), a2.clone());
        async move {
            reached.notify_one();
            answer.notified().await;
            Ok::<_, Infallible>("written")
        }
    });
    let gate = WriteGateLayer::new(leadership.clone()).layer(http);
    let write = tokio::spawn(gate.oneshot(request(Method::PATCH)));
    reached.notified().await;

    let l2 = leadership.clone();
    let drained = tokio::spawn(async move { l2.close_and_drain().await });
    for _ in 0..10 {
        tokio::task::yield_now().await;
    }
    assert!(
        matches!(leadership.check(), Err(NotLeader::ShuttingDown)),
        "draining"
    );
    assert!(!drained.is_finished(), "the drain waits for the write");

    answer.notify_one();
    let r = tokio::time::timeout(Duration::from_secs(30), write)
        .await
        .expect("the write finished")
        .expect("task");
    assert_eq!(r.ok(), Some("written"));
    tokio::time::timeout(Duration::from_secs(30), drained)
        .await
        .expect("drained once the response came")
        .expect("task");
}

#[tokio::test]
async fn a_read_in_flight_does_not_hold_back_a_graceful_release() {
    let leadership = Leadership::always_leader();
    let http = service_fn(|_: Request<()>| std::future::pending::<Result<(), Infallible>>());
    let gate = WriteGateLayer::new(leadership.clone()).layer(http);
    let watch = tokio::spawn(gate.oneshot(request(Method::GET)));
    tokio::task::yield_now().await;
    tokio::time::timeout(Duration::from_secs(30), leadership.close_and_drain())
        .await
        .expect("drained while a watch runs");
    watch.abort();
}

#[tokio::test(start_paused = true)]
async fn a_gate_for_a_permit_refuses_its_writes_once_a_new_term_leads() {
    let (script, leadership) = Leadership::scripted(leader(3, Duration::from_secs(10)));
    let probe = Probe::default();
    let permit = leadership.check().expect("leading");
    let bound = WriteGateLayer::for_permit(permit).layer(probe.client(Duration::ZERO));
    let r = bound.clone().oneshot(request(Method::PATCH)).await;
    assert_eq!(r.ok(), Some(Some(Term(3))), "sent under the given permit");

    // Lost and won again: the leadership is valid, but not the one the permit (and whatever
    // the write stamped with its term) belongs to.
    script.publish(follower());
    script.publish(leader(4, Duration::from_secs(10)));
    let e = bound
        .clone()
        .oneshot(request(Method::PATCH))
        .await
        .unwrap_err();
    assert!(refused_as_follower(&e), "{e}");
    assert_eq!(probe.calls(), 1, "the stale term's write was not sent");
    // Reads pass; a gate that takes its own permits writes under the new term.
    let read = bound.oneshot(request(Method::GET)).await;
    assert_eq!(read.ok(), Some(None));
    let taking = WriteGateLayer::new(leadership).layer(probe.client(Duration::ZERO));
    let r = taking.oneshot(request(Method::PATCH)).await;
    assert_eq!(r.ok(), Some(Some(Term(4))));
}

#[tokio::test(start_paused = true)]
async fn a_gate_for_a_permit_keeps_to_that_permit_s_deadline_through_renewals() {
    let (script, leadership) = Leadership::scripted(leader(5, Duration::from_secs(10)));
    let probe = Probe::default();
    let permit = leadership.check().expect("leading");
    let bound = WriteGateLayer::for_permit(permit).layer(probe.client(Duration::from_secs(60)));
    let started = Instant::now();
    let write = tokio::spawn(bound.clone().oneshot(request(Method::PUT)));
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Renewed: the leadership's deadline moves out to 15 s, the permit's stays at 10 s.
    script.publish(leader(5, Duration::from_secs(10)));
    let e = write.await.expect("task").unwrap_err();
    assert!(
        matches!(gate_error(&e), GateError::Deadline { term: Term(5), .. }),
        "{e}"
    );
    assert_eq!(Instant::now() - started, Duration::from_secs(10));
    assert!(probe.dropped.load(Ordering::SeqCst), "cancelled");
    // After its deadline the permit sends nothing, although the leadership is still valid.
    let e = bound.oneshot(request(Method::PUT)).await.unwrap_err();
    assert!(
        matches!(
            gate_error(&e),
            GateError::NotLeader {
                reason: NotLeader::Expired { term: Term(5), .. },
                ..
            }
        ),
        "{e}"
    );
    assert_eq!(probe.calls(), 1);
    assert!(leadership.check().is_ok(), "the leadership itself is valid");
}
