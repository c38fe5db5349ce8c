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
}

impl Scenario {
    /// Every scenario, in the order `all` runs them.
    pub const ALL: [Scenario; 4] = [
        Scenario::Graceful,
        Scenario::Crash,
        Scenario::Pause,
        Scenario::Vanish,
    ];

    /// The name on the command line and in the output.
    pub fn name(self) -> &'static str {
        match self {
            Scenario::Graceful => "graceful",
            Scenario::Crash => "crash",
            Scenario::Pause => "pause",
            Scenario::Vanish => "vanish",
        }
    }

    /// Parses one `--scenario` value (`all` is handled by the caller).
    pub fn parse(s: &str) -> Option<Scenario> {
        Self::ALL.into_iter().find(|x| x.name() == s)
    }
}

impl fmt::Display for Scenario {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
