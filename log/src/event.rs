//! [`Event`]: one line of the declaration, read back from its JSON.

use std::net::SocketAddr;

use serde_json::Value;

use crate::{field, message};

/// One line a machine reads, typed: which of [`crate::message`] it is and what its fields say.
///
/// Each variant names the message it is read from. Numbers are read whether they were logged as
/// numbers or as text (terms are logged as text, so that the disabled marker fits the same
/// field).
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Event {
    /// [`message::LEADING`]: a new leadership, valid until `valid_until`.
    Leading {
        /// The fencing term.
        term: u64,
        /// The validity deadline (`CLOCK_MONOTONIC` ms).
        valid_until: f64,
    },
    /// [`message::RENEWED`]: the validity deadline moved.
    Renewed {
        /// The fencing term.
        term: u64,
        /// The new validity deadline (`CLOCK_MONOTONIC` ms).
        valid_until: f64,
    },
    /// [`message::FOLLOWING`]: not leading (any more).
    Following {
        /// The term of the leadership this replica follows, when known.
        term: Option<u64>,
        /// The holder it follows; `None` when it sees none ([`field::HOLDER_UNKNOWN`]).
        holder: Option<String>,
    },
    /// [`message::STOPPED`]: the elector stopped; nothing is written any more.
    Stopped,
    /// [`message::RELEASED`]: the elector's release of the lock returned.
    Released {
        /// The term released.
        term: u64,
        /// Whether the lock was still ours and is now free (`false`: someone else's already).
        released: bool,
        /// When the release was sent (`CLOCK_MONOTONIC` ms), if the line says.
        sent: Option<f64>,
    },
    /// [`message::SWEEP_STARTED`]: a new leadership checks every cached status.
    SweepStarted {
        /// The term of the leadership.
        term: u64,
        /// How many desired statuses it holds.
        statuses: u64,
    },
    /// [`message::WRITTEN`]: one status written under a term.
    Written {
        /// The term the write carried.
        term: u64,
        /// The object's kind (`HTTPRoute`).
        object_kind: String,
        /// The object's namespace; empty for a cluster-scoped one.
        namespace: String,
        /// The object's name.
        name: String,
    },
    /// [`message::FIRST_WRITE`]: the first status written under a leadership.
    FirstWrite {
        /// The term of the leadership.
        term: u64,
        /// The object, as one piece of text ([`field::OBJECT`]).
        object: String,
        /// Milliseconds from the start of the leadership.
        after_ms: f64,
    },
    /// [`message::SWEEP_DONE`]: the new leader's check of every cached status is over.
    SweepDone {
        /// The term of the leadership.
        term: u64,
        /// Statuses written.
        written: u64,
        /// Statuses found already right.
        unchanged: u64,
        /// Statuses neither written nor right.
        other: u64,
        /// How long the check took, in milliseconds.
        took_ms: f64,
    },
    /// [`message::ENDPOINT`]: the etcd member the lock talks to from now on.
    Endpoint {
        /// The member's URL, as given in `--etcd-endpoints`.
        url: String,
    },
    /// [`message::SERVING`]: the health and metrics server is up.
    Serving {
        /// The address it bound.
        addr: SocketAddr,
    },
}

// === impl Event ===

impl Event {
    /// Reads one JSON log line; `None` for a line that is not one of the declared ones, or that
    /// lacks a field its event needs (a line of an older version, a disabled replica's term).
    pub fn parse(line: &str) -> Option<Event> {
        Event::from_json(&serde_json::from_str(line).ok()?)
    }

