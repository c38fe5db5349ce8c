//! Terms never go back and never repeat: exact beyond 2^53, and above everything handed out
//! before even when the counter key is lost or set back (issue 9, section 2).

mod common;
mod support;

use std::time::Duration;

use leader_lock::backend::{LeaderLock, LockError};
use leader_lock::Term;
use leader_lock_redis::RedisLock;

const PATIENCE: Duration = Duration::from_secs(30);

/// One handover: `name` takes the free lock through a client of its own and releases it again.
async fn hand_over(r: &common::Redis, lock_name: &str, name: &str) -> Term {
    let lock = r.connect(lock_name).await;
    let c = support::candidate(name, &common::timing());
    let term = support::acquire(&lock, &c, PATIENCE).await;
    assert!(lock.release(&c, term).await.expect("release"), "released");
    term
}

async fn set_counter(r: &common::Redis, lock: &RedisLock, value: &str) {
    let _: () = support::raw(&r.server.url(), &["SET", lock.term_key(), value]).await;
}

/// The counter near 2^53, where Lua numbers (doubles) can no longer count by one: each
/// handover still gets the next integer, exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_stay_exact_beyond_2_pow_53() {
    let r = common::Redis::start().await;
    let lock = r.connect("big").await;
    // Wait out the restart guard once, so every handover below is immediate.
    hand_over(&r, "big", "warmup").await;
    set_counter(&r, &lock, "9007199254740993").await;
    let mut terms = Vec::new();
    for i in 0..4 {
        terms.push(hand_over(&r, "big", &format!("c{i}")).await.0);
    }
    eprintln!("terms after setting the counter to 2^53 + 1: {terms:?}");
    assert_eq!(
        terms,
        vec![
            9_007_199_254_740_994,
            9_007_199_254_740_995,
            9_007_199_254_740_996,
            9_007_199_254_740_997
        ],
        "each handover takes exactly the next term"
    );
    // The stored record and the counter agree with the term handed out, digit for digit.
    let c = support::candidate("last", &common::timing());
    let t = support::acquire(&lock, &c, PATIENCE).await;
    assert_eq!(t, Term(9_007_199_254_740_998));
    let rec = lock.get().await.expect("get").expect("held");
    assert_eq!(rec.term, t);
    let counter: String = support::raw(&r.server.url(), &["GET", lock.term_key()]).await;
    assert_eq!(counter, "9007199254740998");
    // Renewals keep the exact term.
    assert_eq!(
        lock.try_acquire_or_renew(&c).await.expect("renew"),
        leader_lock::backend::Attempt::leader(t)
    );
    assert!(lock.release(&c, t).await.expect("release"));

    // At the end of Redis' integer range the counter cannot go on: a clear error, no wrap.
    set_counter(&r, &lock, &i64::MAX.to_string()).await;
    let c = support::candidate("overflow", &common::timing());
    match r.connect("big").await.try_acquire_or_renew(&c).await {
        Err(LockError::Malformed { message: m, .. }) => assert!(m.contains(lock.term_key()), "{m}"),
        other => panic!("expected a clear error at the end of the range: {other:?}"),
    }
}

/// A counter lost or set back (reset to 0, restored from an old snapshot) does not make a
/// client that never saw the old terms hand out one of them again: the term is at least the
/// server's time in microseconds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_survive_a_counter_set_back_for_fresh_clients() {
    let r = common::Redis::start().await;
    let lock = r.connect("setback").await;
    let mut last = hand_over(&r, "setback", "a").await;
    for (case, value) in [
        ("reset to 0", Some("0".to_string())),
        ("deleted", None),
        ("restored lower", Some((last.0 - 1000).to_string())),
        ("negative", Some("-5".to_string())),
    ] {
        match &value {
            Some(v) => set_counter(&r, &lock, v).await,
            None => {
                let _: () = support::raw(&r.server.url(), &["DEL", lock.term_key()]).await;
            }
        }
        // Every handover goes through new clients: no client-side memory of old terms helps.
        let t = hand_over(&r, "setback", case).await;
        assert!(t > last, "counter {case}: term went from {last} to {t}");
        eprintln!("counter {case}: {last} -> {t}");
        last = t;
    }
}
