//! The Go peers of `testkit/peers/` as replicas beside ours: client-go's `leaderelection`
//! elector, a controller-runtime manager and client-go 0.38's elector with KEP-6361's recovery
//! and write gate, each contending for a Lease with the same timing
//! as our replicas and, while it leads, writing a ConfigMap every short interval. They are
//! started and read as our replicas are ([`Replica::spawn`]), their lines read by [`event`]
//! into the same events as ours.

use std::fmt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::Result;
use gateway_leader_log::Event;
use leader_lock::Timing;
use serde_json::Value;

use super::{Dialect, Journal, Replica, Transcript};

/// Which Go peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Peer {
    /// `client-go-elector`: client-go's `LeaderElector` over a `LeaseLock`, `ReleaseOnCancel`.
    ClientGo,
    /// `controller-runtime-manager`: a Manager with `LeaderElection`, `"leases"` and
    /// `LeaderElectionReleaseOnCancel`.
    ControllerRuntime,
    /// `client-go-gated-elector`: client-go 0.38's `LeaderElector` with
    /// `LeaderElectionConfig.Recovery` and its `WriteGate` on the client it writes with
    /// (KEP-6361); [`PeerArgs::lock_kubeconfig`] may give its Lease client a kubeconfig of its
    /// own. Built from a pre-release of client-go, so it is not in [`Peer::ALL`].
    ClientGoGated,
}

impl Peer {
    /// The peers on the client-go and controller-runtime releases `scripts/versions.sh` pins.
    pub const ALL: [Peer; 2] = [Peer::ClientGo, Peer::ControllerRuntime];

    /// The program's file name in the peers' folder (`testkit::built::peers`).
    pub fn program(self) -> &'static str {
        match self {
            Peer::ClientGo => crate::built::CLIENT_GO_ELECTOR,
            Peer::ControllerRuntime => crate::built::CONTROLLER_RUNTIME_MANAGER,
            Peer::ClientGoGated => crate::built::CLIENT_GO_GATED_ELECTOR,
        }
    }

    /// The short name in identities, tables and the JSON.
    pub fn name(self) -> &'static str {
        match self {
            Peer::ClientGo => "client-go",
            Peer::ControllerRuntime => "controller-runtime",
            Peer::ClientGoGated => "client-go-gated",
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
    /// A kubeconfig for the Lease's client alone (a partition proxy in front of the
    /// apiserver), for the peers that take one (`client-go-gated-elector`); `None`: the Lease
    /// goes through `kubeconfig` too.
    pub lock_kubeconfig: Option<PathBuf>,
}

/// Go's `time.ParseDuration` reads milliseconds exactly.
fn go_duration(d: Duration) -> String {
    format!("{}ms", d.as_millis())
}

/// Starts `peer` as process `name` of `journal` (its holder identity is `<name>_<uuid>`); its
/// output goes to `log`.
pub fn start(
    peer: Peer,
    args: &PeerArgs,
    name: &str,
    journal: &Journal,
    log: PathBuf,
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
    if let Some(lock) = &args.lock_kubeconfig {
        cmd.arg(format!("--lock-kubeconfig={}", lock.display()));
    }
    Replica::spawn(cmd, name, Dialect::GoPeer, journal, Transcript::File(log))
}

/// The key of a peer line's name (`testkit/peers/internal/peer` lists them): the peers' own
/// dialect, not the product's, which names its lines in `message`.
const EVENT: &str = "event";

/// Reads one JSON line of a Go peer; `None` for lines that do not matter here. A peer's
/// leadership is valid from its `started leading` line until its last `renewed` write was sent
/// plus the renew deadline, as the peer computes it in `valid_until_mono_ms`; its release and
/// its `stopped leading` line end it sooner. The peers name their fields as the product does
/// (`term`, `mono_ms`, ...): one time line, one set of names.
pub fn event(v: &Value) -> Option<Event> {
    use gateway_leader_log::field;
    let whole = |key: &str| v[key].as_u64();
    let float = |key: &str| v[key].as_f64();
    Some(match v[EVENT].as_str()? {
        "started leading" => Event::Leading {
            term: whole(field::TERM)?,
            valid_until: float(field::VALID_UNTIL_MONO_MS)?,
        },
        "renewed" => Event::Renewed {
            term: whole(field::TERM)?,
            valid_until: float(field::VALID_UNTIL_MONO_MS)?,
        },
        "following" => Event::Following {
            term: whole(field::TERM),
            holder: v[field::HOLDER]
                .as_str()
                .filter(|h| !h.is_empty())
                .map(str::to_string),
        },
        "stopped leading" => Event::Stopped,
        "released" => Event::Released {
            term: whole(field::TERM)?,
            released: true,
            sent: float(field::SENT_MONO_MS),
        },
        "wrote" => Event::Written {
            term: whole(field::TERM)?,
            object_kind: "ConfigMap".to_string(),
            namespace: String::new(),
            name: v[field::OBJECT].as_str().unwrap_or_default().to_string(),
        },
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::Line;

    fn read(text: &str) -> Option<Line> {
        Line::read(3, Dialect::GoPeer, text)
    }

    #[test]
    fn reads_the_peers_lines() {
        // As testkit/peers prints them (Go's encoding/json: sorted keys, numbers as numbers).
        let l = r#"{"event":"started leading","holder":"cg-3_1b2c","mono_ms":100.5,
            "renew_deadline_ms":3000,"term":4,"valid_until_mono_ms":3098.25}"#;
        let record = read(l).and_then(|l| l.record());
        assert_eq!(
            record.map(|r| (r.replica, r.mono_ms, r.what)),
            Some((
                3,
                100.5,
                Event::Leading {
                    term: 4,
                    valid_until: 3098.25
                }
            ))
        );
        let r = r#"{"event":"released","mono_ms":12.5,"sent_mono_ms":10.0,"term":4}"#;
        assert_eq!(
            read(r).and_then(|l| l.event),
            Some(Event::Released {
                term: 4,
                released: true,
                sent: Some(10.0)
            })
        );
        let f = r#"{"event":"following","holder":"","mono_ms":5.0}"#;
        assert_eq!(
            read(f).and_then(|l| l.event),
            Some(Event::Following {
                term: None,
                holder: None
            })
        );
        let w = r#"{"event":"wrote","mono_ms":7.0,"object":"writes","resource_version":"812",
            "sent_mono_ms":6.0,"seq":2,"term":4}"#;
        assert!(matches!(
            read(w).and_then(|l| l.event),
            Some(Event::Written { term: 4, .. })
        ));
        // The acquiring write comes before the callback; it is not a leadership yet.
        let a = r#"{"event":"acquired","created":false,"mono_ms":1.0,"sent_mono_ms":0.5,
            "term":4,"valid_until_mono_ms":3000.5}"#;
        assert_eq!(read(a).and_then(|l| l.event), None);
        assert!(read("I1203 07:13:46 klog text").is_none());
    }
}
