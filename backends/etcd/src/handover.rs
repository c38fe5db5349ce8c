//! The release and the handover in one write (docs/etcd.md, "Handover: one write"): which
//! candidate a release hands the key to (chosen while leading, so that the release reads
//! nothing first), how that candidate takes it without a request of its own, and how a
//! stopping follower takes its candidacy back.

use std::time::Duration;

use etcd_client::{
    Compare, CompareOp, GetOptions, GetResponse, KeyValue, PutOptions, Txn, TxnOp, TxnOpResponse,
};
use leader_lock::backend::{Candidate, LockError};
use leader_lock::Term;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::client::{Choice, Chosen, Held, Inner, State, Unanswered};
use crate::keepalive::{LeaseState, LeaseStream};
use crate::knowledge::{Seen, Version};
use crate::value::{revision, term, StoredValue};

/// How a look for a key handed to us ended.
pub(crate) enum Handover {
    /// It was ours to take: we lead under this term, held from `held_from` when that is
    /// before the attempt (`Attempt::Leader`).
    Taken {
        term: Term,
        held_from: Option<Instant>,
    },
    /// Not ours (or not now): the read, to go on with as with any other.
    Not(GetResponse),
}

/// A live candidate a release hands the key to.
#[derive(Clone)]
pub(crate) struct Successor {
    /// Its registration's key and mod revision, compared by the release transaction.
    pub(crate) key: Vec<u8>,
    pub(crate) mod_rev: i64,
    /// Its spare lease, which the key moves onto.
    pub(crate) lease: i64,
    /// Its registration's value.
    pub(crate) value: StoredValue,
}

impl Successor {
    /// The candidate a registration names, if it parses and is on a lease.
    pub(crate) fn of(kv: &KeyValue) -> Option<Self> {
        let value = StoredValue::parse(kv.value()).ok()?;
        (kv.lease() != 0).then(|| Successor {
            key: kv.key().to_vec(),
            mod_rev: kv.mod_revision(),
            lease: kv.lease(),
            value,
        })
    }

    /// The value that hands it the key now (`StoredValue::handed_to`).
    fn handed(&self) -> Vec<u8> {
        StoredValue::handed_to(&self.value).encode()
    }
}

impl Choice {
    /// A registration the watch showed written just now: its candidate is alive now (it wrote
    /// it on a lease it had just granted), so it is the choice unless a fresh one is kept.
    pub(crate) fn registered(&mut self, kv: &KeyValue, now: Instant) {
        let Some(successor) = Successor::of(kv) else {
            return;
        };
        let fresh = Duration::from_secs(successor.value.lease_duration_seconds) / 3;
        let keep = self
            .chosen
            .as_ref()
            .is_some_and(|c| c.successor.is_some() && now.duration_since(c.checked) <= fresh);
        if !keep {
            self.chosen = Some(Chosen {
                successor: Some(successor),
                checked: now,
            });
        }
    }

    /// A registration the watch showed deleted: no longer a candidate to hand over to.
    pub(crate) fn withdrawn(&mut self, key: &[u8]) {
        if let Some(c) = self.chosen.as_mut() {
            if c.successor.as_ref().is_some_and(|s| s.key == key) {
                c.successor = None;
            }
        }
    }
}

