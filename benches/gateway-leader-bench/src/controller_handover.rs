//! `gateway-leader-bench controller-handover`: how soon a controller's own election hands over,
//! natively and driven by our lock through `gateway-leader proxy --proxy-election-lease`
//! (docs/benchmarks.md, "A controller's own election, driven by ours").
//!
//! The controller is client-go's `leaderelection` (testkit/peers' client-go-elector,
//! ReleaseOnCancel), two replicas on one throwaway kube-apiserver. Each round starts both
//! replicas afresh on a Lease of its own, waits until one controller leads and the other follows,
//! then signals the leading replica (its controller, and its proxy where there is one): SIGTERM
//! for a graceful stop, SIGKILL for a crash. A round's figure is from the signal to the other
//! controller's `started leading`, both on CLOCK_MONOTONIC.
//!
//! Modes: `native` (the controller's election on the apiserver, the anchor), `driven` (behind
//! the proxy, the controller's timings as given), `driven-fast` (the same with the controller's
//! retry period at 500 ms, which docs/sidecar.md recommends). Our lock and the native election
//! use the same timing (`--lease-duration`, `--renew-deadline`, `--retry-period`).

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use clap::Args;
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;
use testkit::kube::KubeApiServer;

use crate::args::MAX_ROUNDS;
use crate::stats::Summary;
use crate::EXIT_USAGE;

/// How long any one step of a round may take before the round fails.
const PATIENCE: Duration = Duration::from_secs(120);
/// How long both replicas are left once they agree, before the signal.
const SETTLE: Duration = Duration::from_secs(2);
/// The namespace of the Leases.
const NAMESPACE: &str = "default";

/// `gateway-leader-bench controller-handover`'s flags.
#[derive(Debug, Args)]
pub struct ControllerHandoverArgs {
    /// Handovers per mode and kind (graceful, crash).
    #[arg(long, default_value_t = 5, value_name = "N")]
    pub rounds: usize,
    /// The lease duration of our lock, of the native election and of the controller behind the
    /// proxy.
    #[arg(long, default_value = "15s", value_name = "DURATION")]
    pub lease_duration: String,
    /// Their renew deadline.
    #[arg(long, default_value = "10s", value_name = "DURATION")]
    pub renew_deadline: String,
    /// Their retry period (`driven-fast` gives its controller 500 ms).
    #[arg(long, default_value = "2s", value_name = "DURATION")]
    pub retry_period: String,
    /// The `gateway-leader` binary (default: the one beside this executable).
    #[arg(long, value_name = "PATH")]
    pub binary: Option<PathBuf>,
    /// Which modes, comma-separated: native, driven, driven-fast.
    #[arg(long, default_value = "native,driven,driven-fast", value_name = "LIST")]
    pub modes: String,
    /// Which stops, comma-separated: graceful, crash.
    #[arg(long, default_value = "graceful,crash", value_name = "LIST")]
    pub stops: String,
    /// Where every process's lines are kept (`logs/controller-handover/ROUND-PROCESS.log`).
    #[arg(long, default_value = "bench-out", value_name = "DIR")]
    pub out: PathBuf,
}

/// One way to run the controller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Native,
    Driven,
    DrivenFast,
}

impl Mode {
    const ALL: [Mode; 3] = [Mode::Native, Mode::Driven, Mode::DrivenFast];

    fn parse(s: &str) -> Result<Mode, String> {
        Mode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| format!("{s:?}; accepted: native, driven, driven-fast"))
    }

    fn name(self) -> &'static str {
        match self {
            Mode::Native => "native",
            Mode::Driven => "driven",
            Mode::DrivenFast => "driven-fast",
        }
    }
}

/// Runs the subcommand; 0, 1 (a round failed) or 2 (bad input, nothing started).
pub fn main(args: ControllerHandoverArgs) -> ExitCode {
    let checked = check(&args);
    let (binary, timing, plan) = match checked {
        Ok(c) => c,
        Err(e) => {
            eprintln!("gateway-leader-bench controller-handover: {e}");
            return ExitCode::from(EXIT_USAGE);
        }
    };
    let logs = args.out.join("logs").join("controller-handover");
    crate::on_two_workers(
        "controller-handover",
        run(&binary, &timing, &plan, args.rounds, &logs),
    )
}

