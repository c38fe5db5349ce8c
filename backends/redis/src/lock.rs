use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use futures::StreamExt;
use leader_lock::backend::{
    Attempt, Candidate, ConfigError, Inspection, LeaderLock, LockError, LockEventStream, LockRecord,
};
use leader_lock::{Term, Timing};
use redis::aio::{ConnectionManager, PubSub};
use redis::{RedisError, Value};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::config::{check_config, check_timing, RedisConfig};
use crate::connection::{manage, Current, Found, Primary};
use crate::error::classify;
use crate::held::Holds;
use crate::keys::Keys;
use crate::knowledge::{Guard, Knowledge, Plan};
use crate::reply::AcquireReply;
use crate::scripts::{self, Scripts};
use crate::value::{self, bytes, int, pttl_wait};
use crate::watch::WatchTask;

/// A [`LeaderLock`] on one Redis server (or a cluster's primary for the lock's slot).
///
/// See `docs/redis.md` for the guarantees, the key layout and the value format.
pub struct RedisLock {
    /// The lock's name, as given to `connect`.
    name: String,
    /// The address first connected to, for messages.
    endpoint: String,
    /// The lock's keys and channel; fixed at connect, so no lock.
    keys: Keys,
    /// The database the keys are in (for keyspace notifications).
    db: i64,
    /// The deadline of each request.
    timeout: Duration,
    /// The primary's connection; with Sentinel it moves to the promoted replica on a failover.
    primary: Primary,
    /// The lock's scripts; fixed, shared with the watch tasks.
    scripts: Arc<Scripts>,
    /// What this client knows of the lock: the highest term seen, the last live holder seen and
    /// whether a watch hears every change.
    knowledge: Arc<Knowledge>,
    /// The holders campaigning through this client, and the term each holds.
    holds: Arc<Holds>,
    /// `WAIT` for this many replicas after every acquire and renew (0: do not wait).
    wait_replicas: u32,
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Connects to the primary `found` and PINGs it, each bounded by `timeout`: the handshake
/// authenticates, the PING proves the session works before `connect` reports success.
async fn open(found: &Found, timeout: Duration) -> Result<ConnectionManager, LockError> {
    let endpoint = &found.endpoint;
    // The manager retries the first connection once; bound the whole thing anyway.
    let limit = timeout * 3 + Duration::from_secs(1);
    let mut conn = match tokio::time::timeout(limit, manage(found.client.clone(), timeout)).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(unreachable(&e, endpoint, timeout)),
        Err(_) => {
            return Err(LockError::unavailable(format!(
                "cannot reach redis at {endpoint}: no connection within {limit:?}"
            )))
        }
    };
    let pong: Result<String, _> =
        tokio::time::timeout(timeout, redis::cmd("PING").query_async(&mut conn))
            .await
            .map_err(|_| LockError::Timeout(timeout))?;
    pong.map_err(|e| classify(&e, endpoint, timeout))?;
    Ok(conn)
}

