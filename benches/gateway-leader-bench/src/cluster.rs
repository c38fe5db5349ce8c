//! The Kubernetes side every lane needs, whatever holds its lock: an apiserver with the Gateway
//! API CRDs, and per lane a GatewayClass, a Gateway, a Service and an HTTPRoute whose status
//! the replicas write. Each round changes the route so the new leader has something to write.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::httproutes::HttpRoute;
use k8s_openapi::api::core::v1::{Namespace, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::json;

use testkit::gateway_api as crds;
use testkit::kube::KubeApiServer;

/// The route every lane's replicas compute and write the status of.
pub const ROUTE: &str = "route";

/// An apiserver: a throwaway local one, or the cluster of a kubeconfig.
pub struct Cluster {
    client: Client,
    kubeconfig: PathBuf,
    local: Option<KubeApiServer>,
}

impl Cluster {
    /// Starts a local kube-apiserver (with its own etcd), or connects to `kubeconfig`; installs
    /// the Gateway API CRDs either way (an existing one is left as it is).
    pub async fn start(kubeconfig: Option<&Path>) -> Result<Cluster> {
        let (client, kubeconfig, local) = match kubeconfig {
            Some(path) => {
                let config = leader_lock_kubernetes::ClientOptions::default()
                    .with_kubeconfig(path)
                    .load()
                    .await
                    .with_context(|| format!("--kubeconfig {}", path.display()))?;
                let client = Client::try_from(config).context("a client for --kubeconfig")?;
                (client, path.to_path_buf(), None)
            }
            None => {
                let server = KubeApiServer::start_local()
                    .await
                    .context("starting a local kube-apiserver (or give --kubeconfig)")?;
                (
                    server.admin_client(),
                    server.kubeconfig_path().to_path_buf(),
                    Some(server),
                )
            }
        };
        crds::install(&client)
            .await
            .context("installing the Gateway API CRDs")?;
        Ok(Cluster {
            client,
            kubeconfig,
            local,
        })
    }

    /// The kubeconfig the replicas use.
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A client with the kubeconfig's rights.
    pub fn client(&self) -> Client {
        self.client.clone()
    }

    /// The local apiserver, when the bench started one.
    pub fn local(&self) -> Option<&KubeApiServer> {
        self.local.as_ref()
    }

    /// Writes a copy of the kubeconfig at `path` whose server is `via` (a partition proxy in
    /// front of the local apiserver, whose certificate names 127.0.0.1 whatever the port).
    pub fn write_kubeconfig_via(&self, via: SocketAddr, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(&self.kubeconfig)
            .with_context(|| format!("reading {}", self.kubeconfig.display()))?;
        let mut kc: serde_yaml::Value = serde_yaml::from_str(&text)
            .with_context(|| format!("parsing {}", self.kubeconfig.display()))?;
        if let Some(clusters) = kc.get_mut("clusters").and_then(|c| c.as_sequence_mut()) {
            for c in clusters {
                if let Some(cluster) = c.get_mut("cluster").and_then(|c| c.as_mapping_mut()) {
                    cluster.insert("server".into(), format!("https://{via}").into());
                }
            }
        }
        let out = serde_yaml::to_string(&kc).context("encoding the kubeconfig")?;
        std::fs::write(path, out).with_context(|| format!("writing {}", path.display()))
    }

    /// The local apiserver, mutably (to restart it).
    pub fn local_mut(&mut self) -> Option<&mut KubeApiServer> {
        self.local.as_mut()
    }

    /// Creates a lane's namespace and objects for `controller`: the class and the namespace are
    /// named `ns`; the route points at Service `web`.
    pub async fn lane(&self, ns: &str, controller: &str) -> Result<Route> {
        let c = self.client.clone();
        put(
            &Api::<Namespace>::all(c.clone()),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await?;
        put(
            &Api::<GatewayClass>::all(c.clone()),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "GatewayClass",
                   "metadata": {"name": ns}, "spec": {"controllerName": controller}}),
        )
        .await?;
        put(
            &Api::<Gateway>::namespaced(c.clone(), ns),
            json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "Gateway",
                   "metadata": {"name": "gw", "namespace": ns},
                   "spec": {"gatewayClassName": ns,
                            "listeners": [{"name": "http", "protocol": "HTTP", "port": 80}]}}),
        )
        .await?;
        put(
            &Api::<Service>::namespaced(c.clone(), ns),
            json!({"apiVersion": "v1", "kind": "Service",
                   "metadata": {"name": "web", "namespace": ns},
                   "spec": {"ports": [{"name": "http", "port": 80}]}}),
        )
        .await?;
        let api = Api::<HttpRoute>::namespaced(c, ns);
        put(&api, route_json(ns, "web")).await?;
        // A route left by an earlier run against the same cluster starts from the same backend.
        let spec = json!({"spec": route_json(ns, "web")["spec"]});
        api.patch(ROUTE, &PatchParams::default(), &Patch::Merge(spec))
            .await
            .with_context(|| format!("resetting route {ns}/{ROUTE}"))?;
        Ok(Route {
            api,
            ns: ns.to_string(),
            controller: controller.to_string(),
            flips: 0,
        })
    }
}

