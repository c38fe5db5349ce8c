//! The proxy's own answers: a Kubernetes `Status` object, as the apiserver answers its errors,
//! so that kubectl and client-go show the message.
//!
//! None carries `Retry-After`: client-go (and with it controller-runtime and kubectl) sends a
//! 429 or 5xx that carries one again, up to ten times and a second apart, before its caller
//! sees the error. A refused write would then hold the controller's writer for ten seconds and
//! reach the proxy eleven times; without it, the caller has the error in under a millisecond
//! and retries on its own terms (docs/sidecar.md, "What a refusal costs the caller").

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::body::ProxyBody;

/// A `Status` answer: `code`, the apiserver's `reason` for it (`ServiceUnavailable`,
/// `RequestEntityTooLarge`, ...) and a message for a person.
pub(super) fn status(code: StatusCode, reason: &str, message: &str) -> Response<ProxyBody> {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    let bytes = Bytes::from(body.to_string());
    let mut resp = Response::new(Full::new(bytes).map_err(|e| match e {}).boxed_unsync());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_is_a_kubernetes_status_that_asks_for_no_wait() {
        let resp = status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "not the leader",
        );
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        // client-go resends a 5xx that carries it, ten times a second apart.
        assert!(!resp.headers().contains_key(header::RETRY_AFTER));
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
        assert_eq!(v["message"], "not the leader");
        assert!(v.get("details").is_none(), "{v}");
    }
}
