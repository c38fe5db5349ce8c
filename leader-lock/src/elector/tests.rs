use super::*;

fn timing() -> Timing {
    Timing::new(
        Duration::from_secs(15),
        Duration::from_secs(10),
        Duration::from_secs(2),
    )
    .expect("valid")
}

fn context(held: Option<Held>, last_term: Option<Term>) -> Context {
    Context {
        timing: timing(),
        held,
        last_term,
        watch_healthy: true,
        starting: false,
        jittered_retry: Duration::from_millis(2100),
    }
}

fn leader(term: u64) -> Result<Attempt, LockError> {
    Ok(Attempt::leader(Term(term)))
}

fn follower(holder: &str, term: u64, retry_after: Option<Duration>) -> Result<Attempt, LockError> {
    Ok(Attempt::Follower {
        holder: Some(holder.into()),
        term: Some(Term(term)),
        retry_after,
    })
}

const S: fn(u64) -> Duration = Duration::from_secs;
const MS: fn(u64) -> Duration = Duration::from_millis;

#[test]
fn validity_counts_from_the_send_instant_not_the_reply() {
    let sent = Instant::now();
    let now = sent + S(3);
    let d = decide(&context(None, None), sent, now, &leader(4));
    let held = d.held.expect("leads");
    assert_eq!(held.valid_until, sent + S(10));
    assert_eq!(
        d.publish,
        Some(LeaderState::Leader {
            term: Term(4),
            valid_until: sent + S(10)
        })
    );
    assert_eq!(
        d.next,
        sent + S(2),
        "renews a retry period after the last send"
    );
    assert_eq!(d.note, Note::Became(Term(4)));
}

#[test]
fn a_hold_made_sure_of_before_the_attempt_counts_from_then_never_later() {
    let sent = Instant::now() + S(5);
    let now = sent + MS(1);
    let held_from = |at| {
        Ok(Attempt::Leader {
            term: Term(4),
            held_from: Some(at),
        })
    };
    // A keep-alive 4 s before the attempt: the leadership ends 4 s sooner.
    let d = decide(&context(None, None), sent, now, &held_from(sent - S(4)));
    assert_eq!(d.held.map(|h| h.valid_until), Some(sent + S(6)));
    assert_eq!(
        d.next,
        sent - S(2),
        "renews a retry period after the hold began: at once"
    );
    // An instant after the sending never lengthens it.
    let d = decide(&context(None, None), sent, now, &held_from(now));
    assert_eq!(d.held.map(|h| h.valid_until), Some(sent + S(10)));
    // Counted from then, a hold already past its deadline is no leadership.
    let d = decide(&context(None, None), sent, now, &held_from(sent - S(10)));
    assert_eq!(d.held, None);
    assert_eq!(d.note, Note::TooLate(Term(4)));
}

#[test]
fn a_reply_after_the_validity_it_grants_does_not_lead() {
    let sent = Instant::now();
    for late in [S(10), S(11)] {
        let d = decide(&context(None, None), sent, sent + late, &leader(4));
        assert_eq!(d.held, None, "{late:?}");
        assert_eq!(d.note, Note::TooLate(Term(4)));
        assert_eq!(d.next, sent + late, "tries again at once");
    }
    let d = decide(&context(None, None), sent, sent + S(10) - MS(1), &leader(4));
    assert!(
        d.held.is_some(),
        "one millisecond before the end it still leads"
    );
    // A leader whose renew came too late steps down.
    let held = Held {
        term: Term(4),
        valid_until: sent + S(5),
    };
    let d = decide(&context(Some(held), None), sent, sent + S(10), &leader(4));
    assert_eq!(d.held, None);
    assert_eq!(d.publish, Some(not_leading()));
}

#[test]
fn a_renew_keeps_the_term_and_moves_the_deadline() {
    let t0 = Instant::now();
    let held = Held {
        term: Term(4),
        valid_until: t0 + S(10),
    };
    let sent = t0 + S(2);
    let d = decide(
        &context(Some(held), Some(Term(4))),
        sent,
        sent + MS(5),
        &leader(4),
    );
    assert_eq!(d.note, Note::Renewed(Term(4)));
    assert_eq!(d.held.map(|h| h.valid_until), Some(sent + S(10)));
    assert_eq!(d.regressed_from, None);
}

#[test]
fn a_failed_renew_keeps_leading_until_the_deadline_then_steps_down() {
    let t0 = Instant::now();
    let held = Held {
        term: Term(4),
        valid_until: t0 + S(10),
    };
    let failure = Err(LockError::unavailable("down"));
    let before = t0 + S(10) - MS(1);
    let d = decide(&context(Some(held), None), before, before, &failure);
    assert_eq!(d.held, Some(held), "still valid: still leading");
    assert_eq!(d.publish, None);
    assert_eq!(d.next, before + S(2), "tries again after a retry period");
    let at = t0 + S(10);
    let d = decide(&context(Some(held), None), at, at, &failure);
    assert_eq!(d.held, None, "at the deadline it steps down");
    assert_eq!(d.publish, Some(not_leading()));
    assert_eq!(
        d.note,
        Note::Failed {
            stepped_down: Some(Term(4))
        }
    );
    assert_eq!(d.next, at + S(2));
}

