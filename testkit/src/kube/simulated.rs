//! Simulated nodes for a test apiserver: Deployments get Pods, Pods get bound to a Node, and
//! kwok reports them Running and Ready, while no container runs anywhere.
//!
//! The test apiserver is bare (no kubelet, no controller-manager, no scheduler), so a Deployment
//! there never gets a Pod. The upstream Gateway API conformance suite's setup and status tests
//! wait for every Pod of their namespaces to be Ready (`kubernetes.NamespacesMustBeReady`). This
//! starts the real upstream components that do that part of a cluster's work, at the release of
//! the apiserver:
//!
//! - `kube-controller-manager` with only the controllers listed in [`CONTROLLERS`]: Deployments
//!   to ReplicaSets to Pods, each namespace's `default` ServiceAccount (the apiserver's
//!   ServiceAccount admission refuses a Pod whose account does not exist), the node lifecycle
//!   controller (the apiserver's TaintNodesByCondition admission gives a new Node the
//!   `node.kubernetes.io/not-ready:NoSchedule` taint, and only that controller takes it off once
//!   the Node is Ready), and the garbage collector and namespace controller, so that deleting a
//!   Deployment or a namespace removes what it owns, as in a cluster;
//! - `kube-scheduler`, which binds each Pod to a Node;
//! - kwok (`sigs.k8s.io/kwok`, "Kubernetes WithOut Kubelet", sig-scheduling's simulator) keeping
//!   one fake Node ([`NODE_NAME`]) and moving its Pods through upstream's default Stages
//!   (`kustomize/stage/` of its module: node-initialize, node-heartbeat-with-lease, pod-ready,
//!   pod-complete, pod-delete; `scripts/build-kwok.sh`).
//!
//! So a Pod here is Ready in the API only: nothing serves its ports, and no traffic reaches it.
//! All three run with the admin credentials, leader election off and no serving port, each
//! killed on drop. The binaries come from `scripts/build-kube-apiserver.sh newest controllers`
//! and `scripts/build-kwok.sh` ([`crate::built`]); a missing one is an error saying how to build
//! it.
//!
//! # Examples
//!
//! ```no_run
//! # async fn f() -> anyhow::Result<()> {
//! use testkit::kube::{KubeApiServer, SimulatedNodes};
//!
//! let server = KubeApiServer::start_local_with(SimulatedNodes::apiserver_options()).await?;
//! let nodes = SimulatedNodes::start(&server).await?;
//! // A Deployment created now gets Pods that are bound to nodes.node_name() and become Ready.
//! # drop(nodes);
//! # Ok(())
//! # }
//! ```

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, PostParams};

use super::{watchdog, KubeApiServer, Options};
use crate::process::{tail, ServerProcess};

/// The fake Node kwok keeps.
pub const NODE_NAME: &str = "kwok-node-0";

/// The annotation (key, value) that marks a Node as kwok's: kwok manages only Nodes that carry
/// it, as upstream's examples mark theirs.
pub const NODE_ANNOTATION: (&str, &str) = ("kwok.x-k8s.io/node", "fake");

/// The kube-controller-manager controllers that run (`--controllers`), by their 1.33+ names.
pub const CONTROLLERS: &[&str] = &[
    "deployment-controller",
    "replicaset-controller",
    "serviceaccount-controller",
    "node-lifecycle-controller",
    "garbage-collector-controller",
    "namespace-controller",
];

/// The pinned release the controllers are built at (`scripts/build-kube-apiserver.sh newest
/// controllers`); the apiserver must be the same one.
pub const RELEASE: &str = "newest";

/// The three start in a few seconds and kwok initializes the Node at once; a busy 2-core machine
/// may need far more.
const READY_LIMIT: Duration = Duration::from_secs(120);

/// kube-controller-manager, kube-scheduler and kwok with one fake Node, on a test apiserver;
/// all three are killed on drop (the Node stays, NotReady once its Lease expires).
pub struct SimulatedNodes {
    controller_manager: ServerProcess,
    scheduler: ServerProcess,
    kwok: ServerProcess,
}

// === impl SimulatedNodes ===

