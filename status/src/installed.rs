//! Which Gateway API kinds the cluster serves, learnt from API discovery, and the watches that
//! follow from it.
//!
//! Clusters often run a subset or an older release of the Gateway API. One discovery request
//! (`GET /apis/gateway.networking.k8s.io/v1`) lists the resources the apiserver serves; a kind
//! is watched only while it is served, so a missing CRD costs no failing watch at all.
//!
//! Invariants:
//! - A missing kind is named once, in one WARN with its CRD and how to install it; it is named
//!   again only after it was installed and went away again.
//! - While a kind is missing, discovery is repeated with exponential backoff (1 s doubling to
//!   [`MAX_RECHECK`]), so a CRD installed later is picked up within seconds without a restart,
//!   and a cluster without some CRDs costs one small GET (a list of a few KiB) per replica every
//!   10 s. A watch that fails makes discovery run again at once: a CRD deleted since stops its
//!   watch instead of failing it forever.
//! - Readiness waits only for the required kinds ([`Crd::required`]): while one is missing it
//!   says which. The optional kinds' statuses are computed once their watch has its first list.
//!
//! Why discovery and not a watch on CustomResourceDefinitions: discovery needs no permission
//! (every authenticated user may read it, through the `system:discovery` ClusterRole), and it
//! says what is *served* at the version the gateway-api crate's types speak, which a CRD object
//! says only after reading its versions and conditions; a watch on every CRD of the cluster
//! would also hold each CRD's schema (hundreds of KiB each) in memory.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use leader_lock::readiness::Readiness;
use tokio::sync::{watch, Notify};
use tokio::task::JoinSet;
use tracing::{debug, info, warn};

// `Crd` lives beside `Kind`, so that the watches can name it without depending on discovery.
pub(crate) use crate::key::Crd;
use crate::watch::Stores;

/// The API group and version whose resources discovery lists.
pub(crate) const GROUP_VERSION: &str = "gateway.networking.k8s.io/v1";
/// The slowest discovery is repeated while some kind is missing.
pub(crate) const MAX_RECHECK: Duration = Duration::from_secs(10);
/// The first repeat of discovery while some kind is missing.
const FIRST_RECHECK: Duration = Duration::from_secs(1);
/// How the missing CRDs are installed: the standard channel of the newest release served.
pub(crate) const INSTALL_HINT: &str = "kubectl apply --server-side -f \
    https://github.com/kubernetes-sigs/gateway-api/releases/download/v1.7.0/standard-install.yaml";

/// What the status writer reports until its required watches have their first lists.
pub(crate) fn not_synced() -> Readiness {
    Readiness::Waiting("the Gateway API watches have not synced yet".into())
}

/// What one discovery found: the served kinds, or why it could not tell.
fn served(resources: &[String]) -> BTreeSet<Crd> {
    Crd::ALL
        .into_iter()
        .filter(|c| resources.iter().any(|r| r == c.plural()))
        .collect()
}

/// Lists the resources of [`GROUP_VERSION`] when `/apis` says the group version is served: a
/// direct request for a group version that is not served would be a 404, which kube-client
/// logs as a WARN of its own on every try.
async fn discover(client: &Client) -> Result<BTreeSet<Crd>, kube::Error> {
    let groups = client.list_api_groups().await?;
    let group_served = groups
        .groups
        .iter()
        .flat_map(|g| &g.versions)
        .any(|v| v.group_version == GROUP_VERSION);
    if !group_served {
        return Ok(BTreeSet::new());
    }
    match client.list_api_group_resources(GROUP_VERSION).await {
        Ok(list) => Ok(served(
            &list
                .resources
                .into_iter()
                .map(|r| r.name)
                .collect::<Vec<_>>(),
        )),
        // The last CRD of the group went away in between.
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(BTreeSet::new()),
        Err(e) => Err(e),
    }
}

/// The readiness that follows from what is served and what has synced. Until the first
/// `Ready`, the optional kinds served at startup are waited for too (or their watch's failure),
/// so the first computation sees them; an optional kind picked up later never holds readiness
/// back.
fn readiness(served: Option<&BTreeSet<Crd>>, stores: &Stores, was_ready: bool) -> Readiness {
    let Some(served) = served else {
        return Readiness::Waiting("the Gateway API kinds could not be discovered yet".into());
    };
    let missing: Vec<String> = Crd::ALL
        .into_iter()
        .filter(|c| c.required() && !served.contains(c))
        .map(Crd::crd_name)
        .collect();
    if !missing.is_empty() {
        return Readiness::Waiting(format!(
            "required Gateway API CRDs are not installed: {}; install them with: {INSTALL_HINT}",
            missing.join(", ")
        ));
    }
    if !stores.first_lists_done(!was_ready) {
        return not_synced();
    }
    Readiness::Ready
}

