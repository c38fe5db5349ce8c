use super::*;

#[tokio::test]
async fn expired_leadership_does_not_pass() {
    let (tx, l) = Publisher::channel(LeaderState::Leader {
        term: Term(3),
        valid_until: Instant::now() - Duration::from_millis(1),
    });
    assert!(matches!(
        l.check(),
        Err(NotLeader::Expired { term: Term(3), .. })
    ));
    tx.publish(LeaderState::Leader {
        term: Term(4),
        valid_until: Instant::now() + Duration::from_secs(60),
    });
    let p = l.check().expect("valid");
    assert_eq!(p.term, Term(4));
    assert!(p.remaining().is_some());
}

fn leader(term: u64, valid_for: Duration) -> LeaderState {
    LeaderState::Leader {
        term: Term(term),
        valid_until: Instant::now() + valid_for,
    }
}

#[tokio::test(start_paused = true)]
async fn a_permit_held_across_a_stall_longer_than_the_lease_writes_nothing() {
    let (tx, l) = Publisher::channel(leader(3, Duration::from_secs(10)));
    let permit = l.check().expect("valid now");
    // Frozen: nothing renews, the clock runs on past the lease.
    tokio::time::advance(Duration::from_secs(16)).await;
    assert!(matches!(
        permit.check(),
        Err(NotLeader::Expired { term: Term(3), .. })
    ));
    let ran = Arc::new(AtomicBool::new(false));
    let flag = ran.clone();
    let r = permit
        .run(|_| async move {
            flag.store(true, Ordering::SeqCst);
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(
        r,
        Err(GuardedError::NotLeader(NotLeader::Expired { .. }))
    ));
    assert!(!ran.load(Ordering::SeqCst), "the write never started");
    // Even a renewal of the same term published after the thaw does not revive an old
    // permit past its own deadline.
    let permit = {
        tx.publish(leader(3, Duration::from_secs(10)));
        l.check().expect("renewed")
    };
    tokio::time::advance(Duration::from_secs(11)).await;
    tx.publish(leader(3, Duration::from_secs(10)));
    assert!(permit.check().is_err(), "the permit's own deadline holds");
}

#[tokio::test(start_paused = true)]
async fn validity_ends_exactly_at_the_deadline() {
    let (_tx, l) = Publisher::channel(leader(3, Duration::from_secs(10)));
    let permit = l.check().expect("valid");
    assert_eq!(permit.remaining(), Some(Duration::from_secs(10)));
    tokio::time::advance(Duration::from_secs(10) - Duration::from_nanos(1)).await;
    assert!(
        l.check().is_ok() && permit.check().is_ok(),
        "valid up to the end"
    );
    assert_eq!(permit.remaining(), Some(Duration::from_nanos(1)));
    tokio::time::advance(Duration::from_nanos(1)).await;
    assert!(
        matches!(l.check(), Err(NotLeader::Expired { ago, .. }) if ago.is_zero()),
        "not at the deadline itself"
    );
    assert!(matches!(permit.check(), Err(NotLeader::Expired { .. })));
    assert_eq!(permit.remaining(), None);
}

#[tokio::test]
async fn the_disabled_leadership_does_not_expire() {
    let l = Leadership::always_leader();
    let LeaderState::Leader { term, valid_until } = l.state() else {
        panic!("always leads");
    };
    assert_eq!(term, Term::DISABLED);
    let years = (valid_until - Instant::now()).as_secs() / (365 * 24 * 3600);
    assert!(years >= 99, "valid for {years} years only");
    assert_eq!(l.check().map(|p| p.term), Ok(Term::DISABLED));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_outlives_its_validity_is_abandoned_at_the_deadline() {
    let (_tx, l) = Publisher::channel(leader(5, Duration::from_secs(10)));
    let started = Instant::now();
    let r = l
        .run(|_| async {
            tokio::time::sleep(Duration::from_secs(60)).await;
            Ok::<_, ()>(())
        })
        .await;
    assert!(matches!(r, Err(GuardedError::Deadline { term: Term(5) })));
    assert_eq!(Instant::now() - started, Duration::from_secs(10));
}

#[tokio::test(start_paused = true)]
async fn the_check_before_sending_sees_a_leadership_that_ended_meanwhile() {
    let (tx, l) = Publisher::channel(leader(7, Duration::from_secs(10)));
    let r = l
        .run(|permit| async move {
            assert_eq!(permit.check(), Ok(Term(7)));
            // The read before the request takes a while, and the record vanishes meanwhile.
            tokio::time::sleep(Duration::from_secs(1)).await;
            tx.publish(LeaderState::Follower {
                holder: None,
                term: None,
            });
            permit.check()?;
            Ok::<_, NotLeader>("sent")
        })
        .await;
    assert!(matches!(
        r,
        Err(GuardedError::NotLeader(NotLeader::Follower { .. }))
    ));
}

#[tokio::test(start_paused = true)]
async fn a_refusal_the_write_turned_into_its_own_error_is_still_a_refusal() {
    #[derive(Debug)]
    struct Mine;
    let (tx, l) = Publisher::channel(leader(7, Duration::from_secs(10)));
    let r = l
        .run(|permit| async move {
            tx.publish(LeaderState::Stopped);
            permit.check().map_err(|_| Mine)
        })
        .await;
    assert!(matches!(
        r,
        Err(GuardedError::NotLeader(NotLeader::ShuttingDown))
    ));
    // A write that fails on its own, with leadership intact, is the write's failure.
    let (_tx, l) = Publisher::channel(leader(7, Duration::from_secs(10)));
    let r = l
        .run(|permit| async move {
            permit.check().map_err(|_| Mine)?;
            Err::<(), _>(Mine)
        })
        .await;
    assert!(matches!(r, Err(GuardedError::Write(Mine))));
}

#[test]
fn a_guarded_error_shows_the_write_errors_message() {
    let e: GuardedError<std::io::Error> =
        GuardedError::Write(std::io::Error::other("connection reset"));
    assert_eq!(e.to_string(), "connection reset");
    let boxed: Box<dyn std::error::Error> =
        Box::new(GuardedError::<String>::Deadline { term: Term(4) });
    assert_eq!(
        boxed.to_string(),
        "write abandoned at the validity deadline of term 4"
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_term_of_ours_is_another_leadership() {
    let (tx, l) = Publisher::channel(leader(7, Duration::from_secs(10)));
    let permit = l.check().expect("leader");
    tx.publish(leader(8, Duration::from_secs(10)));
    assert!(
        permit.check().is_err(),
        "a permit of term 7 is void under term 8"
    );
    assert_eq!(l.check().map(|p| p.term), Ok(Term(8)));
}

#[tokio::test(start_paused = true)]
async fn a_write_in_flight_may_finish_during_the_drain_but_none_starts() {
    let l = Leadership::always_leader();
    let permit = l.check().expect("leader");
    let l2 = l.clone();
    let drained = tokio::spawn(async move { l2.close_and_drain().await });
    tokio::task::yield_now().await;
    assert!(permit.check().is_ok(), "in flight: may still send");
    let r = l.run(|_| async { Ok::<_, ()>(()) }).await;
    assert!(matches!(
        r,
        Err(GuardedError::NotLeader(NotLeader::ShuttingDown))
    ));
    assert!(!drained.is_finished(), "the drain waits for the permit");
    drop(permit);
    drained.await.expect("drained");
}

#[tokio::test]
async fn drain_waits_for_permits() {
    let l = Leadership::always_leader();
    let permit = l.check().expect("leader");
    let l2 = l.clone();
    let drained = tokio::spawn(async move { l2.close_and_drain().await });
    tokio::task::yield_now().await;
    assert!(matches!(l.check(), Err(NotLeader::ShuttingDown)));
    assert!(!drained.is_finished());
    drop(permit);
    tokio::time::timeout(Duration::from_secs(30), drained)
        .await
        .expect("drained after the permit was dropped")
        .expect("task");
}

// === changes ===

/// Nobody leads, as far as this replica knows.
const NO_LEADER: LeaderState = LeaderState::Follower {
    holder: None,
    term: None,
};

fn started(term: u64) -> Option<LeadershipChange> {
    Some(LeadershipChange::StartedLeading { term: Term(term) })
}

fn stopped(term: u64) -> Option<LeadershipChange> {
    Some(LeadershipChange::StoppedLeading { term: Term(term) })
}

/// The next change, or `None` when none comes within a (paused) minute.
async fn next_change(changes: &mut LeadershipChanges) -> Option<LeadershipChange> {
    use futures::StreamExt;
    tokio::time::timeout(Duration::from_secs(60), changes.next())
        .await
        .ok()
        .flatten()
}

#[test]
fn the_changes_can_be_a_kube_runtime_trigger() {
    fn trigger<T: futures::Stream + Send + Sync + Unpin + 'static>() {}
    trigger::<LeadershipChanges>();
}

#[tokio::test(start_paused = true)]
async fn renewals_are_no_change_and_each_term_starts_and_stops_once() {
    let (tx, l) = Publisher::channel(LeaderState::Starting);
    let mut changes = l.changes();
    tx.publish(NO_LEADER);
    tx.publish(leader(3, Duration::from_secs(10)));
    assert_eq!(next_change(&mut changes).await, started(3));
    for _ in 0..5 {
        tokio::time::advance(Duration::from_secs(2)).await;
        tx.publish(leader(3, Duration::from_secs(10)));
        assert_eq!(next_change(&mut changes).await, None, "a renewal");
    }
    tx.publish(NO_LEADER);
    assert_eq!(next_change(&mut changes).await, stopped(3));
    tx.publish(LeaderState::Follower {
        holder: Some("pod-c".into()),
        term: Some(Term(4)),
    });
    assert_eq!(
        next_change(&mut changes).await,
        None,
        "another follower state"
    );
    tx.publish(leader(5, Duration::from_secs(10)));
    assert_eq!(next_change(&mut changes).await, started(5));
    tx.publish(LeaderState::Stopped);
    assert_eq!(next_change(&mut changes).await, stopped(5));
    drop((tx, l));
    assert_eq!(
        next_change(&mut changes).await,
        None,
        "ends with the elector"
    );
}

#[tokio::test(start_paused = true)]
async fn a_term_that_replaced_the_last_one_unseen_ends_it_first() {
    let (tx, l) = Publisher::channel(leader(3, Duration::from_secs(10)));
    let mut changes = l.changes();
    assert_eq!(
        next_change(&mut changes).await,
        started(3),
        "leading already"
    );
    // Lost and won again before the stream looked: it sees only the new term.
    tx.publish(NO_LEADER);
    tx.publish(leader(4, Duration::from_secs(10)));
    assert_eq!(next_change(&mut changes).await, stopped(3));
    assert_eq!(next_change(&mut changes).await, started(4));
    assert_eq!(next_change(&mut changes).await, None);
    assert_eq!(started(4).map(|c| c.term()), Some(Term(4)));
}

#[tokio::test(start_paused = true)]
async fn a_leadership_open_when_the_elector_goes_away_is_ended() {
    let (tx, l) = Publisher::channel(leader(7, Duration::from_secs(10)));
    let mut changes = l.changes();
    assert_eq!(next_change(&mut changes).await, started(7));
    drop((tx, l));
    assert_eq!(next_change(&mut changes).await, stopped(7));
    assert_eq!(next_change(&mut changes).await, None);
}