impl SimulatedNodes {
    /// The apiserver options these components need: the same pinned release as theirs
    /// ([`RELEASE`]), whatever `GATEWAY_LEADER_KUBE_VERSION` chooses for the other tests (the
    /// controllers and scheduler of one release are not meant to run against an older
    /// apiserver).
    pub fn apiserver_options() -> Options {
        Options {
            version: Some(RELEASE.to_string()),
            ..Options::default()
        }
    }

    /// Creates the fake Node ([`NODE_NAME`]; fine if it exists) on `server`, starts
    /// kube-controller-manager, kube-scheduler and kwok against it, and waits until the Node is
    /// schedulable: Ready (kwok) and without the not-ready taint (the node lifecycle controller).
    ///
    /// # Errors
    ///
    /// A binary that is not built (the message says how to build it), one whose release is not
    /// the apiserver's, an existing cluster (`GATEWAY_LEADER_TEST_KUBECONFIG`: it has nodes of
    /// its own), a component that exits, or a Node not Ready within 120 s (with the logs' tails).
    ///
    /// # Cancel safety
    ///
    /// Cancelling it kills whatever it started; the Node stays.
    pub async fn start(server: &KubeApiServer) -> Result<SimulatedNodes> {
        if server.is_external() {
            bail!(
                "simulated nodes need a local test apiserver; an existing cluster \
                 (GATEWAY_LEADER_TEST_KUBECONFIG) runs its own controllers and nodes"
            );
        }
        // Every binary first, so that a missing one fails before anything starts.
        let controller_manager = crate::built::kube_controller_manager()?;
        let scheduler = crate::built::kube_scheduler()?;
        let kwok = crate::built::kwok()?;
        let stages = kwok.with_file_name(crate::built::KWOK_STAGES);
        let release = server
            .admin_client()
            .apiserver_version()
            .await
            .context("reading the apiserver's /version")?
            .git_version;
        for binary in [&controller_manager, &scheduler] {
            let said = release_of(binary)?;
            if said != release {
                bail!(
                    "{} is {said} but the apiserver is {release}: start the apiserver with \
                     SimulatedNodes::apiserver_options() (the {RELEASE} release, which \
                     scripts/build-kube-apiserver.sh {RELEASE} controllers builds them at)",
                    binary.display()
                );
            }
        }
        create_node(server).await?;
        let kubeconfig = server.kubeconfig_path();
        let mut nodes = SimulatedNodes {
            controller_manager: spawn("kube-controller-manager", |_| {
                controller_manager_command(&controller_manager, kubeconfig)
            })?,
            scheduler: spawn("kube-scheduler", |_| {
                scheduler_command(&scheduler, kubeconfig)
            })?,
            kwok: spawn("kwok", |dir| kwok_command(&kwok, kubeconfig, &stages, dir))?,
        };
        nodes.wait_node_ready(server).await?;
        Ok(nodes)
    }

    /// The fake Node's name ([`NODE_NAME`]).
    pub fn node_name(&self) -> &str {
        NODE_NAME
    }

    /// Fails with the log's tail when one of the three has exited.
    pub fn ensure_running(&mut self) -> Result<()> {
        self.controller_manager.ensure_running()?;
        self.scheduler.ensure_running()?;
        self.kwok.ensure_running()
    }

    /// The tails of the three logs, for a failure message.
    pub fn log_tails(&self, lines: usize) -> String {
        [
            ("kube-controller-manager", &self.controller_manager),
            ("kube-scheduler", &self.scheduler),
            ("kwok", &self.kwok),
        ]
        .iter()
        .map(|(name, p)| format!("--- {name}:\n{}", tail(&p.log(), lines)))
        .collect::<Vec<_>>()
        .join("\n")
    }

