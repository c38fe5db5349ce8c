//! Where the demo's Kubernetes comes from: a local kube-apiserver it starts (with its own etcd),
//! or a cluster the user already has (a kubeconfig: kind, k3s, ...), on which it builds no server
//! and leaves nothing behind.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client, Resource};
use serde_json::json;
use testkit::kube::KubeApiServer;
use tokio::time::Instant;

use crate::out::{human, Out};
use crate::sample::CLASS;
use crate::{MANAGED_BY, NS, OTHER_NS, PATIENCE};

/// The CRDs the sample needs; on an existing cluster that has them, none is installed.
const NEEDED_CRDS: [&str; 4] = [
    "gatewayclasses.gateway.networking.k8s.io",
    "gateways.gateway.networking.k8s.io",
    "httproutes.gateway.networking.k8s.io",
    "grpcroutes.gateway.networking.k8s.io",
];

/// The apiserver the demo runs against: started here, or the existing cluster of `kubeconfig`.
pub async fn open(out: &Out, kubeconfig: Option<&Path>) -> Result<KubeApiServer> {
    let began = Instant::now();
    let server = match kubeconfig {
        None => {
            out.step("starting a local kube-apiserver (with its own etcd)");
            KubeApiServer::start_local()
                .await
                .context("starting kube-apiserver")?
        }
        Some(path) => {
            out.step(format!("using the cluster of {}", path.display()));
            KubeApiServer::connect(path)
                .await
                .with_context(|| format!("connecting to the cluster of {}", path.display()))?
        }
    };
    let version = server
        .admin_client()
        .apiserver_version()
        .await
        .context("reading the apiserver's version")?;
    out.step(format!(
        "kube-apiserver {} ready at {} after {}",
        version.git_version,
        server.url().trim_end_matches('/'),
        human(began.elapsed())
    ));
    Ok(server)
}

/// Installs the Gateway API CRDs that are missing. An existing cluster that serves every CRD
/// the sample needs keeps its own (of whatever version) and needs no CRD folder.
pub async fn install_crds(out: &Out, server: &KubeApiServer) -> Result<()> {
    let dir = testkit::gateway_api::crd_dir();
    if server.is_external() {
        let crds: Api<CustomResourceDefinition> = Api::all(server.admin_client());
        let mut missing = Vec::new();
        for name in NEEDED_CRDS {
            if crds
                .get_opt(name)
                .await
                .context("reading the CRDs")?
                .is_none()
            {
                missing.push(name);
            }
        }
        if missing.is_empty() {
            out.step("the cluster has the Gateway API CRDs already");
            return Ok(());
        }
        out.step(format!("the cluster lacks {}", missing.join(", ")));
    }
    let dir = dir.context("finding the Gateway API CRDs")?;
    out.step(format!(
        "installing the Gateway API CRDs from {}",
        dir.display()
    ));
    server
        .install_gateway_api()
        .await
        .context("installing the Gateway API CRDs")
}

/// Creates the sample's two namespaces, labelled as the demo's.
pub async fn create_namespaces(client: &Client) -> Result<()> {
    let api: Api<Namespace> = Api::all(client.clone());
    for ns in [NS, OTHER_NS] {
        let obj: Namespace = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {MANAGED_BY.0: MANAGED_BY.1}},
        }))
        .context("the sample's namespace")?;
        api.create(&PostParams::default(), &obj)
            .await
            .with_context(|| format!("creating namespace {ns}"))?;
    }
    Ok(())
}

/// Removes the demo's sample from the cluster: its namespaces (with the Lease and every object
/// of the sample) and its GatewayClass. Anything of those names that the demo did not create (no
/// [`MANAGED_BY`] label) is left alone, and the demo stops instead. With `wait`, waits until
/// the namespaces are gone, which takes the cluster's namespace controller
/// (kube-controller-manager) a few seconds: before a run, so that the sample starts afresh.
pub async fn remove_sample(client: &Client, wait: bool) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let classes: Api<GatewayClass> = Api::all(client.clone());
    for ns in [NS, OTHER_NS] {
        delete_ours(&namespaces, ns, "namespace").await?;
    }
    delete_ours(&classes, CLASS.name, "GatewayClass").await?;
    if !wait {
        return Ok(());
    }
    let deadline = Instant::now() + PATIENCE;
    for ns in [NS, OTHER_NS] {
        while namespaces.get_opt(ns).await?.is_some() {
            if Instant::now() >= deadline {
                bail!(
                    "namespace {ns}, left by an earlier demo, is still being deleted after \
                     {PATIENCE:?}; a cluster's namespace controller (kube-controller-manager) \
                     finishes that, so check `kubectl get namespace {ns} -o yaml`"
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

/// Deletes `name` when it carries the demo's label; an unlabelled one is an error.
async fn delete_ours<K>(api: &Api<K>, name: &str, what: &str) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let Some(obj) = api
        .get_opt(name)
        .await
        .with_context(|| format!("reading {what} {name}"))?
    else {
        return Ok(());
    };
    let ours = obj
        .meta()
        .labels
        .as_ref()
        .and_then(|l| l.get(MANAGED_BY.0))
        .is_some_and(|v| v == MANAGED_BY.1);
    if !ours {
        bail!(
            "{what} {name} exists and was not made by this demo (no label {}={}); the demo \
             would write its sample there: delete it or use another cluster",
            MANAGED_BY.0,
            MANAGED_BY.1
        );
    }
    match api.delete(name, &DeleteParams::default()).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("deleting {what} {name}")),
    }
}
