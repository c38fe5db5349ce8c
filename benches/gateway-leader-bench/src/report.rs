//! The results: a table per backend × scenario on stdout, and every sample as JSON.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::anchor::{Anchor, Start};
use crate::checker::Verdict;
use crate::cost::Cost;
use crate::round::Sample;
use crate::stats::Summary;

/// The rounds of one scenario in one lane.
#[derive(Debug, Clone, Serialize)]
pub struct ScenarioResult {
    /// The backend.
    pub backend: String,
    /// How followers wake up: `watch` (ours) or `poll` (client-go-like).
    pub wakeup: String,
    /// The scenario.
    pub scenario: String,
    /// Every round.
    pub samples: Vec<Sample>,
}

impl ScenarioResult {
    /// Signal → the stopped leader's release returned (graceful), over the rounds that have it.
    pub fn to_released(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_released_ms))
    }

    /// Signal → the stopped leader sent its release (graceful), over the rounds that have it.
    pub fn to_release_sent(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_release_sent_ms))
    }

    /// Signal → new leader, over the rounds that have it.
    pub fn to_leader(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_leader_ms))
    }

    /// Signal → first status write, over the rounds that count.
    pub fn to_write(&self) -> Option<Summary> {
        Summary::over(self.samples.iter().filter_map(|s| s.to_write_ms))
    }

    /// The stopped leader's release sent → new leader (graceful), over the rounds that have both.
    pub fn sent_to_leader(&self) -> Option<Summary> {
        self.since_release_sent(|s| s.to_leader_ms)
    }

    /// The stopped leader's release sent → first status write (graceful), over the rounds that
    /// have both.
    pub fn sent_to_write(&self) -> Option<Summary> {
        self.since_release_sent(|s| s.to_write_ms)
    }

    fn since_release_sent(&self, to: impl Fn(&Sample) -> Option<f64>) -> Option<Summary> {
        Summary::over(
            self.samples
                .iter()
                .filter_map(|s| Some(to(s)? - s.to_release_sent_ms?)),
        )
    }

    /// Rounds in which the stopping leader wrote the change itself.
    pub fn old_leader_wrote(&self) -> usize {
        self.samples.iter().filter(|s| s.old_leader_wrote).count()
    }

    /// Under a member fault: the rounds in which the leading replica stepped down, out of those
    /// that say; `None` for the scenarios that stop the leader themselves.
    pub fn step_downs(&self) -> Option<(usize, usize)> {
        let said: Vec<bool> = self.samples.iter().filter_map(|s| s.stepped_down).collect();
        (!said.is_empty()).then(|| (said.iter().filter(|s| **s).count(), said.len()))
    }

    /// Rounds that did not finish.
    pub fn errors(&self) -> usize {
        self.samples.iter().filter(|s| s.error.is_some()).count()
    }
}

/// The checker's verdict on one lane.
#[derive(Debug, Clone, Serialize)]
pub struct LaneVerdict {
    /// The backend.
    pub backend: String,
    /// The wake-up mode.
    pub wakeup: String,
    /// What the checker found.
    pub verdict: Verdict,
}

/// The machine the figures were taken on.
#[derive(Debug, Clone, Serialize)]
pub struct Machine {
    /// CPUs online.
    pub cpus: usize,
    /// The CPU model, from /proc/cpuinfo.
    pub cpu_model: String,
    /// The kernel release.
    pub kernel: String,
}

impl Machine {
    /// Reads what the system tells.
    pub fn read() -> Machine {
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu_model = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, m)| m.trim().to_string())
            .unwrap_or_default();
        Machine {
            cpus: std::thread::available_parallelism().map_or(0, |n| n.get()),
            cpu_model,
            kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
                .unwrap_or_default()
                .trim()
                .to_string(),
        }
    }
}

