//! The apiserver's Lease of the controller's election, which a replica of the native election
//! may still renew during a rolling update into this mode: while it does, no controller behind a
//! proxy leads.

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::runtime::watcher;
use tokio::time::Instant;
use tracing::{debug, warn};

use super::ElectionLease;

/// The native election's Lease on the apiserver, as last seen.
#[derive(Debug, Clone)]
pub(super) struct Native {
    pub(super) lease: Option<Lease>,
    /// When its record last changed while watched (not its first sighting).
    pub(super) changed: Option<Instant>,
}

impl Native {
    /// Its holder while a replica of the old kind may still lead by it.
    pub(super) fn live_holder(&self, now: Instant, wall: Timestamp) -> Option<String> {
        let lease = self.lease.as_ref()?;
        let spec = lease.spec.as_ref()?;
        let holder = spec.holder_identity.as_deref().filter(|h| !h.is_empty())?;
        let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64);
        let renewed_lately = spec
            .renew_time
            .as_ref()
            .is_some_and(|t| t.0 + SignedDuration::try_from(duration).unwrap_or_default() > wall);
        let changed_lately = self.changed.is_some_and(|c| now < c + duration);
        (renewed_lately || changed_lately).then(|| holder.to_string())
    }
}

impl ElectionLease {
    /// Follows the apiserver's Lease of the same name: a replica of the native election may
    /// still renew it during a rolling update into this mode.
    pub(super) async fn watch_native(self: Arc<Self>, client: kube::Client) {
        let api: kube::Api<Lease> = kube::Api::namespaced(client, &self.target.namespace);
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.target.name));
        let mut events = watcher::watcher(api, config).boxed();
        let mut first_error = true;
        loop {
            let event = tokio::select! {
                _ = self.stop.cancelled() => return,
                e = events.next() => e,
            };
            let Some(event) = event else { return };
            let mut native = self.native.lock().unwrap_or_else(|p| p.into_inner());
            match event {
                Ok(watcher::Event::InitDone) => {
                    native.get_or_insert(Native {
                        lease: None,
                        changed: None,
                    });
                    first_error = true;
                }
                Ok(watcher::Event::Apply(lease) | watcher::Event::InitApply(lease)) => {
                    let changed = match &*native {
                        Some(n) if n.lease.as_ref().map(|l| &l.spec) != Some(&lease.spec) => {
                            Some(Instant::now())
                        }
                        Some(n) => n.changed,
                        None => None,
                    };
                    let listed = native.is_some();
                    *native = Some(Native {
                        lease: Some(lease),
                        changed: if listed { changed } else { None },
                    });
                }
                Ok(watcher::Event::Delete(_)) => {
                    *native = Some(Native {
                        lease: None,
                        changed: None,
                    });
                }
                Ok(watcher::Event::Init) => {}
                Err(e) => {
                    drop(native);
                    if first_error {
                        warn!(lease = %self.target, error = %e,
                            "cannot watch the apiserver's Lease of the controller's election \
                             (the proxy needs get, list and watch on leases there); until it \
                             can, no controller here leads");
                        first_error = false;
                    } else {
                        debug!(error = %e, "watching the native election's Lease");
                    }
                    tokio::time::sleep(Duration::from_secs(1)).await;
                }
            }
        }
    }
}
