use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::{
    Attempt, Candidate, LeaderLock, LockError, LockEvent, LockEventStream, LockRecord, Term, Timing,
};
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{
    Client, ConnectionAddr, ErrorKind, IntoConnectionInfo, RedisError, ServerErrorKind,
    TlsCertificates, Value,
};
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::{debug, warn};

use crate::config::{check_config, check_timing, read_ca, RedisConfig};
use crate::keys::Keys;
use crate::scripts;
use crate::value::{self, Message, MAX_TERM};

/// A [`LeaderLock`] on one Redis server (or a cluster's primary for the lock's slot).
///
/// See `docs/redis.md` for the guarantees, the key layout and the value format.
pub struct RedisLock {
    name: String,
    endpoint: String,
    keys: Keys,
    db: i64,
    timeout: Duration,
    client: Client,
    conn: ConnectionManager,
    scripts: Arc<Scripts>,
    /// The term each holder of this process last led under: a renew expects exactly it.
    held: Mutex<HashMap<String, Term>>,
    /// The highest term seen; a new term is always above it, even if the counter and the
    /// server clock both went back.
    max_seen: AtomicU64,
}

struct Scripts {
    acquire: redis::Script,
    release: redis::Script,
    get: redis::Script,
}

fn endpoint(addr: &ConnectionAddr, db: i64) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}/{db}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}/{db}"),
        other => format!("{other:?}"),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

fn install_crypto_provider() {
    // redis builds its rustls config from the process default provider; with more than one
    // provider compiled into the binary rustls cannot pick one by itself.
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}

