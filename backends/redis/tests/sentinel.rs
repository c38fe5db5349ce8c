//! Redis with Sentinel: the primary is SIGKILLed and Sentinel promotes the replica. The lock
//! follows the promoted replica, also with ACL users and with TLS on the data nodes and the
//! Sentinels; and when that replica never got the lock record (replication held back before
//! the acquire), the vanished-record rule still keeps a single writer. Wrong credentials are
//! refused at connect, naming the side that refused them.

mod common;

use std::time::Duration;

use leader_lock::backend::LockError;
use leader_lock::conformance::{wait_following, wait_leader, wait_state, SplitBrainChecker};
use leader_lock::{Elector, Identity, LeaderState, Timing};
use leader_lock_redis::{RedisConfig, RedisLock, SentinelConfig};
use redis::IntoConnectionInfo;
use testkit::redis_sentinel::{SentinelTopology, User, DATA_USER, MASTER, SENTINEL_USER};

/// How long the Sentinels may take to promote the replica on a busy machine.
const FAILOVER_PATIENCE: Duration = Duration::from_secs(60);

fn sentinel_config(t: &SentinelTopology, timing: &Timing) -> RedisConfig {
    // `url` names no server when the Sentinels name the primary.
    let mut c = common::config("", timing);
    c.sentinel = Some(SentinelConfig {
        addresses: t.sentinel_urls(),
        master: MASTER.to_string(),
        username: None,
        password: None,
    });
    c.validate(timing).expect("a valid config");
    c
}

/// `config` logging in as `data` on the data nodes and as `sentinel` on the Sentinels.
fn with_users(mut config: RedisConfig, data: User, sentinel: User) -> RedisConfig {
    config.username = Some(data.name.to_string());
    config.password = Some(data.password.to_string());
    let s = config.sentinel.as_mut().expect("a Sentinel config");
    s.username = Some(sentinel.name.to_string());
    s.password = Some(sentinel.password.to_string());
    config
}

async fn contender(t: &SentinelTopology, id: &str, timing: Timing) -> Elector {
    contender_with(sentinel_config(t, &timing), id, timing).await
}

async fn contender_with(config: RedisConfig, id: &str, timing: Timing) -> Elector {
    common::elector(config, "sentinel", id, timing).await
}

/// A client of the data node at `port`, with the TLS and the data node user of `config`.
fn data_node(config: &RedisConfig, port: u16) -> redis::Client {
    let scheme = if config.ca_file.is_some() {
        "rediss"
    } else {
        "redis"
    };
    let info = format!("{scheme}://127.0.0.1:{port}")
        .into_connection_info()
        .expect("a URL");
    let mut settings = info.redis_settings().clone();
    if let (Some(u), Some(p)) = (&config.username, &config.password) {
        settings = settings.set_username(u).set_password(p);
    }
    let info = info.set_redis_settings(settings);
    match &config.ca_file {
        Some(ca) => redis::Client::build_with_tls(
            info,
            redis::TlsCertificates {
                client_tls: None,
                root_cert: Some(std::fs::read(ca).expect("the CA file")),
            },
        ),
        None => redis::Client::open(info),
    }
    .expect("a client")
}

/// The holder key's value on the server at `port`, if any (read as `config` connects).
async fn holder_on(config: &RedisConfig, port: u16) -> Option<String> {
    let mut con = data_node(config, port)
        .get_multiplexed_async_connection()
        .await
        .ok()?;
    redis::cmd("GET")
        .arg("gateway-leader:{sentinel}:holder")
        .query_async(&mut con)
        .await
        .ok()?
}

