//! A [`LeaderLock`] on etcd: a key bound to a lease.
//!
//! - Acquire: grant a fresh lease (TTL = lease duration), then a transaction that creates the key
//!   only if it does not exist, attached to that lease. The term is the key's create revision.
//! - Renew: one lease keep-alive round trip, together with a read that checks the key is still
//!   ours (same create revision, lease and value).
//! - Release: delete the key if its create revision is still our term, then revoke the lease.
//! - Followers watch the key: a delete (release or lease expiry) wakes them at once.
//!
//! See `docs/etcd.md` for the guarantees and the settings.

mod config;
mod value;

use std::time::Duration;

use async_trait::async_trait;
use etcd_client::{
    Certificate, Client, Compare, CompareOp, ConnectOptions, GetResponse, Identity as TlsIdentity,
    KeyValue, PutOptions, TlsOptions, Txn, TxnOp, WatchOptions, WatchStream,
};
use futures::StreamExt;
use leader_lock::input::Pem;
use leader_lock::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord, Term, Timing,
};
use tokio::sync::Mutex;
use tracing::{debug, warn};

pub use config::{EtcdConfig, MIN_LEASE};
use value::StoredValue;

/// HTTP/2 pings find dead connections (a paused or unplugged server) under a long watch.
/// etcd refuses pings more often than every 5 s, so stay above that.
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// A follower whose holder's lease is already gone looks again this soon (the delete is near).
const LEASE_GONE_RETRY: Duration = Duration::from_millis(200);

/// What we hold: the key instance (its create revision), its lease, and the value we wrote.
#[derive(Debug, Clone)]
struct Held {
    holder: String,
    term: i64,
    lease: i64,
    value: Vec<u8>,
}

/// A lock on etcd; one per process and lock name.
pub struct EtcdLock {
    client: Client,
    key: Vec<u8>,
    key_text: String,
    endpoints: String,
    timeout: Duration,
    held: Mutex<Option<Held>>,
}