impl Inner {
    /// Takes the key when a leader's release handed it to us: it names us, on our spare lease.
    ///
    /// No request at all when the watch showed the handover and a request that made sure of
    /// the spare lease (its grant, a keep-alive) was answered as of a revision before the
    /// handover's, within the spare keeper's period and a second: our hold counts from when
    /// that request was sent (`Attempt::Leader::held_from`). Why that is safe: the lease, and
    /// so the key on it, lives at least a lease past that instant; and that instant came
    /// before the handover was written, so before any deletion of the key, from whose sight
    /// every follower waits a lease (a key deleted without a release). From then on only a
    /// holder's guarded write (ours: the old holder's all compare the mod revision the
    /// handover changed), a deletion, or the lease's end change the key. The handover value
    /// carries no `renewTime`, so no follower deletes it as stale (it was timed by no write of
    /// ours). Our first renew, a retry period after the hold began, writes our term and
    /// `renewTime`, as every renew does.
    ///
    /// Otherwise one round trip, no write: the spare's keep-alive joined with a read of the
    /// key; the hold counts from the attempt, sent before both, as any other.
    ///
    /// A key naming us on any other lease (a stale or duplicate record) is not taken.
    pub(crate) async fn take_handover(
        &self,
        st: &mut State,
        me: &str,
        ttl: i64,
    ) -> Result<Handover, LockError> {
        let mut slot = self.spare.lock().await;
        let handed = slot
            .as_ref()
            .filter(|s| s.ttl() == ttl)
            .and_then(|s| self.handed_by_watch(s, me, ttl));
        if let Some((version, from)) = handed {
            if let Some(lease) = slot.take() {
                drop(slot);
                let seen = Seen {
                    create_rev: version.create_rev,
                    mod_rev: version.mod_rev,
                    lease: version.lease,
                    value: &version.value,
                };
                let term = self.lead_handed(st, me, seen, lease, "its watch event")?;
                return Ok(Handover::Taken {
                    term,
                    held_from: Some(from),
                });
            }
        }
        let Some(spare) = slot.as_mut().filter(|s| s.ttl() == ttl) else {
            drop(slot);
            return Ok(Handover::Not(self.read().await?));
        };
        let spare_id = spare.id();
        let (alive, read) = tokio::join!(
            spare.keep_alive(&self.members, self.timeout.get()),
            self.read()
        );
        let resp = read?;
        if let Ok(LeaseState::Gone) = alive {
            // Expired or revoked: the key it carried is gone too, whatever the read said.
            *slot = None;
            return Ok(Handover::Not(resp));
        }
        let Some(kv) = resp
            .kvs()
            .first()
            .filter(|kv| kv.lease() == spare_id && handed_to(kv.value(), me))
            .cloned()
        else {
            return Ok(Handover::Not(resp));
        };
        // Ours, but without a live lease behind it no validity: the next attempt looks again.
        alive.map_err(|e| self.keep_alive_error(spare_id, e))?;
        let Some(lease) = slot.take() else {
            return Ok(Handover::Not(resp));
        };
        drop(slot);
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        self.knowledge()
            .present(rev, Seen::from(&kv), Instant::now());
        let term = self.lead_handed(st, me, Seen::from(&kv), lease, "a read")?;
        Ok(Handover::Taken {
            term,
            held_from: None,
        })
    }

    /// The key as the watch last showed it, when it is handed to `me` on `spare`, and the
    /// instant our hold of it counts from (`take_handover`).
    fn handed_by_watch(
        &self,
        spare: &LeaseStream,
        me: &str,
        ttl: i64,
    ) -> Option<(Version, Instant)> {
        let version = self.knowledge().current()?.clone();
        if version.lease != spare.id() || !handed_to(&version.value, me) {
            return None;
        }
        let from = spare.sure_before(version.mod_rev)?;
        // Older than the keeper's period and a second: the keeper is failing; the round trip
        // makes sure of the lease again.
        let fresh = Duration::from_secs(ttl.unsigned_abs()) / 3 + Duration::from_secs(1);
        (from.elapsed() <= fresh).then_some((version, from))
    }

    /// Leads on the key a release handed to us, seen as `kv`, on `lease` (our spare).
    fn lead_handed(
        &self,
        st: &mut State,
        me: &str,
        kv: Seen<'_>,
        lease: LeaseStream,
        seen_by: &'static str,
    ) -> Result<Term, LockError> {
        let value = StoredValue::parse(kv.value).map_err(LockError::malformed)?;
        let t = term(&value, kv.create_rev, kv.mod_rev);
        info!(key = %self.key_text, term = %t, seen_by, "took the lock key handed over by the last holder's release");
        st.held = Some(Held {
            holder: me.to_string(),
            create_rev: kv.create_rev,
            term: t,
            mod_rev: kv.mod_rev,
            // Every renew carries the term from now on: the handover write is renewed away.
            value: StoredValue {
                term: Some(revision(t)),
                ..value
            },
            written: kv.value.to_vec(),
            unanswered: Unanswered::default(),
            lease,
        });
        Ok(Term(revision(t)))
    }

