use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::{Term, Timing};
use redis::{ErrorKind, RedisError, ServerErrorKind, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::{check_config, check_timing, RedisConfig};
use crate::connection::{is_auth, is_untrusted, manage, Primary};
use crate::keys::Keys;
use crate::knowledge::{Knowledge, Plan};
use crate::scripts::{self, Scripts};
use crate::value::{self, bytes, int, pttl_wait};
use crate::watch::WatchTask;

/// A [`LeaderLock`] on one Redis server (or a cluster's primary for the lock's slot).
///
/// See `docs/redis.md` for the guarantees, the key layout and the value format.
pub struct RedisLock {
    name: String,
    endpoint: String,
    keys: Keys,
    db: i64,
    timeout: Duration,
    /// The primary's connection; with Sentinel it moves to the promoted replica on a failover.
    primary: Primary,
    scripts: Arc<Scripts>,
    /// What this client knows of the lock: the holders it campaigns as and the terms they hold,
    /// the highest term seen, the last live holder seen and whether a watch hears every change.
    knowledge: Arc<Knowledge>,
    /// `WAIT` for this many replicas after every acquire and renew (0: do not wait).
    wait_replicas: u32,
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

/// Maps a redis error to a lock error whose message names the endpoint and the setting to fix;
/// the error itself is kept as the source.
fn classify(e: &RedisError, endpoint: &str, timeout: Duration) -> LockError {
    let code = e.code().unwrap_or_default();
    if is_auth(e) {
        let message = format!(
            "redis at {endpoint} rejected the credentials ({e}); check the username and the \
             password"
        );
        return LockError::refused_from(message, e.clone());
    }
    let text = e.to_string();
    // Inside a script a denied command comes back as a plain ERR with this wording.
    let denied_in_script = text.contains("can't run this command");
    if matches!(e.kind(), ErrorKind::Server(ServerErrorKind::NoPerm))
        || code == "NOPERM"
        || denied_in_script
    {
        let message = format!(
            "redis at {endpoint}: the ACL user lacks a permission ({e}); it needs the commands \
             EVAL, EVALSHA, SCRIPT LOAD, GET, SET, DEL, PTTL, INCR, EXISTS, TIME, INFO, PUBLISH, \
             SUBSCRIBE and PING (and WAIT with redis-wait-replicas), the keys and channels under \
             redis-key-prefix (see docs/redis.md)"
        );
        return LockError::refused_from(message, e.clone());
    }
    if matches!(e.kind(), ErrorKind::InvalidClientConfig) {
        return LockError::refused_from(format!("redis-url {endpoint}: {e}"), e.clone());
    }
    if code == "GLBADTERM" || code == "WRONGTYPE" {
        return LockError::malformed_from(format!("redis at {endpoint}: {e}"), e.clone());
    }
    if is_untrusted(e) {
        let message = format!(
            "redis at {endpoint}: the server's TLS certificate is not trusted ({e}); set \
             redis-ca-file to the CA that signed it"
        );
        return LockError::refused_from(message, e.clone());
    }
    if e.is_timeout() {
        return LockError::Timeout(timeout);
    }
    if matches!(e.kind(), ErrorKind::Server(ServerErrorKind::ReadOnly)) {
        let message = format!(
            "redis at {endpoint} is a read-only replica; redis-url must point to the primary ({e})"
        );
        return LockError::unavailable_from(message, e.clone());
    }
    if e.is_connection_refusal() {
        let message = format!("cannot reach redis at {endpoint}: connection refused ({e})");
        return LockError::unavailable_from(message, e.clone());
    }
    LockError::unavailable_from(format!("redis at {endpoint}: {e}"), e.clone())
}

impl RedisLock {
    /// Connects and authenticates. Check the config with [`RedisConfig::validate`] first.
    ///
    /// # Errors
    /// A clear message when the server is unreachable ([`LockError::Unavailable`],
    /// [`LockError::Timeout`]: worth retrying) or refuses the credentials
    /// ([`LockError::Refused`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it writes nothing, and its connections close when it is dropped.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use leader_lock::{Elector, ElectorConfig, Identity, Timing};
    /// use leader_lock_redis::{RedisConfig, RedisLock};
    ///
    /// let timing = Timing::default();
    /// let config = RedisConfig::new("rediss://redis.example:6380/0");
    /// config.validate(&timing)?;
    /// let lock = RedisLock::connect(config, "my-controller").await?;
    /// let elector = Elector::spawn(
    ///     Arc::new(lock),
    ///     ElectorConfig {
    ///         identity: Identity::new("pod-a"),
    ///         timing,
    ///         release_on_shutdown: true,
    ///     },
    /// )?;
    /// # let _ = elector;
    /// # Ok(())
    /// # }
    /// ```
    pub async fn connect(config: RedisConfig, lock_name: &str) -> Result<RedisLock, LockError> {
        check_config(&config)?;
        if lock_name.is_empty() {
            return Err(LockError::refused("the lock name must not be empty"));
        }
        let timeout = config.request_timeout;
        if config.is_tls() {
            install_crypto_provider();
        }
        let found = Primary::find(&config).await?;
        let endpoint = found.endpoint.clone();
        let db = found.db;
        // The manager retries the first connection once; bound the whole thing anyway.
        let limit = timeout * 3 + Duration::from_secs(1);
        let mut conn = match tokio::time::timeout(limit, manage(found.client.clone(), timeout))
            .await
        {
            Ok(Ok(c)) => c,
            Ok(Err(e)) => {
                return Err(match classify(&e, &endpoint, timeout) {
                    LockError::Unavailable { message, source }
                        if !message.starts_with("cannot reach") =>
                    {
                        LockError::Unavailable {
                            message: format!("cannot reach redis at {endpoint}: {e}"),
                            source,
                        }
                    }
                    LockError::Timeout(_) => LockError::unavailable_from(
                        format!("cannot reach redis at {endpoint}: timed out after {timeout:?}"),
                        e,
                    ),
                    other => other,
                })
            }
            Err(_) => {
                return Err(LockError::unavailable(format!(
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
            primary: Primary::new(found, conn, timeout),
            scripts: Arc::new(Scripts {
                acquire: scripts::acquire(),
                release: scripts::release(),
                get: scripts::get(),
            }),
            knowledge: Arc::new(Knowledge::default()),
            wait_replicas: config.wait_replicas,
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

    /// The key that keeps the last holder's lease (or its release) beyond the record's TTL.
    pub fn state_key(&self) -> &str {
        &self.keys.state
    }

    async fn run<T: redis::FromRedisValue>(
        &self,
        inv: redis::ScriptInvocation<'_>,
    ) -> Result<T, LockError> {
        // Twice at most: once more on the new primary when the Sentinels name one.
        for _ in 0..2 {
            let mut current = self.primary.current();
            let e = match tokio::time::timeout(self.timeout, inv.invoke_async(&mut current.conn))
                .await
            {
                Ok(Ok(v)) => return Ok(v),
                Ok(Err(e)) => classify(&e, &current.endpoint, self.timeout),
                Err(_) => LockError::Timeout(self.timeout),
            };
            // A primary that is gone, hangs, or answers as a replica may have been failed over.
            let moved = matches!(e, LockError::Unavailable { .. } | LockError::Timeout(_))
                && self.primary.rediscover().await;
            if !moved {
                return Err(e);
            }
        }
        Err(LockError::unavailable(format!(
            "redis primary of {}: moved twice during one request",
            self.endpoint
        )))
    }

    /// `WAIT` until `wait_replicas` replicas acknowledged every write so far on the primary's
    /// connection (the acquire or renew just made among them), within the request timeout.
    async fn wait_for_replicas(&self) -> Result<(), LockError> {
        if self.wait_replicas == 0 {
            return Ok(());
        }
        let mut current = self.primary.current();
        let within = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut cmd = redis::cmd("WAIT");
        cmd.arg(self.wait_replicas).arg(within);
        let wait = cmd.query_async::<i64>(&mut current.conn);
        let acked =
            match tokio::time::timeout(self.timeout + Duration::from_millis(100), wait).await {
                Ok(Ok(n)) => n,
                Ok(Err(e)) => return Err(classify(&e, &current.endpoint, self.timeout)),
                Err(_) => return Err(LockError::Timeout(self.timeout)),
            };
        if acked < i64::from(self.wait_replicas) {
            return Err(LockError::unavailable(format!(
                "redis at {}: {acked} of the {} replicas redis-wait-replicas asks for \
                 acknowledged the lock record within {:?}; the leadership does not count yet",
                current.endpoint, self.wait_replicas, self.timeout
            )));
        }
        Ok(())
    }

    /// Interprets a value that is not ours, found with `pttl` left when the reply arrived at
    /// `got`.
    fn follower(&self, raw: &[u8], pttl: i64, got: Instant) -> Result<Attempt, LockError> {
        let wait = pttl_wait(pttl);
        match value::parse(raw) {
            Ok(rec) => {
                if wait.is_none() {
                    return Err(LockError::malformed(format!(
                        "{} holds a record of {} (term {}) without a TTL; it never expires and is \
                         never taken over: delete it by hand",
                        self.keys.holder, rec.holder, rec.term
                    )));
                }
                self.knowledge
                    .saw(&rec, got, wait.unwrap_or(Duration::ZERO));
                Ok(Attempt::Follower {
                    holder: Some(rec.holder),
                    term: Some(rec.term),
                    retry_after: wait,
                })
            }
            Err(why) => {
                if wait.is_none() {
                    return Err(LockError::malformed(format!(
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

    /// The timing rules of [`RedisConfig::validate`], with the request timeout this lock
    /// connected with.
    fn validate(&self, timing: &Timing) -> Result<(), ConfigError> {
        check_timing(timing, self.timeout)
    }

    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError> {
        let me = candidate.holder();
        let lease_ms = u64::try_from(candidate.lease_duration.as_millis()).unwrap_or(u64::MAX);
        if lease_ms == 0 {
            return Err(LockError::refused(
                "lease-duration must be at least 1ms for redis",
            ));
        }
        let k = &self.knowledge;
        k.candidate(&me);
        let expect = k.held(&me);
        let guard = match expect {
            // A leader always asks the server: only a renew that reached it extends validity.
            Some(_) => crate::knowledge::Guard::Free,
            None => match k.plan(&me, Instant::now()) {
                Plan::Follow {
                    holder,
                    term,
                    retry_after,
                } => {
                    // The watch heard every renew of this holder: no need to ask.
                    return Ok(Attempt::Follower {
                        holder: Some(holder),
                        term: Some(term),
                        retry_after: Some(retry_after),
                    });
                }
                Plan::Ask(guard) => guard,
            },
        };
        let mut inv = self.scripts.acquire.prepare_invoke();
        inv.key(&self.keys.holder)
            .key(&self.keys.term)
            .key(&self.keys.state)
            .arg(&me)
            .arg(lease_ms)
            .arg(now_ms())
            .arg(expect.map(|t| t.0.to_string()).unwrap_or_default())
            .arg(k.floor())
            .arg(&self.keys.events)
            .arg(guard.arg());
        let reply: Vec<Value> = self.run(inv).await?;
        let got = Instant::now();
        let malformed = || {
            LockError::malformed(format!(
                "unexpected reply from the acquire script: {reply:?}"
            ))
        };
        let wait_ms = |i: usize| {
            reply
                .get(i)
                .and_then(int)
                .and_then(|w| u64::try_from(w).ok())
                .map(Duration::from_millis)
                .ok_or_else(malformed)
        };
        match reply.first().and_then(int) {
            Some(1) => {
                let term = reply
                    .get(1)
                    .and_then(int)
                    .and_then(|t| u64::try_from(t).ok())
                    .ok_or_else(malformed)?;
                let term = Term(term);
                k.won(&me, term);
                // Held, but only counted once enough replicas have it: until then a failover
                // could promote a replica without the record.
                self.wait_for_replicas().await?;
                Ok(Attempt::leader(term))
            }
            Some(2) => {
                k.drop_held(&me);
                let raw = reply.get(1).and_then(bytes).ok_or_else(malformed)?;
                let pttl = reply.get(2).and_then(int).ok_or_else(malformed)?;
                match value::parse(raw) {
                    // Our own record, but not under the term we believed we held (an acquire of
                    // ours landed unseen after that term was lost): we do not lead under the term
                    // we thought. Look again at once as a candidate; that renews the record and
                    // leads under its real term, valid from that attempt.
                    Ok(rec) if rec.holder == me => {
                        k.saw_term(rec.term);
                        Ok(Attempt::Follower {
                            holder: Some(me),
                            term: Some(rec.term),
                            retry_after: Some(Duration::ZERO),
                        })
                    }
                    _ => self.follower(raw, pttl, got),
                }
            }
            Some(3) => {
                let lost = k.drop_held(&me);
                warn!(lock = %self.describe(), term = ?lost, "our lock key is gone; stepping down");
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(Duration::ZERO),
                })
            }
            Some(4) => {
                let wait = wait_ms(1)?;
                debug!(
                    lock = %self.describe(),
                    ?wait,
                    "redis restarted less than a lease ago; not taking a vanished lock yet"
                );
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(wait),
                })
            }
            Some(5) => {
                let wait = wait_ms(1)?;
                debug!(
                    lock = %self.describe(),
                    ?wait,
                    "the lock record vanished without a release; waiting out its holder's lease"
                );
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(wait),
                })
            }
            Some(6) => {
                let wait = match k.vanished(got) {
                    Some((rec, wait)) => {
                        info!(
                            lock = %self.describe(),
                            holder = %rec.holder,
                            term = %rec.term,
                            ?wait,
                            "the lock vanished without a release or any trace on the server \
                             (flushed, failed over or lost) while its holder was live; waiting \
                             a lease before taking it"
                        );
                        wait
                    }
                    // The holder was seen released meanwhile: look again at once.
                    None => Duration::ZERO,
                };
                Ok(Attempt::Follower {
                    holder: None,
                    term: None,
                    retry_after: Some(wait),
                })
            }
            _ => Err(malformed()),
        }
    }

    async fn release(&self, candidate: &Candidate, term: Term) -> Result<bool, LockError> {
        let me = candidate.holder();
        let mut inv = self.scripts.release.prepare_invoke();
        inv.key(&self.keys.holder)
            .key(&self.keys.state)
            .arg(&me)
            .arg(term.0.to_string())
            .arg(&self.keys.events);
        let released: i64 = self.run(inv).await?;
        self.knowledge.drop_held(&me);
        if released == 1 {
            self.knowledge.released(&me, term);
        }
        Ok(released == 1)
    }

    async fn get(&self) -> Result<Option<LockRecord>, LockError> {
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let reply: Vec<Value> = self.run(inv).await?;
        let got = Instant::now();
        match reply.first() {
            None | Some(Value::Nil) => Ok(None),
            Some(v) => {
                let raw = bytes(v).ok_or_else(|| {
                    LockError::malformed(format!("unexpected reply from the get script: {reply:?}"))
                })?;
                let rec = value::parse(raw).map_err(|why| {
                    LockError::malformed(format!(
                        "{} holds a foreign value: {why}",
                        self.keys.holder
                    ))
                })?;
                if let Some(ttl) = reply.get(1).and_then(int).and_then(pttl_wait) {
                    self.knowledge.saw(&rec, got, ttl);
                }
                Ok(Some(rec))
            }
        }
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let t = self.timeout;
        let current = self.primary.current();
        let fail = |e: RedisError| classify(&e, &current.endpoint, t);
        let mut pubsub = tokio::time::timeout(t, current.client.get_async_pubsub())
            .await
            .map_err(|_| LockError::Timeout(t))?
            .map_err(fail)?;
        tokio::time::timeout(t, pubsub.subscribe(&self.keys.events))
            .await
            .map_err(|_| LockError::Timeout(t))?
            .map_err(fail)?;
        // Expiry, deletion and eviction notifications only come when the server has
        // notify-keyspace-events with K and x, g or e; subscribing costs nothing otherwise, and a
        // denied channel only loses this extra.
        let keyspace = self.keys.keyspace(self.db);
        match tokio::time::timeout(t, pubsub.subscribe(&keyspace)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => debug!(channel = %keyspace, error = %e, "no keyspace notifications"),
            Err(_) => return Err(LockError::Timeout(t)),
        }
        let (sink, messages) = pubsub.split();
        // Read the record once subscribed: from this read on, every change reaches us as a
        // message, so what we know stays complete while the subscription lasts.
        let since = Instant::now();
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let first: Vec<Value> = self.run(inv).await?;
        let got = Instant::now();
        let heard = match (first.first().and_then(bytes), first.get(1).and_then(int)) {
            (Some(raw), Some(pttl)) => match (value::parse(raw), pttl_wait(pttl)) {
                (Ok(rec), Some(ttl)) => {
                    self.knowledge.saw(&rec, got, ttl);
                    Some(rec)
                }
                _ => None,
            },
            _ => None,
        };
        let subscription = self.knowledge.subscribed(since);
        let (tx, rx) = mpsc::channel(64);
        let task = WatchTask {
            conn: current.conn.clone(),
            sink,
            scripts: self.scripts.clone(),
            keys: self.keys.clone(),
            endpoint: current.endpoint.clone(),
            timeout: t,
            knowledge: self.knowledge.clone(),
            tx,
            heard,
            forwarded: None,
            probed: None,
        };
        tokio::spawn(task.run(messages, subscription));
        Ok(futures::stream::unfold(rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        })
        .boxed())
    }
}
