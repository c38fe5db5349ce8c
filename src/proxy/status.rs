//! The proxy's own answers: a Kubernetes `Status` object, as the apiserver answers its errors,
//! so that kubectl and client-go show the message and honour `Retry-After`.

use bytes::Bytes;
use http::{header, HeaderValue, Response, StatusCode};
use http_body_util::{BodyExt, Full};

use super::body::ProxyBody;

/// A `Status` answer: `code`, the apiserver's `reason` for it (`ServiceUnavailable`,
/// `RequestEntityTooLarge`, ...) and a message for a person. `retry_after` (seconds) goes in
/// the `Retry-After` header and in `details.retryAfterSeconds`, where client-go reads it.
pub(super) fn status(
    code: StatusCode,
    reason: &str,
    message: &str,
    retry_after: Option<u64>,
) -> Response<ProxyBody> {
    let mut body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code.as_u16(),
    });
    if let Some(secs) = retry_after {
        body["details"] = serde_json::json!({ "retryAfterSeconds": secs });
    }
    let bytes = Bytes::from(body.to_string());
    let mut resp = Response::new(Full::new(bytes).map_err(|e| match e {}).boxed_unsync());
    *resp.status_mut() = code;
    let headers = resp.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some(secs) = retry_after {
        headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_refusal_is_a_kubernetes_status_with_retry_after() {
        let resp = status(
            StatusCode::SERVICE_UNAVAILABLE,
            "ServiceUnavailable",
            "not the leader",
            Some(2),
        );
        assert_eq!(resp.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "2");
        let body = resp.into_body().collect().await.expect("body").to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(v["kind"], "Status");
        assert_eq!(v["apiVersion"], "v1");
        assert_eq!(v["status"], "Failure");
        assert_eq!(v["reason"], "ServiceUnavailable");
        assert_eq!(v["code"], 503);
        assert_eq!(v["message"], "not the leader");
        assert_eq!(v["details"]["retryAfterSeconds"], 2);
    }
}