/// The outcome of one keep-alive.
enum LeaseState {
    Alive,
    Gone,
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
        let lock = EtcdLock {
            client,
            key: key_text.clone().into_bytes(),
            key_text,
            endpoints,
            timeout,
            held: Mutex::new(None),
        };
        // The channel connects lazily: one read proves reachability, TLS and permissions.
        let mut kv = lock.client.kv_client();
        match tokio::time::timeout(timeout, kv.get(lock.key.clone(), None)).await {
            Ok(Ok(_)) => Ok(lock),
            Ok(Err(e)) => Err(connect_error(&config, "reading the lock key", e).await),
            Err(_) => Err(unreachable(&config, timeout).await),
        }
    }

    /// Checks the settings without touching the network: well-formed endpoints without
    /// credentials, TLS files given together and holding PEM of the right kind, credentials
    /// complete, a plain key prefix, lease duration whole seconds of at least 2 s.
    pub fn validate(config: &EtcdConfig, timing: &Timing) -> Result<(), String> {
        config::validate(config, timing)
    }

    /// The full key of the lock (`<prefix><name>`).
    pub fn key(&self) -> &str {
        &self.key_text
    }

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

    async fn read(&self) -> Result<GetResponse, LockError> {
        let mut kv = self.client.kv_client();
        self.call("get", kv.get(self.key.clone(), None)).await
    }

    /// One keep-alive round trip; `Gone` when the server no longer knows the lease.
    async fn keep_alive(&self, lease: i64) -> Result<LeaseState, LockError> {
        let mut client = self.client.lease_client();
        match tokio::time::timeout(self.timeout, client.keep_alive(lease)).await {
            // The client checks the first answer: TTL <= 0 is its "lease not found".
            Ok(Ok(_)) => Ok(LeaseState::Alive),
            Ok(Err(etcd_client::Error::LeaseKeepAliveError(_))) => Ok(LeaseState::Gone),
            Ok(Err(etcd_client::Error::GRpcStatus(s))) if s.code() == tonic::Code::NotFound => {
                Ok(LeaseState::Gone)
            }
            Ok(Err(e)) => Err(self.error("lease keep-alive", e)),
            Err(_) => Err(LockError::Timeout(self.timeout)),
        }
    }

    /// Grants a fresh lease of `ttl` seconds; refuses a TTL the server rounded up to its minimum.
    async fn grant(&self, ttl: i64) -> Result<i64, LockError> {
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
        Ok(resp.id())
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

    /// Follower answer for a key someone holds; asks for the holder lease's remaining TTL.
    async fn follower(&self, kv: &KeyValue) -> Attempt {
        let (holder, term) = match StoredValue::parse(kv.value()) {
            Ok(v) => (Some(v.holder), Some(Term(revision(kv.create_revision())))),
            Err(why) => {
                debug!(key = %self.key_text, %why, "the lock key holds a foreign value; waiting for it to go");
                (None, None)
            }
        };
        let retry_after = if kv.lease() == 0 {
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

    /// Renews what we hold: keep-alive and a read of the key, together.
    ///
    /// `Ok(None)` means the key or the lease is no longer ours (lost).
    async fn renew(&self, h: &Held) -> Result<Option<Term>, LockError> {
        let (alive, current) = tokio::join!(self.keep_alive(h.lease), self.read());
        let alive = alive?;
        let current = current?;
        let ours = current.kvs().first().is_some_and(|kv| {
            kv.create_revision() == h.term && kv.lease() == h.lease && kv.value() == h.value
        });
        match alive {
            LeaseState::Alive if ours => Ok(Some(Term(revision(h.term)))),
            LeaseState::Alive => {
                warn!(key = %self.key_text, term = h.term, "the lock key is no longer ours; stepping down");
                self.revoke_later(h.lease);
                Ok(None)
            }
            LeaseState::Gone => {
                warn!(key = %self.key_text, term = h.term, lease = h.lease, "our etcd lease expired; stepping down");
                Ok(None)
            }
        }
    }
}

#[async_trait]
impl LeaderLock for EtcdLock {
    fn describe(&self) -> String {
        format!("etcd key {} at {}", self.key_text, self.endpoints)
    }

    async fn try_acquire_or_renew(&self, c: &Candidate) -> Result<Attempt, LockError> {
        let me = c.holder();
        let ttl = whole_seconds(c.lease_duration)?;
        let mut held = self.held.lock().await;
        if let Some(h) = held.clone().filter(|h| h.holder == me) {
            match self.renew(&h).await? {
                Some(term) => return Ok(Attempt::Leader { term }),
                // Lost: campaign again below, always with a new lease.
                None => *held = None,
            }
        }

        let current = self.read().await?;
        if let Some(kv) = current.kvs().first() {
            // Our own key from an attempt whose answer was lost (timeout): adopt it if its lease
            // lives; a keep-alive now makes it last a full TTL from this attempt on.
            if kv.lease() != 0 && held.is_none() {
                if let Ok(v) = StoredValue::parse(kv.value()) {
                    if v.holder == me {
                        if let LeaseState::Alive = self.keep_alive(kv.lease()).await? {
                            let h = Held {
                                holder: me,
                                term: kv.create_revision(),
                                lease: kv.lease(),
                                value: kv.value().to_vec(),
                            };
                            let term = Term(revision(h.term));
                            *held = Some(h);
                            return Ok(Attempt::Leader { term });
                        }
                    }
                }
            }
            return Ok(self.follower(kv).await);
        }

        // Free. A fresh lease every time: an older one may have expired while we waited.
        let lease = self.grant(ttl).await?;
        let value = StoredValue::new(me.clone(), ttl.unsigned_abs()).encode();
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                0,
            )])
            .and_then([TxnOp::put(
                self.key.clone(),
                value.clone(),
                Some(PutOptions::new().with_lease(lease)),
            )]);
        let mut kv = self.client.kv_client();
        // On error the key may exist with our lease; the next attempt adopts it, so no revoke.
        let resp = self.call("acquire transaction", kv.txn(txn)).await?;
        if !resp.succeeded() {
            self.revoke_later(lease);
            let current = self.read().await?;
            return Ok(match current.kvs().first() {
                Some(kv) => self.follower(kv).await,
                None => Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(Duration::ZERO),
                },
            });
        }
        let Some(rev) = resp.header().map(|h| h.revision()).filter(|r| *r > 0) else {
            return Err(LockError::Malformed(
                "etcd transaction answer without a revision".into(),
            ));
        };
        *held = Some(Held {
            holder: me,
            term: rev,
            lease,
            value,
        });
        Ok(Attempt::Leader {
            term: Term(revision(rev)),
        })
    }

    async fn release(&self, c: &Candidate, term: Term) -> Result<bool, LockError> {
        let Ok(rev) = i64::try_from(term.0) else {
            return Ok(false);
        };
        let mut held = self.held.lock().await;
        let txn = Txn::new()
            .when([Compare::create_revision(
                self.key.clone(),
                CompareOp::Equal,
                rev,
            )])
            .and_then([TxnOp::delete(self.key.clone(), None)]);
        let mut kv = self.client.kv_client();
        let deleted = self.call("release transaction", kv.txn(txn)).await;
        let ours = held
            .as_ref()
            .is_some_and(|h| h.holder == c.holder() && h.term == rev);
        if !ours {
            return deleted.map(|r| r.succeeded());
        }
        let Some(h) = held.take() else {
            return deleted.map(|r| r.succeeded());
        };
        let mut lease = self.client.lease_client();
        let revoked = self.call("lease revoke", lease.revoke(h.lease)).await;
        match (deleted, revoked) {
            (Ok(r), _) => Ok(r.succeeded()),
            // Revoking the lease deletes the key attached to it.
            (Err(_), Ok(_)) => Ok(true),
            (Err(e), Err(_)) => Err(e),
        }
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
            Some(kv) => event(kv),
        };
        let mut client = self.client.watch_client();
        let stream = self
            .call(
                "watch",
                client.watch(
                    self.key.clone(),
                    Some(WatchOptions::new().with_start_revision(rev + 1)),
                ),
            )
            .await?;
        let state = Some(WatchState {
            stream,
            endpoints: self.endpoints.clone(),
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

/// Keeps the watch's request side alive with the response side.
struct WatchState {
    stream: WatchStream,
    endpoints: String,
}

/// A change of the key as a lock event. A delete carries a key-value with version 0; reading that
/// avoids the client's event-type accessor, which panics on types it does not know.
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
        holder: v.holder,
        term: Term(revision(kv.create_revision())),
        // Renewal is a lease keep-alive; the value is not rewritten.
        renew_time: None,
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
