//! One JSON line a process logged, as the harness keeps it: the whole object, its own time, and
//! the declared event it is, if any.

use std::time::SystemTime;

use gateway_leader_log::{field, Event};
use serde_json::Value;

use super::peer;

/// How a process's JSON lines are read: which output carries them, and into which events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// `gateway-leader run --log-format json`: lines on stderr, read as the product declares
    /// them ([`Event::from_json`]).
    GatewayLeader,
    /// A Go peer of `testkit/peers/`: lines on stdout (client-go's own logs go to stderr), read
    /// by [`peer::event`] into the same events.
    GoPeer,
}

/// One JSON line of a process.
#[derive(Debug, Clone)]
pub struct Line {
    /// The process's index in its [`Journal`](super::Journal).
    pub process: usize,
    /// The line's own wall-clock time ([`field::TIMESTAMP`]), or when it was read if it has
    /// none.
    pub at: SystemTime,
    /// The whole object; `Null` in a journal that keeps only events
    /// ([`Journal::events_only`](super::Journal::events_only)).
    pub json: Value,
    /// The declared event the line is, if it is one.
    pub event: Option<Event>,
    /// The line's `CLOCK_MONOTONIC` instant ([`field::MONO_MS`]), if it carries one.
    pub mono_ms: Option<f64>,
}

/// An event on the machine's common time line, as the bench and its split-brain checker take
/// them: which process, when, what.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// Which process of its journal logged it.
    pub replica: usize,
    /// When, on `CLOCK_MONOTONIC`, in milliseconds.
    pub mono_ms: f64,
    /// What it says.
    pub what: Event,
}

// === impl Line ===

impl Line {
    /// Reads one line of process `process` in `dialect`; `None` when it is not JSON.
    pub(crate) fn read(process: usize, dialect: Dialect, text: &str) -> Option<Line> {
        let json: Value = serde_json::from_str(text).ok()?;
        let at = json[field::TIMESTAMP]
            .as_str()
            .and_then(|t| humantime::parse_rfc3339(t).ok())
            // Only timings within one log need the process's own time; a line without one is
            // still a line.
            .unwrap_or_else(SystemTime::now);
        let event = match dialect {
            Dialect::GatewayLeader => Event::from_json(&json),
            Dialect::GoPeer => peer::event(&json),
        };
        Some(Line {
            process,
            at,
            mono_ms: gateway_leader_log::mono_ms(&json),
            event,
            json,
        })
    }

    /// The log message ([`field::MESSAGE`]); empty when there is none.
    pub fn message(&self) -> &str {
        self.json[field::MESSAGE].as_str().unwrap_or_default()
    }

    /// A field as text, whether it was logged as a string (`%term`) or as a number.
    pub fn text(&self, key: &str) -> Option<String> {
        match &self.json[key] {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        }
    }

    /// The line as an event on the common time line; `None` for a line that is no event or
    /// carries no instant (it has no place on that line).
    pub fn record(&self) -> Option<Record> {
        let what = self.event.clone()?;
        let mono_ms = match what {
            // Only ever used to end a wait, never as a time.
            Event::SweepDone { .. } => self.mono_ms.unwrap_or(f64::NAN),
            _ => self.mono_ms?,
        };
        Some(Record {
            replica: self.process,
            mono_ms,
            what,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_release_without_its_instant_has_no_place_on_the_time_line() {
        // Before the release carried its instant, the line had none.
        let old = r#"{"message":"released leadership","term":"7","released":true}"#;
        let line = Line::read(1, Dialect::GatewayLeader, old).expect("json");
        assert!(line.event.is_some());
        assert_eq!(line.record(), None);
        let new = r#"{"message":"released leadership","term":"7","released":true,
            "mono_ms":20.25}"#;
        let record = Line::read(1, Dialect::GatewayLeader, new).and_then(|l| l.record());
        assert_eq!(record.map(|r| (r.replica, r.mono_ms)), Some((1, 20.25)));
    }

    #[test]
    fn keeps_the_replicas_own_time_and_every_field() {
        let l = r#"{"timestamp":"2025-01-02T03:04:05.5Z","message":"first statuses computed",
            "objects":12}"#;
        let line = Line::read(0, Dialect::GatewayLeader, l).expect("json");
        assert_eq!(line.message(), "first statuses computed");
        assert_eq!(line.text("objects").as_deref(), Some("12"));
        assert_eq!(
            line.at,
            humantime::parse_rfc3339("2025-01-02T03:04:05.5Z").expect("time")
        );
        assert!(line.event.is_none());
        assert!(Line::read(0, Dialect::GatewayLeader, "not json").is_none());
    }
}
