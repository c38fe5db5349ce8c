//! The Gateway API CRDs on a test apiserver: the upstream files, created unmodified.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::PostParams;
use kube::{Api, Client};
use serde::Deserialize;

pub use crate::built::CRDS_ENV;

/// The largest CRD file read; the upstream HTTPRoute CRD is about 400 KiB.
const MAX_FILE: u64 = 8 << 20;
/// How long a created CRD may take to become established on a busy machine.
const ESTABLISH_LIMIT: Duration = Duration::from_secs(60);

/// The Gateway API releases whose CRDs the tests install, oldest first (the status writer
/// serves both; `scripts/versions.sh` pins them, `scripts/servers.sh` picks one per run).
pub const BUNDLE_VERSIONS: [&str; 2] = ["v1.5.1", "v1.7.0"];

/// The annotation on every upstream Gateway API CRD that names its release.
pub const BUNDLE_VERSION_ANNOTATION: &str = "gateway.networking.k8s.io/bundle-version";

/// The release of the Gateway API CRDs installed on the server `client` talks to, read from the
/// GatewayClass CRD's [`BUNDLE_VERSION_ANNOTATION`].
pub async fn installed_bundle_version(client: &Client) -> Result<String> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let crd = api
        .get_metadata("gatewayclasses.gateway.networking.k8s.io")
        .await
        .context("reading the GatewayClass CRD")?;
    crd.metadata
        .annotations
        .and_then(|a| a.get(BUNDLE_VERSION_ANNOTATION).cloned())
        .context("the GatewayClass CRD names no bundle version")
}

/// Fails, saying how to get them, unless the installed CRDs are of Gateway API v1.6 or later
/// (TCPRoute and UDPRoute at `v1`): a test of those kinds must not pass by skipping on a server
/// with older CRDs.
pub async fn require_v1_6(client: &Client) -> Result<()> {
    let v = installed_bundle_version(client).await?;
    let minor = v
        .strip_prefix("v1.")
        .and_then(|rest| rest.split('.').next())
        .and_then(|m| m.parse::<u32>().ok());
    if minor.is_some_and(|m| m >= 6) {
        return Ok(());
    }
    bail!(
        "this test needs the Gateway API v1.6 CRDs (TCPRoute, UDPRoute) and the server has {v}; \
         run it with {CRDS_ENV}=$(scripts/gateway-api-crds.sh {} | tail -n1), as scripts/test.sh \
         does on the newest apiserver",
        BUNDLE_VERSIONS[1]
    )
}

/// Where the CRDs come from: `GATEWAY_LEADER_GATEWAY_API_CRDS`, else the `sigs.k8s.io/gateway-api`
/// module's `config/crd/standard/` ([`crate::built::gateway_api_crds`]).
pub fn crd_dir() -> Result<PathBuf> {
    crate::built::gateway_api_crds()
}

/// What an upstream CRD folder holds: the CRDs, and the ValidatingAdmissionPolicy
/// (`safe-upgrades`) with its binding that upstream's standard install applies beside them.
#[derive(Default)]
pub struct Bundle {
    /// Every CustomResourceDefinition, in file order.
    pub crds: Vec<CustomResourceDefinition>,
    /// The admission policies of the folder.
    pub policies: Vec<ValidatingAdmissionPolicy>,
    /// Their bindings.
    pub bindings: Vec<ValidatingAdmissionPolicyBinding>,
}

/// Reads every document of every `*.yaml` file in `dir`, as written (multi-document files too):
/// CRDs, admission policies and their bindings; any other kind is an error.
pub fn read_dir(dir: &Path) -> Result<Bundle> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("{}: cannot read the CRD folder", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    files.sort();
    let mut bundle = Bundle::default();
    for f in &files {
        read_into(&mut bundle, f)?;
    }
    if bundle.crds.is_empty() {
        bail!("{} holds no CRD (*.yaml)", dir.display());
    }
    Ok(bundle)
}

/// Reads every document of the file `f` (multi-document files too): CRDs, admission policies
/// and their bindings; any other kind is an error.
pub fn read_file(f: &Path) -> Result<Bundle> {
    let mut bundle = Bundle::default();
    read_into(&mut bundle, f)?;
    if bundle.crds.is_empty() {
        bail!("{} holds no CRD", f.display());
    }
    Ok(bundle)
}

/// Adds the documents of the file `f` to `bundle`.
fn read_into(bundle: &mut Bundle, f: &Path) -> Result<()> {
    let len = std::fs::metadata(f)?.len();
    if len > MAX_FILE {
        bail!(
            "{}: {len} bytes is more than a CRD file may have ({MAX_FILE})",
            f.display()
        );
    }
    let text = std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
    for doc in serde_yaml::Deserializer::from_str(&text) {
        let value = serde_yaml::Value::deserialize(doc)
            .with_context(|| format!("parsing {}", f.display()))?;
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        let bad = || format!("{} holds a {kind} that does not parse", f.display());
        match kind.as_str() {
            "CustomResourceDefinition" => bundle
                .crds
                .push(serde_yaml::from_value(value).with_context(bad)?),
            "ValidatingAdmissionPolicy" => bundle
                .policies
                .push(serde_yaml::from_value(value).with_context(bad)?),
            "ValidatingAdmissionPolicyBinding" => bundle
                .bindings
                .push(serde_yaml::from_value(value).with_context(bad)?),
            other => bail!(
                "{} holds a {other:?}: CRD files hold CustomResourceDefinitions and \
                 ValidatingAdmissionPolicies with their bindings",
                f.display()
            ),
        }
    }
    Ok(())
}

/// The upstream CRDs to install, from [`crd_dir`].
pub fn crds() -> Result<Vec<CustomResourceDefinition>> {
    Ok(read_dir(&crd_dir()?)?.crds)
}

/// Creates the CRDs and waits until each is established, then the admission policies and
/// bindings of the folder, as upstream's standard install does. A plain create: what already
/// exists is left as it is.
pub async fn install(client: &Client) -> Result<()> {
    let bundle = read_dir(&crd_dir()?)?;
    install_crds(client, &bundle.crds).await?;
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    for p in &bundle.policies {
        create(&policies, p, "ValidatingAdmissionPolicy").await?;
    }
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    for b in &bundle.bindings {
        create(&bindings, b, "ValidatingAdmissionPolicyBinding").await?;
    }
    Ok(())
}

/// Like [`install`], only the CRDs whose name (`httproutes.gateway.networking.k8s.io`) `wanted`
/// picks, and no policy: a cluster that runs a subset of the Gateway API.
pub async fn install_some(client: &Client, wanted: impl Fn(&str) -> bool) -> Result<()> {
    let crds: Vec<_> = crds()?
        .into_iter()
        .filter(|c| c.metadata.name.as_deref().is_some_and(&wanted))
        .collect();
    install_crds(client, &crds).await
}

/// Creates `crds` (those that exist already are left as they are) and waits until each is
/// established.
pub async fn install_crds(client: &Client, crds: &[CustomResourceDefinition]) -> Result<()> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in crds {
        create(&api, crd, "CRD").await?;
    }
    for crd in crds {
        let name = crd.metadata.name.clone().unwrap_or_default();
        wait_established(&api, &name).await?;
    }
    Ok(())
}

/// Creates `object`; one that exists already is fine.
async fn create<K>(api: &Api<K>, object: &K, what: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let name = object.meta().name.clone().unwrap_or_default();
    match api.create(&PostParams::default(), object).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {what} {name}")),
    }
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
