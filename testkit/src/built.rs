//! Where the servers and peers built from their Go modules are: an environment variable names a
//! binary, else the cache that the build scripts (`scripts/build-kube-apiserver.sh`,
//! `scripts/build-etcd.sh`, `scripts/gateway-api-crds.sh`, `scripts/build-peers.sh`,
//! `scripts/build-helm.sh`, `scripts/build-contour.sh`, `scripts/build-kwok.sh`) fill, asked
//! with `--cached` so that a binary of an older recipe is never used. A missing one is an error
//! that says how to get it.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};

/// Names the kube-apiserver binary to run.
pub const APISERVER_ENV: &str = "GATEWAY_LEADER_KUBE_APISERVER";
/// Chooses which pinned kube-apiserver the cache gives: `newest` (the default), `oldest` or a
/// version `vX.Y.Z` (scripts/versions.sh pins newest and oldest).
pub const KUBE_VERSION_ENV: &str = "GATEWAY_LEADER_KUBE_VERSION";
/// Names the kube-controller-manager binary that [`crate::kube::simulated`] runs.
pub const CONTROLLER_MANAGER_ENV: &str = "GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER";
/// Names the kube-scheduler binary that [`crate::kube::simulated`] runs.
pub const SCHEDULER_ENV: &str = "GATEWAY_LEADER_KUBE_SCHEDULER";
/// Names the kwok binary (its Stages, [`KWOK_STAGES`], beside it) that
/// [`crate::kube::simulated`] runs.
pub const KWOK_ENV: &str = "GATEWAY_LEADER_KWOK";
/// The file beside [`kwok`] holding the Stages kwok runs: upstream's default node and pod stages,
/// as `scripts/build-kwok.sh` copies them from the module's `kustomize/stage/`.
pub const KWOK_STAGES: &str = "kwok-stages.yaml";
/// Names the etcd binary to run; `etcdctl` is taken from the same folder.
pub const ETCD_ENV: &str = "GATEWAY_LEADER_ETCD";
/// Names a folder of Gateway API CRD files (`*.yaml`), e.g. upstream's `config/crd/standard/`.
pub const CRDS_ENV: &str = "GATEWAY_LEADER_GATEWAY_API_CRDS";
/// Names the folder of the Go peers (`client-go-elector`, `controller-runtime-manager`,
/// `client-go-proxy-client`, `client-go-gated-elector`).
pub const PEERS_ENV: &str = "GATEWAY_LEADER_PEERS";
/// Names the helm binary that lints and renders the chart.
pub const HELM_ENV: &str = "GATEWAY_LEADER_HELM";
/// Names the contour binary (Contour's own CRDs, [`CONTOUR_CRDS`], and RBAC, [`CONTOUR_RBAC`],
/// beside it) that tests/contour/ runs.
pub const CONTOUR_ENV: &str = "GATEWAY_LEADER_CONTOUR";
/// The file beside [`contour`] holding Contour's own CRDs (HTTPProxy, ExtensionService, ...),
/// as its release ships them.
pub const CONTOUR_CRDS: &str = "contour-crds.yaml";
/// The file beside [`contour`] holding Contour's own RBAC (its ClusterRole, its Role for the
/// leader-election Lease and Events, and their bindings), as its release ships them.
pub const CONTOUR_RBAC: &str = "contour-rbac.yaml";
/// Names the envoy-gateway binary (Envoy Gateway's own CRDs, [`ENVOY_GATEWAY_CRDS`], and RBAC,
/// [`ENVOY_GATEWAY_RBAC`], beside it) that tests/envoy_gateway/ runs.
pub const ENVOY_GATEWAY_ENV: &str = "GATEWAY_LEADER_ENVOY_GATEWAY";
/// The file beside [`envoy_gateway`] holding Envoy Gateway's own CRDs (EnvoyProxy,
/// ClientTrafficPolicy, ...), from its release's CRD chart.
pub const ENVOY_GATEWAY_CRDS: &str = "envoy-gateway-crds.yaml";
/// The file beside [`envoy_gateway`] holding Envoy Gateway's RBAC as its Helm chart renders it.
pub const ENVOY_GATEWAY_RBAC: &str = "envoy-gateway-rbac.yaml";
/// The Go peer that runs client-go's `leaderelection` (a file in [`peers`]).
pub const CLIENT_GO_ELECTOR: &str = "client-go-elector";
/// The Go peer that runs a controller-runtime Manager with leader election (a file in
/// [`peers`]).
pub const CONTROLLER_RUNTIME_MANAGER: &str = "controller-runtime-manager";
/// The Go peer that runs client-go 0.38's `leaderelection` with KEP-6361's recovery and its
/// write gate on the client it writes with (a file in [`peers`]).
pub const CLIENT_GO_GATED_ELECTOR: &str = "client-go-gated-elector";
/// The Go program whose client-go informer reads through one gateway-leader proxy while its
/// typed client writes through two (a file in [`peers`]).
pub const CLIENT_GO_PROXY_CLIENT: &str = "client-go-proxy-client";