    /// Whether `me`'s successor is due to be chosen ahead (`choose_ahead`): the last choice is
    /// older than a sixth of the TTL (or is `me`, registered while following) and none is
    /// under way. Claims the choice if so.
    pub(crate) fn choice_due(&self, ttl: i64, me: &str) -> bool {
        let every = Duration::from_secs(ttl.unsigned_abs()) / 6;
        let mut choice = self.choice.lock().unwrap_or_else(|p| p.into_inner());
        let due = !choice.choosing
            && choice.chosen.as_ref().is_none_or(|c| {
                c.checked.elapsed() > every
                    || c.successor.as_ref().is_some_and(|s| s.value.holder == me)
            });
        choice.choosing |= due;
        due
    }

    /// Chooses the successor ahead, after an attempt that kept us leading, when `choice_due`
    /// claimed it: a release then hands over at once, without the reads of `choose`, if the
    /// choice is at most a third of the TTL old (`chosen`). Renewing every retry period, a
    /// leader keeps its choice that fresh whenever the retry period is at most a sixth of the
    /// TTL, or at most a third and every renew chooses (the bench's 1 s of 4 s). Two reads per
    /// choice (with one live candidate), sent after the attempt, never delaying it.
    pub(crate) async fn choose_ahead(&self, me: &str) {
        let checked = Instant::now();
        let made = self.choose(me).await;
        let mut choice = self.choice.lock().unwrap_or_else(|p| p.into_inner());
        choice.choosing = false;
        // A failed look-up keeps the last choice: it ages out, and a release looks again. A
        // choice the watch made meanwhile is newer news than this look-up.
        if let Ok(successor) = made {
            if choice.chosen.as_ref().is_none_or(|c| c.checked <= checked) {
                choice.chosen = Some(Chosen { successor, checked });
            }
        }
    }

    /// The successor chosen ahead, if chosen at most a third of the TTL ago and not `me`; used
    /// once. A choice of nobody is not used: a candidate may have registered since.
    fn chosen(&self, ttl: i64, me: &str) -> Option<Successor> {
        let fresh = Duration::from_secs(ttl.unsigned_abs()) / 3;
        self.choice
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .chosen
            .take()
            .filter(|c| c.checked.elapsed() <= fresh)
            .and_then(|c| c.successor)
            .filter(|s| s.value.holder != me)
    }

    /// The oldest live candidate other than `me`, if any: one range read on the candidates'
    /// prefix and a time-to-live look-up per candidate until one is alive; no write.
    ///
    /// Alive means its spare lease was kept alive within the spare keeper's period (a third of
    /// its TTL) and a second of slack: a candidate whose process died still has a registration
    /// until its lease runs out, and a key handed to it would wait out that lease and then a
    /// lease more.
    pub(crate) async fn choose(&self, me: &str) -> Result<Option<Successor>, LockError> {
        let prefix = self.candidates.clone();
        let resp = self
            .call("candidates get", |c| async move {
                c.kv_client()
                    .get(prefix, Some(GetOptions::new().with_prefix()))
                    .await
            })
            .await?;
        let mut candidates: Vec<&KeyValue> = resp.kvs().iter().collect();
        candidates.sort_by_key(|kv| kv.create_revision());
        for kv in candidates {
            let Some(candidate) = Successor::of(kv) else {
                continue;
            };
            let (lease, value) = (candidate.lease, &candidate.value);
            if value.holder == me {
                continue;
            }
            let ttl = self
                .call("lease time-to-live", |c| async move {
                    c.lease_client().time_to_live(lease, None).await
                })
                .await?;
            let granted = i64::try_from(value.lease_duration_seconds).unwrap_or(i64::MAX);
            if ttl.ttl() > 0
                && ttl.granted_ttl() == granted
                && granted - ttl.ttl() <= granted / 3 + 1
            {
                return Ok(Some(candidate));
            }
            debug!(key = %self.key_text, candidate = %value.holder, lease, ttl = ttl.ttl(),
                granted = ttl.granted_ttl(), "passing over a candidate whose spare lease is not kept alive");
        }
        Ok(None)
    }
}

