//! The flags of `gateway-leader-bench run`, and their check before anything starts.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use clap::Args;
use leader_lock::input::parse_duration;
use leader_lock::Timing;

use crate::lockserver::Endpoints;
use crate::scenario::Scenario;
use crate::topology::Topology;
use testkit::replica::clear_settings;

/// The most replicas a lane may run: each is a full process with its own watches.
pub const MAX_REPLICAS: usize = 64;
/// The wake-up modes a lane can run in: ours, and client-go-like polling at the same timing
/// as the baseline.
pub const WAKEUPS: [&str; 2] = ["watch", "poll"];

/// The most rounds per backend and scenario.
pub const MAX_ROUNDS: usize = 100_000;
/// The most HTTPRoutes the `scale` scenario creates.
pub const MAX_ROUTES: usize = 100_000;

/// Flags of `gateway-leader-bench run`.
#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Lock backend to measure: kubernetes, etcd, redis or all (those three); or a production
    /// topology on its own: etcd-cluster (3 etcd members) or redis-sentinel (a primary, a
    /// replica, 3 Sentinels); repeatable [default: all].
    #[arg(long, value_name = "BACKEND")]
    pub lock_backend: Vec<String>,
    /// Scenario: graceful (SIGTERM), crash (SIGKILL), pause (SIGSTOP past the lease, then
    /// SIGCONT), vanish (the lock record deleted by hand), backend-restart (the lock's server
    /// killed and started again), partition (the leader cut off from the lock's server past the
    /// lease), all of these, or chaos (each round one of them at random); on etcd-cluster also
    /// member-kill, member-freeze, member-cut (the member the leader talks to),
    /// member-kill-raft-leader, member-restart, rolling-restart (an etcd member's fault under a
    /// running leader) and crash-with-member (the leader and its member killed at once); on
    /// redis-sentinel sentinel-failover; repeatable [default: all].
    #[arg(long, value_name = "SCENARIO")]
    pub scenario: Vec<String>,
    /// Wake-up mode to measure: watch (ours), poll (the client-go-like baseline) or all;
    /// repeatable [default: all].
    #[arg(long, value_name = "MODE")]
    pub wakeup: Vec<String>,
    /// Seed of chaos's random draws, to replay a run [default: random, printed].
    #[arg(long, value_name = "N")]
    pub seed: Option<u64>,
    /// Replicas per lock (at least 2).
    #[arg(long, default_value_t = 3, value_name = "N")]
    pub replicas: usize,
    /// Failovers per backend and scenario.
    #[arg(long, default_value_t = 20, value_name = "N")]
    pub rounds: usize,
    /// The replicas' --lease-duration (shorter than run's default, so that a crash round takes
    /// seconds).
    #[arg(long, default_value = "4s", value_name = "DURATION")]
    pub lease_duration: String,
    /// The replicas' --renew-deadline.
    #[arg(long, default_value = "3s", value_name = "DURATION")]
    pub renew_deadline: String,
    /// The replicas' --retry-period.
    #[arg(long, default_value = "1s", value_name = "DURATION")]
    pub retry_period: String,
    /// How long to measure the steady-state cost (requests/s, CPU, memory) of each lane before
    /// its rounds; 0s skips it.
    #[arg(long, default_value = "5s", value_name = "DURATION")]
    pub steady: String,
    /// Where the results (JSON), the replicas' logs and the plot are written.
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
    /// Use this cluster for statuses and the Lease instead of a local kube-apiserver.
    #[arg(long, value_name = "FILE")]
    pub kubeconfig: Option<PathBuf>,
    /// Use these etcd endpoints instead of a local etcd.
    #[arg(long, value_name = "URLS")]
    pub etcd_endpoints: Option<String>,
    /// Use this Redis instead of a local redis-server.
    #[arg(long, value_name = "URL")]
    pub redis_url: Option<String>,
    /// The `gateway-leader` binary the replicas run [default: the one beside this executable].
    #[arg(long, value_name = "FILE")]
    pub binary: Option<PathBuf>,
    /// HTTPRoutes of the `scale` scenario (the burst changes up to 1,000 of them).
    #[arg(long, default_value_t = 1000, value_name = "N")]
    pub routes: usize,
}

