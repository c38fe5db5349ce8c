//! The JSON value stored under the lock key, and a key-value read back as a lock record.

use std::time::{Duration, SystemTime};

use etcd_client::KeyValue;
use leader_lock::{LockRecord, Term};
use serde::{Deserialize, Serialize};

/// A lease longer than this is not one we wrote; such a value is treated as foreign.
const MAX_LEASE_SECONDS: u64 = 366 * 24 * 3600;

/// The lock key's value: who holds it, for how long they asked, and since when.
///
/// The term is not stored: it is the key's create revision, which etcd assigns.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct StoredValue {
    /// `name_incarnation` of the holder.
    pub holder: String,
    /// The TTL of the etcd lease the key is attached to.
    pub lease_duration_seconds: u64,
    /// RFC 3339, by the holder's wall clock (informational only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub acquire_time: Option<String>,
    /// RFC 3339, by the holder's wall clock (informational only). Its presence also says the
    /// holder rewrites the value on every renew, so a version that stops changing is stale;
    /// values without it (older gateway-leader versions) are only ever left to expire.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub renew_time: Option<String>,
}

impl StoredValue {
    /// The value a candidate writes when it takes the lock now.
    pub fn new(holder: String, lease_duration_seconds: u64) -> Self {
        let now = Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string());
        StoredValue {
            holder,
            lease_duration_seconds,
            acquire_time: now.clone(),
            renew_time: now,
        }
    }

    /// The same value with the renew time set to now: what every renew writes.
    pub fn renewed(&self) -> Self {
        StoredValue {
            renew_time: Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
            ..self.clone()
        }
    }

    /// Serialized value bytes.
    pub fn encode(&self) -> Vec<u8> {
        // Serializing a struct of strings and integers cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Parses a value; anything that is not a well-formed value of ours is an error.
    pub fn parse(raw: &[u8]) -> Result<Self, String> {
        let v: StoredValue =
            serde_json::from_slice(raw).map_err(|e| format!("not a gateway-leader value: {e}"))?;
        if v.holder.is_empty() {
            return Err("empty holder".into());
        }
        if v.lease_duration_seconds == 0 || v.lease_duration_seconds > MAX_LEASE_SECONDS {
            return Err(format!(
                "lease duration {}s out of range",
                v.lease_duration_seconds
            ));
        }
        Ok(v)
    }

    /// The lease duration as a `Duration`.
    pub fn lease_duration(&self) -> Duration {
        Duration::from_secs(self.lease_duration_seconds)
    }

    /// The renew time, when present and readable.
    pub fn renew_time(&self) -> Option<SystemTime> {
        self.renew_time
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    }

    /// The acquire time, when present and readable.
    pub fn acquire_time(&self) -> Option<SystemTime> {
        self.acquire_time
            .as_deref()
            .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
    }
}

pub(crate) fn record(kv: &KeyValue) -> Result<LockRecord, String> {
    let v = StoredValue::parse(kv.value())?;
    Ok(LockRecord {
        lease_duration: v.lease_duration(),
        acquire_time: v.acquire_time(),
        renew_time: v.renew_time(),
        holder: v.holder,
        term: Term(revision(kv.create_revision())),
        version: kv.mod_revision().to_string(),
    })
}

pub(crate) fn revision(r: i64) -> u64 {
    r.max(0).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let v = StoredValue::new("pod-a_12345678".into(), 15);
        let parsed = StoredValue::parse(&v.encode()).expect("parses");
        assert_eq!(parsed, v);
        assert!(parsed.acquire_time().is_some());
        assert_eq!(parsed.lease_duration(), Duration::from_secs(15));
    }

    #[test]
    fn rejects_foreign_values() {
        for raw in [
            &b"\x00\x01garbage"[..],
            br#"{"holder":7,"leaseDurationSeconds":"x"}"#,
            br#"{"holder":"a_1"}"#,
            br#"{"holder":"","leaseDurationSeconds":15}"#,
            br#"{"holder":"a_1","leaseDurationSeconds":-5}"#,
            br#"{"holder":"a_1","leaseDurationSeconds":18446744073709551615}"#,
            br#"{"holder":"a_1","leaseDurationSeconds":0}"#,
        ] {
            assert!(StoredValue::parse(raw).is_err(), "{raw:?}");
        }
    }

    #[test]
    fn unreadable_acquire_time_is_only_informational() {
        let v = StoredValue::parse(
            br#"{"holder":"a_1","leaseDurationSeconds":15,"acquireTime":"yesterday"}"#,
        )
        .expect("parses");
        assert_eq!(v.acquire_time(), None);
    }
}