fn route_json(ns: &str, backend: &str) -> serde_json::Value {
    json!({"apiVersion": "gateway.networking.k8s.io/v1", "kind": "HTTPRoute",
           "metadata": {"name": ROUTE, "namespace": ns},
           "spec": {"parentRefs": [{"name": "gw"}],
                    "rules": [{"backendRefs": [{"name": backend, "port": 80}]}]}})
}

/// Creates an object, or leaves an existing one as it is.
async fn put<K>(api: &Api<K>, obj: serde_json::Value) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    let obj: K = serde_json::from_value(obj).context("a bench object")?;
    let name = obj.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), &obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {name}")),
    }
}

/// A lane's route, whose backend the bench flips between a Service that exists and one that
/// does not, so that its `ResolvedRefs` condition changes each time.
pub struct Route {
    api: Api<HttpRoute>,
    ns: String,
    controller: String,
    flips: u64,
}

impl Route {
    /// Changes the route's backend (and so the status it should have).
    pub async fn flip(&mut self) -> Result<()> {
        self.flips += 1;
        let backend = if self.flips % 2 == 1 {
            "missing"
        } else {
            "web"
        };
        let patch = json!({"spec": route_json(&self.ns, backend)["spec"]});
        self.api
            .patch(ROUTE, &PatchParams::default(), &Patch::Merge(patch))
            .await
            .with_context(|| format!("changing route {}/{ROUTE}", self.ns))?;
        Ok(())
    }

    /// The route's `metadata.generation` as the apiserver holds it now.
    pub async fn generation(&self) -> Result<i64> {
        let r = self
            .api
            .get(ROUTE)
            .await
            .with_context(|| format!("reading route {}/{ROUTE}", self.ns))?;
        Ok(r.metadata.generation.unwrap_or_default())
    }

    /// The `ResolvedRefs` status the route's current spec calls for.
    fn expected_resolved(&self) -> &'static str {
        if self.flips % 2 == 1 {
            "False"
        } else {
            "True"
        }
    }

    /// What is wrong with the route's status now, if anything: our parent entry must carry the
    /// `ResolvedRefs` its current backend calls for, observed at its current generation.
    pub async fn status_problem(&self) -> Result<Option<String>> {
        let route = self
            .api
            .get(ROUTE)
            .await
            .with_context(|| format!("reading route {}/{ROUTE}", self.ns))?;
        Ok(status_problem(
            &route,
            &self.controller,
            self.expected_resolved(),
        ))
    }

    /// Waits up to `limit` for the route's status to be right; the last problem seen otherwise.
    pub async fn settled(&self, limit: Duration) -> Result<Option<String>> {
        let deadline = tokio::time::Instant::now() + limit;
        loop {
            let problem = self.status_problem().await?;
            if problem.is_none() || tokio::time::Instant::now() >= deadline {
                return Ok(problem);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

/// What is wrong with `route`'s status for `controller`, if anything: its parent entry must
/// carry `ResolvedRefs` = `want`, observed at the route's current generation.
fn status_problem(route: &HttpRoute, controller: &str, want: &str) -> Option<String> {
    let generation = route.metadata.generation;
    let parents = route
        .status
        .as_ref()
        .map(|s| s.parents.as_slice())
        .unwrap_or_default();
    let Some(ours) = parents.iter().find(|p| p.controller_name == controller) else {
        return Some("no parent entry of ours".into());
    };
    let Some(c) = ours.conditions.iter().find(|c| c.type_ == "ResolvedRefs") else {
        return Some("no ResolvedRefs condition".into());
    };
    if c.status != want || c.observed_generation != generation {
        return Some(format!(
            "ResolvedRefs {} at generation {:?}; wanted {want} at {generation:?}",
            c.status, c.observed_generation
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn route(generation: i64, controller: &str, resolved: &str, observed: i64) -> HttpRoute {
        let mut r: HttpRoute = serde_json::from_value(route_json("ns", "web")).expect("a route");
        r.metadata.generation = Some(generation);
        r.status = serde_json::from_value(json!({"parents": [{
            "controllerName": controller,
            "parentRef": {"name": "gw"},
            "conditions": [{"type": "ResolvedRefs", "status": resolved, "reason": "r",
                "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z",
                "observedGeneration": observed}]
        }]}))
        .expect("a status");
        r
    }

    #[test]
    fn the_final_status_must_be_ours_current_and_right() {
        assert_eq!(status_problem(&route(2, "c", "True", 2), "c", "True"), None);
        let stale = status_problem(&route(3, "c", "True", 2), "c", "True");
        assert!(stale.is_some_and(|p| p.contains("at generation Some(2)")));
        let wrong = status_problem(&route(2, "c", "False", 2), "c", "True");
        assert!(wrong.is_some_and(|p| p.contains("ResolvedRefs False")));
        let foreign = status_problem(&route(2, "other", "True", 2), "c", "True");
        assert_eq!(foreign.as_deref(), Some("no parent entry of ours"));
        let mut none = route(2, "c", "True", 2);
        none.status = None;
        assert_eq!(
            status_problem(&none, "c", "True").as_deref(),
            Some("no parent entry of ours")
        );
    }
}
