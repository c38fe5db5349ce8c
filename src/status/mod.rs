//! `gateway-leader status`: reads the configured lock, on any backend, and says who holds it,
//! under which term, since when, when its record expires by the lock's view, and what the lock
//! keeps of its history; `--watch` prints a line per change. It only reads: no candidacy, no
//! write (docs/operations.md, "gateway-leader status").
//!
//! The exit code is the state (held 0, free 3, vanished 4, unreachable 5; 1 another failure,
//! 2 bad settings), so a probe or a script needs no parsing. It logs warnings only unless
//! `--log-level` (or `RUST_LOG`) names another filter than the default `info`.

mod render;
mod view;

use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::StreamExt;
use leader_lock::backend::{LeaderLock, LockError, LockEvent, LockEventStream};
use tokio::time::Instant;

use crate::backend;
use crate::config::{RunArgs, Settings};
use crate::kube_client::KubeClient;
use crate::shutdown::ShutdownSignals;
pub use view::State;
use view::{changed, next_change, Seen, View};

/// Exit code: someone holds the lock.
pub const EXIT_HELD: u8 = 0;
/// Exit code: nobody holds it (no record, released, or its lease ran out).
pub const EXIT_FREE: u8 = 3;
/// Exit code: its record vanished without a release and may not be taken yet.
pub const EXIT_VANISHED: u8 = 4;
/// Exit code: its server could not be read within the renew deadline.
pub const EXIT_UNREACHABLE: u8 = 5;

/// The output formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Output {
    /// An aligned block (with `--watch`, a line per change).
    Text,
    /// One JSON object (with `--watch`, one per line per change).
    Json,
}

/// The arguments of `gateway-leader status`: `run`'s settings name the lock.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The settings, as for `run`: the backend, the lock's name and the backend's settings.
    #[command(flatten)]
    pub run: RunArgs,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: Output,
    /// Keep reading: print one line (with `-o json`, one object per line) at every change of
    /// state, holder or term, until SIGTERM or Ctrl-C (exit 0). Renewals are no change.
    #[arg(long)]
    pub watch: bool,
}

/// The exit code of a state.
pub fn exit_code(state: State) -> u8 {
    match state {
        State::Held => EXIT_HELD,
        State::Free => EXIT_FREE,
        State::Vanished => EXIT_VANISHED,
        State::Unreachable => EXIT_UNREACHABLE,
    }
}

/// Checks that `status` can read a lock with these settings: there is none with leader
/// election off.
///
/// # Errors
/// The message for a usage error.
pub fn check(settings: &Settings) -> Result<(), String> {
    if settings.disabled {
        return Err(format!(
            "{}: status reads the lock, and with leader election disabled there is none",
            crate::config::flag("leader_election_disable")
        ));
    }
    Ok(())
}

/// The lock, connected (a Kubernetes client loaded first when the backend needs one); `Err` is
/// a failure that is no unreachable server (no kubeconfig, credentials refused).
async fn connect(settings: &Settings) -> Result<Result<Arc<dyn LeaderLock>, LockError>, String> {
    let kube = match settings.backend {
        crate::config::Backend::Kubernetes => {
            let identity = leader_lock::Identity::new(settings.identity.clone());
            Some(
                KubeClient::connect(&settings.kube, &identity)
                    .await
                    .map_err(|e| format!("{e:#}"))?,
            )
        }
        _ => None,
    };
    let client = kube.as_ref().map(|k| (&k.client, k.default_namespace()));
    Ok(backend::connect(settings, client).await.map(|c| c.lock))
}

/// The lock's description before it is connected, for a server that cannot be reached.
fn describe(s: &Settings) -> String {
    format!("{} lock {}", s.backend, s.lock_name)
}

/// One reading, given up at `deadline`: a server that does not answer is unreachable.
async fn read(
    lock: &dyn LeaderLock,
    name: &str,
    s: &Settings,
    seen: &mut Seen,
    deadline: Instant,
) -> Result<View, String> {
    let bound = s.timing.renew_deadline;
    let r = match tokio::time::timeout_at(deadline, lock.inspect()).await {
        Ok(r) => r,
        Err(_) => Err(LockError::Timeout(bound)),
    };
    let backend = s.backend.to_string();
    match r {
        Ok(i) => Ok(seen.view(
            name,
            &backend,
            i,
            Instant::now(),
            SystemTime::now(),
            s.timing.lease_duration,
        )),
        Err(e @ (LockError::Unavailable { .. } | LockError::Timeout(_))) => {
            Ok(view::unreachable(name, &backend, &e, SystemTime::now()))
        }
        Err(e) => Err(format!("reading {name}: {}", e.chain())),
    }
}

fn print(v: &View, output: Output, watching: bool) {
    match (output, watching) {
        (Output::Json, _) => println!("{}", render::json(v)),
        (Output::Text, false) => print!("{}", render::text(v)),
        (Output::Text, true) => println!("{}", render::line(v)),
    }
}

