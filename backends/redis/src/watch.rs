//! The watch stream: one pub/sub connection per stream, feeding the client's [`Knowledge`].
//!
//! Every acquire and renew publishes the record and every release publishes a release message,
//! so a subscribed follower learns everything without sending a command. It arms one timer at
//! the end of the holder's lease as last heard; only when no renew came by then does it ask the
//! server (one read), and that read also tells whether messages went missing.

use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use leader_lock::backend::{LockError, LockEvent, LockRecord};
use leader_lock::Term;
use redis::aio::{ConnectionManager, PubSubSink};
use redis::Value;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::{debug, warn};

use crate::keys::Keys;
use crate::knowledge::{Knowledge, Subscription};
use crate::scripts::Scripts;
use crate::value::{self, bytes, int, pttl_wait, Message};

pub(crate) struct WatchTask {
    pub conn: ConnectionManager,
    /// The subscription's own connection, to PING through: its reply comes after every message
    /// the server sent on it before.
    pub sink: PubSubSink,
    pub scripts: Arc<Scripts>,
    pub keys: Keys,
    pub endpoint: String,
    pub timeout: Duration,
    pub knowledge: Arc<Knowledge>,
    pub tx: mpsc::Sender<Result<LockEvent, LockError>>,
    /// The last record this stream heard (message, first read or probe): a probe that finds
    /// another one proves that messages went missing.
    pub heard: Option<LockRecord>,
    /// The holder and term last reported as `Changed(Some(_))`: renewals are not reported.
    pub forwarded: Option<(String, Term)>,
    /// The lapse instant last probed: it is not probed twice.
    pub probed: Option<Instant>,
}

/// True when `b` is a later write than `a`: another lease, or a later renew of the same one.
fn newer(a: &LockRecord, b: &LockRecord) -> bool {
    a.holder != b.holder || a.term != b.term || b.renew_time > a.renew_time
}

