//! The body of every answer the proxy gives: the apiserver's, streamed, or the proxy's own.

/// The errors a body or the relay may end with.
pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;
/// The body of every answer: the apiserver's, streamed, or the proxy's own.
pub(super) type ProxyBody = http_body_util::combinators::UnsyncBoxBody<bytes::Bytes, BoxError>;
