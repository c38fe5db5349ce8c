//! Kubernetes Events on the Lease when this replica becomes or stops being leader, as client-go posts.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use kube::Api;
use leader_lock::{Identity, LeaderState, Leadership, Term};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// The event source component.
const COMPONENT: &str = "gateway-leader";

/// Posts Kubernetes Events on the Lease whenever this replica becomes or stops being leader.
pub fn spawn_leader_events(
    client: kube::Client,
    namespace: &str,
    lease_name: &str,
    identity: &Identity,
    leadership: Leadership,
) -> JoinHandle<()> {
    let poster = Poster {
        events: Api::namespaced(client.clone(), namespace),
        leases: Api::namespaced(client, namespace),
        namespace: namespace.to_string(),
        lease: lease_name.to_string(),
        holder: identity.holder(),
    };
    tokio::spawn(async move {
        let mut rx = leadership.subscribe();
        let mut leading: Option<Term> = None;
        loop {
            let state = rx.borrow_and_update().clone();
            let now = state.term();
            if now != leading {
                if leading.is_some() {
                    poster.post("stopped leading").await;
                }
                if now.is_some() {
                    poster.post("became leader").await;
                }
                leading = now;
            }
            if matches!(state, LeaderState::Stopped) || rx.changed().await.is_err() {
                if leading.is_some() {
                    poster.post("stopped leading").await;
                }
                return;
            }
        }
    })
}

struct Poster {
    events: Api<Event>,
    leases: Api<Lease>,
    namespace: String,
    lease: String,
    holder: String,
}

impl Poster {
    /// Posts "<holder> <what>"; failures are logged, never fatal.
    async fn post(&self, what: &str) {
        let message = format!("{} {what}", self.holder);
        // The uid ties the event to this Lease object; without it the event still lists by name.
        let uid = match self.leases.get_opt(&self.lease).await {
            Ok(Some(l)) => l.metadata.uid,
            _ => None,
        };
        let now = Time(jiff::Timestamp::now());
        let ev = Event {
            metadata: ObjectMeta {
                generate_name: Some(format!("{}.", self.lease)),
                namespace: Some(self.namespace.clone()),
                ..ObjectMeta::default()
            },
            involved_object: ObjectReference {
                api_version: Some("coordination.k8s.io/v1".into()),
                kind: Some("Lease".into()),
                name: Some(self.lease.clone()),
                namespace: Some(self.namespace.clone()),
                uid,
                ..ObjectReference::default()
            },
            reason: Some("LeaderElection".into()),
            message: Some(message.clone()),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some(COMPONENT.into()),
                host: None,
            }),
            first_timestamp: Some(now.clone()),
            last_timestamp: Some(now),
            count: Some(1),
            ..Event::default()
        };
        match self.events.create(&PostParams::default(), &ev).await {
            Ok(_) => debug!(%message, lease = %self.lease, "posted leader election event"),
            Err(e) => warn!(
                error = %e,
                %message,
                lease = %format!("{}/{}", self.namespace, self.lease),
                "cannot post leader election event (needs RBAC events: create)"
            ),
        }
    }
}