/// Maps a redis error to a lock error whose message names the endpoint and the setting to fix.
fn classify(e: &RedisError, endpoint: &str, timeout: Duration) -> LockError {
    let code = e.code().unwrap_or_default();
    let auth = matches!(e.kind(), ErrorKind::AuthenticationFailed)
        || matches!(code, "WRONGPASS" | "NOAUTH");
    if auth {
        return LockError::Refused(format!(
            "redis at {endpoint} rejected the credentials ({e}); check redis-username and the \
             password (redis-password-file or GATEWAY_LEADER_REDIS_PASSWORD)"
        ));
    }
    let text = e.to_string();
    // Inside a script a denied command comes back as a plain ERR with this wording.
    let denied_in_script = text.contains("can't run this command");
    if matches!(e.kind(), ErrorKind::Server(ServerErrorKind::NoPerm))
        || code == "NOPERM"
        || denied_in_script
    {
        return LockError::Refused(format!(
            "redis at {endpoint}: the ACL user lacks a permission ({e}); it needs the commands \
             EVAL, EVALSHA, SCRIPT LOAD, GET, SET, DEL, PTTL, INCR, EXISTS, TIME, INFO, PUBLISH, \
             SUBSCRIBE and PING, the keys and channels under redis-key-prefix (see docs/redis.md)"
        ));
    }
    if matches!(e.kind(), ErrorKind::InvalidClientConfig) {
        return LockError::Refused(format!("redis-url {endpoint}: {e}"));
    }
    if code == "GLBADTERM" || code == "WRONGTYPE" {
        return LockError::Malformed(format!("redis at {endpoint}: {e}"));
    }
    if text.contains("certificate") || text.contains("UnknownIssuer") {
        return LockError::Refused(format!(
            "redis at {endpoint}: the server's TLS certificate is not trusted ({e}); set \
             redis-ca-file to the CA that signed it"
        ));
    }
    if e.is_timeout() {
        return LockError::Timeout(timeout);
    }
    if matches!(e.kind(), ErrorKind::Server(ServerErrorKind::ReadOnly)) {
        return LockError::Unavailable(format!(
            "redis at {endpoint} is a read-only replica; redis-url must point to the primary ({e})"
        ));
    }
    if e.is_connection_refusal() {
        return LockError::Unavailable(format!(
            "cannot reach redis at {endpoint}: connection refused ({e})"
        ));
    }
    LockError::Unavailable(format!("redis at {endpoint}: {e}"))
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A PTTL reply as a wait: `Some` for a running TTL, `Some(0)` for a key already gone.
fn pttl_wait(pttl: i64) -> Option<Duration> {
    match pttl {
        p if p > 0 => Some(Duration::from_millis(p.unsigned_abs())),
        -2 | 0 => Some(Duration::ZERO),
        _ => None,
    }
}

impl RedisLock {
    /// Checks the settings without touching the network: URL scheme (`redis-url`), CA file,
    /// key prefix, and that the timing fits Redis (lease in whole milliseconds).
    pub fn validate(config: &RedisConfig, timing: &Timing) -> Result<(), String> {
        check_config(config)?;
        check_timing(config, timing)
    }

    /// Connects and authenticates; fails with a clear message when the server is unreachable or
    /// refuses the credentials.
    pub async fn connect(config: RedisConfig, lock_name: &str) -> Result<RedisLock, LockError> {
        check_config(&config).map_err(LockError::Refused)?;
        if lock_name.is_empty() {
            return Err(LockError::Refused("the lock name must not be empty".into()));
        }
        let mut info = config
            .url
            .as_str()
            .into_connection_info()
            .map_err(|e| LockError::Refused(format!("redis-url is invalid: {e}")))?;
        let mut settings = info.redis_settings().clone();
        if let Some(u) = &config.username {
            settings = settings.set_username(u);
        }
        if let Some(p) = &config.password {
            settings = settings.set_password(p);
        }
        let db = settings.db();
        info = info.set_redis_settings(settings);
        let endpoint = endpoint(info.addr(), db);
        let timeout = config.request_timeout;
        if config.is_tls() {
            install_crypto_provider();
        }
        let client = match &config.ca_file {
            Some(ca) => {
                let root = read_ca(ca).map_err(LockError::Refused)?;
                Client::build_with_tls(
                    info,
                    TlsCertificates {
                        client_tls: None,
                        root_cert: Some(root),
                    },
                )
            }
            None => Client::open(info),
        }
        .map_err(|e| LockError::Refused(format!("redis-url {endpoint}: {e}")))?;
        let manager = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_min_delay(Duration::from_millis(100))
            .set_max_delay(Duration::from_secs(2));
        // The manager retries the first connection once; bound the whole thing anyway.
        let limit = timeout * 3 + Duration::from_secs(1);
        let mut conn = match tokio::time::timeout(
            limit,
            ConnectionManager::new_with_config(client.clone(), manager),
        )
        .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(match classify(&e, &endpoint, timeout) {
                    LockError::Unavailable(m) if !m.starts_with("cannot reach") => {
                        LockError::Unavailable(format!("cannot reach redis at {endpoint}: {e}"))
                    }
                    LockError::Timeout(_) => LockError::Unavailable(format!(
                        "cannot reach redis at {endpoint}: timed out after {timeout:?}"
                    )),
                    other => other,
                })
            }
            Err(_) => {
                return Err(LockError::Unavailable(format!(
                    "cannot reach redis at {endpoint}: no connection within {limit:?}"
                )))
            }
        };
        // The handshake authenticates; a PING proves the session works before we report success.
        let pong: Result<String, _> =
            tokio::time::timeout(timeout, redis::cmd("PING").query_async(&mut conn))
                .await
                .map_err(|_| LockError::Timeout(timeout))?;
        pong.map_err(|e| classify(&e, &endpoint, timeout))?;
        Ok(RedisLock {
            name: lock_name.to_string(),
            endpoint,
            keys: Keys::new(&config.key_prefix, lock_name),
            db,
            timeout,
            client,
            conn,
            scripts: Arc::new(Scripts {
                acquire: scripts::acquire(),
                release: scripts::release(),
                get: scripts::get(),
            }),
            held: Mutex::new(HashMap::new()),
            max_seen: AtomicU64::new(0),
        })
    }

    /// The key holding the lock's value.
    pub fn holder_key(&self) -> &str {
        &self.keys.holder
    }

    /// The key holding the fencing counter.
    pub fn term_key(&self) -> &str {
        &self.keys.term
    }

    /// The pub/sub channel of acquire and release messages.
    pub fn events_channel(&self) -> &str {
        &self.keys.events
    }

    fn held(&self) -> std::sync::MutexGuard<'_, HashMap<String, Term>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn saw(&self, term: Term) {
        if term.0 <= MAX_TERM {
            self.max_seen.fetch_max(term.0, Ordering::Relaxed);
        }
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, inv.invoke_async(&mut conn)).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(e)) => Err(classify(&e, &self.endpoint, self.timeout)),
            Err(_) => Err(LockError::Timeout(self.timeout)),
        }
    }

    /// Interprets a value that is not ours, found with `pttl` left.
    fn follower(&self, raw: &[u8], pttl: i64) -> Result<Attempt, LockError> {
        let wait = pttl_wait(pttl);
        match value::parse(raw) {
            Ok(rec) => {
                if wait.is_none() {
                    return Err(LockError::Malformed(format!(
                        "{} holds a record of {} (term {}) without a TTL; it never expires and is \
                         never taken over: delete it by hand",
                        self.keys.holder, rec.holder, rec.term
                    )));
                }
                self.saw(rec.term);
                Ok(Attempt::Follower {
                    holder: Some(rec.holder),
                    term: Some(rec.term),
                    retry_after: wait,
                })
            }
            Err(why) => {
                if wait.is_none() {
                    return Err(LockError::Malformed(format!(
                        "{} holds a value this library did not write ({why}) and it has no TTL; \
                         it is never overwritten: delete it by hand or change redis-key-prefix",
                        self.keys.holder
                    )));
                }
                debug!(key = %self.keys.holder, %why, ?wait, "foreign value; waiting for its TTL");
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: wait,
                })
            }
        }
    }
}

