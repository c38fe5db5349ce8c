//! The replicas the tests start (`testkit::replica`), with waits that panic, and the server
//! set-ups several tests share.

#![allow(dead_code)]

pub mod audit;
pub mod cli;
pub mod deploy;
pub mod gateway;
pub mod helm;
pub mod in_cluster;
pub mod pod;
pub mod proxy;

use std::process::Command;
use std::time::{Duration, SystemTime};

use gateway_leader_log::message;
use nix::sys::signal::Signal;
use testkit::replica::{self, Dialect, Journal, Transcript};

pub use testkit::replica::Line;

/// Runs a blocking wait (a replica's log, an HTTP probe) without stalling the async runtime
/// (the tests run on a multi-threaded runtime).
pub fn blocking<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

/// A running `gateway-leader run` with JSON logs (`testkit::replica`, with its own journal
/// and its lines on the test's stderr), whose waits panic: a test fails where it waited.
pub struct Replica {
    /// Its name (its identity, unless the command says another).
    pub name: String,
    inner: replica::Replica,
}

impl Replica {
    /// Starts `gateway-leader run` with `args` plus JSON logs and the identity `name`.
    pub fn start(name: &str, args: &[&str]) -> Replica {
        Self::start_with_env(name, args, &[("RUST_LOG", "info")])
    }

    /// Like [`Replica::start`], with these environment variables set.
    pub fn start_with_env(name: &str, args: &[&str], env: &[(&str, &str)]) -> Replica {
        let exe = std::path::Path::new(env!("CARGO_BIN_EXE_gateway-leader"));
        let mut cmd = replica::Replica::run_command(exe, name, args);
        cmd.envs(env.iter().copied());
        Self::spawn(name, cmd)
    }

    /// Starts `cmd`, a `gateway-leader run` with JSON logs however it is wrapped (its process
    /// id must be the binary's, so that signals reach it), and follows its log as `name`.
    pub fn spawn(name: &str, cmd: Command) -> Replica {
        let inner = replica::Replica::spawn(
            cmd,
            name,
            Dialect::GatewayLeader,
            &Journal::new(),
            Transcript::Stderr,
        )
        .unwrap_or_else(|e| panic!("{name}: {e:#}"));
        Replica {
            name: name.to_string(),
            inner,
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
        self.inner
            .wait_line_blocking(what, limit, hit)
            .unwrap_or_else(|e| panic!("{e:#}"))
    }

    fn signal(&mut self, sig: Signal) {
        self.inner
            .signal(sig)
            .unwrap_or_else(|e| panic!("{sig} to {}: {e:#}", self.name));
    }

    /// The address the replica serves /healthz, /readyz and /metrics on.
    pub fn health_addr(&mut self, limit: Duration) -> std::net::SocketAddr {
        let line = self.wait_for(message::SERVING, limit);
        match line.event {
            Some(gateway_leader_log::Event::Serving { addr }) => addr,
            _ => panic!("{}: no address in {:?}", self.name, line.json),
        }
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.inner.pid()
    }

    /// Sends SIGKILL (a crash: nothing is released).
    pub fn kill(&mut self) {
        self.signal(Signal::SIGKILL)
    }

    /// Sends SIGTERM.
    pub fn terminate(&mut self) {
        self.signal(Signal::SIGTERM)
    }

    /// Freezes the whole process (SIGSTOP): its timers stop too, as in a paused VM.
    pub fn pause(&mut self) {
        self.signal(Signal::SIGSTOP)
    }

    /// Thaws it (SIGCONT).
    pub fn resume(&mut self) {
        self.signal(Signal::SIGCONT)
    }

    /// Every line logged so far.
    pub fn lines(&mut self) -> Vec<Line> {
        self.inner.lines()
    }

    /// Waits for the process to exit; returns its exit code.
    pub fn wait_exit(&mut self, limit: Duration) -> Option<i32> {
        self.inner
            .wait_exit_blocking(limit)
            .unwrap_or_else(|e| panic!("{e:#}"))
            .code()
    }
}

/// Runs two replicas on `args`, stops the leader with SIGTERM, and returns how long the follower
/// took to lead, measured between the leader's release and the follower's first "leading" log.
pub fn graceful_handover(args: &[&str]) -> Duration {
    let patience = Duration::from_secs(60);
    let mut a = Replica::start("replica-a", args);
    a.wait_for(message::LEADING, patience);
    let mut b = Replica::start("replica-b", args);
    b.wait_for(message::FOLLOWING, patience);
    // Give b's watch a moment to be established before the release.
    std::thread::sleep(Duration::from_millis(500));
    a.terminate();
    let released = a.wait_for(message::RELEASED, patience);
    let led = b.wait_for(message::LEADING, patience);
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
