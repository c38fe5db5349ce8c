//! Binding the shipped RBAC manifests to a test's service account, to prove they suffice.

use std::path::Path;

use anyhow::{bail, Context, Result};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding, Subject};
use kube::api::PostParams;
use kube::{Api, Resource};
use serde::Deserialize;

use crate::kube::KubeApiServer;

/// Creates every Role, RoleBinding, ClusterRole and ClusterRoleBinding in the manifest `file`,
/// with every binding's subjects replaced by service account `sa` of `ns`. Namespaced objects
/// are created in `ns`, whatever namespace the file names; cluster-scoped objects get `-<ns>`
/// appended to their names (and their references), so tests that bind the same manifest in
/// different namespaces do not collide. Returns how many objects were created.
pub async fn bind_manifest(s: &KubeApiServer, file: &Path, ns: &str, sa: &str) -> Result<usize> {
    bind_manifest_to(s, file, ns, &[sa]).await
}

/// Like [`bind_manifest`], with every binding's subjects replaced by all the service accounts
/// `sas` of `ns`: several replicas, each with a credential of its own, on one set of rights.
pub async fn bind_manifest_to(
    s: &KubeApiServer,
    file: &Path,
    ns: &str,
    sas: &[&str],
) -> Result<usize> {
    let text =
        std::fs::read_to_string(file).with_context(|| format!("reading {}", file.display()))?;
    let client = s.admin_client();
    let subjects: Vec<Subject> = sas
        .iter()
        .map(|sa| Subject {
            kind: "ServiceAccount".into(),
            name: (*sa).into(),
            namespace: Some(ns.into()),
            ..Subject::default()
        })
        .collect();
    let suffix = |name: &Option<String>| name.as_ref().map(|n| format!("{n}-{ns}"));
    let pp = PostParams::default();
    // Parsed up front: the YAML deserializer is not Send, and this future may move between
    // threads while it awaits the apiserver.
    let docs = serde_yaml::Deserializer::from_str(&text)
        .map(serde_yaml::Value::deserialize)
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("{}", file.display()))?;
    let mut made = 0;
    for v in docs {
        if v.is_null() {
            continue;
        }
        let kind = v
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default()
            .to_string();
        let what = format!("{} {kind}", file.display());
        match kind.as_str() {
            "Role" => {
                let mut role: Role = serde_yaml::from_value(v).context(what.clone())?;
                role.metadata.namespace = Some(ns.into());
                create(Api::namespaced(client.clone(), ns), &pp, &role, &what).await?;
            }
            "RoleBinding" => {
                let mut b: RoleBinding = serde_yaml::from_value(v).context(what.clone())?;
                b.metadata.namespace = Some(ns.into());
                b.subjects = Some(subjects.clone());
                if b.role_ref.kind == "ClusterRole" {
                    b.role_ref.name = format!("{}-{ns}", b.role_ref.name);
                }
                create(Api::namespaced(client.clone(), ns), &pp, &b, &what).await?;
            }
            "ClusterRole" => {
                let mut role: ClusterRole = serde_yaml::from_value(v).context(what.clone())?;
                role.metadata.name = suffix(&role.metadata.name);
                create(Api::all(client.clone()), &pp, &role, &what).await?;
            }
            "ClusterRoleBinding" => {
                let mut b: ClusterRoleBinding = serde_yaml::from_value(v).context(what.clone())?;
                b.metadata.name = suffix(&b.metadata.name);
                b.role_ref.name = format!("{}-{ns}", b.role_ref.name);
                b.subjects = Some(subjects.clone());
                create(Api::all(client.clone()), &pp, &b, &what).await?;
            }
            other => bail!("{}: {other:?} is not an RBAC kind", file.display()),
        }
        made += 1;
    }
    Ok(made)
}

async fn create<K>(api: Api<K>, pp: &PostParams, obj: &K, what: &str) -> Result<()>
where
    K: Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    match api.create(pp, obj).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating {what}")),
    }
}
