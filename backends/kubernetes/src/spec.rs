//! Reading and writing a Lease's spec the way client-go does, with clamps for foreign values.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use leader_lock::backend::LockRecord;
use leader_lock::Term;

/// How a read Lease is interpreted: the clamps that keep a foreign or damaged record harmless.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Clamp {
    /// Used for a missing, zero or negative `leaseDurationSeconds`.
    pub fallback: Duration,
    /// The longest lease we respect; a larger `leaseDurationSeconds` counts as this.
    pub max: Duration,
}

impl Clamp {
    /// The duration we respect for a recorded `leaseDurationSeconds`.
    pub fn duration(&self, seconds: Option<i32>) -> Duration {
        match seconds {
            Some(s) if s > 0 => Duration::from_secs(u64::from(s.unsigned_abs())).min(self.max),
            // client-go would treat these as "already expired"; we wait a full lease of our own
            // instead.
            _ => self.fallback,
        }
    }
}

/// The raw `leaseTransitions`, with a negative value (which the API rejects anyway) read as 0.
pub(crate) fn transitions(lease: &Lease) -> i32 {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.lease_transitions)
        .unwrap_or(0)
        .max(0)
}

/// The holder, empty when the Lease is free (no spec, no holder, or an empty holder).
pub(crate) fn holder(lease: &Lease) -> &str {
    lease
        .spec
        .as_ref()
        .and_then(|s| s.holder_identity.as_deref())
        .unwrap_or("")
}

fn system_time(t: &Option<MicroTime>) -> Option<SystemTime> {
    t.as_ref().map(|m| SystemTime::from(m.0))
}

/// The lock record a Lease stands for (durations clamped, term guarded against negatives).
pub(crate) fn record(lease: &Lease, clamp: Clamp) -> LockRecord {
    let spec = lease.spec.clone().unwrap_or_default();
    LockRecord {
        holder: spec.holder_identity.unwrap_or_default(),
        term: Term(u64::from(transitions(lease).unsigned_abs())),
        lease_duration: clamp.duration(spec.lease_duration_seconds),
        acquire_time: system_time(&spec.acquire_time),
        renew_time: system_time(&spec.renew_time),
        version: lease.metadata.resource_version.clone().unwrap_or_default(),
    }
}

/// Now, as client-go writes it (`metav1.MicroTime`, microseconds, UTC).
pub(crate) fn now() -> MicroTime {
    MicroTime(jiff::Timestamp::now())
}

/// The spec client-go's `LeaderElectionRecordToLeaseSpec` writes: every field set, nothing else
/// kept.
pub(crate) fn spec(
    holder: &str,
    lease_seconds: i32,
    acquire: MicroTime,
    renew: MicroTime,
    transitions: i32,
) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(holder.to_string()),
        lease_duration_seconds: Some(lease_seconds),
        acquire_time: Some(acquire),
        renew_time: Some(renew),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    const CLAMP: Clamp = Clamp {
        fallback: Duration::from_secs(15),
        max: Duration::from_secs(3600),
    };

    fn lease(spec: Option<LeaseSpec>) -> Lease {
        Lease {
            metadata: ObjectMeta {
                name: Some("l".into()),
                resource_version: Some("7".into()),
                ..ObjectMeta::default()
            },
            spec,
        }
    }

    #[test]
    fn clamps() {
        assert_eq!(CLAMP.duration(None), Duration::from_secs(15));
        assert_eq!(CLAMP.duration(Some(0)), Duration::from_secs(15));
        assert_eq!(CLAMP.duration(Some(-5)), Duration::from_secs(15));
        assert_eq!(CLAMP.duration(Some(20)), Duration::from_secs(20));
        assert_eq!(CLAMP.duration(Some(i32::MAX)), Duration::from_secs(3600));
    }

    #[test]
    fn foreign_and_empty_leases_read_safely() {
        let r = record(&lease(None), CLAMP);
        assert!(r.is_free());
        assert_eq!(r.term, Term(0));
        let r = record(
            &lease(Some(LeaseSpec {
                holder_identity: Some("x".into()),
                lease_transitions: Some(-3),
                ..LeaseSpec::default()
            })),
            CLAMP,
        );
        assert_eq!(r.holder, "x");
        assert_eq!(r.term, Term(0));
        assert_eq!(r.lease_duration, Duration::from_secs(15));
        assert_eq!(r.version, "7");
    }

    #[test]
    fn written_times_are_micro_time() {
        let s = spec("me", 15, now(), now(), 2);
        let v = serde_json::to_value(&s).expect("serializes");
        let t = v["renewTime"].as_str().expect("a string");
        // client-go's RFC3339Micro: 2006-01-02T15:04:05.000000Z07:00 (UTC here).
        assert_eq!(t.len(), "2006-01-02T15:04:05.000000Z".len(), "{t}");
        assert!(t.ends_with('Z'));
        assert_eq!(v["leaseTransitions"], 2);
        assert_eq!(v["holderIdentity"], "me");
    }
}
