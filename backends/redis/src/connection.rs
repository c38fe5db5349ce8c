//! The connection to the primary: built in one place ([`open`]) for a fixed server (`url`) or
//! for the primary Redis Sentinel names, and rebuilt on the new primary after a failover.

use std::sync::Mutex;
use std::time::Duration;

use leader_lock::backend::LockError;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::io::tcp::TcpSettings;
use redis::sentinel::{SentinelClient, SentinelClientBuilder, SentinelServerType};
use redis::{
    Client, ConnectionAddr, ConnectionInfo, ErrorKind, IntoConnectionInfo, RedisError,
    TlsCertificates, TlsMode,
};
use tokio::time::Instant;
use tracing::{info, warn};

use crate::config::{read_ca, RedisConfig, SentinelConfig};

/// Asks the Sentinels again at most this often while the primary keeps failing.
const REDISCOVER_EVERY: Duration = Duration::from_millis(250);

/// The primary as of now: its client (for pub/sub), its managed connection and its address.
#[derive(Clone)]
pub(crate) struct Current {
    /// Its client, which opens the pub/sub connections of watches.
    pub(crate) client: Client,
    /// Its managed connection (cheap to clone), for scripts and `WAIT`.
    pub(crate) conn: ConnectionManager,
    /// Its address, for messages.
    pub(crate) endpoint: String,
}

/// The primary the lock talks to, and how to find it again.
pub(crate) struct Primary {
    /// The Sentinels, the master name, and when they were last asked.
    sentinel: Option<tokio::sync::Mutex<(SentinelClient, String, Option<Instant>)>>,
    /// The primary now: its lock is held only to read or replace it, never across a request.
    current: Mutex<Current>,
    /// The request timeout, which bounds connecting to a new primary too.
    timeout: Duration,
}

/// Where the primary was found at connect, before connecting to it.
pub(crate) struct Found {
    /// The Sentinels and the master name, when the primary was asked of them.
    sentinel: Option<(SentinelClient, String)>,
    /// The primary's client.
    pub(crate) client: Client,
    /// Its address, for messages.
    pub(crate) endpoint: String,
    /// The database the lock uses.
    pub(crate) db: i64,
}

/// `redis://host:port/db` (or `rediss://`) for messages.
pub(crate) fn endpoint(addr: &ConnectionAddr, db: i64) -> String {
    match addr {
        ConnectionAddr::Tcp(host, port) => format!("redis://{host}:{port}/{db}"),
        ConnectionAddr::TcpTls { host, port, .. } => format!("rediss://{host}:{port}/{db}"),
        other => format!("{other:?}"),
    }
}

impl Primary {
    /// Builds the client for the configured server, or asks the Sentinels for the primary.
    /// Only the client is built: [`manage`] connects.
    pub(crate) async fn find(config: &RedisConfig) -> Result<Found, LockError> {
        let timeout = config.request_timeout;
        let Some(s) = &config.sentinel else {
            let info = data_node_info(config)?;
            let db = info.redis_settings().db();
            let endpoint = endpoint(info.addr(), db);
            let client = match &config.ca_file {
                Some(ca) => Client::build_with_tls(info, certificates(ca)?),
                None => Client::open(info),
            }
            .map_err(|e| {
                LockError::refused_from(format!("redis-url {endpoint} is not usable"), e)
            })?;
            return Ok(Found {
                sentinel: None,
                client,
                endpoint,
                db,
            });
        };
        let mut sentinel = sentinel_client(config, s)?;
        let (client, endpoint) = match ask(&mut sentinel, timeout).await {
            Ok(found) => found,
            // Refusals are for good: say which side refused, rather than retry as if the
            // Sentinels were down.
            Err(Asked::Failed(e)) if is_auth(&e) => return Err(refusal(config, s, e).await),
            Err(Asked::Failed(e)) if is_untrusted(&e) => {
                return Err(LockError::refused_from(
                    "a Sentinel or the primary they name has a TLS certificate that is not \
                     trusted; set redis-ca-file to the CA that signed it",
                    e,
                ))
            }
            Err(other) => return Err(other.into_lock_error(&s.master)),
        };
        Ok(Found {
            sentinel: Some((sentinel, s.master.clone())),
            client,
            endpoint,
            db: 0,
        })
    }

    /// The primary `found`, connected with `conn`.
    pub(crate) fn new(found: Found, conn: ConnectionManager, timeout: Duration) -> Self {
        Primary {
            sentinel: found
                .sentinel
                .map(|(s, master)| tokio::sync::Mutex::new((s, master, None))),
            current: Mutex::new(Current {
                client: found.client,
                conn,
                endpoint: found.endpoint,
            }),
            timeout,
        }
    }

    /// The primary as of now.
    pub(crate) fn current(&self) -> Current {
        guard(&self.current).clone()
    }

    fn set(&self, current: Current) {
        *guard(&self.current) = current;
    }