/// Connects by `deadline`; unreachable (as a view) when it cannot.
async fn connect_bounded(
    s: &Settings,
    deadline: Instant,
) -> Result<Result<Arc<dyn LeaderLock>, View>, String> {
    let bound = s.timing.renew_deadline;
    let name = describe(s);
    let backend = s.backend.to_string();
    match tokio::time::timeout_at(deadline, connect(s)).await {
        Err(_) => Ok(Err(view::unreachable(
            &name,
            &backend,
            &LockError::Timeout(bound),
            SystemTime::now(),
        ))),
        Ok(Err(message)) => Err(message),
        Ok(Ok(Ok(lock))) => Ok(Ok(lock)),
        Ok(Ok(Err(e @ (LockError::Unavailable { .. } | LockError::Timeout(_))))) => Ok(Err(
            view::unreachable(&name, &backend, &e, SystemTime::now()),
        )),
        Ok(Ok(Err(e))) => Err(format!("connecting to {name}: {}", e.chain())),
    }
}

/// `gateway-leader status`: one reading, or `--watch`; returns the exit code.
///
/// # Cancel safety
/// Cancel safe: it only reads the lock, so a drop leaves nothing behind on the server.
pub async fn status(settings: Settings, output: Output, watch: bool) -> ExitCode {
    let result = if watch {
        watch_lock(&settings, output).await
    } else {
        once(&settings, output).await
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(message) => {
            eprintln!("gateway-leader: {message}");
            ExitCode::FAILURE
        }
    }
}

/// One reading, connection included, within one renew deadline: the documented bound on an
/// unreachable answer.
async fn once(s: &Settings, output: Output) -> Result<u8, String> {
    let deadline = Instant::now() + s.timing.renew_deadline;
    let v = match connect_bounded(s, deadline).await? {
        Ok(lock) => {
            let name = lock.describe();
            read(lock.as_ref(), &name, s, &mut Seen::default(), deadline).await?
        }
        Err(v) => v,
    };
    print(&v, output, false);
    Ok(exit_code(v.state))
}

/// How long until `at` on the wall clock, as an instant (now when it has passed).
fn instant_of(at: SystemTime) -> Instant {
    Instant::now()
        + at.duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO)
}

/// `--watch`: a line for the first reading and for each change. The lock's change stream wakes
/// it, and so do a timer at the next expiry or end of hold-off and a poll every retry period
/// (one read each: this is an operator's tool, not a follower counting its requests).
async fn watch_lock(s: &Settings, output: Output) -> Result<u8, String> {
    let mut signals = ShutdownSignals::install().map_err(|e| format!("{e:#}"))?;
    // The signal ends whatever is under way, a reading or a connection included: each is only
    // a read, and a dropped one changes nothing.
    tokio::select! {
        r = follow(s, output) => r,
        sig = signals.recv() => {
            tracing::debug!(signal = sig, "status --watch stopped");
            Ok(0)
        }
    }
}

/// `--watch`'s loop; it returns only on a failure that is no unreachable server.
async fn follow(s: &Settings, output: Output) -> Result<u8, String> {
    let retry = s.timing.retry_period;
    let mut seen = Seen::default();
    let mut last: Option<View> = None;
    let mut lock: Option<Arc<dyn LeaderLock>> = None;
    let mut events: Option<LockEventStream> = None;
    loop {
        if lock.is_none() {
            match connect_bounded(s, Instant::now() + s.timing.renew_deadline).await? {
                Ok(l) => lock = Some(l),
                Err(v) => report(&mut last, v, output),
            }
        }
        if let (Some(l), None) = (&lock, &events) {
            events = tokio::time::timeout(s.timing.renew_deadline, l.watch())
                .await
                .ok()
                .and_then(Result::ok);
        }
        if let Some(l) = &lock {
            let deadline = Instant::now() + s.timing.renew_deadline;
            let v = read(l.as_ref(), &l.describe(), s, &mut seen, deadline).await?;
            report(&mut last, v, output);
        }
        // Wait for whatever can change the reading. A poll every retry period too, with the
        // stream open: not every backend's stream tells a record deleted by hand (Redis hears a
        // DEL only with keyspace notifications on), and a vanish must be seen while it lasts.
        let poll = Instant::now() + retry;
        let wake = match last.as_ref().and_then(next_change).map(instant_of) {
            Some(at) => poll.min(at),
            None => poll,
        };
        tokio::select! {
            ev = next_event(&mut events) => {
                match ev {
                    Some(Ok(LockEvent::Changed(_) | LockEvent::Resynced)) => {}
                    // The stream broke: read now, reopen it on the next turn.
                    _ => events = None,
                }
            }
            () = sleep_until(wake) => {}
        }
    }
}

async fn next_event(events: &mut Option<LockEventStream>) -> Option<Result<LockEvent, LockError>> {
    match events {
        Some(s) => s.next().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until a moment after `at`, so that a reading woken by an expiry is past it.
async fn sleep_until(at: Instant) {
    tokio::time::sleep_until(at + Duration::from_millis(50)).await;
}

/// Prints `v` when it differs from the last reading printed.
fn report(last: &mut Option<View>, v: View, output: Output) {
    if last.as_ref().is_none_or(|l| changed(l, &v)) {
        print(&v, output, true);
    }
    *last = Some(v);
}
