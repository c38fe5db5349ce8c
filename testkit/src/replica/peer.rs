//! The Go peers of `testkit/peers/` as replicas beside ours: client-go's `leaderelection`
//! elector and a controller-runtime manager, each contending for a Lease with the same timing
//! as our replicas and, while it leads, writing a ConfigMap every short interval. They are
//! started and read as our replicas are ([`Replica::spawn`]), their lines read by
//! [`events::parse_peer`] into the same events.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use tokio::sync::mpsc::UnboundedSender;

use super::{Lines, Replica};
use gateway_leader_log::{self as events, Event};
use leader_lock::Timing;

/// Which Go peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// `client-go-elector`: client-go's `LeaderElector` over a `LeaseLock`, `ReleaseOnCancel`.
    ClientGo,
    /// `controller-runtime-manager`: a Manager with `LeaderElection`, `"leases"` and
    /// `LeaderElectionReleaseOnCancel`.
    ControllerRuntime,
}

impl Peer {
    /// Both peers.
    pub const ALL: [Peer; 2] = [Peer::ClientGo, Peer::ControllerRuntime];

    /// The program's file name in the peers' folder (`testkit::built::peers`).
    pub fn program(self) -> &'static str {
        match self {
            Peer::ClientGo => crate::built::CLIENT_GO_ELECTOR,
            Peer::ControllerRuntime => crate::built::CONTROLLER_RUNTIME_MANAGER,
        }
    }

    /// The short name in identities, tables and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Peer::ClientGo => "client-go",
            Peer::ControllerRuntime => "controller-runtime",
        }
    }
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What every peer of one Lease is given.
#[derive(Debug, Clone)]
pub struct PeerArgs {
    /// The peers' folder (`testkit::built::peers`).
    pub dir: PathBuf,
    /// An admin kubeconfig of the apiserver.
    pub kubeconfig: PathBuf,
    /// The namespace of the Lease and of the ConfigMap.
    pub namespace: String,
    /// The Lease's name.
    pub lease: String,
    /// The ConfigMap a leader writes.
    pub configmap: String,
    /// The Lease timing (as our replicas').
    pub timing: Timing,
    /// How often a leader writes.
    pub write_every: Duration,
}

/// Go's `time.ParseDuration` reads milliseconds exactly.
fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Starts `peer` as process `index` named `name` (its holder identity is `<name>_<uuid>`); its
/// output goes to `log` and its lines, as events, to `events`.
pub fn start(
    peer: Peer,
    args: &PeerArgs,
    (index, name): (usize, &str),
    log: PathBuf,
    events: UnboundedSender<Event>,
) -> Result<Replica> {
    let mut cmd = Command::new(Path::new(&args.dir).join(peer.program()));
    cmd.arg(format!("--kubeconfig={}", args.kubeconfig.display()))
        .arg(format!("--namespace={}", args.namespace))
        .arg(format!("--lease={}", args.lease))
        .arg(format!("--identity={name}"))
        .arg(format!(
            "--lease-duration={}",
            go_duration(args.timing.lease_duration)
        ))
        .arg(format!(
            "--renew-deadline={}",
            go_duration(args.timing.renew_deadline)
        ))
        .arg(format!(
            "--retry-period={}",
            go_duration(args.timing.retry_period)
        ))
        .arg(format!("--write-configmap={}", args.configmap))
        .arg(format!("--write-every={}", go_duration(args.write_every)))
        // The user's kubeconfig and Go settings must not leak into the peers.
        .env_remove("KUBECONFIG")
        .env_remove("GODEBUG");
    Replica::spawn(
        cmd,
        index,
        name,
        log,
        (Lines::Stdout, events::parse_peer),
        events,
    )
}
