//! How a round stops the leader.

use std::fmt;

/// One way of stopping the current leader.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Scenario {
    /// SIGTERM: the leader drains its writes and releases the lock.
    Graceful,
    /// SIGKILL: nothing is released; the lease must expire.
    Crash,
    /// SIGSTOP for longer than the lease, then SIGCONT: the frozen leader must not write when
    /// it thaws.
    Pause,
    /// The lock record deleted by hand (Lease delete, etcd `del`, Redis `DEL`) under a running
    /// leader: the replicas must settle on one new leadership, under a new term.
    Vanish,
    /// The lock's server killed and started again at once: Redis empty, etcd with its data,
    /// the apiserver with its etcd. Timed from the kill.
    BackendRestart,
    /// The leader's connection to the lock's server black-holed (a TCP proxy per replica) for
    /// longer than the lease, then healed; the other replicas still reach the server.
    Partition,
    /// Each round one of the others, dealt from a shuffled deck (every one once in six rounds):
    /// the long run that hunts for split brain.
    Chaos,
    /// Two replicas over `--routes` HTTPRoutes: memory, a graceful takeover's requests and
    /// check time, the first write of a route changed at the takeover, and a burst of changes
    /// (runs alone; `bench/src/scale.rs`).
    Scale,
}

impl Scenario {
    /// Every scenario `all` runs, in order; `chaos` draws from these too.
    pub const ALL: [Scenario; 6] = [
        Scenario::Graceful,
        Scenario::Crash,
        Scenario::Pause,
        Scenario::Vanish,
        Scenario::BackendRestart,
        Scenario::Partition,
    ];

    /// Every name `--scenario` accepts, `all` aside.
    pub const NAMES: &'static str =
        "graceful, crash, pause, vanish, backend-restart, partition, chaos, scale";

    /// The name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Graceful => "graceful",
            Scenario::Crash => "crash",
            Scenario::Pause => "pause",
            Scenario::Vanish => "vanish",
            Scenario::BackendRestart => "backend-restart",
            Scenario::Partition => "partition",
            Scenario::Chaos => "chaos",
            Scenario::Scale => "scale",
        }
    }

    /// Parses one `--scenario` value (`all` is handled by the caller).
    pub fn parse(s: &str) -> Option<Scenario> {
        Self::ALL
            .into_iter()
            .chain([Scenario::Chaos, Scenario::Scale])
            .find(|x| x.name() == s)
    }

    /// Whether a replica needs its own proxy to the lock's server for this scenario.
    pub fn needs_proxy(self) -> bool {
        matches!(self, Scenario::Partition | Scenario::Chaos)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