/// The timing, as the Go peers and our flags both read it.
struct Timing {
    lease: String,
    renew: String,
    retry: String,
}

/// The modes and stops to time, in order.
struct Plan {
    modes: Vec<Mode>,
    stops: Vec<(&'static str, Signal)>,
}

fn check(args: &ControllerHandoverArgs) -> Result<(PathBuf, Timing, Plan), String> {
    let modes = args
        .modes
        .split(',')
        .map(|m| Mode::parse(m.trim()).map_err(|e| format!("--modes: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    let stops = args
        .stops
        .split(',')
        .map(|s| match s.trim() {
            "graceful" => Ok(("graceful", Signal::SIGTERM)),
            "crash" => Ok(("crash", Signal::SIGKILL)),
            other => Err(format!("--stops: {other:?}; accepted: graceful, crash")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    if !(1..=MAX_ROUNDS).contains(&args.rounds) {
        return Err(format!(
            "--rounds {}: accepted: 1 to {MAX_ROUNDS}",
            args.rounds
        ));
    }
    let mut parsed = Vec::new();
    for (flag, v) in [
        ("--lease-duration", &args.lease_duration),
        ("--renew-deadline", &args.renew_deadline),
        ("--retry-period", &args.retry_period),
    ] {
        let d =
            gateway_leader::config::parse_duration(v).map_err(|e| format!("{flag} {v}: {e}"))?;
        parsed.push(d);
    }
    leader_lock::Timing::new(parsed[0], parsed[1], parsed[2]).map_err(|e| e.to_string())?;
    let go = |d: Duration| format!("{}ms", d.as_millis());
    let binary = match &args.binary {
        Some(p) => p.clone(),
        None => std::env::current_exe()
            .map_err(|e| format!("cannot find my own executable: {e}"))?
            .with_file_name("gateway-leader"),
    };
    if !binary.is_file() {
        return Err(format!(
            "--binary {}: not a file; build it with `cargo build --release -p gateway-leader` or \
             name it with --binary",
            binary.display()
        ));
    }
    Ok((
        binary,
        Timing {
            lease: go(parsed[0]),
            renew: go(parsed[1]),
            retry: go(parsed[2]),
        },
        Plan { modes, stops },
    ))
}

async fn run(
    binary: &Path,
    timing: &Timing,
    plan: &Plan,
    rounds: usize,
    logs: &Path,
) -> Result<()> {
    std::fs::create_dir_all(logs).with_context(|| format!("creating {}", logs.display()))?;
    let peers = testkit::built::peers()?;
    let server = KubeApiServer::start_local()
        .await
        .context("starting kube-apiserver")?;
    let dir = tempfile::tempdir().context("a directory for the kubeconfigs")?;
    let mut results: Vec<(Mode, &str, Vec<f64>)> = Vec::new();
    let mut n = 0;
    for &mode in &plan.modes {
        for &(kind, signal) in &plan.stops {
            let mut samples = Vec::new();
            for round in 0..rounds {
                n += 1;
                let setup = Setup {
                    binary,
                    peers: &peers,
                    server: &server,
                    dir: dir.path(),
                    timing,
                    lease: format!("ctl-{n}"),
                    logs,
                };
                let ms = setup
                    .round(mode, signal)
                    .with_context(|| format!("{} {kind} round {}", mode.name(), round + 1))?;
                eprintln!("{} {kind} round {}: {ms:.0} ms", mode.name(), round + 1);
                samples.push(ms);
            }
            results.push((mode, kind, samples));
        }
    }
    println!(
        "signal to the other controller's `started leading`, ms (lease {} / renew {} / retry {}; \
         driven-fast: the controller's retry 500ms)",
        timing.lease, timing.renew, timing.retry
    );
    println!("| mode | stop | n | p50 | p90 | max |");
    println!("|---|---|---|---|---|---|");
    for (mode, kind, samples) in results {
        let s = Summary::of(&samples).ok_or_else(|| anyhow!("no samples"))?;
        println!(
            "| {} | {kind} | {} | {:.0} | {:.0} | {:.0} |",
            mode.name(),
            samples.len(),
            s.p50,
            s.p90,
            s.max
        );
    }
    Ok(())
}

/// What every round shares.
struct Setup<'a> {
    binary: &'a Path,
    peers: &'a Path,
    server: &'a KubeApiServer,
    dir: &'a Path,
    timing: &'a Timing,
    lease: String,
    logs: &'a Path,
}

/// One replica: its controller, and its proxy in the driven modes.
struct Pod {
    controller: Process,
    proxy: Option<Process>,
}

impl Setup<'_> {
    /// Starts two replicas, waits until one's controller leads and the other's follows it,
    /// signals the leader's, and returns the milliseconds to the other's `started leading`.
    fn round(&self, mode: Mode, signal: Signal) -> Result<f64> {
        let mut pods = Vec::new();
        for name in ["a", "b"] {
            pods.push(self.pod(mode, name)?);
        }
        let until = Instant::now() + PATIENCE;
        let leader = loop {
            if let Some(i) = pods
                .iter_mut()
                .position(|p| p.controller.saw("started leading"))
            {
                break i;
            }
            if Instant::now() > until {
                bail!("no controller led");
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        let follower = 1 - leader;
        pods[follower]
            .controller
            .wait(PATIENCE, |v| {
                v["event"] == "following" && v["holder"].as_str().is_some_and(|h| !h.is_empty())
            })
            .context("the other controller following")?;
        std::thread::sleep(SETTLE);
        if pods[follower].controller.saw("started leading") {
            bail!("both controllers lead");
        }
        let at = leader_lock::clock::mono_ms();
        pods[leader].controller.signal(signal);
        if let Some(p) = &pods[leader].proxy {
            p.signal(signal);
        }
        let led = pods[follower]
            .controller
            .wait(PATIENCE, |v| v["event"] == "started leading")
            .context("the other controller leading")?;
        let ms = led["mono_ms"]
            .as_f64()
            .ok_or_else(|| anyhow!("no mono_ms"))?
            - at;
        Ok(ms)
    }

    fn pod(&self, mode: Mode, name: &str) -> Result<Pod> {
        let t = self.timing;
        let (kubeconfig, proxy) = match mode {
            Mode::Native => (self.server.kubeconfig_path().to_path_buf(), None),
            Mode::Driven | Mode::DrivenFast => {
                let port = testkit::process::free_port()?;
                let addr: SocketAddr = ([127, 0, 0, 1], port).into();
                let mut cmd = Command::new(self.binary);
                cmd.arg("proxy")
                    .args(["--lock-backend", "kubernetes", "--kubeconfig"])
                    .arg(self.server.kubeconfig_path())
                    .args(["--leader-election-namespace", NAMESPACE])
                    .args([
                        "--leader-election-lock-name",
                        &format!("{}-lock", self.lease),
                    ])
                    .args(["--leader-election-identity", &format!("proxy-{name}")])
                    .args(["--lease-duration", &t.lease, "--renew-deadline", &t.renew])
                    .args(["--retry-period", &t.retry])
                    .args(["--proxy-listen", &addr.to_string()])
                    .args([
                        "--proxy-election-lease",
                        &format!("{NAMESPACE}/{}", self.lease),
                    ])
                    .args(["--health-addr", "127.0.0.1:0", "--log-format", "json"])
                    .env("RUST_LOG", "info");
                testkit::replica::clear_settings(&mut cmd);
                let log = self.logs.join(format!("{}-proxy-{name}.log", self.lease));
                let mut proxy = Process::spawn(cmd, true, &log)?;
                proxy
                    .wait(PATIENCE, |v| {
                        v["fields"]["message"] == gateway_leader_log::message::PROXY_SERVING
                            || v["message"] == gateway_leader_log::message::PROXY_SERVING
                    })
                    .with_context(|| format!("proxy-{name} serving"))?;
                let path = self.dir.join(format!("{}-{name}.kubeconfig", self.lease));
                std::fs::write(&path, gateway_leader::proxy::kubeconfig(addr))?;
                (path, Some(proxy))
            }
        };
        let retry = match mode {
            Mode::DrivenFast => "500ms",
            _ => t.retry.as_str(),
        };
        let mut cmd = Command::new(self.peers.join(testkit::built::CLIENT_GO_ELECTOR));
        cmd.arg(format!("--kubeconfig={}", kubeconfig.display()))
            .arg(format!("--namespace={NAMESPACE}"))
            .arg(format!("--lease={}", self.lease))
            .arg(format!("--identity=ctl-{name}"))
            .arg(format!("--write-configmap={}-{name}", self.lease))
            .arg("--write-every=1s")
            .arg(format!("--lease-duration={}", t.lease))
            .arg(format!("--renew-deadline={}", t.renew))
            .arg(format!("--retry-period={retry}"))
            .env_remove("KUBECONFIG");
        let log = self
            .logs
            .join(format!("{}-controller-{name}.log", self.lease));
        Ok(Pod {
            controller: Process::spawn(cmd, false, &log)?,
            proxy,
        })
    }
}

/// A child whose JSON lines are read as they come; killed when dropped.
pub(crate) struct Process {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<Value>,
}

impl Process {
    /// Starts `cmd`, reading its lines from stdout (the Go peers) or stderr (our logs), each
    /// also written to `log`.
    pub(crate) fn spawn(mut cmd: Command, from_stderr: bool, log: &Path) -> Result<Process> {
        use std::io::Write;
        let mut file =
            std::fs::File::create(log).with_context(|| format!("creating {}", log.display()))?;
        let (out, err) = if from_stderr {
            (Stdio::null(), Stdio::piped())
        } else {
            (Stdio::piped(), Stdio::null())
        };
        let mut child = cmd
            .stdout(out)
            .stderr(err)
            .spawn()
            .with_context(|| format!("starting {:?}", cmd.get_program()))?;
        let out: Box<dyn std::io::Read + Send> = match (child.stdout.take(), child.stderr.take()) {
            (Some(o), _) => Box::new(o),
            (None, Some(e)) => Box::new(e),
            (None, None) => bail!("no output to read"),
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                let _ = writeln!(file, "{line}");
                // The reader may be gone; the log goes on until the process ends.
                let _ = tx.send(line);
            }
        });
        Ok(Process {
            child,
            lines,
            seen: Vec::new(),
        })
    }

    fn drain(&mut self) {
        while let Ok(l) = self.lines.try_recv() {
            if let Ok(v) = serde_json::from_str(&l) {
                self.seen.push(v);
            }
        }
    }

    fn saw(&mut self, event: &str) -> bool {
        self.drain();
        self.seen.iter().any(|v| v["event"] == event)
    }

    /// The first line `hit` accepts, printed already or within `limit`.
    pub(crate) fn wait(&mut self, limit: Duration, hit: impl Fn(&Value) -> bool) -> Result<Value> {
        self.drain();
        if let Some(v) = self.seen.iter().find(|v| hit(v)) {
            return Ok(v.clone());
        }
        let until = Instant::now() + limit;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let line = self
                .lines
                .recv_timeout(left)
                .map_err(|e| anyhow!("the line waited for did not come: {e}"))?;
            if let Ok(v) = serde_json::from_str::<Value>(&line) {
                self.seen.push(v.clone());
                if hit(&v) {
                    return Ok(v);
                }
            }
        }
    }

    /// Its process id.
    pub(crate) fn id(&self) -> u32 {
        self.child.id()
    }

    fn signal(&self, s: Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), s);
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
