//! Every version of a route a watch sees: what tells a stale status write (one for an older
//! generation than the route had when it was written) and a rewrite from the server's own record,
//! for the tests and the bench alike.

use gateway_api::httproutes::HttpRoute;
use kube::Api;
use serde_json::Value;

/// One version of a route as a watch saw it: its generation, the lowest `observedGeneration` of
/// its status's conditions, and whether its status differs from the version before.
#[derive(Debug, Clone, PartialEq)]
pub struct Version {
    /// `metadata.generation`.
    pub generation: i64,
    /// The lowest `observedGeneration` among its status's conditions (none without a status).
    pub observed: Option<i64>,
    /// Whether its status differs from the version seen before.
    pub status_changed: bool,
}

impl Version {
    /// A status written for an older generation than the route had: stale.
    pub fn is_stale(&self) -> bool {
        self.status_changed && self.observed.is_some_and(|o| o < self.generation)
    }
}

/// Records every version of route `name` the server holds from now on, until `stop`.
pub async fn record_versions(
    routes: Api<HttpRoute>,
    name: &str,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> Vec<Version> {
    use futures::StreamExt;
    use kube::runtime::WatchStreamExt;
    let config = kube::runtime::watcher::Config::default().fields(&format!("metadata.name={name}"));
    let mut events = kube::runtime::watcher(routes, config)
        .applied_objects()
        .boxed();
    let mut stop = stop;
    let mut seen: Vec<Version> = Vec::new();
    let mut last_status: Option<Value> = None;
    loop {
        let route = tokio::select! {
            _ = &mut stop => return seen,
            r = events.next() => match r {
                Some(Ok(r)) => r,
                Some(Err(_)) => continue,
                None => return seen,
            },
        };
        let status = serde_json::to_value(&route.status).unwrap_or_default();
        let observed = status["parents"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|p| p["conditions"].as_array().into_iter().flatten())
            .filter_map(|c| c["observedGeneration"].as_i64())
            .min();
        seen.push(Version {
            generation: route.metadata.generation.unwrap_or_default(),
            observed,
            status_changed: last_status.as_ref().is_some_and(|l| *l != status),
        });
        last_status = Some(status);
    }
}