    /// As [`Event::parse`], from a line already read as JSON.
    pub fn from_json(v: &Value) -> Option<Event> {
        let term = || whole(v, field::TERM);
        let text = |key: &str| v[key].as_str().map(str::to_string);
        Some(match v[field::MESSAGE].as_str()? {
            message::LEADING => Event::Leading {
                term: term()?,
                valid_until: float(v, field::VALID_UNTIL_MONO_MS)?,
            },
            message::RENEWED => Event::Renewed {
                term: term()?,
                valid_until: float(v, field::VALID_UNTIL_MONO_MS)?,
            },
            message::FOLLOWING => Event::Following {
                term: term(),
                holder: text(field::HOLDER).filter(|h| h != field::HOLDER_UNKNOWN),
            },
            message::STOPPED => Event::Stopped,
            message::RELEASED => Event::Released {
                term: term()?,
                released: v[field::RELEASED].as_bool()?,
                sent: float(v, field::SENT_MONO_MS),
            },
            message::SWEEP_STARTED => Event::SweepStarted {
                term: term()?,
                statuses: whole(v, field::STATUSES)?,
            },
            message::WRITTEN => Event::Written {
                term: term()?,
                object_kind: text(field::KIND).unwrap_or_default(),
                namespace: text(field::NAMESPACE).unwrap_or_default(),
                name: text(field::NAME).unwrap_or_default(),
            },
            message::FIRST_WRITE => Event::FirstWrite {
                term: term()?,
                object: text(field::OBJECT)?,
                after_ms: float(v, field::AFTER_MS)?,
            },
            message::SWEEP_DONE => Event::SweepDone {
                term: term()?,
                written: whole(v, field::WRITTEN)?,
                unchanged: whole(v, field::UNCHANGED)?,
                other: whole(v, field::OTHER)?,
                took_ms: float(v, field::TOOK_MS)?,
            },
            message::ENDPOINT => Event::Endpoint {
                url: text(field::ENDPOINT)?,
            },
            message::SERVING => Event::Serving {
                addr: text(field::ADDR)?.parse().ok()?,
            },
            _ => return None,
        })
    }

    /// The fencing term the line is about, if it names one.
    pub fn term(&self) -> Option<u64> {
        match self {
            Event::Leading { term, .. }
            | Event::Renewed { term, .. }
            | Event::Released { term, .. }
            | Event::SweepStarted { term, .. }
            | Event::Written { term, .. }
            | Event::FirstWrite { term, .. }
            | Event::SweepDone { term, .. } => Some(*term),
            Event::Following { term, .. } => *term,
            Event::Stopped | Event::Endpoint { .. } | Event::Serving { .. } => None,
        }
    }
}

/// The instant a JSON log line carries ([`field::MONO_MS`]), if it carries one.
pub fn mono_ms(v: &Value) -> Option<f64> {
    float(v, field::MONO_MS)
}

/// A number logged as a number or as text.
fn float(v: &Value, key: &str) -> Option<f64> {
    let f = &v[key];
    f.as_f64()
        .or_else(|| f.as_str().and_then(|s| s.parse().ok()))
}

