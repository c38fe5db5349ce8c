//! The field names of the lines machines read ([`crate::message`] says which line has which).

/// The line's text: where `tracing-subscriber`'s JSON format puts the message.
pub const MESSAGE: &str = "message";

/// The line's wall-clock time (RFC 3339): `tracing-subscriber`'s own, for people and for
/// timings within one process's log; instants compared across processes are [`MONO_MS`].
pub const TIMESTAMP: &str = "timestamp";

/// The fencing term, as text: a number, or `disabled` when leader election is off (then no
/// [`Event`](crate::Event) is read from the line: there is no leadership to follow).
pub const TERM: &str = "term";

/// When it happened: milliseconds on `CLOCK_MONOTONIC`, comparable across the machine's
/// processes.
pub const MONO_MS: &str = "mono_ms";

/// The leadership's validity deadline, on the same clock as [`MONO_MS`].
pub const VALID_UNTIL_MONO_MS: &str = "valid_until_mono_ms";

/// The lock's holder as a follower sees it; [`HOLDER_UNKNOWN`] when it sees none.
pub const HOLDER: &str = "holder";

/// The [`HOLDER`] of a follower that knows of no holder.
pub const HOLDER_UNKNOWN: &str = "unknown";

/// Whether the lock was still ours and is now free (`false`: someone else's already).
pub const RELEASED: &str = "released";

/// The lock, described by its backend (`etcd key /gateway-leader/...`).
pub const LOCK: &str = "lock";

/// When the release was sent, on the same clock as [`MONO_MS`].
pub const SENT_MONO_MS: &str = "sent_mono_ms";

/// The replica's identity with its incarnation (`pod-a_5f3c9e1a`).
pub const IDENTITY: &str = "identity";

/// How many desired statuses a new leader holds.
pub const STATUSES: &str = "statuses";

/// The written object's kind (`HTTPRoute`).
pub const KIND: &str = "kind";

/// The written object's namespace; empty for a cluster-scoped one.
pub const NAMESPACE: &str = "namespace";

/// The written object's name.
pub const NAME: &str = "name";

/// An object as one piece of text: its kind, then `namespace/name` or `name`.
pub const OBJECT: &str = "object";

/// Milliseconds from the start of the leadership to its first write.
pub const AFTER_MS: &str = "after_ms";

/// Of a new leader's check: the statuses it wrote.
pub const WRITTEN: &str = "written";

/// Of a new leader's check: the statuses it found already right.
pub const UNCHANGED: &str = "unchanged";

/// Of a new leader's check: the statuses neither written nor found right (refused, gone, left
/// to the next leader).
pub const OTHER: &str = "other";

/// Of a new leader's check: how long it took, in milliseconds.
pub const TOOK_MS: &str = "took_ms";

/// An etcd member's URL, as given in `--etcd-endpoints`.
pub const ENDPOINT: &str = "endpoint";

/// A socket address the replica bound.
pub const ADDR: &str = "addr";