/// What to run, checked.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The backends, in order.
    pub backends: Vec<Topology>,
    /// The scenarios, in order.
    pub scenarios: Vec<Scenario>,
    /// The wake-up modes, in order.
    pub wakeups: Vec<&'static str>,
    /// The seed of chaos's draws.
    pub seed: u64,
    /// Replicas per lane.
    pub replicas: usize,
    /// Rounds per backend and scenario.
    pub rounds: usize,
    /// The replicas' timing.
    pub timing: Timing,
    /// The timing flags as given, passed on to the replicas.
    pub timing_args: Vec<String>,
    /// The steady-state window (zero: not measured).
    pub steady: Duration,
    /// The output dir.
    pub out: PathBuf,
    /// `--kubeconfig`.
    pub kubeconfig: Option<PathBuf>,
    /// Existing lock servers.
    pub endpoints: Endpoints,
    /// HTTPRoutes of the `scale` scenario.
    pub routes: usize,
}

/// Expands repeatable values with `all`, keeping the order of first mention and no duplicate.
fn pick<T: PartialEq + Copy>(
    flag: &str,
    given: &[String],
    all: &[T],
    parse: impl Fn(&str) -> Option<T>,
    names: &str,
) -> Result<Vec<T>, String> {
    if given.is_empty() {
        return Ok(all.to_vec());
    }
    let mut out = Vec::new();
    for v in given {
        let items = if v == "all" {
            all.to_vec()
        } else {
            vec![parse(v).ok_or_else(|| format!("{flag} {v:?}: accepted: {names}, all"))?]
        };
        for i in items {
            if !out.contains(&i) {
                out.push(i);
            }
        }
    }
    Ok(out)
}