/// A whole number logged as a number or as text (`%term`, `Display`).
fn whole(v: &Value, key: &str) -> Option<u64> {
    let f = &v[key];
    f.as_u64()
        .or_else(|| f.as_str().and_then(|s| s.parse().ok()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Lines as the binary logs them, spelled out rather than from the declaration: these tests
    /// hold the declaration to the lines that are out there.
    fn read(v: Value) -> Option<Event> {
        Event::parse(&v.to_string())
    }

    #[test]
    fn reads_the_leadership_lines() {
        let l = json!({"timestamp": "x", "level": "INFO", "message": "leadership: leading",
            "term": "7", "mono_ms": 10.5, "valid_until_mono_ms": 3010.5});
        assert_eq!(
            read(l),
            Some(Event::Leading {
                term: 7,
                valid_until: 3010.5
            })
        );
        let f = json!({"message": "leadership: following", "holder": "unknown", "mono_ms": 5.0});
        assert_eq!(
            read(f),
            Some(Event::Following {
                term: None,
                holder: None
            })
        );
        let f = json!({"message": "leadership: following", "holder": "a_1b", "term": "3",
            "mono_ms": 5.0});
        assert_eq!(
            read(f),
            Some(Event::Following {
                term: Some(3),
                holder: Some("a_1b".into())
            })
        );
        // A disabled replica's term is no number: there is no leadership to read.
        let d = json!({"message": "leadership: leading", "term": "disabled", "mono_ms": 1.0,
            "valid_until_mono_ms": 2.0});
        assert_eq!(read(d), None);
    }

    #[test]
    fn reads_the_writers_lines() {
        let w = json!({"message": "status written", "term": "7", "kind": "HTTPRoute",
            "namespace": "n", "name": "route", "mono_ms": 12.0});
        assert_eq!(
            read(w),
            Some(Event::Written {
                term: 7,
                object_kind: "HTTPRoute".into(),
                namespace: "n".into(),
                name: "route".into()
            })
        );
        let done = json!({"message": "every cached status checked", "term": "7",
            "identity": "a_1", "written": 2, "unchanged": 5, "other": 0, "took_ms": 31.5,
            "mono_ms": 40.0});
        assert_eq!(
            read(done),
            Some(Event::SweepDone {
                term: 7,
                written: 2,
                unchanged: 5,
                other: 0,
                took_ms: 31.5
            })
        );
        let first = json!({"message": "first status write of this leadership", "term": "7",
            "identity": "a_1", "object": "HTTPRoute n/route", "after_ms": 4.25});
        assert_eq!(
            read(first),
            Some(Event::FirstWrite {
                term: 7,
                object: "HTTPRoute n/route".into(),
                after_ms: 4.25
            })
        );
        let started = json!({"message": "leading: writing every cached status", "term": "7",
            "identity": "a_1", "statuses": 6});
        assert_eq!(
            read(started),
            Some(Event::SweepStarted {
                term: 7,
                statuses: 6
            })
        );
    }

    #[test]
    fn reads_the_release_endpoint_and_address() {
        // The elector's line, as `tracing`'s JSON layer flattens it (target and all).
        let r = json!({"timestamp": "x", "level": "INFO", "message": "released leadership",
            "term": "7", "released": true, "lock": "etcd key /gateway-leader/l",
            "sent_mono_ms": 19.5, "mono_ms": 20.25, "target": "leader_lock::elector"});
        assert_eq!(mono_ms(&r), Some(20.25));
        assert_eq!(
            read(r),
            Some(Event::Released {
                term: 7,
                released: true,
                sent: Some(19.5),
            })
        );
        let u = json!({"message": "using etcd endpoint", "endpoint": "http://127.0.0.1:2379",
            "mono_ms": 13.0, "answered": "[Some(0)]"});
        assert_eq!(
            read(u),
            Some(Event::Endpoint {
                url: "http://127.0.0.1:2379".into()
            })
        );
        let s = json!({"message": "serving /healthz, /readyz and /metrics",
            "addr": "127.0.0.1:40123"});
        assert_eq!(
            read(s),
            Some(Event::Serving {
                addr: "127.0.0.1:40123".parse().expect("addr")
            })
        );
        assert_eq!(read(json!({"message": "something else"})), None);
        assert_eq!(Event::parse("not json"), None);
    }

    #[test]
    fn a_line_logged_with_the_declared_names_reads_back() {
        use std::sync::{Arc, Mutex};

        #[derive(Clone, Default)]
        struct Buf(Arc<Mutex<Vec<u8>>>);
        impl std::io::Write for Buf {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                self.0
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .extend_from_slice(b);
                Ok(b.len())
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        let buf = Buf::default();
        let writer = buf.clone();
        // The binary's JSON format (`--log-format json`).
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .finish();
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!({ field::TERM } = %12, { field::RELEASED } = true,
                { field::LOCK } = "a Lease", { field::SENT_MONO_MS } = 1.5,
                { field::MONO_MS } = 2.5, "{}", message::RELEASED);
        });
        let text = String::from_utf8(buf.0.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .expect("utf-8");
        assert_eq!(
            Event::parse(text.trim()),
            Some(Event::Released {
                term: 12,
                released: true,
                sent: Some(1.5)
            }),
            "{text}"
        );
    }
}
