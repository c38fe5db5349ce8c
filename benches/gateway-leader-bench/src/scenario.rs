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
    /// The etcd member the leading replica talks to (its last `using etcd endpoint` line)
    /// SIGKILLed, kept down for a lease, then started again. `etcd-cluster` only, as are the
    /// next six.
    MemberKill,
    /// The etcd member that is the Raft leader SIGKILLed under a leading replica, whichever
    /// member that replica talks to (started again once the others elected a new Raft leader).
    MemberKillRaftLeader,
    /// The member the leading replica talks to frozen with SIGSTOP for half a lease, then thawed.
    MemberFreeze,
    /// The client traffic of the member the leading replica talks to black-holed (its proxy
    /// cut) for a lease and a half, then healed; it stays in the quorum.
    MemberCut,
    /// One member killed and started again on its data, waited for until it rejoins.
    MemberRestart,
    /// Every member restarted in turn, each waited for before the next.
    RollingRestart,
    /// The leading replica and the etcd member it talks to SIGKILLed at the same moment (the
    /// member started again once another replica leads): a takeover, as `crash`, on a cluster
    /// that may have to elect a new Raft leader first.
    CrashWithMember,
    /// `redis-sentinel` only: the Redis primary SIGKILLed and the replica promoted by the
    /// Sentinels (the killed node started again afterwards, to become the next replica).
    SentinelFailover,
    /// Two replicas over `--routes` HTTPRoutes: memory, a graceful takeover's requests and
    /// check time, the first write of a route changed at the takeover, and a burst of changes
    /// (runs alone; `benches/gateway-leader-bench/src/scale.rs`).
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

    /// The faults of one etcd member under a leader that keeps running: not in `all` (they
    /// need `--lock-backend etcd-cluster`), each named on its own.
    pub const MEMBER: [Scenario; 6] = [
        Scenario::MemberKill,
        Scenario::MemberKillRaftLeader,
        Scenario::MemberFreeze,
        Scenario::MemberCut,
        Scenario::MemberRestart,
        Scenario::RollingRestart,
    ];

    /// Every name `--scenario` accepts, `all` aside.
    pub const NAMES: &'static str = "graceful, crash, pause, vanish, backend-restart, partition, \
         chaos, scale, member-kill, member-kill-raft-leader, member-freeze, member-cut, \
         member-restart, rolling-restart, crash-with-member, sentinel-failover";

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
            Scenario::MemberKill => "member-kill",
            Scenario::MemberKillRaftLeader => "member-kill-raft-leader",
            Scenario::MemberFreeze => "member-freeze",
            Scenario::MemberCut => "member-cut",
            Scenario::MemberRestart => "member-restart",
            Scenario::RollingRestart => "rolling-restart",
            Scenario::CrashWithMember => "crash-with-member",
            Scenario::SentinelFailover => "sentinel-failover",
            Scenario::Scale => "scale",
        }
    }

    /// Parses one `--scenario` value (`all` is handled by the caller).
    pub fn parse(s: &str) -> Option<Scenario> {
        Self::ALL
            .into_iter()
            .chain([Scenario::Chaos, Scenario::Scale])
            .chain(Self::MEMBER)
            .chain([Scenario::CrashWithMember, Scenario::SentinelFailover])
            .find(|x| x.name() == s)
    }

    /// Whether it faults an etcd member rather than the leading replica.
    pub fn is_member_fault(self) -> bool {
        Self::MEMBER.contains(&self)
    }

    /// Whether it needs the bench's own etcd cluster (`--lock-backend etcd-cluster`).
    pub fn needs_members(self) -> bool {
        self.is_member_fault() || self == Scenario::CrashWithMember
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_name_parses_back_and_is_listed() {
        for s in Scenario::ALL
            .into_iter()
            .chain([Scenario::Chaos, Scenario::Scale])
            .chain(Scenario::MEMBER)
            .chain([Scenario::CrashWithMember, Scenario::SentinelFailover])
        {
            assert_eq!(Scenario::parse(s.name()), Some(s));
            assert!(Scenario::NAMES.contains(s.name()), "{s}");
        }
        assert!(Scenario::MEMBER.iter().all(|s| s.is_member_fault()));
        assert!(Scenario::CrashWithMember.needs_members());
        assert!(!Scenario::CrashWithMember.is_member_fault());
        assert!(!Scenario::ALL.iter().any(|s| s.is_member_fault()));
    }
}