    /// After the primary failed or answered as a replica: asks the Sentinels where the primary
    /// is and, when it moved, connects there. True when the lock now talks to another server.
    pub(crate) async fn rediscover(&self) -> bool {
        let Some(sentinel) = &self.sentinel else {
            return false;
        };
        let mut s = sentinel.lock().await;
        if s.2.is_some_and(|at| at.elapsed() < REDISCOVER_EVERY) {
            return false;
        }
        s.2 = Some(Instant::now());
        let (sentinel_client, master, _) = &mut *s;
        let (client, endpoint) = match ask(sentinel_client, self.timeout).await {
            Ok(c) => c,
            Err(e) => {
                let e = e.into_lock_error(master);
                warn!(error = %e, "asking the Sentinels for the primary failed");
                return false;
            }
        };
        let old = self.current().endpoint;
        if endpoint == old {
            return false;
        }
        match manage(client.clone(), self.timeout).await {
            Ok(conn) => {
                info!(
                    from = %old,
                    to = %endpoint,
                    "the Sentinels name a new primary; moving to it"
                );
                self.set(Current {
                    client,
                    conn,
                    endpoint,
                });
                true
            }
            Err(e) => {
                warn!(
                    primary = %endpoint,
                    error = %e,
                    "cannot connect to the primary the Sentinels name"
                );
                false
            }
        }
    }
}

/// The Sentinel client for `s`, with the credentials and TLS settings of both sides: the
/// Sentinels' and the data nodes'.
fn sentinel_client(config: &RedisConfig, s: &SentinelConfig) -> Result<SentinelClient, LockError> {
    let mut addrs = Vec::new();
    for a in &s.addresses {
        let info = a
            .as_str()
            .into_connection_info()
            .map_err(|e| LockError::refused_from(format!("redis-sentinel {a} is invalid"), e))?;
        addrs.push(info.addr().clone());
    }
    let mut b = SentinelClientBuilder::new(addrs, &s.master, SentinelServerType::Master)
        .map_err(|e| LockError::refused_from("redis-sentinel is not usable", e))?
        .set_client_to_redis_tcp_settings(tcp_settings())
        .set_client_to_sentinel_tcp_settings(tcp_settings());
    if let Some(u) = &config.username {
        b = b.set_client_to_redis_username(u);
    }
    if let Some(p) = &config.password {
        b = b.set_client_to_redis_password(p);
    }
    if let Some(u) = &s.username {
        b = b.set_client_to_sentinel_username(u);
    }
    if let Some(p) = &s.password {
        b = b.set_client_to_sentinel_password(p);
    }
    if config.is_tls() {
        b = b
            .set_client_to_redis_tls_mode(TlsMode::Secure)
            .set_client_to_sentinel_tls_mode(TlsMode::Secure);
        if let Some(ca) = &config.ca_file {
            b = b
                .set_client_to_redis_certificates(certificates(ca)?)
                .set_client_to_sentinel_certificates(certificates(ca)?);
        }
    }
    b.build()
        .map_err(|e| LockError::refused_from("redis-sentinel is not usable", e))
}

/// Why the Sentinels named no primary.
enum Asked {
    /// A Sentinel, or the primary one named, answered with this error.
    Failed(RedisError),
    /// No answer within this long.
    TimedOut(Duration),
}

impl Asked {
    /// The lock error when nothing refused us for good: worth retrying.
    fn into_lock_error(self, master: &str) -> LockError {
        match self {
            Asked::Failed(e) => LockError::unavailable_from(
                format!("no Sentinel named a reachable primary for {master:?}"),
                e,
            ),
            Asked::TimedOut(after) => LockError::unavailable(format!(
                "no Sentinel named a primary for {master:?} within {after:?}"
            )),
        }
    }
}

/// Asks the Sentinels for the current primary of their master, under the request timeout.
async fn ask(sentinel: &mut SentinelClient, timeout: Duration) -> Result<(Client, String), Asked> {
    match tokio::time::timeout(timeout * 2, sentinel.async_get_client()).await {
        Ok(Ok(client)) => {
            let endpoint = endpoint(client.get_connection_info().addr(), 0);
            Ok((client, endpoint))
        }
        Ok(Err(e)) => Err(Asked::Failed(e)),
        Err(_) => Err(Asked::TimedOut(timeout * 2)),
    }
}

/// A server refused the credentials, or asked for some (`NOAUTH`).
pub(crate) fn is_auth(e: &RedisError) -> bool {
    matches!(e.kind(), ErrorKind::AuthenticationFailed)
        || matches!(e.code(), Some("WRONGPASS" | "NOAUTH"))
}

/// The server's TLS certificate was not trusted.
pub(crate) fn is_untrusted(e: &RedisError) -> bool {
    let text = e.to_string();
    text.contains("certificate") || text.contains("UnknownIssuer")
}