/// The workspace's `scripts/` folder (testkit sits one level below the workspace root).
fn scripts() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap_or(Path::new(env!("CARGO_MANIFEST_DIR")))
        .join("scripts")
}

/// The path `env` names, which must exist.
fn from_env(env: &str) -> Result<Option<PathBuf>> {
    let Some(p) = std::env::var_os(env).filter(|p| !p.is_empty()) else {
        return Ok(None);
    };
    let p = PathBuf::from(p);
    if !p.exists() {
        bail!(
            "{env}={} does not exist; unset it to use the build scripts' cache",
            p.display()
        );
    }
    Ok(Some(p))
}

/// The last line a build script prints with `--cached`: the cached path, or the error `what`
/// and how to build it.
fn cached(script: &str, args: &[&str], what: &str, how: &str) -> Result<PathBuf> {
    let path = scripts().join(script);
    let out = Command::new("bash")
        .arg(&path)
        .arg("--cached")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {} --cached", path.display()))?;
    let last = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_string();
    if out.status.success() && Path::new(&last).exists() {
        return Ok(PathBuf::from(last));
    }
    bail!(
        "{what}: none in the cache; {how} ({})",
        String::from_utf8_lossy(&out.stderr).trim()
    )
}

/// The kube-apiserver to run: `GATEWAY_LEADER_KUBE_APISERVER`, else the cached build of the
/// version `GATEWAY_LEADER_KUBE_VERSION` chooses (newest by default).
pub fn kube_apiserver() -> Result<PathBuf> {
    if let Some(p) = from_env(APISERVER_ENV)? {
        return Ok(p);
    }
    let version = std::env::var(KUBE_VERSION_ENV).unwrap_or_else(|_| "newest".into());
    cached(
        "build-kube-apiserver.sh",
        &[&version],
        &format!("kube-apiserver ({version})"),
        &format!(
            "run scripts/build-kube-apiserver.sh {version} (it builds the binary from the \
             k8s.io/kubernetes Go module, about 6 minutes; scripts/test.sh does it for you), set \
             {APISERVER_ENV} to a kube-apiserver binary, or set GATEWAY_LEADER_TEST_KUBECONFIG \
             to an existing cluster's kubeconfig"
        ),
    )
}

/// The kube-apiserver of the pinned release `version` (`newest`, `oldest` or `vX.Y.Z`) from the
/// build scripts' cache, whatever `GATEWAY_LEADER_KUBE_APISERVER` and
/// `GATEWAY_LEADER_KUBE_VERSION` say: for servers that must match other components' release.
pub fn kube_apiserver_at(version: &str) -> Result<PathBuf> {
    cached(
        "build-kube-apiserver.sh",
        &[version],
        &format!("kube-apiserver ({version})"),
        &format!(
            "run scripts/build-kube-apiserver.sh {version} (it builds the binary from the \
             k8s.io/kubernetes Go module, about 6 minutes; scripts/test.sh does it for you)"
        ),
    )
}

/// One of the newest release's controllers (`kube-controller-manager`, `kube-scheduler`): the
/// path `env` names, else the cached build beside its sibling.
fn kube_controller(env: &str, name: &str) -> Result<PathBuf> {
    if let Some(p) = from_env(env)? {
        return Ok(p);
    }
    let dir = cached(
        "build-kube-apiserver.sh",
        &["newest", "controllers"],
        &format!("{name} (newest)"),
        &format!(
            "run scripts/test.sh, or `. scripts/servers.sh; ensure_servers` (they run \
             `scripts/build-kube-apiserver.sh newest controllers`, which builds \
             kube-controller-manager and kube-scheduler from the k8s.io/kubernetes Go module, \
             about 4 minutes, and export {CONTROLLER_MANAGER_ENV} and {SCHEDULER_ENV}), or set \
             {env} to a {name} binary"
        ),
    )?;
    Ok(dir.join(name))
}

/// kube-controller-manager: `GATEWAY_LEADER_KUBE_CONTROLLER_MANAGER`, else the cached build of
/// the newest pinned release (`scripts/build-kube-apiserver.sh newest controllers`).
pub fn kube_controller_manager() -> Result<PathBuf> {
    kube_controller(CONTROLLER_MANAGER_ENV, "kube-controller-manager")
}