/// Everything one `bench` run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The machine.
    pub machine: Machine,
    /// The apiserver's version (`/version`'s `gitVersion`), when it answered.
    pub apiserver: Option<String>,
    /// Replicas per lane.
    pub replicas: usize,
    /// The timing flags given to the replicas.
    pub timing: Vec<String>,
    /// The seed of chaos's draws, when chaos ran.
    pub seed: Option<u64>,
    /// Every scenario of every lane.
    pub results: Vec<ScenarioResult>,
    /// Other tools timed beside a backend × scenario (`etcdctl elect` beside etcd × graceful).
    pub anchors: Vec<Anchor>,
    /// The checker's verdicts.
    pub verdicts: Vec<LaneVerdict>,
    /// The steady-state cost of each lane.
    pub costs: Vec<Cost>,
}

fn row(out: &mut String, label: &str, s: Option<Summary>) {
    match s {
        Some(s) => {
            let _ = writeln!(
                out,
                "  {label:<42} {:>4} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                s.n, s.min, s.p50, s.p90, s.p99, s.max
            );
        }
        None => {
            let _ = writeln!(out, "  {label:<42} {:>4}", 0);
        }
    }
}

fn ratio(out: &mut String, label: &str, ours: Option<Summary>, poll: Option<Summary>) {
    if let (Some(o), Some(p)) = (ours, poll) {
        let r = |a: f64, b: f64| if a > 0.0 { b / a } else { f64::NAN };
        let _ = writeln!(
            out,
            "  {label:<42} {:>4} {:>9} {:>8.1}× {:>9} {:>8.1}×",
            "",
            "",
            r(o.p50, p.p50),
            "",
            r(o.p99, p.p99)
        );
    }
}

impl Report {
    /// The number of violations over every lane.
    pub fn violations(&self) -> usize {
        self.verdicts
            .iter()
            .map(|v| v.verdict.violations.len())
            .sum()
    }