impl BenchArgs {
    /// Checks every flag, with the same rules `run` applies to each backend's settings, before
    /// anything starts. The error is one line naming the flag.
    pub fn plan(&self) -> Result<Plan, String> {
        let backends = pick(
            "--lock-backend",
            &self.lock_backend,
            &Topology::ALL,
            Topology::parse,
            Topology::NAMES,
        )?;
        let scenarios = pick(
            "--scenario",
            &self.scenario,
            &Scenario::ALL,
            Scenario::parse,
            Scenario::NAMES,
        )?;
        let wakeups = pick(
            "--wakeup",
            &self.wakeup,
            &WAKEUPS,
            |w| WAKEUPS.into_iter().find(|x| *x == w),
            "watch, poll",
        )?;
        let restarts = scenarios
            .iter()
            .any(|s| matches!(s, Scenario::BackendRestart | Scenario::Chaos));
        let partitions = scenarios.iter().any(|s| s.needs_proxy());
        if restarts || partitions {
            let what = if restarts {
                "backend-restart and chaos restart"
            } else {
                "partition proxies"
            };
            let given = [
                (
                    Topology::Kubernetes,
                    "--kubeconfig",
                    self.kubeconfig.is_some(),
                ),
                (
                    Topology::Etcd,
                    "--etcd-endpoints",
                    self.etcd_endpoints.is_some() && restarts,
                ),
                (
                    Topology::Redis,
                    "--redis-url",
                    self.redis_url.is_some() && restarts,
                ),
            ];
            for (b, flag, is_given) in given {
                if is_given && backends.contains(&b) {
                    return Err(format!(
                        "--scenario: {what} the bench's own {b} server; \
                         drop {flag} or that scenario"
                    ));
                }
            }
        }
        // The member faults need the bench's own etcd cluster, and only that lane can run them.
        if let Some(m) = scenarios.iter().find(|s| s.needs_members()) {
            if backends != [Topology::EtcdCluster] {
                return Err(format!(
                    "--scenario {m}: faults an etcd member; give --lock-backend etcd-cluster \
                     (and no other backend)"
                ));
            }
        }
        if scenarios.contains(&Scenario::SentinelFailover) && backends != [Topology::RedisSentinel]
        {
            return Err(
                "--scenario sentinel-failover: fails the Redis primary over; give \
                 --lock-backend redis-sentinel (and no other backend)"
                    .into(),
            );
        }
        if backends.contains(&Topology::RedisSentinel) {
            if self.redis_url.is_some() {
                return Err(
                    "--lock-backend redis-sentinel: the bench starts its own primary, replica and \
                     Sentinels; drop --redis-url"
                        .into(),
                );
            }
            if let Some(s) = scenarios.iter().find(|s| {
                !matches!(
                    s,
                    Scenario::SentinelFailover | Scenario::Graceful | Scenario::Crash
                )
            }) {
                return Err(format!(
                    "--scenario {s}: not on redis-sentinel; accepted there: sentinel-failover, \
                     graceful, crash"
                ));
            }
        }
        if backends.contains(&Topology::EtcdCluster) {
            if let Some(s) = scenarios
                .iter()
                .find(|s| matches!(s, Scenario::BackendRestart | Scenario::Chaos))
            {
                return Err(format!(
                    "--scenario {s}: not on etcd-cluster (its members restart one at a time: \
                     member-restart, rolling-restart)"
                ));
            }
        }
        if backends.contains(&Topology::EtcdCluster) && self.etcd_endpoints.is_some() {
            return Err(
                "--lock-backend etcd-cluster: the bench starts its own 3-member cluster; \
                 drop --etcd-endpoints"
                    .into(),
            );
        }
        if scenarios.contains(&Scenario::Scale) && scenarios.len() > 1 {
            return Err("--scenario scale: runs alone; give it without other scenarios".into());
        }
        if !(1..=MAX_ROUTES).contains(&self.routes) {
            return Err(format!(
                "--routes {}: accepted: 1 to {MAX_ROUTES}",
                self.routes
            ));
        }
        if !(2..=MAX_REPLICAS).contains(&self.replicas) {
            return Err(format!(
                "--replicas {}: accepted: 2 to {MAX_REPLICAS} (a failover needs a follower)",
                self.replicas
            ));
        }
        if !(1..=MAX_ROUNDS).contains(&self.rounds) {
            return Err(format!(
                "--rounds {}: accepted: 1 to {MAX_ROUNDS}",
                self.rounds
            ));
        }
        let duration = |flag: &str, v: &str| parse_duration(v).map_err(|e| format!("{flag}: {e}"));
        let timing = Timing::new(
            duration("--lease-duration", &self.lease_duration)?,
            duration("--renew-deadline", &self.renew_deadline)?,
            duration("--retry-period", &self.retry_period)?,
        )
        .map_err(|e| format!("--{e}"))?;
        let steady =
            parse_duration(&self.steady).map_err(|e| format!("--steady {:?}: {e}", self.steady))?;
        if steady > Duration::from_secs(3600) {
            return Err(format!("--steady {:?}: accepted: 0s to 1h", self.steady));
        }
        if let Some(k) = &self.kubeconfig {
            if !k.is_file() {
                return Err(format!("--kubeconfig {}: not a file", k.display()));
            }
        }
        Ok(Plan {
            backends,
            scenarios,
            wakeups,
            seed: self.seed.unwrap_or_else(rand::random),
            replicas: self.replicas,
            rounds: self.rounds,
            timing,
            timing_args: vec![
                "--lease-duration".into(),
                self.lease_duration.clone(),
                "--renew-deadline".into(),
                self.renew_deadline.clone(),
                "--retry-period".into(),
                self.retry_period.clone(),
            ],
            steady,
            out: self.out.clone(),
            kubeconfig: self.kubeconfig.clone(),
            endpoints: Endpoints {
                etcd: self.etcd_endpoints.clone(),
                redis: self.redis_url.clone(),
            },
            routes: self.routes,
        })
    }
}

