//! Turning kube errors into [`LockError`]s that name the Lease, the cluster and the fix.

use std::future::Future;
use std::time::Duration;

use leader_lock::backend::LockError;

/// The HTTP status of an API error, if it is one.
pub(crate) fn status(e: &kube::Error) -> Option<u16> {
    match e {
        kube::Error::Api(s) => Some(s.code),
        _ => None,
    }
}

/// True for 409: a write lost a race (Conflict) or a create found the object (AlreadyExists).
pub(crate) fn is_conflict(e: &kube::Error) -> bool {
    status(e) == Some(409)
}

/// Classifies `e`; `what` names the operation and the object, e.g. `update Lease ns/name on URL`.
///
/// The message says what failed and what to check; the cause is the source only, so a chain
/// (`{e:#}`, [`LockError::chain`]) shows it once. For the apiserver's answer the source is its
/// `kube::core::Status` (message, reason, code) rather than the `kube::Error::Api` around it,
/// whose own message repeats the status twice over.
pub(crate) fn classify(what: &str, e: kube::Error) -> LockError {
    type Class = fn(String, BoxError) -> LockError;
    let refused: Class = LockError::refused_from;
    let unavailable: Class = LockError::unavailable_from;
    let malformed: Class = LockError::malformed_from;
    let (class, message) = match &e {
        kube::Error::Api(s) => match s.code {
            401 => (
                refused,
                format!(
                    "{what}: unauthorized (401): the credentials were rejected; check the \
                     kubeconfig user or the service-account token"
                ),
            ),
            403 => (
                refused,
                format!(
                    "{what}: forbidden (403) by RBAC; grant the Role in docs/kubernetes.md \
                     (leases: get, list, watch, create, update; events: create)"
                ),
            ),
            404 => (
                refused,
                format!("{what}: not found (404); check that the Lease's namespace exists"),
            ),
            400 | 405 | 406 | 415 | 422 => (refused, format!("{what}: rejected ({})", s.code)),
            _ => (unavailable, format!("{what}: API error {}", s.code)),
        },
        kube::Error::SerdeError(_) => (malformed, what.to_string()),
        kube::Error::Auth(_)
        | kube::Error::InferConfig(_)
        | kube::Error::InferKubeconfig(_)
        | kube::Error::RustlsTls(_) => (refused, what.to_string()),
        _ => (unavailable, what.to_string()),
    };
    let source: BoxError = match e {
        kube::Error::Api(status) => status,
        other => Box::new(other),
    };
    class(message, source)
}

/// The cause a [`LockError`] keeps.
type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Runs one API request with its own deadline, so a hung apiserver never eats the renew deadline.
pub(crate) async fn bounded<T>(
    limit: Duration,
    f: impl Future<Output = Result<T, kube::Error>>,
) -> Result<Result<T, kube::Error>, LockError> {
    tokio::time::timeout(limit, f)
        .await
        .map_err(|_| LockError::Timeout(limit))
}

#[cfg(test)]
mod tests {
    use std::error::Error as _;

    use super::*;

    #[test]
    fn a_forbidden_request_is_refused_and_keeps_the_apiserver_s_status() {
        let status = kube::core::Status::failure("leases is forbidden", "Forbidden").with_code(403);
        let e = classify(
            "update Lease ns/lock on https://127.0.0.1:6443",
            kube::Error::Api(status.boxed()),
        );
        assert!(matches!(e, LockError::Refused { .. }), "{e:?}");
        assert!(e.to_string().starts_with(
            "backend refused the request: update Lease ns/lock on https://127.0.0.1:6443: \
             forbidden (403) by RBAC; grant the Role"
        ));
        // The apiserver's message once, from the source.
        let shown = e.chain().to_string();
        assert_eq!(shown.matches("leases is forbidden").count(), 1, "{shown}");
        let source = e.source().expect("the apiserver's status is kept");
        match source.downcast_ref::<kube::core::Status>() {
            Some(s) => assert_eq!(s.code, 403),
            None => panic!("not the apiserver's status: {source:?}"),
        }
    }
}
