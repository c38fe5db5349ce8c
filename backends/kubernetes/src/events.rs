//! Kubernetes Events on the Lease when this replica becomes or stops being leader, as client-go
//! posts.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, EventSource, ObjectReference};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use kube::api::PostParams;
use kube::Api;
use leader_lock::elector::AFTER_RELEASE_QUIET;
use leader_lock::{Identity, LeaderState, Leadership, Term};
use tokio::task::JoinHandle;
use tracing::{debug, warn};

/// How long one Event may take to post (a read of the Lease's uid, then the create). Events are
/// optional: a hung apiserver must not hold up the next one, nor a shutdown waiting for the last.
pub const EVENT_POST_TIMEOUT: Duration = Duration::from_secs(2);

/// What [`spawn_leader_events`] posts on, and as whom.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEventsConfig {
    /// The Events' source component: your controller's name.
    pub component: String,
    /// The namespace of the Lease (and of its Events).
    pub namespace: String,
    /// The name of the Lease.
    pub lease_name: String,
    /// This replica's identity, as its elector campaigns (`Elector::candidate`): the Events
    /// name its holder (`<identity>_<incarnation>`).
    pub identity: Identity,
}

/// Posts Kubernetes Events on the Lease whenever this replica becomes or stops being leader, as
/// client-go does: reason `LeaderElection`, message `<holder> became leader` or `<holder> stopped
/// leading`, source [`component`](LeaderEventsConfig::component). Each post is bounded by
/// [`EVENT_POST_TIMEOUT`]; a failure is logged, never fatal. Neither competes with the requests
/// a takeover waits for: "became leader" is posted once the leadership has renewed (or ended),
/// stamped with when it began, so a new leader's first writes go first; the task ends after the
/// elector stops, with a last "stopped leading" when it was leading, posted
/// [`AFTER_RELEASE_QUIET`] after the elector released the lock (or gave up on it after
/// [`EVENT_POST_TIMEOUT`]): a follower is waiting for that release, then takes the Lease and
/// writes, and those requests go first.
///
/// `client` must be ungated (as the lock's, see [`LeaseLock`](crate::LeaseLock)): the "stopped
/// leading" Event is posted after leadership ended. It needs RBAC `events: create`.
///
/// # Panics
/// Outside a Tokio runtime.
///
/// # Examples
///
/// ```no_run
/// # async fn run(kube: kube::Client, elector: leader_lock::Elector) {
/// use leader_lock_kubernetes::{spawn_leader_events, LeaderEventsConfig};
///
/// let config = LeaderEventsConfig {
///     component: "my-controller".to_string(),
///     namespace: "default".to_string(),
///     lease_name: "my-controller-lock".to_string(),
///     identity: elector.candidate().identity.clone(),
/// };
/// let events = spawn_leader_events(kube, config, elector.leadership());
/// let _ = elector.shutdown().await;
/// let _ = events.await; // the last Event is posted
/// # }
/// ```
pub fn spawn_leader_events(
    client: kube::Client,
    config: LeaderEventsConfig,
    leadership: Leadership,
) -> JoinHandle<()> {
    let mut poster = Poster {
        events: Api::namespaced(client.clone(), &config.namespace),
        leases: Api::namespaced(client, &config.namespace),
        holder: config.identity.holder(),
        component: config.component,
        namespace: config.namespace,
        lease: config.lease_name,
        uid: None,
    };
    tokio::spawn(async move {
        let mut rx = leadership.subscribe();
        let mut leading: Option<Term> = None;
        // When the current leadership began, while its "became leader" Event waits for the
        // leadership's first renewal: a new leader's first status writes go to the apiserver
        // before that Event's read and write.
        let mut unposted: Option<Time> = None;
        loop {
            let state = rx.borrow_and_update().clone();
            if matches!(state, LeaderState::Stopped) {
                if leading.is_some() {
                    // `Stopped` comes before the release, and a follower is waiting for that
                    // release to take the Lease and write: the Events (more writes to the
                    // apiserver, and its etcd) go a quiet moment after it. The elector drops its
                    // side of the channel once it released.
                    let released = async { while rx.changed().await.is_ok() {} };
                    let _ = tokio::time::timeout(EVENT_POST_TIMEOUT, released).await;
                    tokio::time::sleep(AFTER_RELEASE_QUIET).await;
                    poster.ended(&mut unposted).await;
                }
                return;
            }
            let term = state.term();
            if term != leading {
                if leading.is_some() {
                    poster.ended(&mut unposted).await;
                }
                unposted = term.map(|_| now());
                leading = term;
            } else if leading.is_some() {
                // The same term again: renewed.
                poster.became(&mut unposted).await;
            }
            if rx.changed().await.is_err() {
                if leading.is_some() {
                    poster.ended(&mut unposted).await;
                }
                return;
            }
        }
    })
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

struct Poster {
    events: Api<Event>,
    leases: Api<Lease>,
    /// The Event's source component.
    component: String,
    namespace: String,
    lease: String,
    holder: String,
    /// The Lease's uid as last read.
    uid: Option<String>,
}

impl Poster {
    /// Posts "<holder> <what>" within [`EVENT_POST_TIMEOUT`]; failures are logged, never fatal.
    /// With `read_uid` (a new leadership, whose Lease may have been recreated) the Lease's uid
    /// is read first; otherwise the one read then is used, so that the Event for a leadership's
    /// end adds no read to a handover.
    async fn post(&mut self, what: &str, read_uid: bool, at: Time) {
        let message = format!("{} {what}", self.holder);
        if tokio::time::timeout(EVENT_POST_TIMEOUT, self.send(&message, read_uid, at))
            .await
            .is_err()
        {
            warn!(%message, lease = %format!("{}/{}", self.namespace, self.lease),
                timeout = ?EVENT_POST_TIMEOUT, "posting the leader election event timed out");
        }
    }

    /// Posts the "became leader" Event of the current leadership, stamped with when it began,
    /// unless it is out already.
    async fn became(&mut self, unposted: &mut Option<Time>) {
        if let Some(at) = unposted.take() {
            self.post("became leader", true, at).await;
        }
    }

    /// Posts the end of a leadership: its "became leader" first when that was still waiting.
    async fn ended(&mut self, unposted: &mut Option<Time>) {
        self.became(unposted).await;
        self.post("stopped leading", false, now()).await;
    }

    async fn send(&mut self, message: &str, read_uid: bool, at: Time) {
        // The uid ties the event to this Lease object; without it the event still lists by name.
        if read_uid || self.uid.is_none() {
            self.uid = match self.leases.get_opt(&self.lease).await {
                Ok(Some(l)) => l.metadata.uid,
                _ => None,
            };
        }
        let uid = self.uid.clone();
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
            message: Some(message.to_string()),
            type_: Some("Normal".into()),
            source: Some(EventSource {
                component: Some(self.component.clone()),
                host: None,
            }),
            first_timestamp: Some(at.clone()),
            last_timestamp: Some(at),
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

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use leader_lock::{Elector, ElectorConfig, MemoryStore, Timing};
    use tokio::net::TcpListener;
    use tokio::time::Instant;

    use super::*;

    /// A client of an "apiserver" that accepts connections and never answers.
    async fn hung_apiserver() -> kube::Client {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("address"));
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((conn, _)) = listener.accept().await {
                held.push(conn);
            }
        });
        let config = kube::Config::new(url.parse().expect("url"));
        kube::Client::try_from(config).expect("client")
    }

    #[tokio::test(start_paused = true)]
    async fn event_posts_to_a_hung_apiserver_give_up_in_time() {
        let client = hung_apiserver().await;
        let elector = Elector::spawn(
            Arc::new(MemoryStore::new().lock("events")),
            ElectorConfig {
                identity: Identity::new("a"),
                timing: Timing::default(),
                release_on_shutdown: true,
            },
        )
        .expect("a valid timing");
        let leadership = elector.leadership();
        let config = LeaderEventsConfig {
            component: "test".to_string(),
            namespace: "ns".to_string(),
            lease_name: "events".to_string(),
            identity: elector.candidate().identity.clone(),
        };
        let events = spawn_leader_events(client, config, leadership.clone());
        drop(leadership.wait_leader().await.expect("leads"));
        let stopped = Instant::now();
        assert!(elector.shutdown().await.expect("released"));
        // A leadership that ended before its first renewal posts "became leader" a quiet moment
        // after the release, then "stopped leading": each gives up in time.
        tokio::time::timeout(EVENT_POST_TIMEOUT * 4, events)
            .await
            .expect("the events task ends despite the hung apiserver")
            .expect("events task");
        assert!(stopped.elapsed() <= AFTER_RELEASE_QUIET + EVENT_POST_TIMEOUT * 3);
    }
}
