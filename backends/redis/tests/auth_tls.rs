//! TLS with a custom CA, password and ACL authentication, and clear connection errors.

mod common;

use std::sync::Arc;
use std::time::Duration;

use leader_lock::backend::{ConfigError, LockError};
use leader_lock::conformance::{patience, wait_leader};
use leader_lock::{Elector, ElectorConfig, Identity};
use leader_lock_redis::{RedisConfig, RedisLock};
use testkit::redis::RedisServer;

async fn leads(config: RedisConfig, name: &str) {
    let timing = common::timing();
    let lock = RedisLock::connect(config, name).await.expect("connects");
    let e = Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new("tls"),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing");
    wait_leader(&e.leadership(), patience(&timing), "the only contender").await;
    assert!(e.shutdown().await.expect("releases"), "released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_with_custom_ca_and_passwords() {
    common::init_tracing();
    let pki = common::Pki::new();
    let server = RedisServer::builder()
        .tls(pki.tls.clone())
        .requirepass("default-secret")
        .acl_user("leader", "acl-secret")
        .start()
        .await
        .expect("a TLS redis-server starts");
    let url = server.url();
    assert!(url.starts_with("rediss://"), "{url}");
    let timing = common::timing();

    // The default user's password, with the CA from a file.
    let mut c = common::config(&url, &timing);
    c.ca_file = Some(pki.ca_file());
    c.password = Some("default-secret".into());
    c.validate(&timing).expect("valid config");
    leads(c.clone(), "tls-default").await;

    // An ACL user.
    let mut acl = c.clone();
    acl.username = Some("leader".into());
    acl.password = Some("acl-secret".into());
    leads(acl.clone(), "tls-acl").await;

    // Credentials in the URL are refused before connecting, without echoing the password.
    let mut in_url = common::config(
        &url.replace("rediss://", "rediss://leader:acl-secret@"),
        &timing,
    );
    in_url.ca_file = Some(pki.ca_file());
    match in_url
        .validate(&timing)
        .expect_err("credentials in the URL")
    {
        ConfigError::CredentialsInUrl {
            setting: "redis-url",
            shown,
        } => assert!(!shown.contains("acl-secret"), "{shown}"),
        other => panic!("expected credentials refused in redis-url: {other:?}"),
    }

    // A wrong ACL password is refused with a message that says what to fix.
    let mut wrong = acl.clone();
    wrong.password = Some("nope".into());
    let Err(e) = RedisLock::connect(wrong, "tls-wrong").await else {
        panic!("a wrong password must not connect");
    };
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("rejected the credentials")
            && msg.contains("check the username and the password"),
        "{msg}"
    );

    // Without our CA the server certificate is not trusted: the connection fails, it is not
    // silently accepted.
    let mut untrusted = c.clone();
    untrusted.ca_file = None;
    let Err(e) = RedisLock::connect(untrusted, "tls-untrusted").await else {
        panic!("a server signed by an unknown CA must not be trusted");
    };
    eprintln!("without the CA: {e}");
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    assert!(
        e.to_string().contains(&url) && e.to_string().contains("redis-ca-file"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn password_auth_plain() {
    common::init_tracing();
    let server = RedisServer::builder()
        .requirepass("s3cret")
        .start()
        .await
        .expect("redis-server starts");
    let timing = common::timing();
    let mut c = common::config(&server.url(), &timing);

    // No password at all.
    let Err(e) = RedisLock::connect(c.clone(), "pw").await else {
        panic!("connecting without the password must fail");
    };
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    assert!(e.to_string().contains("rejected the credentials"), "{e}");

    // A wrong password.
    c.password = Some("wrong".into());
    let Err(e) = RedisLock::connect(c.clone(), "pw").await else {
        panic!("a wrong password must fail");
    };
    let msg = e.to_string();
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    assert!(
        msg.contains("rejected the credentials")
            && msg.contains(&server.url())
            && !msg.contains("wrong"),
        "{msg}"
    );
    // The refusal keeps the server's own error, for callers that inspect the cause.
    let source = std::error::Error::source(&e).expect("the redis error is kept");
    let redis_error = source
        .downcast_ref::<redis::RedisError>()
        .unwrap_or_else(|| panic!("not a redis::RedisError: {source:?}"));
    assert!(
        matches!(redis_error.kind(), redis::ErrorKind::AuthenticationFailed)
            || redis_error.code() == Some("WRONGPASS"),
        "{redis_error:?}"
    );

    c.password = Some("s3cret".into());
    leads(c, "pw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_is_a_clear_error() {
    common::init_tracing();
    let port = testkit::free_port().expect("port");
    let url = format!("redis://127.0.0.1:{port}");
    let started = tokio::time::Instant::now();
    let Err(e) = RedisLock::connect(common::config(&url, &common::timing()), "gone").await else {
        panic!("nothing listens on {url}");
    };
    assert!(matches!(e, LockError::Unavailable { .. }), "{e:?}");
    let msg = e.to_string();
    assert!(
        msg.contains("cannot reach redis at") && msg.contains(&format!("127.0.0.1:{port}")),
        "{msg}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "gave up in time"
    );

    // A bad scheme is caught before any network.
    let e = RedisConfig::new(format!("http://127.0.0.1:{port}"))
        .validate(&common::timing())
        .unwrap_err();
    assert!(
        matches!(
            e,
            ConfigError::Invalid {
                setting: "redis-url",
                ..
            }
        ),
        "{e:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_refused_on_connect_keeps_its_config_error() {
    let mut c = common::config("rediss://127.0.0.1:1", &common::timing());
    c.ca_file = Some("/nonexistent/ca.pem".into());
    let Err(e) = RedisLock::connect(c, "ca").await else {
        panic!("a missing CA file must not connect");
    };
    assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
    let config = std::error::Error::source(&e).and_then(|s| s.downcast_ref::<ConfigError>());
    assert_eq!(
        config.and_then(ConfigError::setting),
        Some("redis-ca-file"),
        "{e:?}"
    );
}

/// The `--user` arguments of the least-privilege ACL user documented in docs/redis.md.
const LEAST_PRIVILEGE_ACL: &[&str] = &[
    "--user",
    "gl",
    "on",
    ">gl-secret",
    "~gateway-leader:*",
    "&gateway-leader:*",
    "&__keyspace@*__:gateway-leader:*",
    "+ping",
    "+eval",
    "+evalsha",
    "+script|load",
    "+get",
    "+set",
    "+del",
    "+pttl",
    "+incr",
    "+exists",
    "+time",
    "+info",
    "+publish",
    "+subscribe",
];

/// The ACL documented in docs/redis.md is enough: elect, watch, hand over, release.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn least_privilege_acl_user_is_enough() {
    common::init_tracing();
    let mut opts = RedisServer::builder();
    for a in LEAST_PRIVILEGE_ACL {
        opts = opts.arg(*a);
    }
    let server = opts.start().await.expect("redis-server starts");
    let timing = common::timing();
    let mut c = common::config(&server.url(), &timing);
    c.username = Some("gl".into());
    c.password = Some("gl-secret".into());
    let checker = leader_lock::conformance::SplitBrainChecker::new();
    let mut pool = Vec::new();
    for id in ["a", "b"] {
        let lock = RedisLock::connect(c.clone(), "acl")
            .await
            .expect("connects");
        let e = Elector::spawn(
            Arc::new(lock),
            ElectorConfig {
                identity: Identity::new(id),
                timing,
                release_on_shutdown: true,
            },
        )
        .expect("a valid timing");
        checker.watch(e.leadership());
        pool.push(e);
    }
    let leader = tokio::time::timeout(patience(&timing), async {
        loop {
            if let Some(i) = pool.iter().position(|e| e.leadership().is_leader()) {
                return i;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("someone leads");
    let follower = pool.remove(1 - leader);
    let leader = pool.remove(0);
    tokio::time::sleep(timing.retry_period * 2).await;
    let started = tokio::time::Instant::now();
    assert!(leader.shutdown().await.expect("release"), "released");
    wait_leader(
        &follower.leadership(),
        timing.lease_duration,
        "the follower after a release",
    )
    .await;
    eprintln!(
        "graceful handover with a least-privilege ACL user: {:?}",
        started.elapsed()
    );
    follower.abort().await;
    checker.finish().await;
    assert!(
        !server.log().contains("NOPERM"),
        "no permission errors in the log"
    );
}

/// A user without a permission the scripts need gets a permanent, explicit error.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_acl_permission_is_refused_clearly() {
    common::init_tracing();
    let mut opts = RedisServer::builder();
    // Everything the lock needs but INFO (called from the acquire script).
    for a in LEAST_PRIVILEGE_ACL.iter().filter(|a| **a != "+info") {
        opts = opts.arg(*a);
    }
    let server = opts.start().await.expect("redis-server starts");
    let timing = common::timing();
    let mut c = common::config(&server.url(), &timing);
    c.username = Some("gl".into());
    c.password = Some("gl-secret".into());
    let lock = RedisLock::connect(c, "noinfo").await.expect("connects");
    let candidate = leader_lock::backend::Candidate {
        identity: Identity::new("a"),
        lease_duration: timing.lease_duration,
    };
    use leader_lock::backend::LeaderLock;
    match lock.try_acquire_or_renew(&candidate).await {
        Err(LockError::Refused { message: m, .. }) => {
            assert!(m.contains("ACL") && m.contains("INFO"), "{m}")
        }
        other => panic!("expected a refusal naming the ACL: {other:?}"),
    }
}