/// kube-scheduler: `GATEWAY_LEADER_KUBE_SCHEDULER`, else the cached build of the newest pinned
/// release (`scripts/build-kube-apiserver.sh newest controllers`).
pub fn kube_scheduler() -> Result<PathBuf> {
    kube_controller(SCHEDULER_ENV, "kube-scheduler")
}

/// kwok: `GATEWAY_LEADER_KWOK`, else the cached build of the pinned release
/// (`scripts/build-kwok.sh`). Its [`KWOK_STAGES`] must stand beside it.
pub fn kwok() -> Result<PathBuf> {
    let binary = match from_env(KWOK_ENV)? {
        Some(p) => p,
        None => cached(
            "build-kwok.sh",
            &[],
            "kwok",
            &format!(
                "run scripts/test.sh, or `. scripts/servers.sh; ensure_servers` (they run \
                 scripts/build-kwok.sh, which builds kwok from its Go module sigs.k8s.io/kwok, \
                 about 2 minutes, and export {KWOK_ENV}), or set {KWOK_ENV} to a kwok binary \
                 with {KWOK_STAGES} beside it"
            ),
        )?,
    };
    if !binary.with_file_name(KWOK_STAGES).is_file() {
        bail!(
            "no {KWOK_STAGES} beside {} ({KWOK_ENV}); scripts/build-kwok.sh puts it there",
            binary.display()
        );
    }
    Ok(binary)
}

/// The etcd server binary: `GATEWAY_LEADER_ETCD`, else the cached build of the pinned 3.6.
pub fn etcd() -> Result<PathBuf> {
    if let Some(p) = from_env(ETCD_ENV)? {
        return Ok(p);
    }
    Ok(cached(
        "build-etcd.sh",
        &[],
        "etcd",
        &format!(
            "run scripts/build-etcd.sh (it builds etcd and etcdctl from their Go modules, about \
             2 minutes; scripts/test.sh does it for you) or set {ETCD_ENV} to an etcd binary"
        ),
    )?
    .join("etcd"))
}

/// `etcdctl`, from the folder of [`etcd`].
pub fn etcdctl() -> Result<PathBuf> {
    let etcd = etcd()?;
    let ctl = etcd.with_file_name("etcdctl");
    if !ctl.is_file() {
        bail!(
            "no etcdctl beside {} ({ETCD_ENV}); scripts/build-etcd.sh builds both",
            etcd.display()
        );
    }
    Ok(ctl)
}

/// The folder of the Gateway API CRDs: `GATEWAY_LEADER_GATEWAY_API_CRDS`, else
/// `config/crd/standard/` of the `sigs.k8s.io/gateway-api` module at the version the status
/// writer targets, as `scripts/gateway-api-crds.sh` downloaded it.
pub fn gateway_api_crds() -> Result<PathBuf> {
    if let Some(p) = from_env(CRDS_ENV)? {
        return Ok(p);
    }
    cached(
        "gateway-api-crds.sh",
        &[],
        "the Gateway API CRDs",
        &format!(
            "run scripts/gateway-api-crds.sh (it fetches the sigs.k8s.io/gateway-api module \
             through the Go module proxy; scripts/test.sh does it for you) or set {CRDS_ENV} to a \
             folder of CRD files"
        ),
    )
}

/// The folder of the Go peers built from `testkit/peers/` (their programs are
/// [`CLIENT_GO_ELECTOR`], [`CONTROLLER_RUNTIME_MANAGER`] and [`CLIENT_GO_PROXY_CLIENT`]):
/// `GATEWAY_LEADER_PEERS`, else the
/// cached build of the sources as they are now (`scripts/build-peers.sh`).
pub fn peers() -> Result<PathBuf> {
    let dir = match from_env(PEERS_ENV)? {
        Some(p) => p,
        None => cached(
            "build-peers.sh",
            &[],
            "the Go peers",
            &format!(
                "run scripts/build-peers.sh (it builds testkit/peers/ with client-go and \
                 controller-runtime from the Go module proxy, about a minute; scripts/test.sh does \
                 it for you) or set {PEERS_ENV} to a folder holding {CLIENT_GO_ELECTOR}, \
                 {CONTROLLER_RUNTIME_MANAGER}, {CLIENT_GO_PROXY_CLIENT} and \
                 {CLIENT_GO_GATED_ELECTOR}"
            ),
        )?,
    };
    for program in [
        CLIENT_GO_ELECTOR,
        CONTROLLER_RUNTIME_MANAGER,
        CLIENT_GO_PROXY_CLIENT,
        CLIENT_GO_GATED_ELECTOR,
    ] {
        if !dir.join(program).is_file() {
            bail!(
                "no {program} in {}; scripts/build-peers.sh builds the peers",
                dir.display()
            );
        }
    }
    Ok(dir)
}

