//! `status`'s output: an aligned block for people, one line per change for `--watch`, and the
//! JSON object of docs/operations.md ("gateway-leader status") for scripts.

use std::fmt::Write as _;
use std::time::{Duration, SystemTime};

use leader_lock::backend::{Fact, FactValue};
use serde_json::{json, Map, Value};

use super::view::View;

/// The version of the JSON schema; it changes only when a field changes meaning or goes away
/// (added fields keep it).
pub const SCHEMA: u32 = 1;

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_millis(t).to_string()
}

/// `t` against `now`: "in 12s" or "3s ago", to the second.
fn relative(t: SystemTime, now: SystemTime) -> String {
    let whole = |d: Duration| humantime::format_duration(Duration::from_secs(d.as_secs()));
    match t.duration_since(now) {
        Ok(d) => format!("in {}", whole(d)),
        Err(e) => format!("{} ago", whole(e.duration())),
    }
}

fn when(t: SystemTime, now: SystemTime) -> String {
    format!(
        "{} ({})",
        humantime::format_rfc3339_seconds(t),
        relative(t, now)
    )
}

fn fact_text(v: &FactValue) -> String {
    match v {
        FactValue::Number(n) => n.to_string(),
        FactValue::Time(t) => humantime::format_rfc3339_millis(*t).to_string(),
        FactValue::Text(s) => s.clone(),
    }
}

fn fact_json(v: &FactValue) -> Value {
    match v {
        FactValue::Number(n) => json!(n),
        FactValue::Time(t) => json!(rfc3339(*t)),
        FactValue::Text(s) => json!(s),
    }
}