    /// The tables, one per backend × scenario, our figures beside the polling baseline's.
    pub fn tables(&self) -> String {
        let mut out = String::new();
        if let Some(v) = &self.apiserver {
            let _ = writeln!(out, "kube-apiserver {v}");
        }
        let mut keys: Vec<(&str, &str)> = Vec::new();
        for r in &self.results {
            if !keys.contains(&(r.backend.as_str(), r.scenario.as_str())) {
                keys.push((&r.backend, &r.scenario));
            }
        }
        for (backend, scenario) in keys {
            let title = format!("{backend} × {scenario}");
            let _ = writeln!(
                out,
                "\n{title:<44} {:>4} {:>9} {:>9} {:>9} {:>9} {:>9}   (ms)",
                "n", "min", "p50", "p90", "p99", "max"
            );
            let of = |w: &str| {
                self.results
                    .iter()
                    .find(|r| r.backend == backend && r.scenario == scenario && r.wakeup == w)
            };
            let (watch, poll) = (of("watch"), of("poll"));
            // The release comes first, and only where a leader releases (graceful); its two
            // lanes release the same way, so there is no ratio to give.
            for r in [watch, poll].into_iter().flatten() {
                if r.samples.iter().any(|s| s.to_release_sent_ms.is_some()) {
                    row(
                        &mut out,
                        &format!("signal → release sent ({})", r.wakeup),
                        r.to_release_sent(),
                    );
                }
                if r.samples.iter().any(|s| s.to_released_ms.is_some()) {
                    row(
                        &mut out,
                        &format!("signal → lock released ({})", r.wakeup),
                        r.to_released(),
                    );
                }
            }
            for (what, get) in [
                (
                    "signal → new leader",
                    ScenarioResult::to_leader as fn(&_) -> _,
                ),
                ("signal → first status write", ScenarioResult::to_write),
            ] {
                if let Some(w) = watch {
                    row(&mut out, &format!("{what} (watch)"), get(w));
                }
                if let Some(p) = poll {
                    row(&mut out, &format!("{what} (poll)"), get(p));
                }
                if let (Some(w), Some(p)) = (watch, poll) {
                    ratio(&mut out, "  poll / watch (p50, p99)", get(w), get(p));
                }
            }
            for a in self
                .anchors
                .iter()
                .filter(|a| a.backend == backend && a.scenario == scenario)
            {
                // An anchor that counts from elsewhere than the signal gets ours from there too.
                if a.from == Start::ReleaseSent {
                    if let Some(w) = watch {
                        row(
                            &mut out,
                            "release sent → new leader (watch)",
                            w.sent_to_leader(),
                        );
                        row(
                            &mut out,
                            "release sent → first status write (watch)",
                            w.sent_to_write(),
                        );
                    }
                }
                let _ = writeln!(out, "  anchor: {}", a.tool);
                for (what, get) in [
                    ("lock released", Anchor::to_released as fn(&_) -> _),
                    ("new leader", Anchor::to_leader),
                    ("first status write", Anchor::to_write),
                ] {
                    if let Some(s) = get(a) {
                        row(&mut out, &format!("  {} → {what}", a.from), Some(s));
                    }
                }
                if a.errors() > 0 {
                    let _ = writeln!(
                        out,
                        "  ({}: {} round(s) did not finish; see the JSON)",
                        a.tool,
                        a.errors()
                    );
                }
            }
            for r in [watch, poll].into_iter().flatten() {
                let (wrote, errors) = (r.old_leader_wrote(), r.errors());
                if let Some((down, of)) = r.step_downs() {
                    let _ = writeln!(
                        out,
                        "  ({}: the leading replica stepped down in {down} of {of} round(s); \
                         \"signal\" is the fault)",
                        r.wakeup
                    );
                }
                if wrote > 0 {
                    let _ = writeln!(
                        out,
                        "  ({}: {wrote} round(s) not counted for the write: \
                         the stopping leader wrote the change itself)",
                        r.wakeup
                    );
                }
                if errors > 0 {
                    let _ = writeln!(
                        out,
                        "  ({}: {errors} round(s) did not finish; see the JSON)",
                        r.wakeup
                    );
                }
            }
        }
        let _ = writeln!(out);
        for c in &self.costs {
            let _ = writeln!(
                out,
                "steady state, {} ({}), {:.0} s, {} replicas: {} backend requests/s, {} per \
                 renewal ({} renewals) [{}]; leader CPU {:.2} % RSS {:.1} MiB; followers (mean) \
                 CPU {:.2} % RSS {:.1} MiB",
                c.backend,
                c.wakeup,
                c.window_s,
                self.replicas,
                c.requests_per_s
                    .map_or("n/a".to_string(), |r| format!("{r:.1}")),
                c.requests_per_renewal
                    .map_or("n/a".to_string(), |r| format!("{r:.2}")),
                c.renewals.map_or("n/a".to_string(), |n| n.to_string()),
                c.counted_by,
                c.leader_cpu_pct,
                c.leader_rss_mib,
                c.follower_cpu_pct,
                c.follower_rss_mib
            );
        }
        if !self.costs.is_empty() {
            let _ = writeln!(out);
        }
        for v in &self.verdicts {
            let _ = writeln!(
                out,
                "split-brain checker, {} ({}): {} leaderships, {} writes, {} violation(s){}{}",
                v.backend,
                v.wakeup,
                v.verdict.leaderships,
                v.verdict.writes,
                v.verdict.violations.len(),
                match v.verdict.findings.len() {
                    0 => String::new(),
                    n => format!(", {n} finding(s) about the peers"),
                },
                v.verdict
                    .min_gap_ms
                    .map(|g| format!("; smallest gap between leaderships {g:.1} ms"))
                    .unwrap_or_default()
            );
            for m in &v.verdict.violations {
                let _ = writeln!(out, "  VIOLATION: {m}");
            }
            for m in &v.verdict.findings {
                let _ = writeln!(out, "  finding: {m}");
            }
        }
        out
    }

    /// Writes `results.json` into `dir`.
    pub fn write_json(&self, dir: &Path) -> Result<std::path::PathBuf> {
        let path = dir.join("results.json");
        let text = serde_json::to_vec_pretty(self).context("encoding the results")?;
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
        Ok(path)
    }
}