impl WatchTask {
    /// Runs until the consumer drops the stream or the subscription breaks; `_subscription`
    /// counts this stream as hearing every change for exactly as long.
    pub async fn run(
        mut self,
        mut messages: impl futures::Stream<Item = redis::Msg> + Unpin,
        _subscription: Subscription,
    ) {
        let mut timer = self.lapse();
        loop {
            let events = tokio::select! {
                _ = self.tx.closed() => return,
                msg = messages.next() => match msg {
                    None => {
                        let _ = self.tx.send(Err(LockError::unavailable(format!(
                            "redis at {}: the subscription to {} closed", self.endpoint, self.keys.events
                        )))).await;
                        return;
                    }
                    Some(m) => {
                        let events = self.on_message(&m);
                        timer = self.lapse();
                        events
                    }
                },
                _ = sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                    match self.on_timer(&mut messages).await {
                        Ok((next, events)) => {
                            timer = next;
                            events
                        }
                        Err(e) => {
                            let _ = self.tx.send(Err(e)).await;
                            return;
                        }
                    }
                }
            };
            for ev in events {
                // Never wait for a slow consumer: messages would pile up unread while this
                // subscription still counts as hearing everything. End the stream instead; the
                // elector reopens it.
                if let Err(e) = self.tx.try_send(Ok(ev)) {
                    if matches!(e, mpsc::error::TrySendError::Full(_)) {
                        warn!(channel = %self.keys.events, "lock watch consumer too slow; closing the stream");
                    }
                    return;
                }
            }
        }
    }

    /// Notes a record this stream heard of; a renew's message arriving after a read that
    /// already showed a later renew does not move it back.
    fn hear(&mut self, rec: LockRecord) {
        if self.heard.as_ref().is_none_or(|h| newer(h, &rec)) {
            self.heard = Some(rec);
        }
    }

    /// When the live record we know of runs out unless renewed (once per lapse instant).
    fn lapse(&self) -> Option<Instant> {
        self.knowledge
            .current()
            .map(|s| s.until)
            .filter(|u| Some(*u) != self.probed)
    }

    fn on_message(&mut self, m: &redis::Msg) -> Vec<LockEvent> {
        let payload = m.get_payload_bytes();
        if m.get_channel_name() != self.keys.events {
            // A keyspace notification: the payload is the event name. What we know does not
            // change: a deleted or evicted record is not free before its lease has run out.
            return match payload {
                b"expired" | b"del" | b"evicted" => vec![LockEvent::Changed(None)],
                _ => Vec::new(),
            };
        }
        match value::message(payload) {
            Message::Released { holder, term } => {
                self.knowledge.released(&holder, term);
                self.heard = None;
                self.forwarded = None;
                vec![LockEvent::Changed(None)]
            }
            Message::Record(rec) => {
                // Published together with the write: it is live now, for a whole lease.
                self.knowledge.saw(&rec, Instant::now(), rec.lease_duration);
                let mut events = Vec::new();
                let key = (rec.holder.clone(), rec.term);
                if self.forwarded.as_ref() != Some(&key) {
                    events.push(LockEvent::Changed(Some(rec.clone())));
                    self.forwarded = Some(key);
                }
                if self.knowledge.unaware_holder(&rec.holder, rec.term) {
                    // One of our candidates holds the lock without knowing it: its acquire was
                    // applied although the reply was lost. The elector ignores its own record
                    // on the stream, so ask it to look now: its next attempt renews the record
                    // and leads, valid from that attempt's sending.
                    debug!(holder = %rec.holder, term = %rec.term, "our own acquire landed unseen; asking the elector to look");
                    events.push(LockEvent::Resynced);
                }
                self.hear(rec);
                events
            }
            Message::Unknown => vec![LockEvent::Resynced],
        }
    }

    /// No renew was heard for a whole lease: ask the server (one read).
    async fn on_timer(
        &mut self,
        messages: &mut (impl futures::Stream<Item = redis::Msg> + Unpin),
    ) -> Result<(Option<Instant>, Vec<LockEvent>), LockError> {
        self.probed = self.knowledge.current().map(|s| s.until);
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let r: Result<Result<Vec<Value>, _>, _> =
            tokio::time::timeout(self.timeout, inv.invoke_async(&mut self.conn)).await;
        let got = Instant::now();
        let reply = match r {
            Ok(Ok(v)) => v,
            // The elector attempts on its own schedule; a failed probe only loses this wake-up.
            _ => return Ok((None, vec![LockEvent::Resynced])),
        };
        let Some(raw) = reply.first().and_then(bytes) else {
            self.heard = None;
            return Ok((None, vec![LockEvent::Changed(None)]));
        };
        let ttl = reply.get(1).and_then(int).and_then(pttl_wait);
        let Ok(rec) = value::parse(raw) else {
            // A foreign value: the elector's attempt tells what to do with it.
            return Ok((None, vec![LockEvent::Resynced]));
        };
        let mut events = Vec::new();
        if self.heard.as_ref().is_some_and(|h| newer(h, &rec)) {
            // The write's message may simply not be read yet: the script publishes with its
            // write, but the message travels on the subscription's connection and the read's
            // reply on another. A PING on the subscription comes back after every message sent
            // before it; what arrived meanwhile is heard first (seen 3 times in 30 quiet rounds
            // before this, each reported as a missed change).
            let _ = tokio::time::timeout(self.timeout, self.sink.ping::<Value>()).await;
            while let Some(Some(m)) = messages.next().now_or_never() {
                events.extend(self.on_message(&m));
            }
        }
        if let Some(heard) = &self.heard {
            if newer(heard, &rec) {
                // A renew or acquire without its message: this subscription misses messages
                // (e.g. a connection dropped without a reset), so what we know is not complete.
                warn!(
                    channel = %self.keys.events,
                    holder = %rec.holder,
                    term = %rec.term,
                    "the lock changed without a message on the subscription; reopening it"
                );
                return Err(LockError::unavailable(format!(
                    "redis at {}: the subscription to {} missed a change of the lock",
                    self.endpoint, self.keys.events
                )));
            }
        }
        // The same record, its TTL not run out yet (the server's clock is a little behind ours):
        // it is live now; wait for the rest of its TTL.
        if let Some(ttl) = ttl {
            self.knowledge.saw(&rec, got, ttl);
        }
        self.hear(rec);
        Ok((self.lapse(), events))
    }
}
