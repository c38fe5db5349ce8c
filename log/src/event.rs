//! What a replica's JSON log says, as far as the bench and the checker need it.
//!
//! Every instant is `mono_ms`: `CLOCK_MONOTONIC` in milliseconds, logged by the replica itself
//! (see `leader_lock::clock`), so it compares with the bench's own signal instants. The Go peers
//! (`testkit/peers/`) stamp their lines with the same clock; [`parse_peer`] reads them into the
//! same events.

use serde::Serialize;

/// One line of a replica's log that matters here.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Event {
    /// Which replica of its lane logged it.
    pub replica: usize,
    /// When, on `CLOCK_MONOTONIC`, in milliseconds.
    pub mono_ms: f64,
    /// What it says.
    pub what: What,
}

/// The lines the bench reads.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// `leadership: leading`: a new leadership, valid until the deadline.
    Leading {
        /// The fencing term.
        term: u64,
        /// The validity deadline (`CLOCK_MONOTONIC` ms).
        valid_until: f64,
    },
    /// `leadership: renewed` (debug): the deadline moved.
    Renewed {
        /// The fencing term.
        term: u64,
        /// The new validity deadline (`CLOCK_MONOTONIC` ms).
        valid_until: f64,
    },
    /// `leadership: following`: not leading (any more); the holder's term when known.
    Following {
        /// The term of the leadership this replica follows.
        term: Option<u64>,
    },
    /// `leadership: stopped`: the elector stopped; nothing is written any more.
    Stopped,
    /// `released leadership`: the elector's release of the lock returned, at `mono_ms`.
    Released {
        /// The term released.
        term: u64,
        /// Whether the lock was still ours and is now free (`false`: someone else's already).
        released: bool,
        /// When the release was sent (`CLOCK_MONOTONIC` ms); `None` from versions without it.
        sent: Option<f64>,
    },
    /// `status written` under a term.
    Written {
        /// The term the write carried.
        term: u64,
        /// GatewayClass, Gateway or HTTPRoute.
        object_kind: String,
        /// The object's name.
        name: String,
    },
    /// `every cached status checked`: the new leader's first pass is over.
    SweepDone {
        /// The term of the leadership.
        term: u64,
    },
    /// `using etcd endpoint`: the etcd member this replica's lock talks to from now on (at
    /// connect, and after each move away from a member that failed).
    Endpoint {
        /// The member's URL, as given in `--etcd-endpoints`.
        url: String,
    },
}

fn num(v: &serde_json::Value, key: &str) -> Option<f64> {
    let f = &v[key];
    f.as_f64()
        .or_else(|| f.as_str().and_then(|s| s.parse().ok()))
}

fn term(v: &serde_json::Value) -> Option<u64> {
    let t = &v["term"];
    t.as_u64()
        .or_else(|| t.as_str().and_then(|s| s.parse().ok()))
}

/// Reads one JSON log line of replica `replica`; `None` for lines that do not matter here.
pub fn parse(replica: usize, line: &str) -> Option<Event> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let message = v["message"].as_str()?;
    let what = match message {
        "leadership: leading" => What::Leading {
            term: term(&v)?,
            valid_until: num(&v, "valid_until_mono_ms")?,
        },
        "leadership: renewed" => What::Renewed {
            term: term(&v)?,
            valid_until: num(&v, "valid_until_mono_ms")?,
        },
        "leadership: following" => What::Following { term: term(&v) },
        "leadership: stopped" => What::Stopped,
        "released leadership" => What::Released {
            term: term(&v)?,
            released: v["released"].as_bool()?,
            sent: num(&v, "sent_mono_ms"),
        },
        "status written" => What::Written {
            term: term(&v)?,
            object_kind: v["kind"].as_str().unwrap_or_default().to_string(),
            name: v["name"].as_str().unwrap_or_default().to_string(),
        },
        "every cached status checked" => What::SweepDone { term: term(&v)? },
        "using etcd endpoint" => What::Endpoint {
            url: v["endpoint"].as_str()?.to_string(),
        },
        _ => return None,
    };
    // Lines without the monotonic instant have no place on the common time line.
    let mono_ms = match what {
        // The sweep line carries no instant; it is only used to end a wait, never as a time.
        What::SweepDone { .. } => num(&v, "mono_ms").unwrap_or(f64::NAN),
        _ => num(&v, "mono_ms")?,
    };
    Some(Event {
        replica,
        mono_ms,
        what,
    })
}