/// After asking the Sentinels failed on credentials (`e`), which side refused them: redis-rs
/// gives one error for the Sentinels and the primary alike. Asks each Sentinel ourselves, with
/// the Sentinel credentials, where the primary is: a Sentinel that answers had the right ones,
/// so the primary refused the data node credentials.
async fn refusal(config: &RedisConfig, s: &SentinelConfig, e: RedisError) -> LockError {
    let timeout = config.request_timeout;
    for address in &s.addresses {
        let asked = tokio::time::timeout(timeout, primary_address(config, s, address)).await;
        match asked {
            Ok(Ok(Some((host, port)))) => {
                // As `endpoint` shows a data node.
                let scheme = if config.is_tls() { "rediss" } else { "redis" };
                return LockError::refused_from(
                    format!(
                        "the primary the Sentinels name for {:?}, {scheme}://{host}:{port}/0, \
                         rejected the credentials; check redis-username and \
                         redis-password (the data nodes' user, not the Sentinels')",
                        s.master
                    ),
                    e,
                );
            }
            Ok(Err(refused)) if is_auth(&refused) => {
                let shown = crate::config::redact_url(address);
                return LockError::refused_from(
                    format!(
                        "the Sentinel at {shown} rejected the credentials; check \
                         redis-sentinel-username and redis-sentinel-password (the Sentinels' \
                         user, not the data nodes')"
                    ),
                    refused,
                );
            }
            // Unreachable, or no such master: the next Sentinel may tell.
            _ => {}
        }
    }
    LockError::refused_from(
        "the Sentinels or the primary they name rejected the credentials; check \
         redis-sentinel-username and redis-sentinel-password for the Sentinels, redis-username \
         and redis-password for the data nodes",
        e,
    )
}

/// `SENTINEL GET-MASTER-ADDR-BY-NAME` on the Sentinel at `address`, logged in as the Sentinel
/// user, over TLS as configured: as the Sentinel client would connect.
async fn primary_address(
    config: &RedisConfig,
    s: &SentinelConfig,
    address: &str,
) -> Result<Option<(String, u16)>, RedisError> {
    let info = login(
        address.into_connection_info()?,
        s.username.as_deref(),
        s.password.as_deref(),
    );
    let client = match &config.ca_file {
        Some(ca) => {
            let certs = certificates(ca).map_err(|e| {
                RedisError::from((
                    ErrorKind::InvalidClientConfig,
                    "redis-ca-file",
                    e.to_string(),
                ))
            })?;
            Client::build_with_tls(info, certs)?
        }
        None => Client::open(info)?,
    };
    let mut conn = client.get_multiplexed_async_connection().await?;
    redis::cmd("SENTINEL")
        .arg("GET-MASTER-ADDR-BY-NAME")
        .arg(&s.master)
        .query_async(&mut conn)
        .await
}

/// The one place a managed connection to a data node is built: its timeouts and retries.
pub(crate) async fn manage(
    client: Client,
    timeout: Duration,
) -> Result<ConnectionManager, redis::RedisError> {
    let manager = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(timeout))
        .set_response_timeout(Some(timeout))
        .set_number_of_retries(1)
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(2));
    ConnectionManager::new_with_config(client, manager).await
}

/// The data node's connection info from `url` with the configured credentials.
fn data_node_info(config: &RedisConfig) -> Result<ConnectionInfo, LockError> {
    let info = config
        .url
        .as_str()
        .into_connection_info()
        .map_err(|e| LockError::refused_from("redis-url is invalid", e))?;
    Ok(login(
        info,
        config.username.as_deref(),
        config.password.as_deref(),
    ))
}

/// `info` with a user and password to log in with, and our TCP settings.
fn login(info: ConnectionInfo, username: Option<&str>, password: Option<&str>) -> ConnectionInfo {
    let mut settings = info.redis_settings().clone();
    if let Some(u) = username {
        settings = settings.set_username(u);
    }
    if let Some(p) = password {
        settings = settings.set_password(p);
    }
    info.set_redis_settings(settings)
        .set_tcp_settings(tcp_settings())
}

/// The TCP settings of every connection to Redis (commands, subscriptions, the Sentinels, and
/// the primary they name): `TCP_NODELAY` on.
///
/// redis-rs 1.x leaves Nagle's algorithm on (redis-rs issue #2195, changed only in 2.0): a
/// command written in more than one segment then waits for the server's delayed ACK, about 40 ms,
/// which delays a new leader's first write (docs/benchmarks.md, "Graceful takeovers on a quiet
/// machine").
fn tcp_settings() -> TcpSettings {
    TcpSettings::default().set_nodelay(true)
}

fn certificates(ca: &std::path::Path) -> Result<TlsCertificates, LockError> {
    Ok(TlsCertificates {
        client_tls: None,
        root_cert: Some(read_ca(ca)?),
    })
}

fn guard<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}