/// The next pause between discoveries while something is missing: doubling up to
/// [`MAX_RECHECK`].
fn next_recheck(last: Option<Duration>) -> Duration {
    last.map_or(FIRST_RECHECK, |d| (d * 2).min(MAX_RECHECK))
}

/// Watches what is served: starts a kind's watch when its CRD appears, stops it when the CRD
/// goes, names each missing kind once, and publishes [`Readiness`]. Runs until aborted (its
/// watches are aborted with it). `looked` is notified whenever what is watched changed, so
/// the caller can re-read the bundle version.
pub(crate) async fn supervise(
    client: Client,
    stores: Stores,
    readiness_tx: watch::Sender<Readiness>,
    looked: Arc<Notify>,
) {
    let mut tasks = JoinSet::new();
    let mut running: Vec<(Crd, tokio::task::AbortHandle)> = vec![];
    let mut warned: BTreeSet<Crd> = BTreeSet::new();
    let mut last: Option<BTreeSet<Crd>> = None;
    let mut recheck: Option<Duration> = None;
    let mut discovery_failed = false;
    let mut was_ready = false;
    loop {
        // 1. What is served now (a failure keeps the watches as they are).
        match discover(&client).await {
            Ok(now) => {
                if discovery_failed {
                    info!("Gateway API discovery works again");
                    discovery_failed = false;
                }
                for crd in Crd::ALL {
                    let is_running = running.iter().any(|(c, _)| *c == crd);
                    match (now.contains(&crd), is_running) {
                        (true, false) => {
                            let handle = stores.start(crd, &client, &mut tasks);
                            running.push((crd, handle));
                            if warned.remove(&crd) {
                                info!(
                                    kind = %crd,
                                    crd = %crd.crd_name(),
                                    "CRD installed; watching it now"
                                );
                            } else {
                                debug!(kind = %crd, "watching");
                            }
                        }
                        (false, true) => {
                            running.retain(|(c, h)| {
                                if *c == crd {
                                    h.abort();
                                }
                                *c != crd
                            });
                            stores.stop(crd);
                        }
                        _ => {}
                    }
                    if !now.contains(&crd) && warned.insert(crd) {
                        let effect = if crd.required() {
                            "readiness stays false until it is installed"
                        } else {
                            "its statuses are not written until it is installed"
                        };
                        warn!(kind = %crd, crd = %crd.crd_name(), install = INSTALL_HINT,
                            "Gateway API CRD not installed; {effect}");
                    }
                }
                if last.as_ref() != Some(&now) {
                    looked.notify_one();
                }
                last = Some(now);
            }
            Err(e) => {
                if !discovery_failed {
                    warn!(group_version = GROUP_VERSION, error = %e,
                        "Gateway API discovery failed; retrying with backoff");
                }
                discovery_failed = true;
            }
        }
        // 2. Look again later while something is missing, at once when a watch found its CRD
        //    gone, and update readiness whenever a watch's state changes.
        let complete =
            !discovery_failed && last.as_ref().is_some_and(|s| s.len() == Crd::ALL.len());
        recheck = if complete {
            None
        } else {
            Some(next_recheck(recheck))
        };
        let delay = recheck;
        let sleep = async move {
            match delay {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        };
        tokio::pin!(sleep);
        loop {
            readiness_tx.send_if_modified(|r| {
                let next = readiness(last.as_ref(), &stores, was_ready);
                was_ready |= next == Readiness::Ready;
                let changed = *r != next;
                *r = next;
                changed
            });
            tokio::select! {
                _ = &mut sleep => break,
                look = stores.watch_state_changed() => {
                    if look {
                        // Look again at once, and back off afresh from there.
                        recheck = None;
                        break;
                    }
                }
                Some(_) = tasks.join_next() => {}
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn discovery_names_only_the_kinds_it_lists() {
        let listed = [
            "gateways",
            "gateways/status",
            "httproutes",
            "gatewayclasses",
            "backendtlspolicies",
        ]
        .map(String::from);
        assert_eq!(
            served(&listed),
            [
                Crd::GatewayClass,
                Crd::Gateway,
                Crd::HttpRoute,
                Crd::BackendTlsPolicy
            ]
            .into()
        );
    }

    #[test]
    fn rechecks_back_off_exponentially_to_ten_seconds() {
        let mut d = None;
        let mut seen = vec![];
        for _ in 0..6 {
            let next = next_recheck(d);
            seen.push(next.as_secs());
            d = Some(next);
        }
        assert_eq!(seen, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn only_required_kinds_are_required() {
        let required: Vec<Crd> = Crd::ALL.into_iter().filter(|c| c.required()).collect();
        assert_eq!(required, [Crd::GatewayClass, Crd::Gateway, Crd::HttpRoute]);
        assert_eq!(
            Crd::GrpcRoute.crd_name(),
            "grpcroutes.gateway.networking.k8s.io"
        );
    }
}
