//! Redis errors as lock errors: what failed, where, and the setting to fix; the cause in the
//! source, never also in the message.

use std::time::Duration;

use leader_lock::backend::LockError;
use redis::{ErrorKind, RedisError, ServerErrorKind};

use crate::connection::{is_auth, is_untrusted};

/// Maps a redis error to a lock error whose message names the endpoint and the setting to fix;
/// the error itself is kept as the source, so the message does not repeat it. The one exception
/// is an error our scripts raise on a record they did not write (`GLBADTERM`, `WRONGTYPE`): its
/// text names the key and what is wrong with it, which is the malformed record's message.
pub(crate) fn classify(e: &RedisError, endpoint: &str, timeout: Duration) -> LockError {
    let code = e.code().unwrap_or_default();
    if is_auth(e) {
        let message = format!(
            "redis at {endpoint} rejected the credentials; check the username and the password"
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
            "redis at {endpoint}: the ACL user lacks a permission; it needs the commands \
             EVAL, EVALSHA, SCRIPT LOAD, GET, SET, DEL, PTTL, INCR, EXISTS, TIME, INFO, PUBLISH, \
             SUBSCRIBE and PING (and WAIT with redis-wait-replicas), the keys and channels under \
             redis-key-prefix (see docs/redis.md)"
        );
        return LockError::refused_from(message, e.clone());
    }
    if matches!(e.kind(), ErrorKind::InvalidClientConfig) {
        return LockError::refused_from(format!("redis-url {endpoint} is not usable"), e.clone());
    }
    if code == "GLBADTERM" || code == "WRONGTYPE" {
        return LockError::malformed(format!("redis at {endpoint}: {e}"));
    }
    if is_untrusted(e) {
        let message = format!(
            "redis at {endpoint}: the server's TLS certificate is not trusted; set redis-ca-file \
             to the CA that signed it"
        );
        return LockError::refused_from(message, e.clone());
    }
    if e.is_timeout() {
        return LockError::Timeout(timeout);
    }
    if matches!(e.kind(), ErrorKind::Server(ServerErrorKind::ReadOnly)) {
        let message = format!(
            "redis at {endpoint} is a read-only replica; redis-url must point to the primary"
        );
        return LockError::unavailable_from(message, e.clone());
    }
    if e.is_connection_refusal() {
        let message = format!("cannot reach redis at {endpoint}");
        return LockError::unavailable_from(message, e.clone());
    }
    LockError::unavailable_from(format!("redis at {endpoint}"), e.clone())
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn the_cause_is_in_the_source_not_twice() {
        let e = RedisError::from((
            ErrorKind::AuthenticationFailed,
            "Password authentication failed",
        ));
        let mapped = classify(&e, "redis://127.0.0.1:6379/0", Duration::from_secs(1));
        assert!(matches!(mapped, LockError::Refused { .. }), "{mapped:?}");
        assert_eq!(
            mapped.to_string(),
            "backend refused the request: redis at redis://127.0.0.1:6379/0 rejected the \
             credentials; check the username and the password"
        );
        let source = mapped.source().expect("the redis error is kept");
        assert!(
            source
                .to_string()
                .contains("Password authentication failed"),
            "{source}"
        );

        let refused = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        let mapped = classify(&refused, "redis://127.0.0.1:1/0", Duration::from_secs(1));
        assert_eq!(
            mapped.to_string(),
            "backend unavailable: cannot reach redis at redis://127.0.0.1:1/0"
        );
        assert!(mapped.source().is_some(), "{mapped:?}");
    }
}
