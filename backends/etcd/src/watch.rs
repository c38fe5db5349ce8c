//! The change stream on the key, and the replay of its history that explains a vanished key.

use std::sync::Arc;

use etcd_client::{KeyValue, WatchOptions, WatchStream};
use futures::StreamExt;
use leader_lock::backend::{LockError, LockEvent, LockEventStream};
use tokio::time::Instant;

use crate::client::{Choice, Inner};
use crate::error::map_error;
use crate::knowledge::{Knowledge, Seen};
use crate::value::record;

impl Inner {
    /// Reads the key's history from `from` up to `until`, to learn how a key we believed present
    /// went missing (which versions it had, whether we saw the last one).
    pub(crate) async fn replay(&self, from: i64, until: i64) -> Result<(), LockError> {
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_prev_key();
        let deadline = Instant::now() + self.timeout.get();
        let key = self.key.clone();
        let mut stream = self
            .call("history watch", |c| async move {
                c.watch_client().watch(key, Some(options)).await
            })
            .await?;
        loop {
            let msg = match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(m) => m.map_err(|e| self.error("history watch", e))?,
                Err(_) => return Err(LockError::Timeout(self.timeout.get())),
            };
            let Some(resp) = msg else {
                return Err(LockError::unavailable(format!(
                    "etcd history watch at {} ended early",
                    self.endpoints
                )));
            };
            if resp.canceled() {
                // Compacted: we cannot know whether we saw the last version; wait from now.
                self.knowledge().absent_unexplained(until, Instant::now());
                return Ok(());
            }
            if resp.created() && resp.events().is_empty() {
                continue;
            }
            apply_events(&self.knowledge, &self.key, &resp);
            if resp.header().map_or(0, |x| x.revision()) >= until {
                return Ok(());
            }
        }
    }

    pub(crate) async fn watch(&self) -> Result<LockEventStream, LockError> {
        // Read first, then watch from the next revision: nothing between is missed.
        let current = self.read().await?;
        let rev = current.header().map(|h| h.revision()).unwrap_or(0);
        let initial = match current.kvs().first() {
            None => LockEvent::Changed(None),
            Some(kv) => {
                self.knowledge()
                    .present(rev, Seen::from(kv), Instant::now());
                event(kv)
            }
        };
        // The key and the candidates' registrations (`<key>#candidates/…`), which sort right
        // after it: a leader learns of a new candidate as it registers (`Choice::registered`).
        let key = self.key.clone();
        let mut end = self.candidates.clone();
        if let Some(last) = end.last_mut() {
            *last += 1;
        }
        let options = WatchOptions::new()
            .with_range(end)
            .with_start_revision(rev + 1)
            .with_prev_key();
        // The member it is opened on: should the lock leave that member, the watch ends too.
        let mut moved = self.members.subscribe();
        let member = *moved.borrow_and_update();
        let stream = self
            .call("watch", |c| async move {
                c.watch_client().watch(key, Some(options)).await
            })
            .await?;
        let state = Some(WatchState {
            stream,
            member,
            moved,
            endpoints: self.endpoints.clone(),
            knowledge: self.knowledge.clone(),
            used: self.used.clone(),
            key: self.key.clone(),
            candidates: self.candidates.clone(),
            choice: self.choice.clone(),
        });
        let changes = futures::stream::unfold(state, |state| async move {
            let mut st = state?;
            loop {
                let message = tokio::select! {
                    m = st.stream.message() => m,
                    // The lock left the member this watch is on: end it, so that the elector
                    // opens it again on the member the lock uses now.
                    _ = st.moved.wait_for(|m| *m != st.member) => {
                        let e = LockError::unavailable(format!(
                            "etcd watch at {}: the lock moved to another member; reopening",
                            st.endpoints
                        ));
                        return Some((Err(e), None));
                    }
                };
                match message {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            let why = if resp.compact_revision() > 0 {
                                format!("compacted at revision {}", resp.compact_revision())
                            } else {
                                resp.cancel_reason().to_string()
                            };
                            let e = LockError::unavailable(format!(
                                "etcd watch at {} canceled: {why}",
                                st.endpoints
                            ));
                            return Some((Err(e), None));
                        }
                        // Knowledge first, so an attempt woken by this event finds it there.
                        apply_events(&st.knowledge, &st.key, &resp);
                        note_candidacies(&st.choice, &st.candidates, &resp);
                        // An elector reads this stream: our candidacy is still wanted.
                        *st.used.lock().unwrap_or_else(|p| p.into_inner()) = Instant::now();
                        // Several events on our one key: only the latest state matters.
                        let last = resp
                            .events()
                            .iter()
                            .filter_map(|e| e.kv())
                            .rfind(|kv| kv.key() == st.key.as_slice());
                        if let Some(kv) = last {
                            return Some((Ok(event(kv)), Some(st)));
                        }
                    }
                    Ok(None) => return None,
                    Err(e) => {
                        let e = map_error(&st.endpoints, "watch", e);
                        return Some((Err(e), None));
                    }
                }
            }
        });
        Ok(futures::stream::once(async move { Ok(initial) })
            .chain(changes)
            .boxed())
    }
}

