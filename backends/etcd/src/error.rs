//! etcd client errors as lock errors: the cause in the source, never also in the message;
//! permanent for authentication and permissions.

use leader_lock::backend::LockError;

/// Maps a client error of request `what` to `endpoints`: the message says what failed and
/// where, the client's error (etcd's status and its message) is the source; authentication and
/// permission errors are permanent.
pub(crate) fn map_error(endpoints: &str, what: &str, e: etcd_client::Error) -> LockError {
    use tonic::Code;
    let msg = format!("etcd {what} at {endpoints}");
    match &e {
        etcd_client::Error::GRpcStatus(s) => match s.code() {
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
        },
        etcd_client::Error::InvalidArgs(_) => LockError::refused_from(msg, e),
        _ => LockError::unavailable_from(msg, e),
    }
}

/// Whether `e` says that the lease a request used is gone (etcd's "requested lease not
/// found", in the source).
pub(crate) fn lease_not_found(e: &LockError) -> bool {
    matches!(e, LockError::Unavailable { source: Some(s), .. }
        if s.to_string().contains("lease not found"))
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
            "backend refused the request: etcd get at http://127.0.0.1:2379",
            "the cause is in the source, not twice"
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

    #[test]
    fn a_missing_lease_is_told_from_the_source() {
        let status = tonic::Status::new(
            tonic::Code::NotFound,
            "etcdserver: requested lease not found",
        );
        let e = map_error(
            "http://127.0.0.1:2379",
            "acquire transaction",
            etcd_client::Error::GRpcStatus(status),
        );
        assert!(lease_not_found(&e), "{e:?}");
        assert!(!lease_not_found(&LockError::unavailable(
            "etcd get at http://127.0.0.1:2379"
        )));
    }
}
