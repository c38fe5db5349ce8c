//! A [`LeaderLock`] on etcd: a key bound to a lease, rewritten on every renew.
//!
//! - Acquire: one transaction that creates the key only if it does not exist, on a lease granted
//!   beforehand (a spare lease kept alive while following), sent together with that lease's
//!   keep-alive. The term is the key's create revision.
//! - Renew: a keep-alive on the lease's one open stream, sent together with a transaction that
//!   rewrites the value only if the key is still the one we wrote last (create revision, lease
//!   and mod revision). Anything else — the key deleted, its lease revoked, the record moved
//!   onto another lease or rewritten — is lost leadership at once, never recreated.
//! - Release: one transaction that deletes the key and writes the released term to the release
//!   marker `<key>#released`, so followers tell a release from a deletion by hand. The lease
//!   is revoked afterwards, off the followers' path.
//! - Follow: a watch on the key. A release wakes followers at once; a record that vanished
//!   without a release is free `lease` after its last version was first seen; a record that
//!   stops changing for `lease` (its holder no longer renews it, e.g. it was moved onto another
//!   lease) is deleted and taken.
//!
//! See `docs/etcd.md` for the guarantees and the settings.

mod config;
mod keepalive;
mod knowledge;
mod value;

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetResponse, Identity as TlsIdentity,
    KeyValue, PutOptions, TlsOptions, Txn, TxnOp, TxnOpResponse, WatchOptions, WatchStream,
};
use futures::StreamExt;
use leader_lock::input::Pem;
use leader_lock::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord, Term, Timing,
};
use tokio::sync::Mutex;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tracing::{debug, info, warn};

pub use config::{EtcdConfig, MIN_LEASE};
use keepalive::{KeepAliveError, LeaseState, LeaseStream};
use knowledge::{Content, Knowledge, Seen};
use value::StoredValue;

/// HTTP/2 pings find dead connections (a paused or unplugged server) under a long watch.
/// etcd refuses pings more often than every 5 s, so stay above that.
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// A follower whose holder's lease is already gone looks again this soon (the delete is near).
const LEASE_GONE_RETRY: Duration = Duration::from_millis(200);

/// The release marker's key: the lock key and this suffix. Neither key prefixes nor lock names
/// may contain `#`, so it is never another lock's key.
const MARKER_SUFFIX: &str = "#released";

/// What we hold: the key instance (its create revision), our last write, and its lease.
struct Held {
    holder: String,
    term: i64,
    /// The mod revision of our last write; a renew only goes through if it is still current.
    mod_rev: i64,
    value: StoredValue,
    /// The bytes of our last write, and of a renew whose answer we did not get.
    written: Vec<u8>,
    in_flight: Option<Vec<u8>>,
    lease: LeaseStream,
}

/// An acquire whose answer was lost: the key may be ours on this lease.
struct Pending {
    lease: LeaseStream,
    value: Vec<u8>,
}

#[derive(Default)]
struct State {
    held: Option<Held>,
    pending: Option<Pending>,
}

/// A lock on etcd; one per process and lock name.
pub struct EtcdLock {
    inner: Arc<Inner>,
    spare_keeper: JoinHandle<()>,
}

struct Inner {
    client: Client,
    key: Vec<u8>,
    marker: Vec<u8>,
    key_text: String,
    endpoints: String,
    timeout: Duration,
    state: Mutex<State>,
    /// Fed by the watch stream too, so it lives in its own lock that is never held across I/O.
    knowledge: Arc<std::sync::Mutex<Knowledge>>,
    /// A lease granted in advance, so a follower takes a released lock in one round trip.
    spare: Mutex<Option<LeaseStream>>,
}

/// How a renew ended.
enum Renewed {
    Yes(Term),
    Lost,
}

/// How an acquire transaction ended.
enum Acquired {
    Yes(Term),
    /// Someone holds the key (as of the revision).
    Taken(i64, KeyValue),
    /// The key is missing but the guard failed; the marker's value, as of the revision.
    Guarded(i64, Option<Vec<u8>>),
}

impl Drop for EtcdLock {
    fn drop(&mut self) {
        self.spare_keeper.abort();
        // A follower going away frees its spare lease at once instead of leaving it to expire.
        // The held lease is left alone: dropping without a release is a crash by design.
        if tokio::runtime::Handle::try_current().is_ok() {
            if let Ok(mut spare) = self.inner.spare.try_lock() {
                if let Some(s) = spare.take() {
                    self.inner.abandon(s);
                }
            }
        }
    }
}

