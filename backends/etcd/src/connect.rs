//! Connecting: the checks before it, the connection itself, and what a failed connect means.

use std::sync::Arc;
use std::time::Duration;

use etcd_client::{Client, ConnectOptions};
use leader_lock::backend::LockError;
use tokio::sync::Mutex;

use crate::client::{Inner, State};
use crate::config::{self, EtcdConfig};
use crate::error::map_error;
use crate::knowledge::Knowledge;
use crate::lease::keep_spare;
use crate::lock::EtcdLock;
use crate::members::member_fault;
use crate::members::Members;
use crate::timeout::RequestTimeout;
use crate::tls::tls_options;

/// HTTP/2 pings find dead connections (a paused or unplugged server) under a long watch.
/// etcd refuses pings more often than every 5 s, so stay above that.
const PING_INTERVAL: Duration = Duration::from_secs(10);

/// The release marker's key: the lock key and this suffix. Neither key prefixes nor lock names
/// may contain `#`, so it is never another lock's key.
const MARKER_SUFFIX: &str = "#released";

/// The prefix of the candidates' registrations under the lock key (`#` again keeps it apart
/// from other locks' keys).
const CANDIDATES_SUFFIX: &str = "#candidates/";

impl EtcdLock {
    /// Connects to etcd and checks that the lock key can be read.
    ///
    /// Check the config with [`EtcdConfig::validate`] first: connecting checks only the
    /// endpoints.
    ///
    /// # Errors
    /// A message that names the endpoints and the setting to look at when no endpoint answers
    /// ([`LockError::Unavailable`], [`LockError::Timeout`]: worth retrying), a TLS file cannot be
    /// read, or authentication is refused ([`LockError::Refused`]).
    ///
    /// # Cancel safety
    /// Cancel safe: it only reads, and its connections close when it is dropped; the task that
    /// keeps the lock's spare lease alive starts only as it returns.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::sync::Arc;
    /// use leader_lock::{Elector, ElectorConfig, Identity, Timing};
    /// use leader_lock_etcd::{EtcdConfig, EtcdLock};
    ///
    /// let timing = Timing::default();
    /// let mut config = EtcdConfig::new(vec!["https://etcd-0.example:2379".to_string()]);
    /// config.ca_file = Some("/etc/etcd/ca.pem".into());
    /// config.username = Some("my-controller".to_string());
    /// config.password = Some(std::env::var("ETCD_PASSWORD")?);
    /// config.validate(&timing)?;
    /// let lock = EtcdLock::connect(config, "my-controller").await?;
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
    pub async fn connect(config: EtcdConfig, lock_name: &str) -> Result<EtcdLock, LockError> {
        if lock_name.is_empty() {
            return Err(LockError::refused("the lock name must not be empty"));
        }
        if lock_name.contains('#') {
            // `#` separates the lock key from its release marker's suffix.
            return Err(LockError::refused(format!(
                "the lock name {lock_name:?} must not contain '#'"
            )));
        }
        if config.endpoints.is_empty() {
            return Err(config::no_endpoint().into());
        }
        for e in &config.endpoints {
            config::check_endpoint(e)?;
        }
        let endpoints = config.endpoints.join(",");
        // Until the elector validates the lock with its timing, a deadline of the default timing
        // (unless the config gives one); the channels' own connect and ping timeouts keep it.
        let request_timeout = RequestTimeout::new(config.request_timeout);
        let timeout = request_timeout.get();
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
        let key_text = format!("{}{}", config.key_prefix, lock_name);
        let inner = Arc::new(Inner {
            members: Members::new(&config.endpoints, options, request_timeout.clone()),
            key: key_text.clone().into_bytes(),
            marker: format!("{key_text}{MARKER_SUFFIX}").into_bytes(),
            candidates: format!("{key_text}{CANDIDATES_SUFFIX}").into_bytes(),
            key_text,
            endpoints,
            timeout: request_timeout,
            state: Mutex::new(State::default()),
            knowledge: Arc::new(std::sync::Mutex::new(Knowledge::default())),
            spare: Mutex::new(None),
            registered: std::sync::Mutex::new(0),
            choice: Arc::default(),
            used: Arc::new(std::sync::Mutex::new(tokio::time::Instant::now())),
        });
        // The channels connect lazily: one read proves reachability, TLS and permissions. The
        // members are tried in turn, so one member down at startup does not stop the replica;
        // the first that answers becomes the current one.
        let mut last = None;
        for i in 0..inner.members.len() {
            inner.members.settle(i);
            match reach(&inner).await {
                Ok(()) => {
                    last = None;
                    break;
                }
                // A refusal (authentication, permissions) is the same on every member.
                Err(Some(e @ etcd_client::Error::GRpcStatus(_))) if !member_fault(&e) => {
                    return Err(connect_error(&config, "reading the lock key", e).await)
                }
                Err(e) => last = Some(e),
            }
        }
        match last {
            None => {}
            Some(None) => return Err(unreachable(&config, timeout).await),
            Some(Some(e)) => return Err(connect_error(&config, "reading the lock key", e).await),
        }
        inner.members.announce();
        let spare_keeper = tokio::spawn(keep_spare(Arc::downgrade(&inner)));
        Ok(EtcdLock {
            inner,
            spare_keeper,
        })
    }
}

/// Connects the current member and reads the lock key there, under the per-request timeout
/// each; `Err(None)` when it did not answer in time.
async fn reach(inner: &Inner) -> Result<(), Option<etcd_client::Error>> {
    let i = inner.members.current();
    let connect = Client::connect(
        [inner.members.url(i)],
        Some(inner.members.options().clone()),
    );
    let client = match tokio::time::timeout(inner.timeout.get(), connect).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return Err(Some(e)),
        Err(_) => return Err(None),
    };
    let mut kv = client.kv_client();
    match tokio::time::timeout(inner.timeout.get(), kv.get(inner.key.clone(), None)).await {
        Ok(Ok(r)) => {
            inner.members.keep(i, client);
            if let Some(h) = r.header() {
                inner.members.learn(i, h.member_id());
            }
            Ok(())
        }
        Ok(Err(e)) => Err(Some(e)),
        Err(_) => Err(None),
    }
}

/// A clear error for a failed connect: permanent for auth, a TLS or address hint otherwise.
async fn connect_error(config: &EtcdConfig, what: &str, e: etcd_client::Error) -> LockError {
    let endpoints = config.endpoints.join(",");
    let from_server = matches!(e, etcd_client::Error::GRpcStatus(_));
    match map_error(&endpoints, what, e) {
        LockError::Refused { message, source } if from_server => LockError::Refused {
            message: format!(
                "{message}; check etcd-username and the password, and the user's role on \
                 etcd-key-prefix"
            ),
            source,
        },
        LockError::Unavailable { message, source } => LockError::Unavailable {
            message: format!("{message}; {}", diagnose(config).await),
            source,
        },
        other => other,
    }
}

/// No endpoint answered in time: say whether TCP works, which points at TLS or at the address.
async fn unreachable(config: &EtcdConfig, timeout: Duration) -> LockError {
    LockError::unavailable(format!(
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
