use std::time::{Duration, SystemTime, UNIX_EPOCH};

use leader_lock::backend::LockRecord;
use leader_lock::Term;
use redis::Value;
use serde::Deserialize;

/// The version marker of the stored value; anything else is a foreign record.
pub(crate) const FORMAT_VERSION: u64 = 1;

/// A lease longer than this is not one we wrote (the CLI caps far below it).
const MAX_LEASE_MS: u64 = 366 * 24 * 3600 * 1000;

/// The greatest term: Redis counts (`INCR`) in signed 64-bit integers. The scripts keep terms
/// as decimal strings, so they stay exact all the way up.
pub(crate) const MAX_TERM: u64 = i64::MAX as u64;

/// The value in the holder key:
/// `{"v":1,"holder":"pod-a_5f3c9e1a","term":7,"lease_ms":15000,"acquired_ms":..,"renewed_ms":..}`.
#[derive(Debug, Deserialize)]
struct Stored {
    v: u64,
    holder: String,
    term: u64,
    lease_ms: u64,
    acquired_ms: u64,
    renewed_ms: u64,
}

/// The message published on the events channel by a release.
#[derive(Debug, Deserialize)]
struct Released {
    v: u64,
    released: bool,
    holder: String,
    term: u64,
}

fn at(ms: u64) -> Option<SystemTime> {
    UNIX_EPOCH.checked_add(Duration::from_millis(ms))
}

/// Parses a stored value; `Err` names what makes it foreign.
pub(crate) fn parse(raw: &[u8]) -> Result<LockRecord, String> {
    let s: Stored =
        serde_json::from_slice(raw).map_err(|e| format!("not a gateway-leader record ({e})"))?;
    if s.v != FORMAT_VERSION {
        return Err(format!("unknown record version {}", s.v));
    }
    if s.holder.is_empty() {
        return Err("empty holder".into());
    }
    if s.term == 0 || s.term > MAX_TERM {
        return Err(format!("term {} out of range", s.term));
    }
    if s.lease_ms == 0 || s.lease_ms > MAX_LEASE_MS {
        return Err(format!("lease_ms {} out of range", s.lease_ms));
    }
    Ok(LockRecord {
        holder: s.holder,
        term: Term(s.term),
        lease_duration: Duration::from_millis(s.lease_ms),
        acquire_time: at(s.acquired_ms),
        renew_time: at(s.renewed_ms),
        version: format!("{}.{}", s.term, s.renewed_ms),
    })
}

/// What a message on the events channel says.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Message {
    /// Someone acquired or renewed; the record they wrote.
    Record(LockRecord),
    /// The holder released its lease.
    Released {
        /// Who released.
        holder: String,
        /// The term it released.
        term: Term,
    },
    /// Something we do not understand.
    Unknown,
}

pub(crate) fn message(payload: &[u8]) -> Message {
    if let Ok(r) = serde_json::from_slice::<Released>(payload) {
        if r.v == FORMAT_VERSION && r.released {
            return Message::Released {
                holder: r.holder,
                term: Term(r.term),
            };
        }
    }
    match parse(payload) {
        Ok(rec) => Message::Record(rec),
        Err(_) => Message::Unknown,
    }
}

/// A reply element as an integer; the scripts return terms as decimal strings, not Lua numbers.
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

/// A reply element's bytes (a value, a record), whichever string type the server used.
pub(crate) fn bytes(v: &Value) -> Option<&[u8]> {
    match v {
        Value::BulkString(b) => Some(b),
        Value::SimpleString(s) => Some(s.as_bytes()),
        _ => None,
    }
}

/// A PTTL reply as a wait: `Some` for a running TTL, `Some(0)` for a key already gone.
pub(crate) fn pttl_wait(pttl: i64) -> Option<Duration> {
    match pttl {
        p if p > 0 => Some(Duration::from_millis(p.unsigned_abs())),
        -2 | 0 => Some(Duration::ZERO),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roundtrip_and_foreign() {
        let rec = parse(
            br#"{"v":1,"holder":"a_1","term":7,"lease_ms":15000,"acquired_ms":1,"renewed_ms":2}"#,
        )
        .expect("ours");
        assert_eq!(rec.holder, "a_1");
        assert_eq!(rec.term, Term(7));
        assert_eq!(rec.lease_duration, Duration::from_secs(15));
        for bad in [
            &br#"{"holder":"a_1","term":7,"lease_ms":15000,"acquired_ms":1,"renewed_ms":2}"#[..],
            br#"{"v":2,"holder":"a_1","term":7,"lease_ms":15000,"acquired_ms":1,"renewed_ms":2}"#,
            br#"{"v":1,"holder":"","term":7,"lease_ms":15000,"acquired_ms":1,"renewed_ms":2}"#,
            br#"{"v":1,"holder":"a","term":7,"lease_ms":-5,"acquired_ms":1,"renewed_ms":2}"#,
            concat!(
                r#"{"v":1,"holder":"a","term":7,"lease_ms":18446744073709551615,"#,
                r#""acquired_ms":1,"renewed_ms":2}"#
            )
            .as_bytes(),
            b"\x00\x01garbage",
        ] {
            assert!(parse(bad).is_err(), "{}", String::from_utf8_lossy(bad));
        }
        // Terms are exact over Redis' integer range, and foreign beyond it.
        let big = parse(
            concat!(
                r#"{"v":1,"holder":"a","term":9007199254740993,"lease_ms":1000,"#,
                r#""acquired_ms":0,"renewed_ms":0}"#
            )
            .as_bytes(),
        );
        assert_eq!(big.expect("ours").term, Term(9_007_199_254_740_993));
        let max = parse(
            concat!(
                r#"{"v":1,"holder":"a","term":9223372036854775807,"lease_ms":1000,"#,
                r#""acquired_ms":0,"renewed_ms":0}"#
            )
            .as_bytes(),
        );
        assert_eq!(max.expect("ours").term, Term(i64::MAX as u64));
        assert!(parse(
            concat!(
                r#"{"v":1,"holder":"a","term":9223372036854775808,"lease_ms":1000,"#,
                r#""acquired_ms":0,"renewed_ms":0}"#
            )
            .as_bytes()
        )
        .is_err());
        assert!(parse(
            br#"{"v":1,"holder":"a","term":0,"lease_ms":1000,"acquired_ms":0,"renewed_ms":0}"#
        )
        .is_err());
        // A renew time far in the future is informational; it must not panic.
        let r = parse(
            concat!(
                r#"{"v":1,"holder":"a","term":1,"lease_ms":1000,"acquired_ms":0,"#,
                r#""renewed_ms":18446744073709551615}"#
            )
            .as_bytes(),
        );
        assert!(r.is_ok());
    }

    #[test]
    fn messages() {
        assert_eq!(
            message(br#"{"v":1,"released":true,"holder":"a_1","term":3}"#),
            Message::Released {
                holder: "a_1".into(),
                term: Term(3)
            }
        );
        assert!(matches!(
            message(
                br#"{"v":1,"holder":"a_1","term":3,"lease_ms":1000,"acquired_ms":1,"renewed_ms":1}"#
            ),
            Message::Record(_)
        ));
        assert_eq!(message(b"hello"), Message::Unknown);
    }
}