/// Feeds a watch response's events on `key` into the knowledge, oldest first.
fn apply_events(
    knowledge: &std::sync::Mutex<Knowledge>,
    key: &[u8],
    resp: &etcd_client::WatchResponse,
) {
    let now = Instant::now();
    let mut k = knowledge.lock().unwrap_or_else(|p| p.into_inner());
    for ev in resp.events() {
        let Some(kv) = ev.kv().filter(|kv| kv.key() == key) else {
            continue;
        };
        // A delete carries a key-value with version 0; reading that avoids the client's
        // event-type accessor, which panics on types it does not know.
        if kv.version() == 0 {
            k.deleted(kv.mod_revision(), ev.prev_kv().map(Seen::from), now);
        } else {
            k.present(kv.mod_revision(), Seen::from(kv), now);
        }
    }
}

/// Feeds the registrations a watch response shows written or deleted into the choice of a
/// successor, oldest first.
fn note_candidacies(
    choice: &std::sync::Mutex<Choice>,
    candidates: &[u8],
    resp: &etcd_client::WatchResponse,
) {
    let now = Instant::now();
    let mut choice = choice.lock().unwrap_or_else(|p| p.into_inner());
    for kv in resp.events().iter().filter_map(|e| e.kv()) {
        if !kv.key().starts_with(candidates) {
            continue;
        }
        // A delete carries a key-value with version 0 (see `apply_events`).
        if kv.version() == 0 {
            choice.withdrawn(kv.key());
        } else {
            choice.registered(kv, now);
        }
    }
}

/// Keeps the watch's request side alive with the response side.
struct WatchState {
    stream: WatchStream,
    /// The member the watch is on, and the lock's current member.
    member: usize,
    moved: tokio::sync::watch::Receiver<usize>,
    endpoints: String,
    knowledge: Arc<std::sync::Mutex<Knowledge>>,
    /// When an elector last used the lock (`Inner::used`).
    used: Arc<std::sync::Mutex<Instant>>,
    key: Vec<u8>,
    /// The candidates' prefix, and the choice their registrations feed (`Inner::choice`).
    candidates: Vec<u8>,
    choice: Arc<std::sync::Mutex<Choice>>,
}

/// A change of the key as a lock event (a delete carries a key-value with version 0).
fn event(kv: &KeyValue) -> LockEvent {
    if kv.version() == 0 {
        return LockEvent::Changed(None);
    }
    match record(kv) {
        Ok(r) => LockEvent::Changed(Some(r)),
        // A foreign value: let the elector look (it will follow until the key goes).
        Err(_) => LockEvent::Resynced,
    }
}
