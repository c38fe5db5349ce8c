//! Leading, following and stepping down: validity from the send instant, terms, what is logged.

use std::sync::Arc;
use std::time::Duration;

use leader_lock::conformance::{wait_leader, wait_state, Fault, Faulty};
use leader_lock::leadership::NotLeader;
use leader_lock::{LeaderState, MemoryStore, Term};
use tokio::time::Instant;

use crate::support::*;

#[tokio::test(start_paused = true)]
async fn a_late_reply_counts_validity_from_the_send_instant() {
    let _serial = serial();
    let t = timing();
    let late = Duration::from_millis(150);
    let lock = Scripted::new(&[(late, Answer::Lead(3))]);
    let started = Instant::now();
    let a = spawn(lock.clone(), "a", true);
    let s = wait_state(&a.leadership(), PATIENCE, "a to lead", |s| {
        matches!(s, LeaderState::Leader { .. })
    })
    .await;
    let sent = lock.sent.lock().expect("sent")[0];
    assert_eq!(sent, started, "the first attempt goes out at once");
    assert_eq!(Instant::now(), started + late, "the reply came late");
    assert_eq!(
        valid_until(&s),
        sent + t.renew_deadline,
        "valid until the send instant + renew deadline, not the reply's"
    );
    // Renewals go out a retry period after the previous *send* (the first one may come earlier:
    // the watch's first resync asks for a fresh look), and each counts from its own send.
    let sends = || lock.sent.lock().expect("sent").clone();
    wait_until(|| sends().len() >= 3).await;
    let s = sends();
    assert_eq!(s[2], s[1] + t.retry_period);
    wait_state(&a.leadership(), PATIENCE, "the third renew", |st| {
        matches!(
            st,
            LeaderState::Leader { valid_until, .. } if *valid_until == s[2] + t.renew_deadline
        )
    })
    .await;
    assert_eq!(Instant::now(), s[2] + late);
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_renew_failing_until_the_deadline_steps_down_exactly_then() {
    let _serial = serial();
    let store = MemoryStore::new();
    let faulty = Faulty::new(Arc::new(store.lock("f")));
    let a = spawn(faulty.clone(), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    faulty.set(Some(Fault::Fail));
    let deadline = valid_until(&l.state());
    // Renewals keep failing; the leadership holds up to its deadline and not a moment longer.
    tokio::time::sleep_until(deadline - Duration::from_millis(1)).await;
    assert!(l.check().is_ok(), "still valid just before the deadline");
    assert!(matches!(l.state(), LeaderState::Leader { .. }));
    wait_state(&l, PATIENCE, "a to step down", |s| {
        matches!(s, LeaderState::Follower { .. })
    })
    .await;
    assert_eq!(Instant::now(), deadline, "stepped down at the deadline");
    assert!(matches!(l.check(), Err(NotLeader::Follower { .. })));
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_hung_renew_steps_down_at_the_deadline_too() {
    let _serial = serial();
    let store = MemoryStore::new();
    let faulty = Faulty::new(Arc::new(store.lock("h")));
    let a = spawn(faulty.clone(), "a", true);
    let l = a.leadership();
    wait_leader(&l, PATIENCE, "a").await;
    faulty.set(Some(Fault::Hang));
    let deadline = valid_until(&l.state());
    wait_state(&l, PATIENCE, "a to step down", |s| {
        matches!(s, LeaderState::Follower { .. })
    })
    .await;
    assert_eq!(Instant::now(), deadline);
    a.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_follower_never_passes_check() {
    let _serial = serial();
    let store = MemoryStore::new();
    let a = spawn(Arc::new(store.lock("f")), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    let b = spawn(Arc::new(store.lock("f")), "b", true);
    let s = wait_state(&b.leadership(), PATIENCE, "b follows", |s| {
        matches!(
            s,
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    let LeaderState::Follower {
        holder: Some(h),
        term,
    } = s
    else {
        unreachable!()
    };
    assert!(h.starts_with("a_"), "the follower knows the holder: {h}");
    assert!(term.is_some());
    assert!(matches!(
        b.leadership().check(),
        Err(NotLeader::Follower { holder: Some(_) })
    ));
    a.abort().await;
    b.abort().await;
}

#[tokio::test(start_paused = true)]
async fn a_term_lower_than_seen_is_logged_as_an_error_and_log_fields_are_typed() {
    let _serial = serial();
    let (logs, _guard) = Logs::capture();
    let step = Duration::from_millis(10);
    let lock = Scripted::new(&[
        (step, Answer::Lead(3)),
        (step, Answer::Fail),
        (step, Answer::Follow(5)),
        (step, Answer::Lead(2)),
    ]);
    let a = spawn(lock.clone(), "a", true);
    wait_state(&a.leadership(), PATIENCE, "a to lead under term 2", |s| {
        s.term() == Some(Term(2))
    })
    .await;
    a.abort().await;
    let lines = logs.lines();
    let regression = lines
        .iter()
        .find(|l| {
            l["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("term went backwards"))
        })
        .unwrap_or_else(|| panic!("no regression line in {lines:#?}"));
    assert_eq!(regression["level"], "ERROR");
    assert_eq!(regression["fields"]["term"], "2");
    assert_eq!(regression["fields"]["previous_term"], "5");
    let lost = lines
        .iter()
        .find(|l| l["fields"]["message"] == "lost leadership")
        .expect("a lost-leadership line");
    assert_eq!(
        lost["fields"]["holder"], "b_1",
        "a plain holder, not Some(..)"
    );
    for l in &lines {
        for (k, v) in l["fields"].as_object().expect("fields") {
            if k.ends_with("term") {
                assert!(v.is_string(), "{k} must be a string like every term: {l}");
            }
            assert!(
                !v.as_str().is_some_and(|s| s.contains("Some(")),
                "{k} shows an Option's Debug form: {l}"
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_scripted_leadership_follows_what_is_published() {
    let _serial = serial();
    let (script, leadership) = leader_lock::Leadership::scripted(LeaderState::Starting);
    assert!(
        leadership.check().is_err(),
        "not leading before a publication"
    );
    let valid_until = Instant::now() + Duration::from_secs(5);
    script.publish(LeaderState::Leader {
        term: Term(7),
        valid_until,
    });
    let permit = leadership.check().expect("leading once published");
    assert_eq!(permit.term, Term(7));
    script.publish(LeaderState::Stopped);
    assert!(leadership.check().is_err(), "stopped once published");
}

#[tokio::test(start_paused = true)]
async fn a_followers_sighting_of_a_live_holder_is_never_older_than_a_lease() {
    let _serial = serial();
    let store = MemoryStore::new();
    let a = spawn(Arc::new(store.lock("s")), "a", true);
    wait_leader(&a.leadership(), PATIENCE, "a").await;
    assert!(
        a.leadership().last_sighting().is_some(),
        "a leader sees its own record"
    );
    let b = spawn(Arc::new(store.lock("s")), "b", true);
    wait_state(&b.leadership(), PATIENCE, "b follows", |s| {
        matches!(
            s,
            LeaderState::Follower {
                holder: Some(_),
                ..
            }
        )
    })
    .await;
    let first = b.leadership().last_sighting().expect("b saw the record");
    // Renewals that change nothing a follower sees (this lock's, etcd's, Redis's) are confirmed
    // by the follower's look when the lease would otherwise have run out.
    let lease = timing().lease_duration;
    for _ in 0..4 {
        tokio::time::sleep(lease / 2).await;
        assert!(a.leadership().is_leader(), "a renews all along");
        let seen = b.leadership().last_sighting().expect("still sighted");
        let age = Instant::now() - seen;
        assert!(age <= lease + timing().retry_period, "sighted {age:?} ago");
    }
    assert!(b.leadership().last_sighting() > Some(first));
    a.abort().await;
    b.abort().await;
}
