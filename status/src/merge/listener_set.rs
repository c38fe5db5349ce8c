//! A ListenerSet's status merges as a Gateway's does: conditions by type, listeners by name,
//! `observedGeneration` never back, nothing sent when nothing changes.
//!
//! kopium gives ListenerSet its own copies of the listener status types; they have the Gateway
//! listener's fields (upstream v1.5.1 `apis/v1/listenerset_types.go`, `ListenerEntryStatus`), so
//! the merge converts to the Gateway's shape and back rather than repeating itself.

use gateway_api::gateways::{GatewayStatusListeners, GatewayStatusListenersSupportedKinds};
use gateway_api::listenersets::{
    ListenerSet, ListenerSetStatus, ListenerSetStatusListeners,
    ListenerSetStatusListenersSupportedKinds,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::StatusObject;
use super::{decide, merge_conditions, merge_listeners, observed_with_listeners, Merge};
use crate::desired::Desired;

impl StatusObject for ListenerSet {
    fn merge(&self, desired: &Desired, _controller_name: &str, now: &Time) -> Merge<Self> {
        let Desired::ListenerSet {
            generation,
            conditions,
            listeners,
        } = desired
        else {
            return Merge::WrongKind;
        };
        let status = self.status.clone().unwrap_or_default();
        let have = status.conditions.clone().unwrap_or_default();
        let have_listeners: Vec<GatewayStatusListeners> = status
            .listeners
            .iter()
            .flatten()
            .map(to_gateway_shape)
            .collect();
        decide(
            self,
            *generation,
            observed_with_listeners(&have, &have_listeners),
            |next| {
                let merged = merge_listeners(&have_listeners, listeners, now);
                next.status = Some(ListenerSetStatus {
                    conditions: Some(merge_conditions(&have, conditions, now)),
                    listeners: Some(merged.iter().map(from_gateway_shape).collect()),
                });
            },
            |a, b| a.status.clone().unwrap_or_default() == b.status.clone().unwrap_or_default(),
        )
    }
}

fn to_gateway_shape(l: &ListenerSetStatusListeners) -> GatewayStatusListeners {
    GatewayStatusListeners {
        attached_routes: l.attached_routes,
        conditions: l.conditions.clone(),
        name: l.name.clone(),
        supported_kinds: l.supported_kinds.as_ref().map(|kinds| {
            kinds
                .iter()
                .map(|k| GatewayStatusListenersSupportedKinds {
                    group: k.group.clone(),
                    kind: k.kind.clone(),
                })
                .collect()
        }),
    }
}

fn from_gateway_shape(l: &GatewayStatusListeners) -> ListenerSetStatusListeners {
    ListenerSetStatusListeners {
        attached_routes: l.attached_routes,
        conditions: l.conditions.clone(),
        name: l.name.clone(),
        supported_kinds: l.supported_kinds.as_ref().map(|kinds| {
            kinds
                .iter()
                .map(|k| ListenerSetStatusListenersSupportedKinds {
                    group: k.group.clone(),
                    kind: k.kind.clone(),
                })
                .collect()
        }),
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::jiff::Timestamp;

    use super::*;
    use crate::desired::condition;

    fn t(secs: i64) -> Time {
        Time(Timestamp::from_second(secs).expect("valid time"))
    }

    #[test]
    fn a_listener_set_keeps_transition_times_and_other_types_and_is_then_unchanged() {
        let mut ls: ListenerSet = serde_json::from_value(serde_json::json!({
            "apiVersion": "gateway.networking.k8s.io/v1", "kind": "ListenerSet",
            "metadata": {"name": "ls", "namespace": "infra", "generation": 2},
            "spec": {"parentRef": {"name": "gw"}, "listeners": []}
        }))
        .expect("a ListenerSet");
        let mut theirs = condition("Vendor", true, "Fine", "", 2);
        theirs.last_transition_time = t(5);
        let mut accepted = condition("Accepted", true, "Accepted", "", 2);
        accepted.last_transition_time = t(7);
        ls.status = Some(ListenerSetStatus {
            conditions: Some(vec![theirs.clone(), accepted]),
            listeners: None,
        });
        let want = Desired::ListenerSet {
            generation: 2,
            conditions: vec![
                condition("Accepted", true, "Accepted", "", 2),
                condition("Programmed", true, "Programmed", "", 2),
            ],
            listeners: vec![GatewayStatusListeners {
                attached_routes: 3,
                conditions: vec![condition("Accepted", true, "Accepted", "", 2)],
                name: "web".into(),
                supported_kinds: Some(vec![]),
            }],
        };
        let Merge::Write(out) = ls.merge(&want, "us", &t(100)) else {
            panic!("a write");
        };
        let status = out.status.clone().expect("status");
        let conditions = status.conditions.expect("conditions");
        assert_eq!(conditions[0], theirs);
        assert_eq!(conditions[1].last_transition_time, t(7));
        assert_eq!(conditions[2].last_transition_time, t(100));
        assert_eq!(status.listeners.expect("listeners")[0].attached_routes, 3);
        assert_eq!(out.merge(&want, "us", &t(200)), Merge::Unchanged);
        let older = Desired::ListenerSet {
            generation: 1,
            conditions: vec![condition("Accepted", false, "NotAllowed", "", 1)],
            listeners: vec![],
        };
        assert_eq!(
            out.merge(&older, "us", &t(300)),
            Merge::Stale { observed: 2 }
        );
    }
}