    async fn wait_node_ready(&mut self, server: &KubeApiServer) -> Result<()> {
        let nodes: Api<Node> = Api::all(server.admin_client());
        let deadline = tokio::time::Instant::now() + READY_LIMIT;
        loop {
            self.ensure_running()?;
            let last = match nodes.get_opt(NODE_NAME).await {
                Ok(Some(node)) if !is_ready(&node) => "not Ready yet".to_string(),
                Ok(Some(node)) if is_tainted_not_ready(&node) => {
                    format!("Ready, but still tainted {NOT_READY_TAINT}")
                }
                Ok(Some(_)) => return Ok(()),
                Ok(None) => "gone".to_string(),
                Err(e) => e.to_string(),
            };
            if tokio::time::Instant::now() >= deadline {
                bail!(
                    "the Node {NODE_NAME} was not schedulable within {READY_LIMIT:?} (last: \
                     {last});\n{}",
                    self.log_tails(20)
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// `Kubernetes vX.Y.Z` from `binary --version`, as the vX.Y.Z the apiserver's /version says.
fn release_of(binary: &Path) -> Result<String> {
    let out = Command::new(binary)
        .arg("--version")
        .output()
        .with_context(|| format!("running {} --version", binary.display()))?;
    let said = String::from_utf8_lossy(&out.stdout);
    said.trim()
        .strip_prefix("Kubernetes ")
        .map(str::to_owned)
        .ok_or_else(|| anyhow!("{} --version said {said:?}", binary.display()))
}

/// A component started in its own temporary dir (given to `command`), which outlives no test
/// binary.
fn spawn(name: &str, command: impl FnOnce(&Path) -> Command) -> Result<ServerProcess> {
    let dir = ServerProcess::temp_dir(name)?;
    let cmd = command(dir.path());
    let process = ServerProcess::spawn(name, cmd, dir)?;
    watchdog(process.pid(), process.dir());
    Ok(process)
}

fn controller_manager_command(binary: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--controllers={}", CONTROLLERS.join(",")))
        .arg("--leader-elect=false")
        // No serving port: nothing here asks for its health or metrics, and no port can clash.
        .arg("--secure-port=0")
        .arg("--v=1");
    cmd
}

fn scheduler_command(binary: &Path, kubeconfig: &Path) -> Command {
    let mut cmd = Command::new(binary);
    cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg("--leader-elect=false")
        .arg("--secure-port=0")
        .arg("--v=1");
    cmd
}

fn kwok_command(binary: &Path, kubeconfig: &Path, stages: &Path, home: &Path) -> Command {
    let mut cmd = Command::new(binary);
    let (key, value) = NODE_ANNOTATION;
    // kwok also reads ~/.kwok/kwok.yaml: HOME is its temporary dir, so only `stages` counts.
    cmd.env("HOME", home)
        .arg(format!("--kubeconfig={}", kubeconfig.display()))
        .arg(format!("--config={}", stages.display()))
        .arg(format!(
            "--manage-nodes-with-annotation-selector={key}={value}"
        ))
        // The Node's heartbeat is its Lease in kube-node-lease, as kwokctl runs it: the
        // node-heartbeat-with-lease Stage updates the Node's status only every 10 minutes or so,
        // and without a Lease the node-lifecycle controller marks the Node unknown after its
        // grace period (about 50 s) and every Pod on it not Ready, until the next heartbeat.
        .arg("--node-lease-duration-seconds=40")
        // kwok serves no kubelet API (no --server-address, no --node-port): no port to clash.
        .arg("--v=1");
    cmd
}

/// Creates the fake Node (fine if it exists): kwok fills its status (capacity, conditions,
/// addresses) through the node-initialize Stage.
async fn create_node(server: &KubeApiServer) -> Result<()> {
    let (key, value) = NODE_ANNOTATION;
    let node: Node = serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": NODE_NAME,
            "annotations": { key: value },
            "labels": {
                "kubernetes.io/hostname": NODE_NAME,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "type": "kwok",
            },
        },
    }))
    .context("the fake Node")?;
    match Api::<Node>::all(server.admin_client())
        .create(&PostParams::default(), &node)
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(()),
        Err(e) => Err(e).with_context(|| format!("creating the Node {NODE_NAME}")),
    }
}

/// The taint the apiserver gives every new Node and the node lifecycle controller removes.
const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";

fn is_tainted_not_ready(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key == NOT_READY_TAINT))
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}
