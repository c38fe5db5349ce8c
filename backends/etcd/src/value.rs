//! The JSON value stored under the lock key, and a key-value read back as a lock record.

use std::time::{Duration, SystemTime};

use etcd_client::KeyValue;
use leader_lock::backend::LockRecord;
use leader_lock::Term;
use serde::{Deserialize, Serialize};

/// A lease longer than this is not one we wrote; such a value is treated as foreign.
const MAX_LEASE_SECONDS: u64 = 366 * 24 * 3600;

/// The lock key's value: who holds it, for how long they asked, and since when.
///
/// The term is usually not stored: it is the key's create revision, which etcd assigns. A
/// holder that was handed the key by its predecessor's release (docs/etcd.md, "Handover") holds
/// a key created long before: its term is the revision of that handover write, which the
/// handover value marks (`handover`) and the successor's renews then carry (`term`). See
/// [`term`].
///
/// Also the value of a candidate's registration `<key>#candidates/<holder>` (holder and lease
/// duration only), which is how a releasing leader finds someone to hand the key to.
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
    /// The term, once a successor renews a key handed over to it; absent otherwise (then the
    /// term follows from the key's revisions, see [`term`]). Versions before the handover
    /// ignore it (serde skips unknown fields).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub term: Option<u64>,
    /// Written by a releasing leader that hands the key to a candidate: this write's own
    /// revision is the successor's term.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub handover: bool,
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
            term: None,
            handover: false,
        }
    }

    /// A candidate's registration: who it is and the TTL of the spare lease it is attached to.
    pub fn candidate(holder: String, lease_duration_seconds: u64) -> Self {
        StoredValue {
            holder,
            lease_duration_seconds,
            acquire_time: None,
            renew_time: None,
            term: None,
            handover: false,
        }
    }

    /// The value a releasing leader writes to hand the key to `candidate` (its registration).
    ///
    /// It carries no `renewTime`: followers then never take it as a stale record (they wait
    /// until etcd deletes it, as for a holder that renews with keep-alives only), because the
    /// successor starts leading without a write of its own and so is not timed by one. Its
    /// first renew writes `renewTime` and `term`.
    pub fn handed_to(candidate: &StoredValue) -> Self {
        StoredValue {
            holder: candidate.holder.clone(),
            lease_duration_seconds: candidate.lease_duration_seconds,
            acquire_time: Some(humantime::format_rfc3339_millis(SystemTime::now()).to_string()),
            renew_time: None,
            term: None,
            handover: true,
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

/// The term of the leadership a value of ours records, given the key's revisions.
///
/// The stored `term` when present (a successor's renews); else, for the handover write itself,
/// that write's revision (`mod_rev`); else the key's create revision. Each is the revision of the
/// write that put this holder in the key, so terms only go up and never repeat: a handover
/// write comes after every write of the holder before it, and a key created later comes after
/// every write to the key before it.
pub(crate) fn term(v: &StoredValue, create_rev: i64, mod_rev: i64) -> i64 {
    match v.term {
        Some(t) => i64::try_from(t).unwrap_or(i64::MAX),
        None if v.handover => mod_rev,
        None => create_rev,
    }
}

pub(crate) fn record(kv: &KeyValue) -> Result<LockRecord, String> {
    let v = StoredValue::parse(kv.value())?;
    Ok(LockRecord {
        lease_duration: v.lease_duration(),
        acquire_time: v.acquire_time(),
        renew_time: v.renew_time(),
        term: Term(revision(term(&v, kv.create_revision(), kv.mod_revision()))),
        holder: v.holder,
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
    fn the_term_is_the_revision_of_the_write_that_put_the_holder_in() {
        let acquired = StoredValue::new("a_1".into(), 15);
        assert_eq!(term(&acquired, 10, 14), 10, "acquired: the create revision");
        let handed = StoredValue::handed_to(&StoredValue::candidate("b_2".into(), 15));
        assert!(handed.renew_time.is_none(), "never stale while unrenewed");
        assert_eq!(
            term(&handed, 10, 20),
            20,
            "handed over: that write's revision"
        );
        let renewed = StoredValue {
            term: Some(20),
            ..handed.renewed()
        };
        assert_eq!(term(&renewed, 10, 25), 20, "the successor's renews keep it");
        // Older versions read the new fields as unknown ones and still parse the value.
        let parsed = StoredValue::parse(&renewed.encode()).expect("parses");
        assert_eq!(parsed.term, Some(20));
        assert!(parsed.handover);
        let old = StoredValue::parse(br#"{"holder":"a_1","leaseDurationSeconds":15,"future":1}"#)
            .expect("unknown fields are ignored");
        assert_eq!(term(&old, 3, 9), 3);
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