/// A first connection to `endpoint` that failed with `e`: said as unreachable unless it is a
/// refusal or already says so.
fn unreachable(e: &RedisError, endpoint: &str, timeout: Duration) -> LockError {
    match classify(e, endpoint, timeout) {
        LockError::Unavailable { message, source } if !message.starts_with("cannot reach") => {
            LockError::Unavailable {
                message: format!("cannot reach redis at {endpoint}"),
                source,
            }
        }
        LockError::Timeout(_) => LockError::unavailable_from(
            format!("cannot reach redis at {endpoint} within {timeout:?}"),
            e.clone(),
        ),
        other => other,
    }
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
        let found = Primary::find(&config).await?;
        let endpoint = found.endpoint.clone();
        let db = found.db;
        let conn = open(&found, timeout).await?;
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
                inspect: scripts::inspect(),
            }),
            knowledge: Arc::new(Knowledge::default()),
            holds: Arc::new(Holds::default()),
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

    /// Subscribes to the lock's events channel on `current`, and to its key's keyspace
    /// notifications when the server sends them.
    async fn subscribe(&self, current: &Current) -> Result<PubSub, LockError> {
        let t = self.timeout;
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
        Ok(pubsub)
    }

    /// A new watch's first read of the record: what it starts from, noted as live when it is.
    async fn first_read(&self) -> Result<Option<LockRecord>, LockError> {
        let mut inv = self.scripts.get.prepare_invoke();
        inv.key(&self.keys.holder);
        let first: Vec<Value> = self.run(inv).await?;
        let got = Instant::now();
        Ok(
            match (first.first().and_then(bytes), first.get(1).and_then(int)) {
                (Some(raw), Some(pttl)) => match (value::parse(raw), pttl_wait(pttl)) {
                    (Ok(rec), Some(ttl)) => {
                        self.knowledge.saw(&rec, got, ttl);
                        Some(rec)
                    }
                    _ => None,
                },
                _ => None,
            },
        )
    }

    /// Runs the acquire script for `me` (expecting to hold `expect`, with the client's `guard`
    /// for a lock gone without a trace); its reply and when it arrived.
    async fn acquire(
        &self,
        me: &str,
        lease_ms: u64,
        expect: Option<Term>,
        guard: Guard,
    ) -> Result<(AcquireReply, Instant), LockError> {
        let mut inv = self.scripts.acquire.prepare_invoke();
        inv.key(&self.keys.holder)
            .key(&self.keys.term)
            .key(&self.keys.state)
            .arg(me)
            .arg(lease_ms)
            .arg(now_ms())
            .arg(expect.map(|t| t.0.to_string()).unwrap_or_default())
            .arg(self.knowledge.floor())
            .arg(&self.keys.events)
            .arg(guard.arg());
        let reply: Vec<Value> = self.run(inv).await?;
        let got = Instant::now();
        Ok((AcquireReply::parse(&reply)?, got))
    }

    /// What the acquire script's `reply` (arrived at `got`) means for `me`, campaigning for a
    /// lease of `own_lease`.
    async fn settle(
        &self,
        me: &str,
        own_lease: Duration,
        reply: AcquireReply,
        got: Instant,
    ) -> Result<Attempt, LockError> {
        let wait = match reply {
            AcquireReply::Leader(term) => {
                self.knowledge.won(me, term);
                self.holds.won(me, term);
                // Held, but only counted once enough replicas have it: until then a failover
                // could promote a replica without the record.
                self.wait_for_replicas().await?;
                return Ok(Attempt::leader(term));
            }
            AcquireReply::Taken { raw, pttl } => {
                self.holds.drop_held(me);
                return self.taken(me, &raw, pttl, got);
            }
            AcquireReply::Gone => {
                let lost = self.holds.drop_held(me);
                warn!(lock = %self.describe(), term = ?lost, "our lock key is gone; stepping down");
                Duration::ZERO
            }
            AcquireReply::Restarted(wait) => {
                debug!(lock = %self.describe(), ?wait,
                    "redis restarted less than a lease ago; not taking a vanished lock yet");
                wait
            }
            AcquireReply::Vanished(wait) => {
                debug!(lock = %self.describe(), ?wait,
                    "the lock record vanished without a release; waiting out its holder's lease");
                wait
            }
            AcquireReply::Traceless => self.traceless(got, own_lease),
        };
        Ok(Attempt::Follower {
            holder: None,
            term: None,
            retry_after: Some(wait),
        })
    }

    /// The key holds `raw` with `pttl` left, as the reply arriving at `got` showed: our own
    /// record under another term than we believed (an acquire of ours landed unseen after that
    /// term was lost), or another's.
    fn taken(&self, me: &str, raw: &[u8], pttl: i64, got: Instant) -> Result<Attempt, LockError> {
        match value::parse(raw) {
            // We do not lead under the term we thought. Look again at once as a candidate; that
            // renews the record and leads under its real term, valid from that attempt.
            Ok(rec) if rec.holder == me => {
                self.knowledge.saw_term(rec.term);
                Ok(Attempt::Follower {
                    holder: Some(me.to_string()),
                    term: Some(rec.term),
                    retry_after: Some(Duration::ZERO),
                })
            }
            _ => self.follower(raw, pttl, got),
        }
    }

    /// The lock is gone with no trace on the server, found at `got`: a lease is counted from
    /// the first time it was found so (`Knowledge::vanished`); how long is left of it.
    fn traceless(&self, got: Instant, own_lease: Duration) -> Duration {
        match self.knowledge.vanished(got, own_lease) {
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
        }
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

    /// In three steps: 1. what this client knows decides whether to ask at all (a leader always
    /// does; a follower whose watch heard every renew does not); 2. the acquire script, which
    /// renews, takes, or says why not; 3. what its reply means for us (`RedisLock::settle`).
    async fn try_acquire_or_renew(&self, candidate: &Candidate) -> Result<Attempt, LockError> {
        let me = candidate.holder();
        let lease_ms = u64::try_from(candidate.lease_duration.as_millis()).unwrap_or(u64::MAX);
        if lease_ms == 0 {
            return Err(LockError::refused(
                "lease-duration must be at least 1ms for redis",
            ));
        }
        self.holds.candidate(&me);
        let expect = self.holds.held(&me);
        let guard = match expect {
            // A leader always asks the server: only a renew that reached it extends validity.
            Some(_) => Guard::Free,
            None => match self
                .knowledge
                .plan(&me, candidate.lease_duration, Instant::now())
            {
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
        let (reply, got) = self.acquire(&me, lease_ms, expect, guard).await?;
        self.settle(&me, candidate.lease_duration, reply, got).await
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
        self.holds.drop_held(&me);
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

    /// The record and its PTTL, the term counter (`termCounter`), and the state key: the
    /// server time of the last renew (`serverRenewTime`) and, with no record, the last holder,
    /// released or vanished, and how long a vanished one holds the lock off by the server's
    /// clock; and the server's uptime, for a restart that lost all of it. One script: one
    /// consistent reading.
    async fn inspect(&self) -> Result<Inspection, LockError> {
        let mut inv = self.scripts.inspect.prepare_invoke();
        inv.key(&self.keys.holder)
            .key(&self.keys.term)
            .key(&self.keys.state);
        let reply: Vec<Value> = self.run(inv).await?;
        crate::inspect::interpret(&reply, &self.keys.holder)
    }

    async fn watch(&self) -> Result<LockEventStream, LockError> {
        let t = self.timeout;
        let current = self.primary.current();
        let (sink, messages) = self.subscribe(&current).await?.split();
        // Read the record once subscribed: from this read on, every change reaches us as a
        // message, so what we know stays complete while the subscription lasts.
        let since = Instant::now();
        let heard = self.first_read().await?;
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
            holds: self.holds.clone(),
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