impl BenchArgs {
    /// The `gateway-leader` binary the replicas run: `--binary`, else the one beside this
    /// executable (cargo builds both into the same target dir).
    pub fn binary(&self) -> Result<PathBuf, String> {
        let path = match &self.binary {
            Some(p) => p.clone(),
            None => std::env::current_exe()
                .map_err(|e| format!("cannot find my own executable: {e}"))?
                .with_file_name("gateway-leader"),
        };
        if !path.is_file() {
            return Err(format!(
                "--binary {}: not a file; build it with `cargo build --release -p gateway-leader` \
                 or name it with --binary",
                path.display()
            ));
        }
        Ok(path)
    }

    /// Asks `binary` itself whether each backend's replicas will start with these settings
    /// (`run --print-config` checks every setting and touches no lock), so a bad value is named
    /// before any server starts, in the words `run` would use.
    pub fn check_replica_settings(&self, plan: &Plan, binary: &Path) -> Result<(), String> {
        for b in &plan.backends {
            let mut cmd = Command::new(binary);
            cmd.args([
                "run",
                "--print-config",
                "--lock-backend",
                b.lock_backend().name(),
            ])
            .args(&plan.timing_args)
            .args(["--leader-election-identity", "bench"])
            .args(["--leader-election-namespace", "bench"]);
            let given = [
                (
                    "--kubeconfig",
                    self.kubeconfig.as_ref().map(|p| p.display().to_string()),
                ),
                ("--etcd-endpoints", self.etcd_endpoints.clone()),
                ("--redis-url", self.redis_url.clone()),
            ];
            for (flag, value) in given {
                if let Some(v) = value {
                    cmd.args([flag, &v]);
                }
            }
            // As the replicas get none of the user's settings, neither does the check.
            let out = clear_settings(&mut cmd)
                .stdin(Stdio::null())
                .output()
                .map_err(|e| format!("--binary {}: cannot run it: {e}", binary.display()))?;
            if !out.status.success() {
                let said = String::from_utf8_lossy(&out.stderr);
                let said = said.trim().trim_start_matches("gateway-leader: ");
                return Err(format!("{b}: {said}"));
            }
        }
        Ok(())
    }
}

impl Plan {
    /// Whether each replica needs its own proxy to the lock's server.
    pub fn needs_proxy(&self) -> bool {
        self.scenarios.iter().any(|s| s.needs_proxy())
    }

    /// How long a round may wait for a new leader: a lease, the server's expiry tick, a retry
    /// period of polling, and room for a busy machine.
    pub fn leader_patience(&self) -> Duration {
        self.timing.lease_duration * 3 + self.timing.retry_period * 2 + Duration::from_secs(10)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        bench: BenchArgs,
    }