#[test]
fn a_failure_never_leads_and_a_candidate_backs_off_with_jitter() {
    let t0 = Instant::now();
    let mut c = context(None, None);
    c.starting = true;
    for e in [
        LockError::unavailable("x"),
        LockError::Timeout(S(1)),
        LockError::refused("x"),
        LockError::malformed("x"),
    ] {
        let d = decide(&c, t0, t0, &Err(e));
        assert_eq!(d.held, None);
        assert_eq!(d.publish, Some(not_leading()), "leaves Starting");
        assert_eq!(d.next, t0 + MS(2100));
    }
    c.starting = false;
    let d = decide(&c, t0, t0, &Err(LockError::unavailable("x")));
    assert_eq!(d.publish, None);
}

#[test]
fn term_zero_and_the_disabled_marker_are_no_leadership() {
    let t0 = Instant::now();
    for term in [Term(0), Term::DISABLED] {
        let d = decide(&context(None, None), t0, t0, &Ok(Attempt::leader(term)));
        assert_eq!(d.held, None, "{term:?}");
        assert_eq!(d.note, Note::NotElected(term));
        assert!(!matches!(d.publish, Some(LeaderState::Leader { .. })));
    }
}

#[test]
fn a_lower_term_than_seen_is_flagged_for_leaders_and_followers() {
    let t0 = Instant::now();
    let d = decide(&context(None, Some(Term(7))), t0, t0, &leader(3));
    assert_eq!(d.regressed_from, Some(Term(7)));
    assert_eq!(d.last_term, Some(Term(3)));
    let d = decide(&context(None, Some(Term(7))), t0, t0, &leader(7));
    assert_eq!(d.regressed_from, None, "the same term is no regression");
    let d = decide(&context(None, Some(Term(7))), t0, t0, &leader(8));
    assert_eq!(d.regressed_from, None);
    let d = decide(
        &context(None, Some(Term(7))),
        t0,
        t0,
        &follower("b", 6, None),
    );
    assert_eq!(d.regressed_from, Some(Term(7)));
    assert_eq!(d.last_term, Some(Term(6)));
    let d = decide(
        &context(None, Some(Term(7))),
        t0,
        t0,
        &follower("b", 9, None),
    );
    assert_eq!(d.regressed_from, None);
    assert_eq!(d.last_term, Some(Term(9)));
    let unknown = Ok(Attempt::Follower {
        holder: None,
        term: None,
        retry_after: None,
    });
    let d = decide(&context(None, Some(Term(7))), t0, t0, &unknown);
    assert_eq!(
        d.last_term,
        Some(Term(7)),
        "an unknown term forgets nothing"
    );
    // Too late, but the term was still seen.
    let d = decide(&context(None, Some(Term(7))), t0, t0 + S(10), &leader(3));
    assert_eq!(d.regressed_from, Some(Term(7)));
}

#[test]
fn another_term_while_leading_is_another_leadership() {
    let t0 = Instant::now();
    let held = Held {
        term: Term(4),
        valid_until: t0 + S(10),
    };
    let d = decide(&context(Some(held), Some(Term(4))), t0, t0, &leader(5));
    assert_eq!(
        d.note,
        Note::NewTerm {
            old: Term(4),
            term: Term(5)
        }
    );
    assert_eq!(d.held.map(|h| h.term), Some(Term(5)));
}

#[test]
fn a_follower_wakes_at_the_lock_hint_but_never_later_than_its_fallback() {
    let t0 = Instant::now();
    let c = context(None, None);
    let d = decide(&c, t0, t0, &follower("b", 3, Some(S(4))));
    assert_eq!(d.next, t0 + S(4));
    assert_eq!(d.note, Note::Following);
    let d = decide(&c, t0, t0, &follower("b", 3, Some(S(40))));
    assert_eq!(d.next, t0 + S(15), "a healthy watch: at most a lease");
    let d = decide(&c, t0, t0, &follower("b", 3, None));
    assert_eq!(d.next, t0 + S(15));
    let mut polling = c;
    polling.watch_healthy = false;
    let d = decide(&polling, t0, t0, &follower("b", 3, Some(S(40))));
    assert_eq!(d.next, t0 + MS(2100), "no watch: the jittered retry");
    let d = decide(&polling, t0, t0, &follower("b", 3, Some(MS(5))));
    assert_eq!(d.next, t0 + MS(5));
}

#[test]
fn a_leader_told_it_follows_loses_at_once() {
    let t0 = Instant::now();
    let held = Held {
        term: Term(4),
        valid_until: t0 + S(10),
    };
    let d = decide(&context(Some(held), None), t0, t0, &follower("b", 5, None));
    assert_eq!(d.held, None);
    assert_eq!(
        d.note,
        Note::Lost {
            term: Term(4),
            holder: Some("b".into())
        }
    );
    assert_eq!(
        d.publish,
        Some(LeaderState::Follower {
            holder: Some("b".into()),
            term: Some(Term(5))
        })
    );
}

#[tokio::test]
async fn join_errors_show_the_panic_message() {
    let e = tokio::spawn(async { panic!("boom {}", 7) })
        .await
        .expect_err("panicked");
    assert_eq!(describe_join_error(e), "panicked: boom 7");
    let e = tokio::spawn(async { panic!("boom") })
        .await
        .expect_err("panicked");
    assert_eq!(describe_join_error(e), "panicked: boom");
    let e = tokio::spawn(async { std::panic::panic_any(3_u8) })
        .await
        .expect_err("panicked");
    assert_eq!(describe_join_error(e), "panicked");
}
