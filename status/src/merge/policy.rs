//! BackendTLSPolicy's `status.ancestors`: the merge of route parents, applied to ancestors
//! (upstream's `PolicyAncestorStatus` has the `RouteParentStatus` shape,
//! `apis/v1/policy_types.go`).

use gateway_api::backendtlspolicies::{
    BackendTlsPolicy, BackendTlsPolicyStatus, BackendTlsPolicyStatusAncestors,
    BackendTlsPolicyStatusAncestorsAncestorRef,
};
use gateway_api::httproutes::HttpRouteStatusParentsParentRef;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::{merge_ours, Merge, RouteStatus, StatusObject, MAX_ANCESTORS};
use crate::desired::{Desired, RouteParentStatus};

impl RouteStatus for BackendTlsPolicy {
    fn parents(&self) -> Vec<RouteParentStatus> {
        let ancestors = self.status.iter().flat_map(|s| &s.ancestors);
        ancestors
            .map(|a| RouteParentStatus {
                conditions: a.conditions.clone(),
                controller_name: a.controller_name.clone(),
                parent_ref: HttpRouteStatusParentsParentRef {
                    group: a.ancestor_ref.group.clone(),
                    kind: a.ancestor_ref.kind.clone(),
                    name: a.ancestor_ref.name.clone(),
                    namespace: a.ancestor_ref.namespace.clone(),
                    port: a.ancestor_ref.port,
                    section_name: a.ancestor_ref.section_name.clone(),
                },
            })
            .collect()
    }

    fn set_parents(&mut self, parents: Vec<RouteParentStatus>) {
        let ancestors = parents
            .into_iter()
            .map(|p| BackendTlsPolicyStatusAncestors {
                conditions: p.conditions,
                controller_name: p.controller_name,
                ancestor_ref: BackendTlsPolicyStatusAncestorsAncestorRef {
                    group: p.parent_ref.group,
                    kind: p.parent_ref.kind,
                    name: p.parent_ref.name,
                    namespace: p.parent_ref.namespace,
                    port: p.parent_ref.port,
                    section_name: p.parent_ref.section_name,
                },
            });
        self.status = Some(BackendTlsPolicyStatus {
            ancestors: ancestors.collect(),
        });
    }
}

impl StatusObject for BackendTlsPolicy {
    fn merge(&self, desired: &Desired, controller_name: &str, now: &Time) -> Merge<Self> {
        let Desired::Policy {
            generation,
            ancestors,
        } = desired
        else {
            return Merge::WrongKind;
        };
        merge_ours(
            self,
            *generation,
            ancestors,
            MAX_ANCESTORS,
            controller_name,
            now,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{parent, t, written, THEM, US};
    use super::*;

    #[test]
    fn policy_ancestors_merge_like_route_parents_within_their_limit() {
        let theirs = parent(THEM, "x", true, 1);
        let mut p = BackendTlsPolicy::new("p", Default::default());
        p.metadata.generation = Some(3);
        p.set_parents(vec![theirs.clone(), parent(US, "gone", true, 2)]);
        let want = Desired::Policy {
            generation: 3,
            ancestors: (0..20)
                .map(|i| parent(US, &format!("g{i}"), true, 3))
                .collect(),
        };
        let out = written(p.merge(&want, US, &t(1)));
        let ancestors = out.parents();
        assert_eq!(ancestors.len(), MAX_ANCESTORS);
        assert_eq!(ancestors[0], theirs);
        assert!(ancestors.iter().all(|a| a.parent_ref.name != "gone"));
        assert_eq!(out.merge(&want, US, &t(9)), Merge::Unchanged);
        // observedGeneration never goes back, and a route's desired status is never written.
        let older = Desired::Policy {
            generation: 2,
            ancestors: vec![parent(US, "g0", false, 2)],
        };
        assert_eq!(out.merge(&older, US, &t(9)), Merge::Stale { observed: 3 });
        let route = Desired::Route {
            generation: 3,
            parents: vec![].into(),
        };
        assert_eq!(out.merge(&route, US, &t(9)), Merge::WrongKind);
    }
}
