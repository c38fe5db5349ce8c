//! Shared pieces of the Kubernetes backend's tests.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ApiResource, DeleteParams, DynamicObject, PostParams};
use kube::Api;
use leader_lock::{Elector, ElectorConfig, Identity, Timing};
use leader_lock_kubernetes::LeaseLock;
use testkit::kube::KubeApiServer;

/// The suite's timing: whole-second lease, as Leases need.
pub fn timing() -> Timing {
    Timing::new(
        Duration::from_secs(3),
        Duration::from_secs(2),
        Duration::from_millis(400),
    )
    .expect("valid timing")
}

/// The cap on recorded lease durations in tests, so a planted huge lease lapses in seconds.
pub const TEST_MAX_LEASE: Duration = Duration::from_secs(6);

/// The shared apiserver of this test binary; fails with the install hint when it is missing.
pub async fn server() -> &'static KubeApiServer {
    match KubeApiServer::shared().await {
        Ok(s) => s,
        Err(e) => panic!("no kube-apiserver for the tests: {e:#}"),
    }
}

/// Logs to the test output when RUST_LOG is set.
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
        .with_test_writer()
        .try_init();
}

/// A namespace of its own for a test.
pub async fn namespace(server: &KubeApiServer, prefix: &str) -> String {
    let ns = format!(
        "{prefix}-{}",
        &uuid::Uuid::new_v4().simple().to_string()[..8]
    );
    server
        .create_namespace(&ns)
        .await
        .expect("creating a test namespace");
    ns
}

/// A lock client of its own, as a separate process would have.
pub fn lock(server: &KubeApiServer, ns: &str, name: &str) -> LeaseLock {
    LeaseLock::new(server.admin_client(), ns, name)
        .with_max_lease_duration(TEST_MAX_LEASE)
        .with_server(server.url())
}

/// An elector named `name` on `lock` that releases on shutdown.
pub fn elector(lock: LeaseLock, name: &str, timing: Timing) -> Elector {
    Elector::spawn(
        Arc::new(lock),
        ElectorConfig {
            identity: Identity::new(name),
            timing,
            release_on_shutdown: true,
        },
    )
    .expect("a valid timing")
}

/// Writes a raw Lease (any JSON the API accepts), replacing one that exists.
pub async fn put_raw(
    server: &KubeApiServer,
    ns: &str,
    name: &str,
    body: serde_json::Value,
) -> Result<(), kube::Error> {
    let ar = ApiResource::erase::<Lease>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(server.admin_client(), ns, &ar);
    let mut obj = DynamicObject::new(name, &ar).within(ns).data(body);
    match api.get_opt(name).await? {
        None => api.create(&PostParams::default(), &obj).await.map(|_| ()),
        Some(old) => {
            obj.metadata.resource_version = old.metadata.resource_version;
            api.replace(name, &PostParams::default(), &obj)
                .await
                .map(|_| ())
        }
    }
}

/// Deletes the Lease by hand, as an operator would: no release.
pub async fn delete_lease(server: &KubeApiServer, ns: &str, name: &str) -> Result<(), kube::Error> {
    let api: Api<Lease> = Api::namespaced(server.admin_client(), ns);
    api.delete(name, &DeleteParams::default()).await.map(|_| ())
}

/// The Lease as raw JSON.
pub async fn get_raw(server: &KubeApiServer, ns: &str, name: &str) -> serde_json::Value {
    let ar = ApiResource::erase::<Lease>(&());
    let api: Api<DynamicObject> = Api::namespaced_with(server.admin_client(), ns, &ar);
    let o = api.get(name).await.expect("reading the Lease");
    serde_json::to_value(o).expect("json")
}

/// The apiserver's counts of requests on Leases, all codes: (GET, PUT).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LeaseRequests {
    pub gets: f64,
    pub puts: f64,
}

impl LeaseRequests {
    /// The requests since `before`: (GET, PUT).
    pub fn since(&self, before: &LeaseRequests) -> (f64, f64) {
        (self.gets - before.gets, self.puts - before.puts)
    }
}

/// Reads the apiserver's `apiserver_request_total` for Leases. Only meaningful in a test binary
/// of its own, where nobody else sends requests meanwhile.
pub async fn lease_requests(server: &KubeApiServer) -> LeaseRequests {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .expect("a request");
    let text = server
        .admin_client()
        .request_text(req)
        .await
        .expect("the apiserver's metrics");
    let count = |verb: &str| -> f64 {
        text.lines()
            .filter(|l| l.starts_with("apiserver_request_total{"))
            .filter(|l| {
                l.contains("resource=\"leases\"") && l.contains(&format!("verb=\"{verb}\""))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    };
    LeaseRequests {
        gets: count("GET"),
        puts: count("PUT"),
    }
}
