//! What the server keeps of the lock, for [`LeaderLock::inspect`]: the record and its PTTL,
//! the term counter, and the state key, which remembers the last holder after its record is
//! gone and tells a release from a record that vanished (docs/redis.md, "Vanished records").
//!
//! [`LeaderLock::inspect`]: leader_lock::backend::LeaderLock::inspect

use std::time::{Duration, UNIX_EPOCH};

use leader_lock::backend::{FactValue, Inspection, LastHolder, LockError};
use leader_lock::Term;
use redis::Value;
use serde::Deserialize;

use crate::value::{self, bytes, int, pttl_wait};

/// One atomic read: the holder key and its PTTL, the term counter, the state key, the
/// server's clock and its uptime. KEYS: holder, term, state. Returns `{value|false, pttl,
/// counter|false, state|false, seconds, microseconds, uptime seconds|false}`.
pub(crate) const INSPECT_BODY: &str = r#"
local t = redis.call('TIME')
local up = string.match(redis.call('INFO', 'server'), 'uptime_in_seconds:(%d+)')
return {redis.call('GET', KEYS[1]), redis.call('PTTL', KEYS[1]), redis.call('GET', KEYS[2]),
  redis.call('GET', KEYS[3]), t[1], t[2], up or false}
"#;

/// The state key's value, as the acquire and release scripts write it (`scripts.rs`).
#[derive(Debug, Deserialize)]
struct State {
    holder: String,
    term: u64,
    lease_ms: u64,
    renewed_us: u64,
    #[serde(default)]
    released: bool,
}

/// Reads the inspect script's reply; `key` names the holder key in messages.
pub(crate) fn interpret(reply: &[Value], key: &str) -> Result<Inspection, LockError> {
    let bad = || {
        LockError::malformed(format!(
            "unexpected reply from the inspect script: {reply:?}"
        ))
    };
    let [value, pttl, counter, state, seconds, micros, up] = reply else {
        return Err(bad());
    };
    // uptime_in_seconds is the difference of two whole-second clocks: only one second less is
    // certain (as the acquire script counts it).
    let uptime = int(up).map(|u| Duration::from_secs(u.max(1).unsigned_abs() - 1));
    let (Some(seconds), Some(micros)) = (int(seconds), int(micros)) else {
        return Err(bad());
    };
    let now_us = u64::try_from(seconds)
        .unwrap_or(0)
        .saturating_mul(1_000_000)
        .saturating_add(u64::try_from(micros).unwrap_or(0));
    // A state key this library did not write is no trace: as if there were none.
    let state = bytes(state).and_then(|raw| serde_json::from_slice::<State>(raw).ok());
    let mut i = Inspection::of_record(None).with_server_uptime(uptime);
    if let Some(c) = int(counter) {
        i = i.with_fact("termCounter", FactValue::Number(c.max(0).unsigned_abs()));
    }
    if let Some(s) = &state {
        i = i.with_fact(
            "serverRenewTime",
            FactValue::Time(UNIX_EPOCH + Duration::from_micros(s.renewed_us)),
        );
    }
    match bytes(value) {
        Some(raw) => {
            let rec = value::parse(raw).map_err(|why| {
                LockError::malformed(format!("{key} holds a foreign value: {why}"))
            })?;
            i.record = Some(rec);
            Ok(i.with_server_ttl(int(pttl).and_then(pttl_wait)))
        }
        None => Ok(i.with_last_holder(state.map(|s| last_holder(&s, now_us)))),
    }
}

/// The last holder the state key remembers; a lease not yet over since its last renew, by the
/// server's clock, holds the lock off (the acquire script's own rule).
fn last_holder(s: &State, now_us: u64) -> LastHolder {
    let lease_us = s.lease_ms.saturating_mul(1000);
    let since = now_us.checked_sub(s.renewed_us);
    let held_off_for = match since {
        Some(since) if !s.released && since < lease_us => {
            Some(Duration::from_micros(lease_us - since))
        }
        // A server clock set back: the script counts no trace, and waits as the client knows.
        None if !s.released => Some(Duration::from_micros(lease_us)),
        _ => None,
    };
    LastHolder {
        holder: s.holder.clone(),
        term: Term(s.term),
        released: s.released,
        held_off_for,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(released: bool) -> State {
        State {
            holder: "a_1".into(),
            term: 9,
            lease_ms: 15_000,
            renewed_us: 1_000_000,
            released,
        }
    }

    #[test]
    fn a_vanished_record_is_held_off_until_a_lease_after_its_last_renew_by_the_servers_clock() {
        let h = last_holder(&state(false), 5_000_000);
        assert!(!h.released);
        assert_eq!(h.held_off_for, Some(Duration::from_secs(11)));
        assert_eq!(last_holder(&state(false), 16_000_000).held_off_for, None);
        let r = last_holder(&state(true), 5_000_000);
        assert!(r.released && r.held_off_for.is_none(), "{r:?}");
    }

    #[test]
    fn an_empty_lock_reports_the_servers_certain_uptime_and_its_trace() {
        let state = br#"{"v":1,"holder":"a_1","term":12,"lease_ms":15000,"renewed_us":1000000}"#;
        let reply = [
            Value::Nil,
            Value::Int(-2),
            Value::BulkString(b"12".to_vec()),
            Value::BulkString(state.to_vec()),
            Value::BulkString(b"5".to_vec()),
            Value::BulkString(b"0".to_vec()),
            Value::BulkString(b"7".to_vec()),
        ];
        let i = interpret(&reply, "k").expect("a reading");
        assert_eq!(i.record, None);
        assert_eq!(
            i.server_uptime,
            Some(Duration::from_secs(6)),
            "one second less"
        );
        let h = i.last_holder.expect("the state key's holder");
        assert_eq!((h.holder.as_str(), h.term), ("a_1", Term(12)));
        assert_eq!(h.held_off_for, Some(Duration::from_secs(11)));
        assert!(
            interpret(&reply[..6], "k").is_err(),
            "a short reply is no reading"
        );
    }

    #[test]
    fn the_state_keys_two_shapes_both_parse() {
        let live: State = serde_json::from_str(
            r#"{"v":1,"holder":"a_1","term":12,"lease_ms":15000,"renewed_us":1700000000000000}"#,
        )
        .expect("live");
        assert!(!live.released);
        let released: State = serde_json::from_str(
            r#"{"v":1,"released":true,"holder":"a_1","term":12,"lease_ms":15000,"renewed_us":1}"#,
        )
        .expect("released");
        assert!(released.released && released.term == 12);
    }
}