#[async_trait]
impl LeaderLock for RedisLock {
    fn describe(&self) -> String {
        format!(
            "redis lock {} at {} (key {})",
            self.name, self.endpoint, self.keys.holder
        )
    }

    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError> {
        let me = candidate.holder();
        let lease_ms = u64::try_from(candidate.lease_duration.as_millis()).unwrap_or(u64::MAX);
        if lease_ms == 0 {
            return Err(LockError::Refused(
                "lease-duration must be at least 1ms for redis".into(),
            ));
        }
        let expect = self.held().get(&me).map(|t| t.0.to_string());
        // Never hand out a term at or below one this client has seen.
        let floor = match self.max_seen.load(Ordering::Relaxed) {
            0 => 0,
            seen => seen.saturating_add(1),
        };
        let mut inv = self.scripts.acquire.prepare_invoke();
        inv.key(&self.keys.holder)
            .key(&self.keys.term)
            .arg(&me)
            .arg(lease_ms)
            .arg(now_ms())
            .arg(expect.as_deref().unwrap_or(""))
            .arg(floor)
            .arg(&self.keys.events);
        let reply: Vec<Value> = self.run(inv).await?;
        let malformed = || {
            LockError::Malformed(format!(
                "unexpected reply from the acquire script: {reply:?}"
            ))
        };
        match reply.first().and_then(int) {
            Some(1) => {
                let term = reply
                    .get(1)
                    .and_then(int)
                    .and_then(|t| u64::try_from(t).ok())
                    .ok_or_else(malformed)?;
                let term = Term(term);
                self.saw(term);
                self.held().insert(me, term);
                Ok(Attempt::Leader { term })
            }
            Some(2) => {
                self.held().remove(&me);
                let raw = reply.get(1).and_then(bytes).ok_or_else(malformed)?;
                let pttl = reply.get(2).and_then(int).ok_or_else(malformed)?;
                self.follower(raw, pttl)
            }
            Some(3) => {
                let lost = self.held().remove(&me);
                warn!(lock = %self.describe(), term = ?lost, "our lock key is gone; stepping down");
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(Duration::ZERO),
                })
            }
            Some(4) => {
                let wait = reply
                    .get(1)
                    .and_then(int)
                    .and_then(|w| u64::try_from(w).ok())
                    .ok_or_else(malformed)?;
                debug!(
                    lock = %self.describe(),
                    wait_ms = wait,
                    "redis restarted less than a lease ago; not taking a vanished lock yet"
                );
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(Duration::from_millis(wait)),
                })
            }
            _ => Err(malformed()),
        }
    }

    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError> {
        let me = candidate.holder();
        let mut inv = self.scripts.release.prepare_invoke();
        inv.key(&self.keys.holder)
            .arg(&me)
            .arg(term.0.to_string())
            .arg(&self.keys.events);
        let released: i64 = self.run(inv).await?;
        self.held().remove(&me);
        Ok(released == 1)
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let reply: Vec<Value> = self.run(inv).await?;
        match reply.first() {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => {
                let raw = bytes(v).ok_or_else(|| {
                    LockError::Malformed(format!("unexpected reply from the get script: {reply:?}"))
                })?;
                value::parse(raw).map(Some).map_err(|why| {
                    LockError::Malformed(format!(
                        "{} holds a foreign value: {why}",
                        self.keys.holder
                    ))
                })
            }
        }
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let t = self.timeout;
        let fail = |e: RedisError| classify(&e, &self.endpoint, t);
        let mut pubsub = tokio::time::timeout(t, self.client.get_async_pubsub())
            .await
            .map_err(|_| LockError::Timeout(t))?
            .map_err(fail)?;
        tokio::time::timeout(t, pubsub.subscribe(&self.keys.events))
            .await
            .map_err(|_| LockError::Timeout(t))?
            .map_err(fail)?;
        // Expiry notifications only come when the server has notify-keyspace-events with K and
        // x; subscribing costs nothing otherwise, and a denied channel only loses this extra.
        let keyspace = self.keys.keyspace(self.db);
        match tokio::time::timeout(t, pubsub.subscribe(&keyspace)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(channel = %keyspace, error = %e, "no keyspace notifications"),
            Err(_) => return Err(LockError::Timeout(t)),
        }
        let messages = pubsub.into_on_message();
        // Arm the expiry timer from the current TTL so a crashed holder is noticed on time.
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let first: Vec<Value> = self.run(inv).await?;
        let armed = first
            .get(1)
            .and_then(int)
            .filter(|p| *p > 0)
            .map(|p| Instant::now() + Duration::from_millis(p.unsigned_abs()));
        let (tx, rx) = mpsc::channel(16);
        let task = WatchTask {
            conn: self.conn.clone(),
            keys: self.keys.clone(),
            endpoint: self.endpoint.clone(),
            timeout: t,
            tx,
        };
        tokio::spawn(task.run(messages, armed));
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed())
    }
}

