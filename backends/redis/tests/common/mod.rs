//! Shared helpers of the redis backend's tests.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::LeaderLock;
use leader_lock::conformance::{Harness, HarnessError, Protect, Tamper};
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_redis::{RedisConfig, RedisLock};
use testkit::redis::{RedisServer, RedisTls};

/// Short timing for tests: lease 2 s, renew deadline 1.5 s, retry 300 ms.
pub fn timing() -> Timing {
    Timing::new(
        Duration::from_millis(2000),
        Duration::from_millis(1500),
        Duration::from_millis(300),
    )
    .expect("valid timing")
}

/// The config the CLI would build for `url` with `timing` (its key prefix is the binary's
/// `gateway-leader`, which docs/redis.md's ACL names).
pub fn config(url: &str, timing: &Timing) -> RedisConfig {
    RedisConfig {
        request_timeout: timing.renew_deadline / 2,
        key_prefix: "gateway-leader".to_string(),
        ..RedisConfig::new(url)
    }
}

/// An elector `id` over the lock `name`, connected with `config`; it releases on shutdown.
pub async fn elector(config: RedisConfig, name: &str, id: &str, timing: Timing) -> Elector {
    let lock = RedisLock::connect(config, name).await.expect("connects");
    Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new(id),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// Certificates for throwaway TLS servers (a CA and a leaf for 127.0.0.1), and the CA in a
/// file for a client's `ca_file`.
pub struct Pki {
    pub tls: RedisTls,
    dir: tempfile::TempDir,
}

impl Pki {
    pub fn new() -> Pki {
        let tls = RedisTls::generate().expect("test certificates");
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("ca.pem"), &tls.ca_pem).expect("write the CA");
        Pki { tls, dir }
    }

    pub fn ca_file(&self) -> std::path::PathBuf {
        self.dir.path().join("ca.pem")
    }
}

/// Logs to the test output when RUST_LOG is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A conformance harness over one throwaway redis-server.
pub struct Redis {
    pub server: RedisServer,
}

impl Redis {
    pub async fn start() -> Redis {
        init_tracing();
        let server = RedisServer::start()
            .await
            .expect("redis-server starts (install with `apt-get install redis-server`)");
        Redis { server }
    }

    pub async fn connect(&self, name: &str) -> RedisLock {
        RedisLock::connect(config(&self.server.url(), &timing()), name)
            .await
            .expect("connects")
    }

    /// A plain connection for planting raw values.
    pub async fn raw(&self) -> redis::aio::MultiplexedConnection {
        redis::Client::open(self.server.url())
            .expect("url")
            .get_multiplexed_async_connection()
            .await
            .expect("raw connection")
    }
}

/// What a tampering writer plants, per case; every one must go through our parser.
pub fn tampered(case: Tamper) -> &'static [u8] {
    match case {
        Tamper::WrongTypes => {
            br#"{"v":1,"holder":7,"term":"x","lease_ms":"long","acquired_ms":[],"renewed_ms":{}}"#
        }
        Tamper::MissingFields => br#"{"v":1,"holder":"intruder_1"}"#,
        Tamper::NegativeDuration => concat!(
            r#"{"v":1,"holder":"intruder_1","term":1,"lease_ms":-5,"#,
            r#""acquired_ms":0,"renewed_ms":0}"#
        )
        .as_bytes(),
        Tamper::HugeDuration => concat!(
            r#"{"v":1,"holder":"intruder_1","term":1,"lease_ms":18446744073709551615,"#,
            r#""acquired_ms":0,"renewed_ms":0}"#
        )
        .as_bytes(),
        Tamper::RenewInFuture => concat!(
            r#"{"v":1,"holder":"intruder_1","term":1,"lease_ms":1000,"#,
            r#""acquired_ms":0,"renewed_ms":99999999999999}"#
        )
        .as_bytes(),
        Tamper::EmptyHolder => {
            br#"{"v":1,"holder":"","term":1,"lease_ms":1000,"acquired_ms":0,"renewed_ms":0}"#
        }
        Tamper::Garbage => b"\x00\x01not json at all\xff",
    }
}

#[async_trait::async_trait]
impl Harness for Redis {
    fn timing(&self) -> Timing {
        timing()
    }

    async fn lock(&self, name: &str) -> Result<Arc<dyn LeaderLock>, HarnessError> {
        let lock = RedisLock::connect(config(&self.server.url(), &timing()), name).await?;
        Ok(Arc::new(lock))
    }

    async fn tamper(&self, name: &str, case: Tamper) -> Result<Protect, HarnessError> {
        let key = self.connect(name).await.holder_key().to_string();
        let ttl = Duration::from_secs(2);
        let mut raw = self.raw().await;
        let sent = tokio::time::Instant::now();
        let _: () = redis::cmd("SET")
            .arg(&key)
            .arg(tampered(case))
            .arg("PX")
            .arg(ttl.as_millis() as u64)
            .query_async(&mut raw)
            .await?;
        // The server's TTL protects whatever the value says, from when it applied the SET: the
        // protection owed from our return is shorter by the reply's way back (the suite measures
        // from the return, and a contender that takes the lock right at the TTL's end must not
        // look early).
        Ok(Protect::For(ttl.saturating_sub(sent.elapsed())))
    }

    async fn vanish(&self, name: &str) -> Result<(), HarnessError> {
        let key = self.connect(name).await.holder_key().to_string();
        let mut raw = self.raw().await;
        let deleted: i64 = redis::cmd("DEL").arg(&key).query_async(&mut raw).await?;
        if deleted != 1 {
            return Err(format!("no lock key {key} to delete").into());
        }
        Ok(())
    }
}