/// Reads one JSON line of Go peer `replica` (`testkit/peers/internal/peer` lists them); `None`
/// for lines that do not matter here. A peer's leadership is valid from its `started leading`
/// line until its last `renewed` write was sent plus the renew deadline, as the peer computes
/// it in `valid_until_mono_ms`; its release and its `stopped leading` line end it sooner.
pub fn parse_peer(replica: usize, line: &str) -> Option<Event> {
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    let what = match v["event"].as_str()? {
        "started leading" => What::Leading {
            term: term(&v)?,
            valid_until: num(&v, "valid_until_mono_ms")?,
        },
        "renewed" => What::Renewed {
            term: term(&v)?,
            valid_until: num(&v, "valid_until_mono_ms")?,
        },
        "following" => What::Following { term: term(&v) },
        "stopped leading" => What::Stopped,
        "released" => What::Released {
            term: term(&v)?,
            released: true,
            sent: num(&v, "sent_mono_ms"),
        },
        "wrote" => What::Written {
            term: term(&v)?,
            object_kind: "ConfigMap".to_string(),
            name: v["object"].as_str().unwrap_or_default().to_string(),
        },
        _ => return None,
    };
    Some(Event {
        replica,
        mono_ms: num(&v, "mono_ms")?,
        what,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_lines_that_matter() {
        let l = r#"{"timestamp":"x","level":"INFO","message":"leadership: leading","term":"7","mono_ms":10.5,"valid_until_mono_ms":3010.5}"#;
        assert_eq!(
            parse(2, l),
            Some(Event {
                replica: 2,
                mono_ms: 10.5,
                what: What::Leading {
                    term: 7,
                    valid_until: 3010.5
                }
            })
        );
        let w = r#"{"message":"status written","term":"7","kind":"HTTPRoute","namespace":"n","name":"route","mono_ms":12.0}"#;
        assert!(matches!(
            parse(0, w).map(|e| e.what),
            Some(What::Written { term: 7, .. })
        ));
        let u = r#"{"message":"using etcd endpoint","endpoint":"http://127.0.0.1:2379","mono_ms":13.0,"answered":"[Some(0)]"}"#;
        assert_eq!(
            parse(1, u).map(|e| e.what),
            Some(What::Endpoint {
                url: "http://127.0.0.1:2379".into()
            })
        );
        // The elector's line, as `tracing`'s JSON layer flattens it (target and all).
        let r = r#"{"timestamp":"x","level":"INFO","message":"released leadership","term":"7","released":true,"lock":"etcd key /gateway-leader/l","sent_mono_ms":19.5,"mono_ms":20.25,"target":"leader_lock::elector"}"#;
        assert_eq!(
            parse(1, r),
            Some(Event {
                replica: 1,
                mono_ms: 20.25,
                what: What::Released {
                    term: 7,
                    released: true,
                    sent: Some(19.5),
                }
            })
        );
        // Before the release carried its instant, the line had none: no place on the time line.
        let old = r#"{"message":"released leadership","term":"7","released":true}"#;
        assert_eq!(parse(1, old), None);
        assert_eq!(parse(0, r#"{"message":"something else"}"#), None);
        assert_eq!(parse(0, "not json"), None);
    }

    #[test]
    fn reads_the_peers_lines() {
        // As testkit/peers prints them (Go's encoding/json: sorted keys, numbers as numbers).
        let l = r#"{"event":"started leading","holder":"cg-3_1b2c","mono_ms":100.5,"renew_deadline_ms":3000,"term":4,"valid_until_mono_ms":3098.25}"#;
        assert_eq!(
            parse_peer(3, l),
            Some(Event {
                replica: 3,
                mono_ms: 100.5,
                what: What::Leading {
                    term: 4,
                    valid_until: 3098.25
                }
            })
        );
        let r = r#"{"event":"released","mono_ms":12.5,"sent_mono_ms":10.0,"term":4}"#;
        assert_eq!(
            parse_peer(3, r).map(|e| e.what),
            Some(What::Released {
                term: 4,
                released: true,
                sent: Some(10.0)
            })
        );
        let f = r#"{"event":"following","holder":"","mono_ms":5.0}"#;
        assert_eq!(
            parse_peer(3, f).map(|e| e.what),
            Some(What::Following { term: None })
        );
        let w = r#"{"event":"wrote","mono_ms":7.0,"object":"writes","resource_version":"812","sent_mono_ms":6.0,"seq":2,"term":4}"#;
        assert!(matches!(
            parse_peer(3, w).map(|e| e.what),
            Some(What::Written { term: 4, .. })
        ));
        // The acquiring write comes before the callback; it is not a leadership yet.
        let a = r#"{"event":"acquired","created":false,"mono_ms":1.0,"sent_mono_ms":0.5,"term":4,"valid_until_mono_ms":3000.5}"#;
        assert_eq!(parse_peer(3, a), None);
        assert_eq!(parse_peer(3, "I1203 07:13:46 klog text"), None);
    }
}