fn history_text(h: &[Fact]) -> String {
    h.iter()
        .map(|f| format!("{}={}", f.name, fact_text(&f.value)))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The aligned block of a one-off `status`.
pub fn text(v: &View) -> String {
    let now = v.observed_at;
    let mut rows: Vec<(&str, String)> = vec![("lock", v.lock.clone())];
    let state = match v.reason {
        Some(r) => format!("{} ({})", v.state.name(), r.name()),
        None => v.state.name().to_string(),
    };
    rows.push(("state", state));
    if let Some(h) = &v.holder {
        rows.push(("holder", h.clone()));
    }
    if let Some(t) = v.term {
        rows.push(("term", t.to_string()));
    }
    if let Some(t) = v.acquired {
        rows.push(("since", when(t, now)));
    }
    if let Some(t) = v.renewed {
        rows.push(("renewed", when(t, now)));
    }
    if let Some(d) = v.lease_duration {
        rows.push(("lease", humantime::format_duration(d).to_string()));
    }
    if let Some((t, basis)) = v.expires {
        let by = match basis {
            super::view::Basis::ServerTtl => "the server's TTL",
            super::view::Basis::RenewTime => "renew time + lease, the holder's clock",
        };
        rows.push(("expires", format!("{} by {by}", when(t, now))));
    }
    if let Some(f) = &v.former {
        let who = if f.holder.is_empty() {
            "(name not kept)"
        } else {
            &f.holder
        };
        let how = if f.released {
            "released"
        } else {
            "not released"
        };
        rows.push(("last holder", format!("{who}, term {}, {how}", f.term)));
    }
    if let Some(t) = v.free_at {
        rows.push(("free at", when(t, now)));
    }
    if !v.history.is_empty() {
        rows.push(("history", history_text(&v.history)));
    }
    if let Some(e) = &v.error {
        rows.push(("error", e.clone()));
    }
    let width = rows.iter().map(|(k, _)| k.len()).max().unwrap_or(0);
    let mut out = String::new();
    for (k, val) in rows {
        let _ = writeln!(out, "{k:<width$}  {val}");
    }
    out
}

/// One `--watch` line: when, the state, and what changed.
pub fn line(v: &View) -> String {
    let mut out = format!("{} {}", rfc3339(v.observed_at), v.state.name());
    if let Some(r) = v.reason {
        let _ = write!(out, " reason={}", r.name());
    }
    if let Some(h) = &v.holder {
        let _ = write!(out, " holder={h}");
    }
    if let Some(t) = v.term {
        let _ = write!(out, " term={t}");
    }
    if let Some((t, _)) = v.expires {
        let _ = write!(out, " expires={}", rfc3339(t));
    }
    if let Some(f) = &v.former {
        if !f.holder.is_empty() {
            let _ = write!(out, " last_holder={}", f.holder);
        }
        let _ = write!(out, " last_term={}", f.term);
    }
    if let Some(t) = v.free_at {
        let _ = write!(out, " free_at={}", rfc3339(t));
    }
    if let Some(e) = &v.error {
        let _ = write!(out, " error={e:?}");
    }
    out
}

/// The JSON object (docs/operations.md, "gateway-leader status"): every field always present,
/// `null` when it does not apply.
pub fn json(v: &View) -> Value {
    let history: Map<String, Value> = v
        .history
        .iter()
        .map(|f| (f.name.to_string(), fact_json(&f.value)))
        .collect();
    json!({
        "schema": SCHEMA,
        "lock": v.lock,
        "backend": v.backend,
        "state": v.state.name(),
        "reason": v.reason.map(|r| r.name()),
        "holder": v.holder,
        "term": v.term.map(|t| t.0),
        "acquireTime": v.acquired.map(rfc3339),
        "renewTime": v.renewed.map(rfc3339),
        "leaseDurationSeconds": v.lease_duration.map(|d| d.as_secs_f64()),
        "expires": v.expires.map(|(t, _)| rfc3339(t)),
        "expiresBy": v.expires.map(|(_, b)| b.name()),
        "lastHolder": v.former.as_ref().map(|f| json!({
            "holder": Some(&f.holder).filter(|h| !h.is_empty()),
            "term": f.term.0,
            "released": f.released,
        })),
        "freeAt": v.free_at.map(rfc3339),
        "history": history,
        "observedAt": rfc3339(v.observed_at),
        "error": v.error,
    })
}

#[cfg(test)]
mod tests {
    use leader_lock::Term;

    use super::super::view::{Basis, State};
    use super::*;

    fn held() -> View {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        View {
            lock: "kubernetes Lease ns/l".into(),
            backend: "kubernetes".into(),
            state: State::Held,
            reason: None,
            holder: Some("pod-a_1".into()),
            term: Some(Term(3)),
            acquired: Some(now - Duration::from_secs(90)),
            renewed: Some(now - Duration::from_secs(1)),
            lease_duration: Some(Duration::from_secs(15)),
            expires: Some((now + Duration::from_secs(14), Basis::RenewTime)),
            former: None,
            free_at: None,
            history: vec![Fact {
                name: "leaseTransitions",
                value: FactValue::Number(3),
            }],
            observed_at: now,
            error: None,
        }
    }

    #[test]
    fn the_block_is_aligned_and_says_whose_clock_the_expiry_is_by() {
        let t = text(&held());
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines[0], "lock     kubernetes Lease ns/l");
        assert_eq!(lines[1], "state    held");
        assert!(
            t.contains("since    2027-01-15T07:58:30Z (1m 30s ago)"),
            "{t}"
        );
        assert!(t.contains("(in 14s) by renew time + lease"), "{t}");
        assert!(t.contains("history  leaseTransitions=3"), "{t}");
    }

    #[test]
    fn the_json_has_every_field_and_numbers_as_numbers() {
        let j = json(&held());
        assert_eq!(j["schema"], 1);
        assert_eq!(j["term"], 3);
        assert_eq!(j["leaseDurationSeconds"], 15.0);
        assert_eq!(j["expiresBy"], "renew-time");
        assert_eq!(j["history"]["leaseTransitions"], 3);
        assert!(j["lastHolder"].is_null() && j["error"].is_null());
        assert_eq!(j.as_object().map(|o| o.len()), Some(17));
    }

    #[test]
    fn a_watch_line_is_one_line() {
        let l = line(&held());
        assert!(
            l.starts_with("2027-01-15T08:00:00.000Z held holder=pod-a_1 term=3 expires="),
            "{l}"
        );
        assert!(!l.contains('\n'));
    }
}
