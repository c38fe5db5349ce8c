//! The messages of the lines machines read (`message` in the JSON), each with who logs it and
//! the fields it carries ([`crate::field`]).

/// A new leadership (the binary; info): [`TERM`](crate::field::TERM),
/// [`MONO_MS`](crate::field::MONO_MS) (when it began) and
/// [`VALID_UNTIL_MONO_MS`](crate::field::VALID_UNTIL_MONO_MS).
pub const LEADING: &str = "leadership: leading";

/// A renewal moved the validity deadline (the binary; debug, so only when asked for):
/// [`TERM`](crate::field::TERM), [`MONO_MS`](crate::field::MONO_MS) and
/// [`VALID_UNTIL_MONO_MS`](crate::field::VALID_UNTIL_MONO_MS).
pub const RENEWED: &str = "leadership: renewed";

/// Not leading, or no longer (the binary; info): [`HOLDER`](crate::field::HOLDER),
/// [`TERM`](crate::field::TERM) when the holder's is known, [`MONO_MS`](crate::field::MONO_MS).
pub const FOLLOWING: &str = "leadership: following";

/// The elector stopped; nothing is written any more (the binary; info):
/// [`MONO_MS`](crate::field::MONO_MS).
pub const STOPPED: &str = "leadership: stopped";

/// The elector's release of the lock returned (`leader-lock`; info): [`TERM`](crate::field::TERM),
/// [`RELEASED`](crate::field::RELEASED), [`LOCK`](crate::field::LOCK),
/// [`SENT_MONO_MS`](crate::field::SENT_MONO_MS) (when it was sent) and
/// [`MONO_MS`](crate::field::MONO_MS) (when it returned).
pub const RELEASED: &str = "released leadership";

/// A new leadership begins by checking every cached status (`gateway-leader-status`; info):
/// [`TERM`](crate::field::TERM), [`IDENTITY`](crate::field::IDENTITY),
/// [`STATUSES`](crate::field::STATUSES) (how many it holds).
pub const SWEEP_STARTED: &str = "leading: writing every cached status";

/// One status written (`gateway-leader-status`; info): [`TERM`](crate::field::TERM) (the one
/// the write carried), [`IDENTITY`](crate::field::IDENTITY), [`KIND`](crate::field::KIND),
/// [`NAMESPACE`](crate::field::NAMESPACE) (empty for a cluster-scoped object),
/// [`NAME`](crate::field::NAME) and [`MONO_MS`](crate::field::MONO_MS).
pub const WRITTEN: &str = "status written";

/// The first status written under a leadership (`gateway-leader-status`; info), just before its
/// [`WRITTEN`] line: [`TERM`](crate::field::TERM), [`IDENTITY`](crate::field::IDENTITY),
/// [`OBJECT`](crate::field::OBJECT) and [`AFTER_MS`](crate::field::AFTER_MS) (since the
/// leadership began).
pub const FIRST_WRITE: &str = "first status write of this leadership";

/// The new leader's check of every cached status is over (`gateway-leader-status`; info):
/// [`TERM`](crate::field::TERM), [`IDENTITY`](crate::field::IDENTITY), how many were
/// [`WRITTEN`](crate::field::WRITTEN), [`UNCHANGED`](crate::field::UNCHANGED) or
/// [`OTHER`](crate::field::OTHER), [`TOOK_MS`](crate::field::TOOK_MS) and
/// [`MONO_MS`](crate::field::MONO_MS).
pub const SWEEP_DONE: &str = "every cached status checked";

/// The etcd member the lock talks to from now on, at connect and after each move away from a
/// member that failed (`leader-lock-etcd`; info): [`ENDPOINT`](crate::field::ENDPOINT) (as given
/// in `--etcd-endpoints`) and [`MONO_MS`](crate::field::MONO_MS).
pub const ENDPOINT: &str = "using etcd endpoint";

/// The health and metrics server is up (the binary; info): [`ADDR`](crate::field::ADDR), the
/// address it bound (`--health-addr` may ask for port 0).
pub const SERVING: &str = "serving /healthz, /readyz and /metrics";

/// The Kubernetes API proxy listens (the binary's `proxy` and `exec`; info):
/// [`ADDR`](crate::field::ADDR), the address it bound (`127.0.0.1:PORT` or `unix:PATH`).
pub const PROXY_SERVING: &str = "serving the Kubernetes API proxy";

/// The proxy stopped accepting connections at the start of a graceful stop; the requests in
/// flight go on (the binary's `proxy` and `exec`; info).
pub const PROXY_CLOSED: &str = "the Kubernetes API proxy accepts no more connections";
