//! The Redis lock's own rules, one call at a time against a real server.

mod common;

use std::time::Duration;

use futures::StreamExt;
use leader_lock::backend::{Attempt, Candidate, LeaderLock, LockError, LockEvent};
use leader_lock::{Identity, Term};
use leader_lock_redis::{RedisConfig, RedisLock, DEFAULT_KEY_PREFIX};

fn candidate(name: &str) -> Candidate {
    Candidate {
        identity: Identity::new(name),
        lease_duration: common::timing().lease_duration,
    }
}

/// A fresh server refuses to hand out a missing lock for a lease after it started: a lock that
/// vanished with a restart may still be believed valid by its old holder.
async fn wait_for_uptime(lock: &dyn LeaderLock, c: &Candidate) -> Term {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match lock.try_acquire_or_renew(c).await.expect("attempt") {
            Attempt::Leader { term, .. } => return term,
            Attempt::Follower {
                holder: None,
                retry_after: Some(wait),
                ..
            } => {
                // A lease, plus a second because the server's uptime is known to the second.
                assert!(
                    wait <= c.lease_duration + Duration::from_secs(1),
                    "never asked to wait more than a lease and a second ({wait:?})"
                );
                assert!(tokio::time::Instant::now() < deadline, "never got the lock");
                tokio::time::sleep(wait).await;
            }
            other => panic!("unexpected {other:?}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acquire_renew_release_and_layout() {
    let r = common::Redis::start().await;
    let lock = r.connect("layout").await;
    assert_eq!(lock.holder_key(), "gateway-leader:{layout}:holder");
    assert_eq!(lock.term_key(), "gateway-leader:{layout}:term");
    assert_eq!(lock.events_channel(), "gateway-leader:{layout}:events");
    // Without a prefix of the program's, the library's own.
    let defaults = RedisLock::connect(RedisConfig::new(r.server.url()), "layout")
        .await
        .expect("connects");
    assert_eq!(DEFAULT_KEY_PREFIX, "leader-lock");
    assert_eq!(defaults.holder_key(), "leader-lock:{layout}:holder");
    let a = candidate("a");
    let b = candidate("b");
    let t1 = wait_for_uptime(&lock, &a).await;
    // Renewals keep the term; the other candidate follows with the remaining TTL.
    assert_eq!(
        lock.try_acquire_or_renew(&a).await.expect("renew"),
        Attempt::leader(t1)
    );
    match lock.try_acquire_or_renew(&b).await.expect("attempt") {
        Attempt::Follower {
            holder,
            term,
            retry_after: Some(left),
        } => {
            assert_eq!(holder, Some(a.holder()));
            assert_eq!(term, Some(t1));
            assert!(
                left <= a.lease_duration && left > Duration::ZERO,
                "{left:?}"
            );
        }
        other => panic!("b must follow: {other:?}"),
    }
    let rec = lock.get().await.expect("get").expect("held");
    assert_eq!(rec.holder, a.holder());
    assert_eq!(rec.term, t1);
    assert_eq!(rec.lease_duration, a.lease_duration);

    // The stored value is the documented JSON.
    let mut raw = r.raw().await;
    let v: String = redis::cmd("GET")
        .arg(lock.holder_key())
        .query_async(&mut raw)
        .await
        .expect("raw get");
    let json: serde_json::Value = serde_json::from_str(&v).expect("json");
    assert_eq!(json["v"], 1);
    assert_eq!(json["holder"], a.holder());
    assert_eq!(json["term"], t1.0);
    assert_eq!(json["lease_ms"], 2000);

    // Only the holder under its term releases, and followers hear of it.
    let mut events = lock.watch().await.expect("watch");
    assert!(
        !lock.release(&b, t1).await.expect("release"),
        "b holds nothing"
    );
    assert!(
        !lock.release(&a, Term(t1.0 + 1)).await.expect("release"),
        "a wrong term releases nothing"
    );
    assert!(lock.release(&a, t1).await.expect("release"));
    let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("a release message in time")
        .expect("stream open")
        .expect("no error");
    assert_eq!(ev, LockEvent::Changed(None));
    assert_eq!(lock.get().await.expect("get"), None);

    // The next holder gets a greater term, and the watch reports its record.
    let t2 = match lock.try_acquire_or_renew(&b).await.expect("acquire") {
        Attempt::Leader { term, .. } => term,
        other => panic!("b takes the free lock: {other:?}"),
    };
    assert!(t2 > t1);
    let ev = tokio::time::timeout(Duration::from_secs(10), events.next())
        .await
        .expect("an acquire message in time")
        .expect("stream open")
        .expect("no error");
    match ev {
        LockEvent::Changed(Some(rec)) => assert_eq!((rec.holder, rec.term), (b.holder(), t2)),
        other => panic!("expected b's record: {other:?}"),
    }

    // A holder whose key vanished under it steps down instead of silently re-acquiring.
    let _: () = redis::cmd("DEL")
        .arg(lock.holder_key())
        .query_async(&mut raw)
        .await
        .expect("del");
    assert_eq!(
        lock.try_acquire_or_renew(&b).await.expect("renew"),
        Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(Duration::ZERO)
        }
    );
    // Its next attempt is a fresh acquisition with a new term.
    match lock.try_acquire_or_renew(&b).await.expect("acquire") {
        Attempt::Leader { term, .. } => assert!(term > t2),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn term_survives_counter_loss_and_never_repeats() {
    let r = common::Redis::start().await;
    let lock = r.connect("counter").await;
    let a = candidate("a");
    let t1 = wait_for_uptime(&lock, &a).await;
    assert!(lock.release(&a, t1).await.expect("release"));
    // Someone deletes the counter (or the server lost it): the next term still goes up.
    let mut raw = r.raw().await;
    let _: () = redis::cmd("DEL")
        .arg(lock.term_key())
        .query_async(&mut raw)
        .await
        .expect("del");
    let fresh = r.connect("counter").await;
    let t2 = wait_for_uptime(&fresh, &a).await;
    assert!(t2 > t1, "{t1} -> {t2}");
    // A counter set back below a term this client saw does not make its terms repeat.
    assert!(fresh.release(&a, t2).await.expect("release"));
    let _: () = redis::cmd("SET")
        .arg(lock.term_key())
        .arg(5)
        .query_async(&mut raw)
        .await
        .expect("set");
    let t3 = wait_for_uptime(&fresh, &a).await;
    assert!(t3 > t2, "{t2} -> {t3}");
    // A counter that is no integer is reported, not overwritten.
    assert!(fresh.release(&a, t3).await.expect("release"));
    let _: () = redis::cmd("SET")
        .arg(lock.term_key())
        .arg("seven")
        .query_async(&mut raw)
        .await
        .expect("set");
    match lock.try_acquire_or_renew(&a).await {
        Err(LockError::Malformed { message: m, .. }) => assert!(m.contains(lock.term_key()), "{m}"),
        other => panic!("expected a clear error: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_values_are_never_overwritten() {
    let r = common::Redis::start().await;
    let lock = r.connect("foreign").await;
    let a = candidate("a");
    let mut raw = r.raw().await;
    // Without a TTL: never taken, reported clearly.
    let _: () = redis::cmd("SET")
        .arg(lock.holder_key())
        .arg("somebody else's")
        .query_async(&mut raw)
        .await
        .expect("set");
    for _ in 0..3 {
        match lock.try_acquire_or_renew(&a).await {
            Err(LockError::Malformed { message: m, .. }) => {
                assert!(m.contains("no TTL") && m.contains(lock.holder_key()), "{m}")
            }
            other => panic!("expected a clear error: {other:?}"),
        }
    }
    let v: String = redis::cmd("GET")
        .arg(lock.holder_key())
        .query_async(&mut raw)
        .await
        .expect("get");
    assert_eq!(v, "somebody else's");
    assert!(matches!(lock.get().await, Err(LockError::Malformed { .. })));

    // With a TTL: respected, and the follower is told when it runs out.
    let _: () = redis::cmd("SET")
        .arg(lock.holder_key())
        .arg("somebody else's")
        .arg("PX")
        .arg(1500)
        .query_async(&mut raw)
        .await
        .expect("set");
    match lock.try_acquire_or_renew(&a).await.expect("attempt") {
        Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(left),
        } => assert!(left <= Duration::from_millis(1500), "{left:?}"),
        other => panic!("{other:?}"),
    }
    // A key of another type is foreign too.
    let _: () = redis::cmd("DEL")
        .arg(lock.holder_key())
        .query_async(&mut raw)
        .await
        .expect("del");
    let _: () = redis::cmd("HSET")
        .arg(lock.holder_key())
        .arg("f")
        .arg("v")
        .query_async(&mut raw)
        .await
        .expect("hset");
    assert!(matches!(
        lock.try_acquire_or_renew(&a).await,
        Err(LockError::Malformed { .. })
    ));
}

/// A crashed holder's expiry reaches the watch: by the stream's own PTTL timer, and by keyspace
/// notifications when the server sends them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_reports_expiry() {
    common::init_tracing();
    for keyspace in [false, true] {
        let mut opts = testkit::redis::RedisServer::builder();
        if keyspace {
            opts = opts.arg("--notify-keyspace-events").arg("Kx");
        }
        let server = opts.start().await.expect("redis-server starts");
        let r = common::Redis { server };
        let lock = r.connect("expiry").await;
        let a = candidate("a");
        let mut events = lock.watch().await.expect("watch");
        let term = wait_for_uptime(&lock, &a).await;
        let acquired = tokio::time::Instant::now();
        // a "crashes": no renew from now on.
        let mut saw_record = false;
        let gone = tokio::time::timeout(Duration::from_secs(30), async {
            loop {
                match events.next().await {
                    Some(Ok(LockEvent::Changed(Some(rec)))) => {
                        assert_eq!((rec.holder.as_str(), rec.term), (a.holder().as_str(), term));
                        saw_record = true;
                    }
                    Some(Ok(LockEvent::Changed(None))) => return,
                    Some(Ok(LockEvent::Resynced)) => {}
                    Some(Err(e)) => panic!("watch broke: {e}"),
                    None => panic!("watch ended"),
                }
            }
        })
        .await;
        assert!(gone.is_ok(), "no expiry event (keyspace: {keyspace})");
        let after = acquired.elapsed();
        assert!(saw_record, "the acquisition was announced");
        assert!(
            after + Duration::from_millis(50) >= a.lease_duration,
            "expiry reported {after:?} after the acquisition, before the lease ended"
        );
        assert_eq!(lock.get().await.expect("get"), None, "the key is gone");
        eprintln!("expiry reported {after:?} after the acquisition (keyspace events: {keyspace})");
    }
}