/// helm: `GATEWAY_LEADER_HELM`, else the cached build of the pinned v4 release
/// (`scripts/build-helm.sh`).
pub fn helm() -> Result<PathBuf> {
    if let Some(p) = from_env(HELM_ENV)? {
        return Ok(p);
    }
    cached(
        "build-helm.sh",
        &[],
        "helm",
        &format!(
            "run scripts/build-helm.sh (it builds helm from its Go module helm.sh/helm/v4, about \
             2 minutes; scripts/test.sh does it for you) or set {HELM_ENV} to a helm v3.8+ or v4 \
             binary"
        ),
    )
}

/// Contour's controller: `GATEWAY_LEADER_CONTOUR`, else the cached build of the pinned release
/// (`scripts/build-contour.sh`). Its [`CONTOUR_CRDS`] and [`CONTOUR_RBAC`] must stand beside it.
pub fn contour() -> Result<PathBuf> {
    let binary = match from_env(CONTOUR_ENV)? {
        Some(p) => p,
        None => cached(
            "build-contour.sh",
            &[],
            "contour",
            &format!(
                "run scripts/test.sh, or `. scripts/servers.sh; ensure_servers` (they run \
                 scripts/build-contour.sh, which builds Contour from its Go module \
                 github.com/projectcontour/contour, about 5 minutes, and export {CONTOUR_ENV}), \
                 or set {CONTOUR_ENV} to a contour binary with {CONTOUR_CRDS} and \
                 {CONTOUR_RBAC} beside it"
            ),
        )?,
    };
    for file in [CONTOUR_CRDS, CONTOUR_RBAC] {
        if !binary.with_file_name(file).is_file() {
            bail!(
                "no {file} beside {} ({CONTOUR_ENV}); scripts/build-contour.sh puts it there",
                binary.display()
            );
        }
    }
    Ok(binary)
}

/// Envoy Gateway's control plane: `GATEWAY_LEADER_ENVOY_GATEWAY`, else the cached build of the
/// pinned release (`scripts/build-envoy-gateway.sh`). Its [`ENVOY_GATEWAY_CRDS`] and
/// [`ENVOY_GATEWAY_RBAC`] must stand beside it.
pub fn envoy_gateway() -> Result<PathBuf> {
    let binary = match from_env(ENVOY_GATEWAY_ENV)? {
        Some(p) => p,
        None => cached(
            "build-envoy-gateway.sh",
            &[],
            "envoy-gateway",
            &format!(
                "run scripts/test.sh, or `. scripts/servers.sh; ensure_servers` (they run \
                 scripts/build-envoy-gateway.sh, which builds Envoy Gateway from its Go module \
                 github.com/envoyproxy/gateway, about 6 minutes, and export \
                 {ENVOY_GATEWAY_ENV}), or set {ENVOY_GATEWAY_ENV} to an envoy-gateway binary \
                 with {ENVOY_GATEWAY_CRDS} and {ENVOY_GATEWAY_RBAC} beside it"
            ),
        )?,
    };
    for file in [ENVOY_GATEWAY_CRDS, ENVOY_GATEWAY_RBAC] {
        if !binary.with_file_name(file).is_file() {
            bail!(
                "no {file} beside {} ({ENVOY_GATEWAY_ENV}); scripts/build-envoy-gateway.sh puts \
                 it there",
                binary.display()
            );
        }
    }
    Ok(binary)
}

/// Where a test finds the upstream Gateway API conformance suite (a Go test binary): it is
/// built when unset (`scripts/build-conformance.sh`).
pub const CONFORMANCE_ENV: &str = "GATEWAY_LEADER_CONFORMANCE";

/// The upstream Gateway API conformance suite's test binary, built from
/// `sigs.k8s.io/gateway-api/conformance` at the pinned Gateway API version:
/// `GATEWAY_LEADER_CONFORMANCE`, else the cached build (`scripts/build-conformance.sh`).
pub fn conformance() -> Result<PathBuf> {
    if let Some(p) = from_env(CONFORMANCE_ENV)? {
        return Ok(p);
    }
    cached(
        "build-conformance.sh",
        &[],
        "the Gateway API conformance suite",
        &format!(
            "run scripts/test.sh, or `. scripts/servers.sh; ensure_servers` (they run \
             scripts/build-conformance.sh, which compiles the suite from the \
             sigs.k8s.io/gateway-api/conformance Go module, about 4 minutes, and export \
             {CONFORMANCE_ENV}), or set {CONFORMANCE_ENV} to a suite built with `go test -c` \
             from that module"
        ),
    )
}
