//! A `gateway-leader run` child process whose JSON log lines the test can wait for.

#![allow(dead_code)]

pub mod deploy;
pub mod gateway;
pub mod in_cluster;
pub mod pod;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::{channel, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;

/// Runs a blocking wait (a replica's log, an HTTP probe) without stalling the async runtime
/// (the tests run on a multi-threaded runtime).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// One log line of a replica, parsed.
#[derive(Debug, Clone)]
pub struct Line {
    /// The log's own timestamp.
    pub at: SystemTime,
    /// The whole JSON object.
    pub json: serde_json::Value,
}

impl Line {
    /// The log message.
    pub fn message(&self) -> &str {
        self.json["message"].as_str().unwrap_or_default()
    }
}

/// A running `gateway-leader run` with JSON logs.
pub struct Replica {
    pub name: String,
    child: Child,
    lines: Receiver<Line>,
    seen: Vec<Line>,
}

impl Replica {
    /// Starts `gateway-leader run` with `args` plus JSON logs and the identity `name`.
    pub fn start(name: &str, args: &[&str]) -> Replica {
        Self::start_with_env(name, args, &[("RUST_LOG", "info")])
    }

    /// Like [`Replica::start`], with these environment variables set.
    pub fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        // Many replicas share this machine: each serves health and metrics on a free port
        // (logged as "serving /healthz, /readyz and /metrics"), unless the test picks one.
        let health: &[&str] = if args.contains(&"--health-addr") {
            &[]
        } else {
            &["--health-addr", "127.0.0.1:0"]
        };
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_gateway-leader"));
        cmd.arg("run")
            .args(args)
            .args(health)
            .args(["--log-format", "json", "--leader-election-identity", name])
            .envs(env.iter().copied());
        Self::spawn(name, cmd)
    }

    /// Starts `cmd`, a `gateway-leader run` with JSON logs however it is wrapped (its process
    /// id must be the binary's, so that signals reach it), and follows its log as `name`.
    pub fn spawn(name: &str, mut cmd: Command) -> Replica {
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("gateway-leader starts");
        let stderr = child.stderr.take().expect("piped stderr");
        let (tx, rx) = channel();
        let who = name.to_string();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                let json: serde_json::Value = match serde_json::from_str(&line) {
                    Ok(j) => j,
                    Err(_) => {
                        eprintln!("[{who}] {line}");
                        continue;
                    }
                };
                let at = json["timestamp"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339(t).ok())
                    .unwrap_or_else(SystemTime::now);
                eprintln!("[{who}] {line}");
                if tx.send(Line { at, json }).is_err() {
                    return;
                }
            }
        });
        Replica {
            name: name.to_string(),
            child,
            lines: rx,
            seen: Vec::new(),
        }
    }

    /// Waits for a log line whose message contains `needle`; panics after `limit`.
    pub fn wait_for(&mut self, needle: &str, limit: Duration) -> Line {
        self.wait_for_since(needle, SystemTime::UNIX_EPOCH, limit)
    }

    /// Waits for a log line logged at or after `since` whose message contains `needle`.
    pub fn wait_for_since(&mut self, needle: &str, since: SystemTime, limit: Duration) -> Line {
        self.wait_match(&format!("{needle:?}"), limit, |l| {
            l.at >= since && l.message().contains(needle)
        })
    }

    /// Waits for a log line that satisfies `hit`; `what` names it in the panic message.
    pub fn wait_match(&mut self, what: &str, limit: Duration, hit: impl Fn(&Line) -> bool) -> Line {
        let needle = what;
        if let Some(l) = self.seen.iter().find(|l| hit(l)) {
            return l.clone();
        }
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(l) => {
                    self.seen.push(l.clone());
                    if hit(&l) {
                        return l;
                    }
                }
                Err(RecvTimeoutError::Timeout) => {
                    panic!("{}: no log line with {needle} within {limit:?}", self.name)
                }
                Err(RecvTimeoutError::Disconnected) => {
                    panic!("{}: exited before logging {needle}", self.name)
                }
            }
        }
    }

    fn signal(&self, sig: Signal) {
        let pid = i32::try_from(self.child.id()).expect("pid fits");
        kill(Pid::from_raw(pid), sig).unwrap_or_else(|e| panic!("{sig} to {}: {e}", self.name));
    }

    /// The address the replica serves /healthz, /readyz and /metrics on.
    pub fn health_addr(&mut self, limit: Duration) -> std::net::SocketAddr {
        let line = self.wait_for("serving /healthz, /readyz and /metrics", limit);
        line.json["addr"]
            .as_str()
            .and_then(|a| a.parse().ok())
            .unwrap_or_else(|| panic!("{}: no address in {:?}", self.name, line.json))
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends SIGKILL (a crash: nothing is released).
    pub fn kill(&self) {
        self.signal(Signal::SIGKILL)
    }

    /// Sends SIGTERM.
    pub fn terminate(&self) {
        self.signal(Signal::SIGTERM)
    }

    /// Freezes the whole process (SIGSTOP): its timers stop too, as in a paused VM.
    pub fn pause(&self) {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&self) {
        self.signal(Signal::SIGCONT)
    }

    /// Every line logged so far (after draining what arrived).
    pub fn lines(&mut self) -> &[Line] {
        while let Ok(l) = self.lines.try_recv() {
            self.seen.push(l);
        }
        &self.seen
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Some(s)) = self.child.try_wait() {
                return s.code();
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {limit:?}",
                self.name
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Replica {
    fn signal_quietly(&self, sig: Signal) {
        if let Ok(pid) = i32::try_from(self.child.id()) {
            let _ = kill(Pid::from_raw(pid), sig);
        }
    }
}

impl Drop for Replica {
    fn drop(&mut self) {
        // A frozen child ignores nothing but must be thawed to be reaped promptly.
        self.signal_quietly(Signal::SIGCONT);
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs two replicas on `args`, stops the leader with SIGTERM, and returns how long the follower
/// took to lead, measured between the leader's release and the follower's first "leading" log.
pub fn graceful_handover(args: &[&str]) -> Duration {
    let patience = Duration::from_secs(60);
    let mut a = Replica::start("replica-a", args);
    a.wait_for("leadership: leading", patience);
    let mut b = Replica::start("replica-b", args);
    b.wait_for("leadership: following", patience);
    // Give b's watch a moment to be established before the release.
    std::thread::sleep(Duration::from_millis(500));
    a.terminate();
    let released = a.wait_for("released leadership", patience);
    let led = b.wait_for("leadership: leading", patience);
    assert_eq!(
        a.wait_exit(patience),
        Some(0),
        "a exits cleanly after SIGTERM"
    );
    // Its watches and connections stay a quiet moment after the release (whose line is logged
    // before that moment begins), while b takes over.
    let stayed = SystemTime::now()
        .duration_since(released.at)
        .unwrap_or(Duration::ZERO);
    assert!(
        stayed >= leader_lock::elector::AFTER_RELEASE_QUIET,
        "a exited {stayed:?} after its release, with no quiet moment for b's takeover"
    );
    led.at.duration_since(released.at).unwrap_or(Duration::ZERO)
}