impl Inner {
    /// Releases what we hold: hands the key to a live candidate in the release transaction, or
    /// deletes it and writes the release marker; one write either way.
    pub(crate) async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let Ok(rev) = i64::try_from(term.0) else {
            return Ok(false);
        };
        let mut st = self.state.lock().await;
        let ours = st
            .held
            .as_ref()
            .is_some_and(|h| h.holder == c.holder() && h.term == rev);
        if !ours {
            return Ok(false);
        }
        let Some(h) = st.held.take() else {
            return Ok(false);
        };
        // Our candidacy goes in the same write, whatever else it does: it is on the lease we
        // let go after, whose revoke this process may not live to send, and a candidacy that
        // outlives its process would be handed the lock by the next release.
        let own = self.candidacy(&h.holder);
        let release = self.marked_release(
            vec![
                Compare::create_revision(self.key.clone(), CompareOp::Equal, h.create_rev),
                Compare::lease(self.key.clone(), CompareOp::Equal, h.lease.id()),
            ],
            rev,
            &own,
        );
        // Chosen ahead, or now (any failure here only means a plain release).
        let ahead = self.chosen(h.lease.ttl(), &h.holder);
        let chosen_ahead = ahead.is_some();
        let successor = match ahead {
            Some(s) => Some(s),
            None => self.choose(&h.holder).await.ok().flatten(),
        };
        let handed = successor
            .as_ref()
            .map(Successor::handed)
            .unwrap_or_default();
        let txn = match &successor {
            // The key moves onto the successor's lease under its name, if it is still the
            // version we wrote last and the candidacy is still the one we read (a candidate
            // whose lease ended has no candidacy left); else the plain release.
            Some(s) => Txn::new()
                .when([
                    Compare::create_revision(self.key.clone(), CompareOp::Equal, h.create_rev),
                    Compare::lease(self.key.clone(), CompareOp::Equal, h.lease.id()),
                    Compare::mod_revision(self.key.clone(), CompareOp::Equal, h.mod_rev),
                    Compare::mod_revision(s.key.clone(), CompareOp::Equal, s.mod_rev),
                ])
                .and_then([
                    TxnOp::put(
                        self.key.clone(),
                        handed.clone(),
                        Some(PutOptions::new().with_lease(s.lease)),
                    ),
                    TxnOp::delete(own, None),
                ])
                .or_else([TxnOp::txn(release)]),
            None => release,
        };
        let answer = self
            .call("release transaction", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await;
        let outcome = answer.map(|r| {
            let at = r.header().map(|x| x.revision()).unwrap_or(0);
            let released = match &successor {
                Some(s) if r.succeeded() => {
                    info!(key = %self.key_text, term = %rev, successor = %s.value.holder, successor_term = %at,
                        chosen_ahead, "handed the lock over to a live candidate");
                    self.knowledge().present(
                        at,
                        Seen {
                            create_rev: h.create_rev,
                            mod_rev: at,
                            lease: s.lease,
                            value: &handed,
                        },
                        Instant::now(),
                    );
                    return true;
                }
                Some(_) => r.op_responses().into_iter().any(|o| match o {
                    TxnOpResponse::Txn(t) => t.succeeded(),
                    _ => false,
                }),
                None => r.succeeded(),
            };
            if released {
                self.note_released(at, rev);
            }
            released
        });
        // Released, the lease holds nothing (the key and our candidacy went in the write): it
        // is left to expire, not revoked. A revoke is a raft write, and even sent in the
        // background it lands while the successor's keep-alive and read wait for etcd to apply
        // every committed write (or while a follower's acquire waits for its own fsync): the
        // bench saw the successor's take slowed from 0.5 ms to 1-6 ms by it. A release that
        // failed revokes the lease, which removes what is left of ours.
        if matches!(outcome, Ok(true)) {
            drop(h.lease);
        } else {
            self.abandon(h.lease);
        }
        outcome
    }