impl EtcdLock {
    /// Connects to etcd and checks that the lock key can be read.
    ///
    /// Fails with a message that names the endpoints and the setting to look at when no endpoint
    /// answers, a TLS file cannot be read, or authentication is refused.
    pub async fn connect(config: EtcdConfig, lock_name: &str) -> Result<EtcdLock, LockError> {
        if lock_name.is_empty() {
            return Err(LockError::Refused("the lock name must not be empty".into()));
        }
        if lock_name.contains('#') {
            // `#` separates the lock key from its release marker's suffix.
            return Err(LockError::Refused(format!(
                "the lock name {lock_name:?} must not contain '#'"
            )));
        }
        if config.endpoints.is_empty() {
            return Err(LockError::Refused(
                "etcd-endpoints: at least one endpoint is required".into(),
            ));
        }
        for e in &config.endpoints {
            config::check_endpoint(e).map_err(LockError::Refused)?;
        }
        let endpoints = config.endpoints.join(",");
        let timeout = config.request_timeout.max(Duration::from_millis(100));
        let mut options = ConnectOptions::new()
            .with_connect_timeout(timeout)
            .with_keep_alive(PING_INTERVAL, timeout.max(Duration::from_secs(1)))
            .with_keep_alive_while_idle(false);
        if config.uses_tls() {
            options = options.with_tls(tls_options(&config)?);
        }
        if let Some(user) = &config.username {
            let password = config.password.clone().unwrap_or_default();
            // Simple tokens expire (5 min by default); re-authenticate instead of failing.
            options = options
                .with_user(user.clone(), password)
                .with_auto_token_refresh(true);
        }
        // With a user, connecting authenticates at once, so it needs the timeout too.
        let client = match tokio::time::timeout(
            timeout,
            Client::connect(config.endpoints.clone(), Some(options)),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => return Err(connect_error(&config, "connecting", e).await),
            Err(_) => return Err(unreachable(&config, timeout).await),
        };
        let key_text = format!("{}{}", config.key_prefix, lock_name);
        let inner = Arc::new(Inner {
            client,
            key: key_text.clone().into_bytes(),
            marker: format!("{key_text}{MARKER_SUFFIX}").into_bytes(),
            key_text,
            endpoints,
            timeout,
            state: Mutex::new(State::default()),
            knowledge: Arc::new(std::sync::Mutex::new(Knowledge::default())),
            spare: Mutex::new(None),
        });
        // The channel connects lazily: one read proves reachability, TLS and permissions.
        let mut kv = inner.client.kv_client();
        match tokio::time::timeout(timeout, kv.get(inner.key.clone(), None)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => return Err(connect_error(&config, "reading the lock key", e).await),
            Err(_) => return Err(unreachable(&config, timeout).await),
        }
        let spare_keeper = tokio::spawn(keep_spare(Arc::downgrade(&inner)));
        Ok(EtcdLock {
            inner,
            spare_keeper,
        })
    }

    /// Checks the settings without touching the network: well-formed endpoints without
    /// credentials, TLS files given together and holding PEM of the right kind, credentials
    /// complete, a plain key prefix, lease duration whole seconds of at least 2 s.
    pub fn validate(config: &EtcdConfig, timing: &Timing) -> Result<(), String> {
        config::validate(config, timing)
    }

    /// The full key of the lock (`<prefix><name>`).
    pub fn key(&self) -> &str {
        &self.inner.key_text
    }

    /// The key of the release marker (`<prefix><name>#released`), which holds the last term
    /// released gracefully.
    pub fn release_marker_key(&self) -> String {
        String::from_utf8_lossy(&self.inner.marker).into_owned()
    }
}

/// Keeps the spare lease alive (a third of its TTL apart) until the lock is dropped.
async fn keep_spare(inner: Weak<Inner>) {
    loop {
        let interval = match inner.upgrade() {
            None => return,
            Some(i) => i
                .spare
                .lock()
                .await
                .as_ref()
                .map(|s| Duration::from_secs(s.ttl().unsigned_abs()) / 3),
        };
        tokio::time::sleep(interval.unwrap_or(Duration::from_secs(1))).await;
        let Some(i) = inner.upgrade() else { return };
        let mut spare = i.spare.lock().await;
        if let Some(s) = spare.as_mut() {
            match s.keep_alive(&i.client, i.timeout).await {
                Ok(LeaseState::Alive) => {}
                Ok(LeaseState::Gone) => *spare = None,
                // Kept: the stream reopens next time, and the acquire checks the lease anyway.
                Err(e) => debug!(lease = s.id(), error = ?e, "spare lease keep-alive failed"),
            }
        }
    }
}

impl Inner {
    fn error(&self, what: &str, e: etcd_client::Error) -> LockError {
        map_error(&self.endpoints, what, e)
    }

