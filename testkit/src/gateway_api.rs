//! The Gateway API CRDs on a test apiserver: the upstream files, created unmodified.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gateway_api::gatewayclasses::GatewayClass;
use gateway_api::gateways::Gateway;
use gateway_api::grpcroutes::GrpcRoute;
use gateway_api::httproutes::HttpRoute;
use gateway_api::referencegrants::ReferenceGrant;
use gateway_api::tlsroutes::TlsRoute;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceValidation, JSONSchemaProps,
};
use kube::api::PostParams;
use kube::{Api, Client, CustomResourceExt};
use serde::Deserialize;

/// Names a folder of Gateway API CRD files (`*.yaml`), e.g. the upstream v1.5.1 standard ones.
pub const CRDS_ENV: &str = "GATEWAY_LEADER_GATEWAY_API_CRDS";
/// The largest CRD file read; the upstream HTTPRoute CRD is about 400 KiB.
const MAX_FILE: u64 = 8 << 20;
/// How long a created CRD may take to become established on a busy machine.
const ESTABLISH_LIMIT: Duration = Duration::from_secs(60);

/// Where the CRDs come from: the folder `GATEWAY_LEADER_GATEWAY_API_CRDS` names, if set.
pub fn crd_dir() -> Option<PathBuf> {
    std::env::var_os(CRDS_ENV)
        .filter(|p| !p.is_empty())
        .map(PathBuf::from)
}

/// Reads every CRD of every `*.yaml` file in `dir`, as written (multi-document files too).
pub fn read_dir(dir: &Path) -> Result<Vec<CustomResourceDefinition>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{CRDS_ENV}={}: cannot read the folder", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut crds = Vec::new();
    for f in &files {
        let len = std::fs::metadata(f)?.len();
        if len > MAX_FILE {
            bail!(
                "{}: {len} bytes is more than a CRD file may have ({MAX_FILE})",
                f.display()
            );
        }
        let text =
            std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
        for doc in serde_yaml::Deserializer::from_str(&text) {
            let value = serde_yaml::Value::deserialize(doc)
                .with_context(|| format!("parsing {}", f.display()))?;
            if value.is_null() {
                continue;
            }
            let crd: CustomResourceDefinition = serde_yaml::from_value(value)
                .with_context(|| format!("{} is not a CustomResourceDefinition", f.display()))?;
            crds.push(crd);
        }
    }
    if crds.is_empty() {
        bail!("{CRDS_ENV}={} holds no CRD (*.yaml)", dir.display());
    }
    Ok(crds)
}

/// The Gateway API release the gateway-api crate's types track.
pub const BUNDLE_VERSION: &str = "v1.5.1";

/// The CRDs to install: the folder's, else stand-ins made from the gateway-api crate's types.
///
/// The crate's generated schemas are refused by kube-apiserver v1.20 ("per-version schemas may
/// not all be set to identical values"), so a stand-in keeps the crate's group, names, scope and
/// status subresource but takes any object (`x-kubernetes-preserve-unknown-fields`): the API
/// behaves, the server just validates nothing. Tests of validation need the upstream folder.
pub fn crds() -> Result<Vec<CustomResourceDefinition>> {
    match crd_dir() {
        Some(dir) => read_dir(&dir),
        None => Ok([
            GatewayClass::crd(),
            Gateway::crd(),
            HttpRoute::crd(),
            GrpcRoute::crd(),
            TlsRoute::crd(),
            ReferenceGrant::crd(),
        ]
        .into_iter()
        .map(|mut crd| {
            // As upstream marks them: *.k8s.io groups need the approval annotation.
            let a = crd
                .metadata
                .annotations
                .get_or_insert_with(Default::default);
            a.insert(
                "api-approved.kubernetes.io".into(),
                "https://github.com/kubernetes-sigs/gateway-api/pull/3328".into(),
            );
            a.insert(
                "gateway.networking.k8s.io/bundle-version".into(),
                BUNDLE_VERSION.into(),
            );
            for v in &mut crd.spec.versions {
                v.schema = Some(CustomResourceValidation {
                    open_api_v3_schema: Some(JSONSchemaProps {
                        type_: Some("object".into()),
                        x_kubernetes_preserve_unknown_fields: Some(true),
                        ..JSONSchemaProps::default()
                    }),
                });
            }
            crd
        })
        .collect()),
    }
}

/// Creates the CRDs and waits until each is established. A plain create, since v1.20 refuses a
/// server-side apply of the upstream CRDs (it does not know `x-kubernetes-validations`); a CRD
/// that already exists is left as it is.
pub async fn install(client: &Client) -> Result<()> {
    install_some(client, |_| true).await
}

/// Like [`install`], only the CRDs whose name (`httproutes.gateway.networking.k8s.io`) `wanted`
/// picks: a cluster that runs a subset of the Gateway API.
pub async fn install_some(client: &Client, wanted: impl Fn(&str) -> bool) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crds: Vec<_> = crds()?
        .into_iter()
        .filter(|c| c.metadata.name.as_deref().is_some_and(&wanted))
        .collect();
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        match api.create(&PostParams::default(), crd).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 409 => {}
            Err(e) => return Err(e).with_context(|| format!("creating CRD {name}")),
        }
    }
    for crd in &crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait_established(&api, &name).await?;
    }
    Ok(())
}

async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    let deadline = tokio::time::Instant::now() + ESTABLISH_LIMIT;
    loop {
        let crd = api
            .get(name)
            .await
            .with_context(|| format!("reading CRD {name}"))?;
        let established = crd
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "Established" && c.status == "True");
        if established {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("CRD {name} was not established within {ESTABLISH_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}