struct WatchTask {
    conn: ConnectionManager,
    keys: Keys,
    endpoint: String,
    timeout: Duration,
    tx: mpsc::Sender<Result<LockEvent, LockError>>,
}

impl WatchTask {
    async fn run(
        mut self,
        mut messages: impl futures::Stream<Item = redis::Msg> + Unpin,
        mut timer: Option<Instant>,
    ) {
        loop {
            let event = tokio::select! {
                _ = self.tx.closed() => return,
                msg = messages.next() => match msg {
                    None => {
                        let _ = self.tx.send(Err(LockError::Unavailable(format!(
                            "redis at {}: the subscription to {} closed", self.endpoint, self.keys.events
                        )))).await;
                        return;
                    }
                    Some(m) => self.on_message(&m, &mut timer),
                },
                _ = sleep_until(timer.unwrap_or_else(Instant::now)), if timer.is_some() => {
                    timer = None;
                    self.on_timer(&mut timer).await
                }
            };
            if let Some(ev) = event {
                if self.tx.send(Ok(ev)).await.is_err() {
                    return;
                }
            }
        }
    }

    fn on_message(&self, m: &redis::Msg, timer: &mut Option<Instant>) -> Option<LockEvent> {
        let payload = m.get_payload_bytes();
        if m.get_channel_name() != self.keys.events {
            // A keyspace notification: the payload is the event name.
            return match payload {
                b"expired" | b"del" | b"evicted" => {
                    *timer = None;
                    Some(LockEvent::Changed(None))
                }
                _ => None,
            };
        }
        match value::message(payload) {
            Message::Released => {
                *timer = None;
                Some(LockEvent::Changed(None))
            }
            Message::Acquired(rec) => {
                *timer = Some(Instant::now() + rec.lease_duration);
                Some(LockEvent::Changed(Some(rec)))
            }
            Message::Unknown => Some(LockEvent::Resynced),
        }
    }

    /// The holder's lease may have run out: ask the server, which owns the TTL.
    async fn on_timer(&mut self, timer: &mut Option<Instant>) -> Option<LockEvent> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(&self.keys.holder);
        let r: Result<Result<i64, _>, _> =
            tokio::time::timeout(self.timeout, cmd.query_async(&mut self.conn)).await;
        match r {
            Ok(Ok(p)) if p > 0 => {
                *timer = Some(Instant::now() + Duration::from_millis(p.unsigned_abs()));
                None
            }
            Ok(Ok(-2)) => Some(LockEvent::Changed(None)),
            Ok(Ok(_)) => None,
            // The elector retries on its own schedule; a failed probe only loses this wake-up.
            _ => Some(LockEvent::Resynced),
        }
    }
}