/// Deletes the lock's keys on the replica at `port`, as if it had never received them.
async fn forget_the_lock(port: u16) {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}")).expect("a URL");
    let mut con = client
        .get_multiplexed_async_connection()
        .await
        .expect("connects to the replica");
    // First the replica must have read the end of its primary's stream: a write the primary sent
    // before it died may still wait in the replica's socket, and would bring the record back.
    tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            let info: String = redis::cmd("INFO")
                .arg("replication")
                .query_async(&mut con)
                .await
                .expect("INFO replication");
            if info.contains("master_link_status:down") {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the replica sees its primary gone");
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("replica-read-only")
        .arg("no")
        .query_async(&mut con)
        .await
        .expect("the replica accepts writes");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg("gateway-leader:{sentinel}:*")
        .query_async(&mut con)
        .await
        .expect("lists the keys");
    assert!(!keys.is_empty(), "the replica never had the lock's keys");
    let _: i64 = redis::cmd("DEL")
        .arg(&keys)
        .query_async(&mut con)
        .await
        .expect("deletes them");
}

/// Waits until one of `electors` leads; returns its index.
async fn any_leader(electors: &[&Elector], limit: Duration) -> usize {
    tokio::time::timeout(limit, async {
        loop {
            for (i, e) in electors.iter().enumerate() {
                if e.leadership().check().is_ok() {
                    return i;
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("someone leads")
}

/// A leads and b follows through the Sentinels of `t`, both connected with `config`; the
/// primary is SIGKILLed, the replica promoted, and someone leads again with the record on the
/// new primary naming them; never two leaders at once.
async fn lock_follows_the_failover(t: &mut SentinelTopology, config: RedisConfig) {
    let timing = common::timing();
    let patience = timing.lease_duration * 4 + Duration::from_secs(10);
    let checker = SplitBrainChecker::new();
    let a = contender_with(config.clone(), "a", timing).await;
    checker.watch(a.leadership());
    wait_leader(&a.leadership(), patience, "a").await;
    let b = contender_with(config.clone(), "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience, "b").await;
    let old = t.node(0).port();
    let before = holder_on(&config, old)
        .await
        .expect("the record is on the primary");
    assert!(before.contains("\"holder\":\"a_"), "{before}");

    t.node(0).kill();
    let new = t
        .wait_failover(old, FAILOVER_PATIENCE)
        .await
        .expect("the replica is promoted");
    let who = any_leader(&[&a, &b], FAILOVER_PATIENCE).await;
    let holder = holder_on(&config, new)
        .await
        .expect("the record is on the new primary");
    let id = ["a", "b"][who];
    assert!(
        holder.contains(&format!("\"holder\":\"{id}_")),
        "{id} leads but the new primary holds {holder}"
    );
    a.abort().await;
    b.abort().await;
    checker.finish().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_failover_moves_the_lock_to_the_promoted_replica() {
    common::init_tracing();
    let mut t = SentinelTopology::start()
        .await
        .expect("the topology starts");
    let config = sentinel_config(&t, &common::timing());
    lock_follows_the_failover(&mut t, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_acl_users_follows_a_failover() {
    common::init_tracing();
    let mut t = SentinelTopology::builder()
        .acl()
        .start()
        .await
        .expect("the topology with ACL users starts");
    let timing = common::timing();
    let config = with_users(sentinel_config(&t, &timing), DATA_USER, SENTINEL_USER);
    config.validate(&timing).expect("a valid config");
    lock_follows_the_failover(&mut t, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_tls_follows_a_failover() {
    common::init_tracing();
    let pki = common::Pki::new();
    let mut t = SentinelTopology::builder()
        .tls(pki.tls.clone())
        .start()
        .await
        .expect("the topology with TLS starts");
    let timing = common::timing();
    let mut config = sentinel_config(&t, &timing);
    assert!(
        config
            .sentinel
            .as_ref()
            .is_some_and(|s| s.addresses.iter().all(|a| a.starts_with("rediss://"))),
        "{config:?}"
    );

    // Without the CA neither the Sentinels nor the data nodes are trusted: refused for good,
    // with the setting to fix, not retried as if they were down.
    let Err(e) = connect_within(config.clone()).await else {
        panic!("a Sentinel signed by an unknown CA must not be trusted");
    };
    eprintln!("without the CA: {e}");
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    assert!(e.to_string().contains("redis-ca-file"), "{e}");

    config.ca_file = Some(pki.ca_file());
    config.validate(&timing).expect("a valid config");
    lock_follows_the_failover(&mut t, config).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_with_tls_and_acl_users_follows_a_failover() {
    common::init_tracing();
    let pki = common::Pki::new();
    let mut t = SentinelTopology::builder()
        .acl()
        .tls(pki.tls.clone())
        .start()
        .await
        .expect("the topology with TLS and ACL users starts");
    let timing = common::timing();
    let mut config = with_users(sentinel_config(&t, &timing), DATA_USER, SENTINEL_USER);
    config.ca_file = Some(pki.ca_file());
    config.validate(&timing).expect("a valid config");
    lock_follows_the_failover(&mut t, config).await;
}

/// `RedisLock::connect` with `config`, which must answer (succeed or fail) well within a
/// minute: a refusal must not turn into retries.
async fn connect_within(config: RedisConfig) -> Result<RedisLock, LockError> {
    tokio::time::timeout(
        Duration::from_secs(60),
        RedisLock::connect(config, "sentinel"),
    )
    .await
    .expect("connect answers instead of hanging")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_wrong_credentials_are_refused_naming_the_side() {
    common::init_tracing();
    let t = SentinelTopology::builder()
        .acl()
        .start()
        .await
        .expect("the topology with ACL users starts");
    let timing = common::timing();
    let plain = sentinel_config(&t, &timing);
    let wrong = User {
        name: SENTINEL_USER.name,
        password: "not-the-password",
    };
    let wrong_data = User {
        name: DATA_USER.name,
        password: "not-the-password",
    };
    // (config, the setting the message must name (and not the other side's), why)
    let cases = [
        (
            with_users(plain.clone(), DATA_USER, wrong),
            "redis-sentinel-password",
            "a wrong Sentinel password",
        ),
        (
            // The data nodes' user given for the Sentinels: they do not know it.
            with_users(plain.clone(), DATA_USER, DATA_USER),
            "redis-sentinel-password",
            "the data nodes' user on the Sentinels",
        ),
        (
            with_users(plain.clone(), wrong_data, SENTINEL_USER),
            "redis-password",
            "a wrong data node password",
        ),
        (
            with_users(plain.clone(), SENTINEL_USER, SENTINEL_USER),
            "redis-password",
            "the Sentinels' user on the data nodes",
        ),
    ];
    for (config, names, why) in cases {
        config.validate(&timing).expect("a valid config");
        let Err(e) = connect_within(config).await else {
            panic!("{why}: connected");
        };
        eprintln!("{why}: {e}");
        assert!(matches!(e, LockError::Refused { .. }), "{why}: {e:?}");
        let msg = e.to_string();
        let other = if names == "redis-password" {
            "redis-sentinel-password"
        } else {
            "redis-password"
        };
        assert!(
            msg.contains("rejected the credentials") && msg.contains(names) && !msg.contains(other),
            "{why}: {msg}"
        );
        assert!(!msg.contains("not-the-password"), "{why}: {msg}");
    }
    // With no Sentinel credentials at all the Sentinels ask for some (NOAUTH).
    let mut no_sentinel_login = with_users(plain, DATA_USER, SENTINEL_USER);
    if let Some(s) = no_sentinel_login.sentinel.as_mut() {
        s.username = None;
        s.password = None;
    }
    let Err(e) = connect_within(no_sentinel_login).await else {
        panic!("no Sentinel login: connected");
    };
    eprintln!("no Sentinel login: {e}");
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("redis-sentinel-password") && !msg.contains("redis-password"),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_promoted_replica_without_the_record_keeps_one_writer() {
    common::init_tracing();
    let mut t = SentinelTopology::start()
        .await
        .expect("the topology starts");
    // A renew deadline longer than the failover: the old leader is still valid when the
    // promoted replica, which lacks its record, starts serving.
    let timing = Timing::new(
        Duration::from_secs(10),
        Duration::from_secs(8),
        Duration::from_millis(500),
    )
    .expect("valid timing");
    let patience = timing.lease_duration * 3;
    let checker = SplitBrainChecker::new();
    let a = contender(&t, "a", timing).await;
    let ia = checker.watch(a.leadership());
    let first = wait_leader(&a.leadership(), patience, "a").await;
    let b = contender(&t, "b", timing).await;
    checker.watch(b.leadership());
    wait_following(&b.leadership(), patience, "b").await;

    let old = t.node(0).port();
    t.node(0).kill();
    // The replica never got a's acquire: every key the lock wrote is gone from it before the
    // Sentinels promote it (they wait a second before they even call the primary down).
    let replica = t.node(1).port();
    forget_the_lock(replica).await;
    let new = t
        .wait_failover(old, FAILOVER_PATIENCE)
        .await
        .expect("the replica is promoted");
    assert_eq!(new, replica);
    // (A contender started now, that never saw the record, is not guarded: docs/redis.md.)
    any_leader(&[&a, &b], patience).await;
    let record = holder_on(&sentinel_config(&t, &timing), new)
        .await
        .expect("a record on the new primary");
    let a_history = checker.history(ia);
    a.abort().await;
    b.abort().await;
    let leaders = checker.finish().await;
    // a's leadership ended when it found its record gone; whoever leads now does so under a new
    // term, never under the lost one.
    let stepped_down = a_history
        .iter()
        .skip_while(|(_, s)| !matches!(s, LeaderState::Leader { .. }))
        .any(|(_, s)| !matches!(s, LeaderState::Leader { .. }));
    assert!(
        stepped_down,
        "a did not step down when its record vanished: {a_history:?}"
    );
    assert!(
        !record.contains(&format!("\"term\":{},", first.0)),
        "the lost term {first} came back: {record}"
    );
    assert!(leaders.len() >= 2, "one leadership only: {leaders:?}");
}

/// The median and the longest of `n` renewals of `lock` (the first attempt acquires).
async fn renewals(lock: &RedisLock, n: usize) -> (Duration, Duration) {
    let c = leader_lock::backend::Candidate {
        identity: Identity::new("timed"),
        lease_duration: common::timing().lease_duration,
    };
    let mut took = Vec::new();
    for _ in 0..=n {
        let sent = std::time::Instant::now();
        let attempt = leader_lock::backend::LeaderLock::try_acquire_or_renew(lock, &c)
            .await
            .expect("an attempt");
        assert!(
            matches!(attempt, leader_lock::backend::Attempt::Leader { .. }),
            "{attempt:?}"
        );
        took.push(sent.elapsed());
    }
    took.remove(0);
    took.sort();
    (took[took.len() / 2], took[took.len() - 1])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sentinel_wait_replicas_counts_a_leadership_only_once_the_replica_has_it() {
    common::init_tracing();
    let mut t = SentinelTopology::start()
        .await
        .expect("the topology starts");
    let timing = common::timing();
    let patience = timing.lease_duration * 4 + Duration::from_secs(10);
    let mut config = sentinel_config(&t, &timing);
    config.wait_replicas = 1;

    // What a WAIT costs per renewal, beside the same renewals without it (printed: timing
    // figures belong to the bench; this machine is shared).
    let plain = RedisLock::connect(sentinel_config(&t, &timing), "timed-plain")
        .await
        .expect("connects");
    let waiting = RedisLock::connect(config.clone(), "timed-wait")
        .await
        .expect("connects");
    let (p50, max) = renewals(&plain, 50).await;
    let (w50, wmax) = renewals(&waiting, 50).await;
    eprintln!(
        "renewals without WAIT: p50 {p50:?}, max {max:?}; with WAIT 1: p50 {w50:?}, max {wmax:?}"
    );

    let a = contender_with(config.clone(), "a", timing).await;
    wait_leader(&a.leadership(), patience, "a").await;
    let replica = t.node(1).port();
    let on_replica = holder_on(&config, replica)
        .await
        .expect("the replica has the record");
    assert!(on_replica.contains("\"holder\":\"a_"), "{on_replica}");

    // Without a replica to acknowledge them, renewals no longer count: a steps down.
    t.node(1).kill();
    wait_state(&a.leadership(), patience, "a to step down", |s| {
        !matches!(s, LeaderState::Leader { .. })
    })
    .await;
    a.abort().await;
}