    fn plan(args: &[&str]) -> Result<Plan, String> {
        let cli = Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied()))
            .map_err(|e| e.to_string())?;
        cli.bench.plan()
    }

    #[test]
    fn defaults_and_all() {
        let p = plan(&[]).expect("defaults are valid");
        assert_eq!(p.backends.len(), 3);
        assert_eq!(p.scenarios, Scenario::ALL.to_vec());
        assert_eq!((p.replicas, p.rounds), (3, 20));
        let p = plan(&["--lock-backend", "redis", "--lock-backend", "all"]).expect("valid");
        assert_eq!(
            p.backends,
            vec![Topology::Redis, Topology::Kubernetes, Topology::Etcd]
        );
    }

    #[test]
    fn bad_input_names_the_flag() {
        let e = plan(&["--scenario", "nap"]).unwrap_err();
        assert!(e.contains("--scenario \"nap\""), "{e}");
        let e = plan(&["--replicas", "1"]).unwrap_err();
        assert!(e.contains("--replicas 1"), "{e}");
        let e = plan(&["--renew-deadline", "5s"]).unwrap_err();
        assert!(
            e.contains("--lease-duration (4s) must be greater than renew-deadline (5s)"),
            "{e}"
        );
        let e = plan(&["--retry-period", "soon"]).unwrap_err();
        assert!(
            e.starts_with("--retry-period: \"soon\" is not a duration"),
            "{e}"
        );
        let e = plan(&["--wakeup", "sometimes"]).unwrap_err();
        assert!(
            e.contains("--wakeup \"sometimes\": accepted: watch, poll, all"),
            "{e}"
        );
    }

    #[test]
    fn restarts_and_partitions_need_the_benchs_own_servers() {
        let e = plan(&["--scenario", "chaos", "--redis-url", "redis://127.0.0.1:1"]).unwrap_err();
        assert!(e.contains("drop --redis-url"), "{e}");
        // A partition proxies a given Redis as well as a local one.
        let p = plan(&[
            "--scenario",
            "partition",
            "--lock-backend",
            "redis",
            "--redis-url",
            "redis://127.0.0.1:1",
        ]);
        assert!(p.is_ok(), "{p:?}");
        let p = plan(&["--scenario", "chaos", "--wakeup", "watch", "--seed", "7"]).expect("valid");
        assert_eq!(
            (p.scenarios, p.wakeups, p.seed),
            (vec![Scenario::Chaos], vec!["watch"], 7)
        );
        assert!(plan(&["--scenario", "all"]).expect("valid").needs_proxy());
        assert!(!plan(&["--scenario", "crash"]).expect("valid").needs_proxy());
    }

    #[test]
    fn member_faults_need_the_etcd_cluster_lane_alone() {
        let e = plan(&["--scenario", "member-kill"]).unwrap_err();
        assert!(e.contains("--lock-backend etcd-cluster"), "{e}");
        let e = plan(&["--scenario", "member-cut", "--lock-backend", "etcd"]).unwrap_err();
        assert!(e.contains("--scenario member-cut"), "{e}");
        let e = plan(&["--scenario", "crash-with-member"]).unwrap_err();
        assert!(e.contains("--lock-backend etcd-cluster"), "{e}");
        let p = plan(&[
            "--lock-backend",
            "etcd-cluster",
            "--scenario",
            "member-freeze",
            "--scenario",
            "rolling-restart",
            "--scenario",
            "crash",
        ])
        .expect("valid");
        assert_eq!(p.backends, vec![Topology::EtcdCluster]);
        assert_eq!(p.scenarios.len(), 3);
        let e = plan(&[
            "--lock-backend",
            "etcd-cluster",
            "--scenario",
            "crash",
            "--etcd-endpoints",
            "http://127.0.0.1:1",
        ])
        .unwrap_err();
        assert!(e.contains("drop --etcd-endpoints"), "{e}");
        let e = plan(&["--lock-backend", "etcd-cluster"]).unwrap_err();
        assert!(
            e.contains("--scenario backend-restart: not on etcd-cluster"),
            "{e}"
        );
    }

    #[test]
    fn the_sentinel_failover_needs_the_sentinel_lane_alone() {
        let e = plan(&["--scenario", "sentinel-failover"]).unwrap_err();
        assert!(e.contains("--lock-backend redis-sentinel"), "{e}");
        let e = plan(&["--lock-backend", "redis-sentinel", "--scenario", "pause"]).unwrap_err();
        assert!(e.contains("--scenario pause: not on redis-sentinel"), "{e}");
        let p = plan(&[
            "--lock-backend",
            "redis-sentinel",
            "--scenario",
            "sentinel-failover",
            "--scenario",
            "crash",
        ])
        .expect("valid");
        assert_eq!(p.backends, vec![Topology::RedisSentinel]);
        assert_eq!(
            p.scenarios,
            vec![Scenario::SentinelFailover, Scenario::Crash]
        );
    }
}
