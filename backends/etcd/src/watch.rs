//! The change stream on the key, and the replay of its history that explains a vanished key.

use etcd_client::{KeyValue, WatchOptions, WatchResponse, WatchStream};
use futures::StreamExt;
use leader_lock::backend::{LockError, LockEvent, LockEventStream};
use tokio::time::Instant;

use crate::client::Conn;
use crate::error::map_error;
use crate::keys::Keys;
use crate::knowledge::{Observed, Seen};
use crate::spare::Usage;
use crate::successor::Succession;
use crate::value::record;

/// What a watch feeds as its events arrive: what the lock knows of the key, the choice of a
/// successor (from the registrations), and the lock's last use.
#[derive(Clone)]
pub(crate) struct Feeds {
    /// What the lock knows of the key: each event updates it.
    pub(crate) observed: Observed,
    /// The successor chosen ahead: registrations and the key's events update it.
    pub(crate) succession: Succession,
    /// When an elector last used the lock: a watch counts as a use.
    pub(crate) usage: Usage,
}

/// Reads the key's history from `from` up to `until`, to learn how a key we believed present
/// went missing (which versions it had, whether we saw the last one).
pub(crate) async fn replay(
    conn: &Conn,
    keys: &Keys,
    observed: &Observed,
    from: i64,
    until: i64,
) -> Result<(), LockError> {
    let options = WatchOptions::new()
        .with_start_revision(from)
        .with_prev_key();
    let deadline = Instant::now() + conn.timeout();
    let key = keys.key.clone();
    let mut stream = conn
        .call("history watch", |c| async move {
            c.watch_client().watch(key, Some(options)).await
        })
        .await?;
    loop {
        let msg = match tokio::time::timeout_at(deadline, stream.message()).await {
            Ok(m) => m.map_err(|e| conn.error("history watch", e))?,
            Err(_) => return Err(LockError::Timeout(conn.timeout())),
        };
        let Some(resp) = msg else {
            return Err(LockError::unavailable(format!(
                "etcd history watch at {} ended early",
                conn.endpoints()
            )));
        };
        if resp.canceled() {
            // Compacted: we cannot know whether we saw the last version; wait from now.
            observed.lock().absent_unexplained(until, Instant::now());
            return Ok(());
        }
        if resp.created() && resp.events().is_empty() {
            continue;
        }
        apply_events(observed, &keys.key, &resp);
        if resp.header().map_or(0, |x| x.revision()) >= until {
            return Ok(());
        }
    }
}

/// Opens the change stream: the key as read now, then every change after that read.
pub(crate) async fn open(
    conn: &Conn,
    keys: &Keys,
    feeds: Feeds,
) -> Result<LockEventStream, LockError> {
    // Read first, then watch from the next revision: nothing between is missed.
    let current = conn.read(&keys.key).await?;
    let rev = current.header().map(|h| h.revision()).unwrap_or(0);
    let initial = match current.kvs().first() {
        None => LockEvent::Changed(None),
        Some(kv) => {
            feeds
                .observed
                .lock()
                .present(rev, Seen::from(kv), Instant::now());
            event(kv)
        }
    };
    // The key and the candidates' registrations (`<key>#candidates/…`), which sort right
    // after it: a leader learns of a new candidate as it registers (`Choice::registered`).
    let key = keys.key.clone();
    let options = WatchOptions::new()
        .with_range(keys.watch_end())
        .with_start_revision(rev + 1)
        .with_prev_key();
    // The member it is opened on: should the lock leave that member, the watch ends too.
    let mut moved = conn.members().subscribe();
    let member = *moved.borrow_and_update();
    let stream = conn
        .call("watch", |c| async move {
            c.watch_client().watch(key, Some(options)).await
        })
        .await?;
    let state = WatchState {
        stream,
        member,
        moved,
        endpoints: conn.endpoints().to_string(),
        key: keys.key.clone(),
        candidates: keys.candidates.clone(),
        feeds,
    };
    let changes = futures::stream::unfold(Some(state), |state| async move {
        let mut st = state?;
        let next = st.next().await;
        let more = next.as_ref().is_some_and(Result::is_ok);
        next.map(|n| (n, more.then_some(st)))
    });
    Ok(futures::stream::once(async move { Ok(initial) })
        .chain(changes)
        .boxed())
}

/// Keeps the watch's request side alive with the response side.
struct WatchState {
    /// The response side; dropped with the request side.
    stream: WatchStream,
    /// The member the watch is on, and the lock's current member.
    member: usize,
    /// The lock's current member (`Members`' own): a change moves the watch there.
    moved: tokio::sync::watch::Receiver<usize>,
    /// Every endpoint, comma-separated, for messages.
    endpoints: String,
    /// The lock key.
    key: Vec<u8>,
    /// The candidates' prefix, whose registrations feed the choice of a successor.
    candidates: Vec<u8>,
    /// The lock's parts this watch feeds (each behind its own lock).
    feeds: Feeds,
}

impl WatchState {
    /// The next change of the key, or the error that ends the stream (`None`: it ended).
    async fn next(&mut self) -> Option<Result<LockEvent, LockError>> {
        loop {
            let message = tokio::select! {
                m = self.stream.message() => m,
                // The lock left the member this watch is on: end it, so that the elector
                // opens it again on the member the lock uses now.
                _ = self.moved.wait_for(|m| *m != self.member) => {
                    return Some(Err(LockError::unavailable(format!(
                        "etcd watch at {}: the lock moved to another member; reopening",
                        self.endpoints
                    ))));
                }
            };
            let resp = match message {
                Ok(Some(resp)) => resp,
                Ok(None) => return None,
                Err(e) => return Some(Err(map_error(&self.endpoints, "watch", e))),
            };
            if resp.canceled() {
                let why = if resp.compact_revision() > 0 {
                    format!("compacted at revision {}", resp.compact_revision())
                } else {
                    resp.cancel_reason().to_string()
                };
                return Some(Err(LockError::unavailable(format!(
                    "etcd watch at {} canceled: {why}",
                    self.endpoints
                ))));
            }
            // Knowledge first, so an attempt woken by this event finds it there.
            apply_events(&self.feeds.observed, &self.key, &resp);
            note_candidacies(&self.feeds.succession, &self.candidates, &resp);
            // An elector reads this stream: our candidacy is still wanted.
            self.feeds.usage.touch();
            // Several events on our one key: only the latest state matters.
            let last = resp
                .events()
                .iter()
                .filter_map(|e| e.kv())
                .rfind(|kv| kv.key() == self.key.as_slice());
            if let Some(kv) = last {
                return Some(Ok(event(kv)));
            }
        }
    }
}

/// Feeds a watch response's events on `key` into the knowledge, oldest first.
fn apply_events(observed: &Observed, key: &[u8], resp: &WatchResponse) {
    let now = Instant::now();
    let mut k = observed.lock();
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
fn note_candidacies(succession: &Succession, candidates: &[u8], resp: &WatchResponse) {
    let now = Instant::now();
    let mut choice = succession.lock();
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
