//! etcd client errors as lock errors: permanent for authentication and permissions.

use leader_lock::LockError;

/// Maps a client error; authentication and permission errors are permanent.
pub(crate) fn map_error(endpoints: &str, what: &str, e: etcd_client::Error) -> LockError {
    use tonic::Code;
    match e {
        etcd_client::Error::GRpcStatus(s) => {
            let msg = format!(
                "etcd {what} at {endpoints}: {} ({:?})",
                s.message(),
                s.code()
            );
            match s.code() {
                Code::Unauthenticated | Code::PermissionDenied => LockError::Refused(msg),
                // etcd reports a wrong user or password, or a missing user, as InvalidArgument.
                Code::InvalidArgument
                    if s.message().contains("auth")
                        || s.message().contains("user")
                        || s.message().contains("password") =>
                {
                    LockError::Refused(msg)
                }
                Code::InvalidArgument => LockError::Malformed(msg),
                _ => LockError::Unavailable(msg),
            }
        }
        etcd_client::Error::InvalidArgs(m) => {
            LockError::Refused(format!("etcd {what} at {endpoints}: {m}"))
        }
        other => LockError::Unavailable(format!("etcd {what} at {endpoints}: {other}")),
    }
}
