//! Redis errors as lock errors: what failed, where, and the setting to fix.

use std::time::Duration;

use leader_lock::LockError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::connection::{is_auth, is_untrusted};

/// Maps a redis error to a lock error whose message names the endpoint and the setting to fix;
/// the error itself is kept as the source.
pub(crate) fn classify(e: &RedisError, endpoint: &str, timeout: Duration) -> LockError {
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
