//! etcd client errors as lock errors: permanent for authentication and permissions.

use leader_lock::backend::LockError;

/// Maps a client error; authentication and permission errors are permanent.
pub(crate) fn map_error(endpoints: &str, what: &str, e: etcd_client::Error) -> LockError {
    use tonic::Code;
    match &e {
        etcd_client::Error::GRpcStatus(s) => {
            let msg = format!(
                "etcd {what} at {endpoints}: {} ({:?})",
                s.message(),
                s.code()
            );
            match s.code() {
                Code::Unauthenticated | Code::PermissionDenied => LockError::refused_from(msg, e),
                // etcd reports a wrong user or password, or a missing user, as InvalidArgument.
                Code::InvalidArgument
                    if s.message().contains("auth")
                        || s.message().contains("user")
                        || s.message().contains("password") =>
                {
                    LockError::refused_from(msg, e)
                }
                Code::InvalidArgument => LockError::malformed_from(msg, e),
                _ => LockError::unavailable_from(msg, e),
            }
        }
        etcd_client::Error::InvalidArgs(m) => {
            LockError::refused_from(format!("etcd {what} at {endpoints}: {m}"), e)
        }
        other => LockError::unavailable_from(format!("etcd {what} at {endpoints}: {other}"), e),
    }
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_refusal_keeps_the_etcd_error_as_its_source() {
        let status = tonic::Status::new(tonic::Code::PermissionDenied, "permission denied");
        let e = map_error(
            "http://127.0.0.1:2379",
            "get",
            etcd_client::Error::GRpcStatus(status),
        );
        assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "backend refused the request: etcd get at http://127.0.0.1:2379: permission denied \
             (PermissionDenied)"
        );
        let source = e.source().expect("the etcd error is kept");
        assert!(
            matches!(
                source.downcast_ref::<etcd_client::Error>(),
                Some(etcd_client::Error::GRpcStatus(s)) if s.code() == tonic::Code::PermissionDenied
            ),
            "{source:?}"
        );
    }
}