    /// Takes our candidacy back: a follower stopping (`LeaderLock::withdraw`).
    ///
    /// One transaction deletes it unless the key is already on our spare lease (handed to us by
    /// a release that read our candidacy before this); then the key is released as its holder
    /// would release it, so the followers take it at once instead of waiting out a vanished
    /// record. The spare lease is let go either way.
    pub(crate) async fn withdraw(&self, me: &str) -> Result<(), LockError> {
        // No attempt under way meanwhile: it could take the spare or the key.
        let _st = self.state.lock().await;
        let Some(spare) = self.spare.lock().await.take() else {
            return Ok(());
        };
        *self.registered.lock().unwrap_or_else(|p| p.into_inner()) = 0;
        let id = spare.id();
        let own = self.candidacy(me);
        let txn = Txn::new()
            .when([Compare::lease(self.key.clone(), CompareOp::NotEqual, id)])
            .and_then([TxnOp::delete(own.clone(), None)])
            .or_else([TxnOp::get(self.key.clone(), None)]);
        let withdrawn = self
            .call("candidacy withdrawal", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await;
        let handed = match &withdrawn {
            Ok(r) if !r.succeeded() => r.op_responses().into_iter().find_map(|o| match o {
                TxnOpResponse::Get(g) => g.kvs().first().cloned(),
                _ => None,
            }),
            _ => None,
        };
        let outcome = match handed {
            Some(kv) => self.release_handed(&kv, own).await,
            None => withdrawn.map(|_| ()),
        };
        self.abandon(spare);
        outcome
    }

    /// Releases a key handed to us that we never took, as a holder releases: deleted with the
    /// release marker naming its term, our candidacy with it.
    async fn release_handed(&self, kv: &KeyValue, own: Vec<u8>) -> Result<(), LockError> {
        let t = StoredValue::parse(kv.value())
            .map(|v| term(&v, kv.create_revision(), kv.mod_revision()))
            .map_err(LockError::malformed)?;
        let txn = self.marked_release(
            vec![
                Compare::create_revision(self.key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(self.key.clone(), CompareOp::Equal, kv.mod_revision()),
                Compare::lease(self.key.clone(), CompareOp::Equal, kv.lease()),
            ],
            t,
            &own,
        );
        let r = self
            .call("release of a key handed to us", |c| async move {
                c.kv_client().txn(txn).await
            })
            .await?;
        if r.succeeded() {
            info!(key = %self.key_text, term = %t, "released the lock key a release handed to us while we were stopping");
            self.note_released(r.header().map(|x| x.revision()).unwrap_or(0), t);
        }
        Ok(())
    }

    /// The release that deletes the key and writes `term` to the release marker, if `when`
    /// holds; our candidacy `own` goes either way.
    fn marked_release(&self, when: Vec<Compare>, term: i64, own: &[u8]) -> Txn {
        Txn::new()
            .when(when)
            .and_then([
                TxnOp::delete(self.key.clone(), None),
                TxnOp::put(self.marker.clone(), term.to_string(), None),
                TxnOp::delete(own.to_vec(), None),
            ])
            .or_else([TxnOp::delete(own.to_vec(), None)])
    }

    /// What this contender knows after its release of `term` went through at revision `at`.
    fn note_released(&self, at: i64, term: i64) {
        let mut k = self.knowledge();
        k.deleted(at, None, Instant::now());
        k.released(term);
    }
}

/// Whether `value` is a key's a release handed to `me`: the handover write, naming us.
pub(crate) fn handed_to(value: &[u8], me: &str) -> bool {
    StoredValue::parse(value).is_ok_and(|v| v.holder == me && v.handover && v.renew_time.is_none())
}
