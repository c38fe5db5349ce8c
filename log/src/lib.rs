//! The lines of `gateway-leader run`'s JSON log that machines read, declared once: the message
//! and the field names each is logged with ([`message`], [`field`]), and [`Event`], the typed
//! reading of such a line.
//!
//! The binary (its leadership changes, its health server's address) and
//! `gateway-leader-status`'s writer (the writes and the new leader's sweep) log their lines with
//! the names from here. The general-purpose libraries that log the others, `leader-lock`'s
//! elector (the release) and the etcd lock (the member it talks to), spell the same names in
//! their own source, since they do not depend on this product; the tests that wait for those
//! lines keep the two equal. Whoever reads them parses with [`Event::parse`]: the bench and its
//! split-brain checker, the tests, the demo, an operator's tooling. Every other line is for
//! people, and its wording may change in any release; a change to these is a breaking change of
//! this crate.
//!
//! The binary logs JSON with `--log-format json`: one object per line, the event's fields
//! flattened beside [`field::MESSAGE`]. Instants that other processes compare with are
//! [`field::MONO_MS`], milliseconds on the machine's `CLOCK_MONOTONIC` (`leader_lock::clock`):
//! wall-clock timestamps can step, and a monotonic instant cannot leave its process otherwise.
//!
//! # Examples
//!
//! Logging a line, with `tracing`'s constant field names (`{ NAME } = value`):
//!
//! ```
//! use gateway_leader_log::{field, message};
//!
//! tracing::info!({ field::TERM } = %7, { field::MONO_MS } = 10.5,
//!     { field::VALID_UNTIL_MONO_MS } = 3010.5, "{}", message::LEADING);
//! ```
//!
//! Reading it back:
//!
//! ```
//! use gateway_leader_log::Event;
//!
//! let line = r#"{"message":"leadership: leading","term":"7","mono_ms":10.5,
//!     "valid_until_mono_ms":3010.5}"#;
//! assert_eq!(Event::parse(line), Some(Event::Leading { term: 7, valid_until: 3010.5 }));
//! ```

mod event;
pub mod field;
pub mod message;

pub use event::{mono_ms, Event};

/// A log filter (`--log-level`) under which the binary logs every line declared here: info, and
/// the debug [`message::RENEWED`] of its leadership logger (`gateway_leader::election`; and
/// `gateway_leader::run`, where older builds log it, which the bench runs with `--binary` beside
/// a new one).
pub const EVERY_LINE_FILTER: &str = "info,gateway_leader::election=debug,gateway_leader::run=debug";
