//! The parts of an HTTP exchange the election's answers read and write.

use std::time::Duration;

use bytes::Bytes;
use http::header::{self, HeaderValue};
use http::{Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use k8s_openapi::api::coordination::v1::Lease;

use super::wire::{self, Encoding};
use super::MAX_LEASE_BODY;
use crate::proxy::body::{BoxError, ProxyBody};
use crate::proxy::status::status;

/// A header's value, when it is text.
pub(super) fn header_str<B>(req: &Request<B>, name: header::HeaderName) -> Option<&str> {
    req.headers().get(name).and_then(|v| v.to_str().ok())
}

/// A query parameter's value (undecoded: the ones read here need no decoding).
pub(super) fn query<'a>(query: Option<&'a str>, key: &str) -> Option<&'a str> {
    query?
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .find(|(k, _)| *k == key)
        .map(|(_, v)| v)
}

/// A Go duration as client-go writes its `timeout` parameter (`5s`, `2.5s`, `1m30s`, `500ms`);
/// `None` for anything else, or more than an hour.
pub(super) fn go_duration(s: &str) -> Option<Duration> {
    let s = s.replace("%C2%B5", "µ");
    let mut rest = s.as_str();
    let mut total = 0.0f64;
    if rest.is_empty() || rest.len() > 32 {
        return None;
    }
    while !rest.is_empty() {
        let digits = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(rest.len());
        let scale = match &rest[..unit_len] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total += value * scale;
    }
    (total <= 3600.0).then(|| Duration::from_secs_f64(total))
}

/// The body of an update, whole and bounded.
pub(super) async fn read_lease_body<B>(body: B) -> Result<Bytes, Response<ProxyBody>>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<BoxError>,
{
    let limited = http_body_util::Limited::new(body, MAX_LEASE_BODY);
    match tokio::time::timeout(Duration::from_secs(30), limited.collect()).await {
        Ok(Ok(c)) => Ok(c.to_bytes()),
        Ok(Err(e)) => Err(status(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            &format!("the Lease could not be read (at most {MAX_LEASE_BODY} bytes): {e}"),
        )),
        Err(_) => Err(status(
            StatusCode::REQUEST_TIMEOUT,
            "Timeout",
            "the request body did not arrive in time",
        )),
    }
}

/// `lease` in `encoding`, as the apiserver answers.
pub(super) fn encoded(code: StatusCode, encoding: Encoding, lease: &Lease) -> Response<ProxyBody> {
    let body = wire::encode(encoding, lease);
    let mut resp = Response::new(Full::new(body).map_err(|e| match e {}).boxed_unsync());
    *resp.status_mut() = code;
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(encoding.content_type()),
    );
    resp
}