    /// Runs one request under the per-request timeout.
    async fn call<T>(
        &self,
        what: &str,
        fut: impl std::future::Future<Output = Result<T, etcd_client::Error>>,
    ) -> Result<T, LockError> {
        match tokio::time::timeout(self.timeout, fut).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(self.error(what, e)),
            Err(_) => Err(LockError::Timeout(self.timeout)),
        }
    }

    fn knowledge(&self) -> std::sync::MutexGuard<'_, Knowledge> {
        self.knowledge.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn read(&self) -> Result<GetResponse, LockError> {
        let mut kv = self.client.kv_client();
        self.call("get", kv.get(self.key.clone(), None)).await
    }

    fn keep_alive_error(&self, lease: i64, e: KeepAliveError) -> LockError {
        match e {
            KeepAliveError::Timeout => LockError::Timeout(self.timeout),
            KeepAliveError::Client(e) => self.error(&format!("keep-alive of lease {lease}"), e),
        }
    }

    /// Grants a fresh lease of `ttl` seconds; refuses a TTL the server rounded up to its minimum.
    async fn grant(&self, ttl: i64) -> Result<LeaseStream, LockError> {
        let mut client = self.client.lease_client();
        let resp = self.call("lease grant", client.grant(ttl, None)).await?;
        if !resp.error().is_empty() {
            return Err(LockError::Unavailable(format!(
                "etcd lease grant at {}: {}",
                self.endpoints,
                resp.error()
            )));
        }
        if resp.ttl() != ttl {
            self.revoke_later(resp.id());
            return Err(LockError::Refused(format!(
                "lease-duration {ttl}s is below the etcd server's minimum lease TTL ({}s, \
                 1.5 × its election timeout); raise lease-duration",
                resp.ttl()
            )));
        }
        Ok(LeaseStream::new(resp.id(), ttl))
    }

    /// Revokes a lease in the background; it expires on its own if this fails.
    fn revoke_later(&self, lease: i64) {
        let mut client = self.client.lease_client();
        let timeout = self.timeout;
        tokio::spawn(async move {
            if let Ok(Err(e)) = tokio::time::timeout(timeout, client.revoke(lease)).await {
                debug!(lease, error = %e, "revoking an unused etcd lease failed; it will expire");
            }
        });
    }

    /// Lets a lease go: its stream closes cleanly and it is revoked in the background.
    fn abandon(&self, mut lease: LeaseStream) {
        lease.close();
        self.revoke_later(lease.id());
    }

    /// Follower answer for a key someone else holds.
    async fn follower(&self, kv: &KeyValue, own_lease: Duration) -> Attempt {
        let (holder, term) = match StoredValue::parse(kv.value()) {
            Ok(v) => (Some(v.holder), Some(Term(revision(kv.create_revision())))),
            Err(why) => {
                debug!(key = %self.key_text, %why, "the lock key holds a foreign value; waiting for it to go");
                (None, None)
            }
        };
        let stale_at = self.knowledge().stale_at(own_lease);
        let retry_after = if let Some(at) = stale_at {
            // A record of ours: look again exactly when it would be stale if it stopped changing.
            Some(at.saturating_duration_since(Instant::now()))
        } else if kv.lease() == 0 {
            // A key without a lease never expires; only the watch (a delete) frees it.
            None
        } else {
            let mut client = self.client.lease_client();
            match tokio::time::timeout(self.timeout, client.time_to_live(kv.lease(), None)).await {
                // "Expires in under TTL+1 seconds": wake after TTL; the delete event comes first.
                Ok(Ok(r)) if r.ttl() > 0 => Some(Duration::from_secs(r.ttl().unsigned_abs())),
                Ok(Ok(_)) => Some(LEASE_GONE_RETRY),
                _ => None,
            }
        };
        Attempt::Follower {
            holder,
            term,
            retry_after,
        }
    }

    /// Renews what we hold: keep-alive on the lease's stream and the rewrite, together.
    async fn renew(&self, h: &mut Held) -> Result<Renewed, LockError> {
        let value = h.value.renewed();
        let bytes = value.encode();
        let txn = Txn::new()
            .when([
                Compare::create_revision(self.key.clone(), CompareOp::Equal, h.term),
                Compare::lease(self.key.clone(), CompareOp::Equal, h.lease.id()),
                Compare::mod_revision(self.key.clone(), CompareOp::Equal, h.mod_rev),
            ])
            .and_then([TxnOp::put(
                self.key.clone(),
                bytes.clone(),
                Some(PutOptions::new().with_lease(h.lease.id())),
            )])
            .or_else([TxnOp::get(self.key.clone(), None)]);
        // A renew whose answer we never got may still have been applied; remember its bytes.
        let lost = h.in_flight.replace(bytes.clone());
        let mut kv = self.client.kv_client();
        let (alive, written) = tokio::join!(
            h.lease.keep_alive(&self.client, self.timeout),
            self.call("renew transaction", kv.txn(txn))
        );
        let lease = h.lease.id();
        if let Ok(LeaseState::Gone) = alive {
            warn!(key = %self.key_text, term = h.term, lease, "our etcd lease expired or was revoked; stepping down");
            return Ok(Renewed::Lost);
        }
        let resp = written?;
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if resp.succeeded() {
            h.mod_rev = rev;
            h.value = value;
            h.written = bytes;
            h.in_flight = None;
            self.knowledge().present(
                rev,
                Seen {
                    create_rev: h.term,
                    mod_rev: rev,
                    value: &h.written,
                },
                Instant::now(),
            );
            // Both halves are needed: the write shows followers we live, the keep-alive keeps
            // the lease (and so the key) at least a lease beyond this renew's start.
            alive.map_err(|e| self.keep_alive_error(lease, e))?;
            return Ok(Renewed::Yes(Term(revision(h.term))));
        }
        let current = resp.op_responses().into_iter().find_map(|r| match r {
            TxnOpResponse::Get(g) => g.kvs().first().cloned(),
            _ => None,
        });
        let Some(kv) = current else {
            warn!(key = %self.key_text, term = h.term, "our lock record vanished without a release (deleted or its lease revoked); stepping down, not recreating it");
            return Ok(Renewed::Lost);
        };
        self.knowledge()
            .present(rev, Seen::from(&kv), Instant::now());
        let ours = kv.create_revision() == h.term && kv.lease() == lease;
        if ours && (lost.as_deref() == Some(kv.value()) || kv.value() == h.written) {
            // Our own earlier renew whose answer was lost went through: catch up, renew next time.
            h.mod_rev = kv.mod_revision();
            h.written = kv.value().to_vec();
            return Err(LockError::Unavailable(format!(
                "etcd renew at {}: an earlier renew's answer was lost; retrying",
                self.endpoints
            )));
        }
        if kv.create_revision() == h.term && kv.lease() != lease {
            warn!(key = %self.key_text, term = h.term, our_lease = lease, lease = kv.lease(), "our lock record was moved onto another lease; stepping down");
        } else {
            warn!(key = %self.key_text, term = h.term, create_revision = kv.create_revision(), "our lock record was replaced or rewritten by someone else; stepping down");
        }
        Ok(Renewed::Lost)
    }

    /// Deletes a stale record of ours if it is still the version we saw go stale.
    async fn delete_stale(&self, kv: &KeyValue) -> Result<(), LockError> {
        let txn = Txn::new()
            .when([
                Compare::create_revision(self.key.clone(), CompareOp::Equal, kv.create_revision()),
                Compare::mod_revision(self.key.clone(), CompareOp::Equal, kv.mod_revision()),
            ])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        let mut client = self.client.kv_client();
        let resp = self.call("stale record delete", client.txn(txn)).await?;
        if resp.succeeded() {
            let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
            warn!(key = %self.key_text, term = kv.create_revision(), lease = kv.lease(), "the lock record stopped changing for a lease (its holder no longer renews it); deleted it to take over");
            let mut k = self.knowledge();
            k.deleted(rev, Some(Seen::from(kv)), Instant::now());
            k.forget_holder();
        }
        Ok(())
    }

    /// Reads the key's history from `from` up to `until`, to learn how a key we believed present
    /// went missing (which versions it had, whether we saw the last one).
    async fn replay(&self, from: i64, until: i64) -> Result<(), LockError> {
        let mut client = self.client.watch_client();
        let options = WatchOptions::new()
            .with_start_revision(from)
            .with_prev_key();
        let deadline = Instant::now() + self.timeout;
        let mut stream = self
            .call(
                "history watch",
                client.watch(self.key.clone(), Some(options)),
            )
            .await?;
        loop {
            let msg = match tokio::time::timeout_at(deadline, stream.message()).await {
                Ok(m) => m.map_err(|e| self.error("history watch", e))?,
                Err(_) => return Err(LockError::Timeout(self.timeout)),
            };
            let Some(resp) = msg else {
                return Err(LockError::Unavailable(format!(
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
            apply_events(&self.knowledge, &resp);
            if resp.header().map_or(0, |x| x.revision()) >= until {
                return Ok(());
            }
        }
    }

    /// Grants the spare lease while following, so that taking a released lock later is one
    /// round trip; a failure only costs that round trip later.
    async fn prepare_spare(&self, ttl: i64) {
        let mut spare = self.spare.lock().await;
        if spare.as_ref().is_some_and(|s| s.ttl() == ttl) {
            return;
        }
        match self.grant(ttl).await {
            Ok(s) => {
                if let Some(old) = spare.replace(s) {
                    self.abandon(old);
                }
            }
            Err(e) => {
                debug!(error = %e, "granting a spare lease failed; the acquire will grant one")
            }
        }
    }

    /// Makes sure a spare lease of `ttl` exists; returns it and whether it was just granted.
    async fn take_spare(&self, ttl: i64) -> Result<(LeaseStream, bool), LockError> {
        let spare = self.spare.lock().await.take();
        match spare {
            Some(s) if s.ttl() == ttl => Ok((s, false)),
            other => {
                if let Some(s) = other {
                    self.abandon(s);
                }
                Ok((self.grant(ttl).await?, true))
            }
        }
    }

    /// One acquire transaction: create the key on the spare lease if it is missing (and, with a
    /// guard, only if the release marker says the last holder released `guard`).
    async fn acquire(
        &self,
        st: &mut State,
        me: &str,
        ttl: i64,
        guard: Option<i64>,
    ) -> Result<Acquired, LockError> {
        let (mut lease, fresh) = self.take_spare(ttl).await?;
        let value = StoredValue::new(me.to_string(), ttl.unsigned_abs());
        let bytes = value.encode();
        let mut when = vec![Compare::create_revision(
            self.key.clone(),
            CompareOp::Equal,
            0,
        )];
        if let Some(term) = guard {
            when.push(Compare::value(
                self.marker.clone(),
                CompareOp::Equal,
                term.to_string(),
            ));
        }
        let txn = Txn::new()
            .when(when)
            .and_then([TxnOp::put(
                self.key.clone(),
                bytes.clone(),
                Some(PutOptions::new().with_lease(lease.id())),
            )])
            .or_else([
                TxnOp::get(self.key.clone(), None),
                TxnOp::get(self.marker.clone(), None),
            ]);
        let mut kv = self.client.kv_client();
        // A spare granted earlier is kept alive in the same round trip: the lease then lasts at
        // least a lease beyond this attempt's start, like a fresh grant.
        let (alive, resp) = if fresh {
            (
                Ok(LeaseState::Alive),
                self.call("acquire transaction", kv.txn(txn)).await,
            )
        } else {
            let lease_ref = &mut lease;
            tokio::join!(
                lease_ref.keep_alive(&self.client, self.timeout),
                self.call("acquire transaction", kv.txn(txn))
            )
        };
        let resp = match resp {
            Ok(r) => r,
            Err(LockError::Unavailable(m)) if m.contains("lease not found") => {
                // The spare expired while we followed: the next attempt grants a new one.
                lease.close();
                return Err(LockError::Unavailable(m));
            }
            Err(e) => {
                // Applied or not, we cannot tell: the next attempt adopts the key if it is ours.
                st.pending = Some(Pending {
                    lease,
                    value: bytes,
                });
                return Err(e);
            }
        };
        let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
        if !resp.succeeded() {
            *self.spare.lock().await = match alive {
                Ok(LeaseState::Gone) => None,
                _ => Some(lease),
            };
            let mut gets = resp.op_responses().into_iter().filter_map(|r| match r {
                TxnOpResponse::Get(g) => Some(g),
                _ => None,
            });
            let key = gets.next().and_then(|g| g.kvs().first().cloned());
            let marker = gets
                .next()
                .and_then(|g| g.kvs().first().map(|kv| kv.value().to_vec()));
            return Ok(match key {
                Some(kv) => Acquired::Taken(rev, kv),
                None => Acquired::Guarded(rev, marker),
            });
        }
        if rev <= 0 {
            return Err(LockError::Malformed(
                "etcd transaction answer without a revision".into(),
            ));
        }
        let lease_id = lease.id();
        self.knowledge().present(
            rev,
            Seen {
                create_rev: rev,
                mod_rev: rev,
                value: &bytes,
            },
            Instant::now(),
        );
        st.held = Some(Held {
            holder: me.to_string(),
            term: rev,
            mod_rev: rev,
            value,
            written: bytes,
            in_flight: None,
            lease,
        });
        match alive {
            Ok(LeaseState::Alive) => Ok(Acquired::Yes(Term(revision(rev)))),
            // The key is ours but its lease may not outlast a renew deadline: no validity from
            // this attempt; the next renew settles it.
            Ok(LeaseState::Gone) => Err(LockError::Unavailable(format!(
                "etcd acquire at {}: the spare lease {lease_id} expired meanwhile",
                self.endpoints
            ))),
            Err(e) => Err(self.keep_alive_error(lease_id, e)),
        }
    }

    /// Adopts the key if an acquire whose answer was lost created it, then renews it.
    async fn adopt(&self, st: &mut State, me: &str) -> Result<Option<Term>, LockError> {
        let Some(p) = st.pending.take() else {
            return Ok(None);
        };
        let current = match self.read().await {
            Ok(r) => r,
            Err(e) => {
                st.pending = Some(p);
                return Err(e);
            }
        };
        let rev = current.header().map(|x| x.revision()).unwrap_or(0);
        let Some(kv) = current
            .kvs()
            .first()
            .filter(|kv| kv.lease() == p.lease.id() && kv.value() == p.value)
        else {
            self.abandon(p.lease);
            return Ok(None);
        };
        let Ok(value) = StoredValue::parse(kv.value()) else {
            self.abandon(p.lease);
            return Ok(None);
        };
        self.knowledge()
            .present(rev, Seen::from(kv), Instant::now());
        let mut h = Held {
            holder: me.to_string(),
            term: kv.create_revision(),
            mod_rev: kv.mod_revision(),
            value,
            written: p.value.clone(),
            in_flight: None,
            lease: p.lease,
        };
        info!(key = %self.key_text, term = h.term, "adopting the lock key from an acquire whose answer was lost");
        // Followers time us from our writes, so the lost write must be followed by a fresh one
        // before this attempt counts.
        let renewed = self.renew(&mut h).await;
        match renewed {
            Ok(Renewed::Yes(term)) => {
                st.held = Some(h);
                Ok(Some(term))
            }
            Ok(Renewed::Lost) => {
                self.abandon(h.lease);
                Ok(None)
            }
            Err(e) => {
                st.held = Some(h);
                Err(e)
            }
        }
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let me = c.holder();
        let ttl = whole_seconds(c.lease_duration)?;
        let own = c.lease_duration;
        let mut st = self.state.lock().await;
        // Renewed in place, not taken out and put back: an attempt dropped mid-renew (the
        // elector stops an attempt under way when it shuts down) must leave the record known as
        // ours, or the release that follows finds nothing to release and the followers wait a
        // whole lease instead of milliseconds.
        if let Some(h) = st.held.as_mut().filter(|h| h.holder == me) {
            match self.renew(h).await {
                Ok(Renewed::Yes(term)) => return Ok(Attempt::Leader { term }),
                Ok(Renewed::Lost) => {
                    if let Some(h) = st.held.take() {
                        self.abandon(h.lease);
                    }
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(term) = self.adopt(&mut st, &me).await? {
            return Ok(Attempt::Leader { term });
        }

        // Each pass either answers or learns something new (a read, a replay, a release).
        for _ in 0..4 {
            let now = Instant::now();
            let (present, free_at, holder) = {
                let k = self.knowledge();
                (
                    k.current().is_some(),
                    k.free_at(own, now),
                    k.holder().cloned(),
                )
            };
            if present {
                let resp = self.read().await?;
                let rev = resp.header().map(|x| x.revision()).unwrap_or(0);
                let Some(kv) = resp.kvs().first() else {
                    let from = self.knowledge().absent(rev);
                    if let Some(from) = from {
                        self.replay(from, rev).await?;
                    }
                    continue;
                };
                let now = Instant::now();
                let stale = {
                    let mut k = self.knowledge();
                    k.present(rev, Seen::from(kv), now);
                    k.current().is_some_and(|v| {
                        v.content == Content::Heartbeat && v.mod_rev == kv.mod_revision()
                    }) && k.stale_at(own).is_some_and(|at| at <= now)
                };
                if stale {
                    self.delete_stale(kv).await?;
                    continue;
                }
                self.prepare_spare(ttl).await;
                return Ok(self.follower(kv, own).await);
            }
            let free_at = free_at.unwrap_or(now);
            let guard = holder.as_ref().map(|h| h.term).filter(|_| free_at > now);
            match self.acquire(&mut st, &me, ttl, guard).await? {
                Acquired::Yes(term) => return Ok(Attempt::Leader { term }),
                Acquired::Taken(rev, kv) => {
                    self.knowledge()
                        .present(rev, Seen::from(&kv), Instant::now());
                    self.prepare_spare(ttl).await;
                    return Ok(self.follower(&kv, own).await);
                }
                Acquired::Guarded(rev, marker) => {
                    let Some(h) = holder else { continue };
                    if marker.as_deref() == Some(h.term.to_string().as_bytes()) {
                        debug!(key = %self.key_text, term = h.term, "the last holder released the lock");
                        self.knowledge().released(h.term);
                        continue;
                    }
                    let from = self.knowledge().absent(rev);
                    if let Some(from) = from {
                        self.replay(from, rev).await?;
                    }
                    let now = Instant::now();
                    let Some(at) = self.knowledge().free_at(own, now) else {
                        continue;
                    };
                    if at <= now {
                        continue;
                    }
                    info!(key = %self.key_text, term = h.term, holder = %h.holder, wait_ms = (at - now).as_millis() as u64, "the lock record vanished without a release; waiting out its holder's lease before taking it");
                    return Ok(Attempt::Follower {
                        holder: Some(h.holder),
                        term: Some(Term(revision(h.term))),
                        retry_after: Some(at - now),
                    });
                }
            }
        }
        // Still changing under us: look again soon.
        Ok(Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(LEASE_GONE_RETRY),
        })
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
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
        let txn = Txn::new()
            .when([
                Compare::create_revision(self.key.clone(), CompareOp::Equal, rev),
                Compare::lease(self.key.clone(), CompareOp::Equal, h.lease.id()),
            ])
            .and_then([
                TxnOp::delete(self.key.clone(), None),
                TxnOp::put(self.marker.clone(), rev.to_string(), None),
            ]);
        let mut kv = self.client.kv_client();
        let released = self.call("release transaction", kv.txn(txn)).await;
        if let Ok(r) = &released {
            if r.succeeded() {
                let at = r.header().map(|x| x.revision()).unwrap_or(0);
                let mut k = self.knowledge();
                k.deleted(at, None, Instant::now());
                k.released(rev);
            }
        }
        // Off the followers' path: they act on the transaction, and a revoke awaited here would
        // be a second raft write competing with their acquire. The lease holds no key now (or,
        // if the transaction failed, revoking it removes what is left of ours); should the
        // process exit first, it expires on its own.
        self.abandon(h.lease);
        released.map(|r| r.succeeded())
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let current = self.read().await?;
        match current.kvs().first() {
            None => Ok(None),
            Some(kv) => record(kv).map(Some).map_err(LockError::Malformed),
        }
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
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
        let mut client = self.client.watch_client();
        let stream = self
            .call(
                "watch",
                client.watch(
                    self.key.clone(),
                    Some(
                        WatchOptions::new()
                            .with_start_revision(rev + 1)
                            .with_prev_key(),
                    ),
                ),
            )
            .await?;
        let state = Some(WatchState {
            stream,
            endpoints: self.endpoints.clone(),
            knowledge: self.knowledge.clone(),
        });
        let changes = futures::stream::unfold(state, |state| async move {
            let mut st = state?;
            loop {
                match st.stream.message().await {
                    Ok(Some(resp)) => {
                        if resp.canceled() {
                            let why = if resp.compact_revision() > 0 {
                                format!("compacted at revision {}", resp.compact_revision())
                            } else {
                                resp.cancel_reason().to_string()
                            };
                            let e = LockError::Unavailable(format!(
                                "etcd watch at {} canceled: {why}",
                                st.endpoints
                            ));
                            return Some((Err(e), None));
                        }
                        // Knowledge first, so an attempt woken by this event finds it there.
                        apply_events(&st.knowledge, &resp);
                        // Several events on our one key: only the latest state matters.
                        if let Some(kv) = resp.events().last().and_then(|e| e.kv()) {
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

#[async_trait]
impl LeaderLock for EtcdLock {
    fn describe(&self) -> String {
        format!(
            "etcd key {} at {}",
            self.inner.key_text, self.inner.endpoints
        )
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        self.inner.try_acquire_or_renew(c).await
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        self.inner.release(c, term).await
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        self.inner.get().await
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        self.inner.watch().await
    }
}

/// Feeds a watch response's events into the knowledge, oldest first.
fn apply_events(knowledge: &std::sync::Mutex<Knowledge>, resp: &etcd_client::WatchResponse) {
    let now = Instant::now();
    let mut k = knowledge.lock().unwrap_or_else(|p| p.into_inner());
    for ev in resp.events() {
        let Some(kv) = ev.kv() else { continue };
        // A delete carries a key-value with version 0; reading that avoids the client's
        // event-type accessor, which panics on types it does not know.
        if kv.version() == 0 {
            k.deleted(kv.mod_revision(), ev.prev_kv().map(Seen::from), now);
        } else {
            k.present(kv.mod_revision(), Seen::from(kv), now);
        }
    }
}

/// Keeps the watch's request side alive with the response side.
struct WatchState {
    stream: WatchStream,
    endpoints: String,
    knowledge: Arc<std::sync::Mutex<Knowledge>>,
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

fn record(kv: &KeyValue) -> Result<LockRecord, String> {
    let v = StoredValue::parse(kv.value())?;
    Ok(LockRecord {
        lease_duration: v.lease_duration(),
        acquire_time: v.acquire_time(),
        renew_time: v.renew_time(),
        holder: v.holder,
        term: Term(revision(kv.create_revision())),
        version: kv.mod_revision().to_string(),
    })
}

fn revision(r: i64) -> u64 {
    r.max(0).unsigned_abs()
}

fn whole_seconds(d: Duration) -> Result<i64, LockError> {
    if d.subsec_nanos() != 0 || d < MIN_LEASE {
        return Err(LockError::Refused(format!(
            "lease-duration {d:?} must be a whole number of seconds, at least {MIN_LEASE:?}, for etcd"
        )));
    }
    i64::try_from(d.as_secs())
        .map_err(|_| LockError::Refused(format!("lease-duration {d:?} is too long for etcd")))
}

fn tls_options(config: &EtcdConfig) -> Result<TlsOptions, LockError> {
    // The TLS stack only says "transport error" about a bad file later; say which one now.
    let read = |setting: &str, path: &std::path::Path, kind: Pem| {
        config::read_tls_file(setting, path, kind).map_err(LockError::Refused)
    };
    let mut tls = TlsOptions::new();
    match &config.ca_file {
        Some(ca) => {
            let ca = read("etcd-ca-file", ca, Pem::Certificates)?;
            tls = tls.ca_certificate(Certificate::from_pem(ca));
        }
        // A server certificate from a public CA: the system's trusted roots verify it.
        None => tls = tls.with_native_roots(),
    }
    match (&config.cert_file, &config.key_file) {
        (Some(cert), Some(key)) => {
            let cert = read("etcd-cert-file", cert, Pem::Certificates)?;
            let key = read("etcd-key-file", key, Pem::PrivateKey)?;
            tls = tls.identity(TlsIdentity::from_pem(cert, key));
        }
        (None, None) => {}
        _ => {
            return Err(LockError::Refused(
                "etcd-cert-file and etcd-key-file must be given together".into(),
            ))
        }
    }
    Ok(tls)
}

/// Maps a client error; authentication and permission errors are permanent.
fn map_error(endpoints: &str, what: &str, e: etcd_client::Error) -> LockError {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let msg = format!(
                "etcd {what} at {endpoints}: {} ({:?})",
                s.message(),
                s.code()
            );
            match s.code() {
                Code::Unauthenticated | Code::PermissionDenied => LockError::Refused(msg),
                // etcd reports a wrong user or password, or a missing user, as InvalidArgument.
                Code::InvalidArgument
                    if s.message().contains("auth")
                        || s.message().contains("user")
                        || s.message().contains("password") =>
                {
                    LockError::Refused(msg)
                }
                Code::InvalidArgument => LockError::Malformed(msg),
                _ => LockError::Unavailable(msg),
            }
        }
        etcd_client::Error::InvalidArgs(m) => {
            LockError::Refused(format!("etcd {what} at {endpoints}: {m}"))
        }
        other => LockError::Unavailable(format!("etcd {what} at {endpoints}: {other}")),
    }
}

/// A clear error for a failed connect: permanent for auth, a TLS or address hint otherwise.
async fn connect_error(config: &EtcdConfig, what: &str, e: etcd_client::Error) -> LockError {
    let endpoints = config.endpoints.join(",");
    let from_server = matches!(e, etcd_client::Error::GRpcStatus(_));
    match map_error(&endpoints, what, e) {
        LockError::Refused(m) if from_server => LockError::Refused(format!(
            "{m}; check etcd-username and the password, and the user's role on etcd-key-prefix"
        )),
        LockError::Unavailable(m) => {
            LockError::Unavailable(format!("{m}; {}", diagnose(config).await))
        }
        other => other,
    }
}

/// No endpoint answered in time: say whether TCP works, which points at TLS or at the address.
async fn unreachable(config: &EtcdConfig, timeout: Duration) -> LockError {
    LockError::Unavailable(format!(
        "no etcd endpoint answered within {timeout:?} (etcd-endpoints: {}); {}",
        config.endpoints.join(","),
        diagnose(config).await
    ))
}

async fn diagnose(config: &EtcdConfig) -> String {
    let mut reachable = Vec::new();
    let mut refused = Vec::new();
    for e in &config.endpoints {
        let authority = e
            .trim_start_matches("https://")
            .trim_start_matches("http://")
            .trim_end_matches('/');
        let addr = authority.trim_start_matches('[').replace("]:", ":");
        let probe = tokio::time::timeout(
            Duration::from_secs(2),
            tokio::net::TcpStream::connect(if authority.starts_with('[') {
                authority.to_string()
            } else {
                addr.clone()
            }),
        )
        .await;
        match probe {
            Ok(Ok(_)) => reachable.push(e.as_str()),
            Ok(Err(err)) => refused.push(format!("{e}: {err}")),
            Err(_) => refused.push(format!("{e}: TCP connect timed out")),
        }
    }
    let mut hints = Vec::new();
    if !refused.is_empty() {
        hints.push(format!(
            "cannot open a TCP connection to {} (is etcd running there?)",
            refused.join("; ")
        ));
    }
    if !reachable.is_empty() {
        if config.uses_tls() {
            hints.push(format!(
                "TCP works to {} but the TLS/gRPC connection failed: check etcd-ca-file (it must sign the \
                 server certificate, whose SANs must match the host) and, when the server requires \
                 client certificates, etcd-cert-file/etcd-key-file",
                reachable.join(",")
            ));
        } else {
            hints.push(format!(
                "TCP works to {} but etcd did not answer over plain http (does the server want \
                 https://?)",
                reachable.join(",")
            ));
        }
    }
    hints.join("; ")
}
