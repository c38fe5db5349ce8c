//! The loop on a scripted leadership, with real commands (`sh`): what each run of the command
//! saw and did is in a file it writes, which the tests wait on.
//!
//! Real time, not tokio's paused clock: a paused clock jumps to the next timer whenever the
//! runtime idles, and it idles while a real process handles its SIGTERM, so the grace would
//! pass before the command could use it. The paused clock serves the part without processes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use leader_lock::leadership::Scripted;
use tokio::sync::oneshot;

use super::*;

/// Generous: the machine is busy.
const PATIENCE: Duration = Duration::from_secs(30);

fn settings(grace: Duration, restart: ExecRestart) -> ExecSettings {
    ExecSettings { grace, restart }
}

/// `sh -c script`, with `$F` the file it writes.
fn sh(script: &str, file: &Path) -> Spec {
    Spec {
        program: "sh".into(),
        args: vec!["-c".into(), script.into()],
        env: vec![("F".into(), file.as_os_str().to_owned())],
    }
}

fn leader(term: u64, valid_for: Duration) -> LeaderState {
    LeaderState::Leader {
        term: Term(term),
        valid_until: Instant::now() + valid_for,
    }
}

fn follower() -> LeaderState {
    LeaderState::Follower {
        holder: Some("pod-b_2".into()),
        term: Some(Term(9)),
    }
}

/// Waits until `file` has a line equal to `line`; returns the whole file.
async fn wait_line(file: &Path, line: &str) -> String {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        if text.lines().any(|l| l == line) {
            return text;
        }
        assert!(
            Instant::now() < deadline,
            "no line {line:?} in {} after {PATIENCE:?}: {text:?}",
            file.display()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

fn lines(file: &Path) -> Vec<String> {
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// A running `supervise`, its shutdown trigger and its file.
struct Running {
    script: Scripted,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<Outcome, SpawnError>>,
    file: PathBuf,
    _dir: tempfile::TempDir,
}

fn start(script: &str, settings: ExecSettings, initial: LeaderState) -> Running {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("out");
    let spec = sh(script, &file);
    let (scripted, leadership) = Leadership::scripted(initial);
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let shutdown = async move {
            let _ = stopped.await;
            "SIGTERM"
        };
        supervise(&spec, "pod-a_1", settings, &leadership, shutdown).await
    });
    Running {
        script: scripted,
        stop: Some(stop),
        task,
        file,
        _dir: dir,
    }
}

impl Running {
    /// How `supervise` ended, and the lines the commands wrote (read before the file goes).
    async fn outcome(self) -> (Outcome, Vec<String>) {
        let outcome = tokio::time::timeout(PATIENCE, self.task)
            .await
            .expect("supervise returns")
            .expect("no panic")
            .expect("the command starts");
        (outcome, lines(&self.file))
    }

    async fn shut_down(mut self) -> (Outcome, Vec<String>) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.outcome().await
    }
}

/// Writes `start TERM IDENTITY`, then `term` when sent SIGTERM, and exits 0 on it.
const POLITE: &str = r#"trap 'echo term >> "$F"; exit 0' TERM
echo "start $GATEWAY_LEADER_TERM $GATEWAY_LEADER_IDENTITY" >> "$F"
while :; do sleep 0.05; done"#;

fn exited(outcome: &Outcome) -> Option<u8> {
    match outcome {
        Outcome::Ended(Stopped::Exited(s)) | Outcome::Signal(Some(Stopped::Exited(s))) => {
            Some(exit_code(*s))
        }
        _ => None,
    }
}

#[tokio::test]
async fn the_command_starts_when_leading_with_the_term_and_identity_in_its_environment() {
    let r = start(
        POLITE,
        settings(Duration::from_secs(5), ExecRestart::Always),
        follower(),
    );
    // Followers run nothing: the first run is the one under term 4.
    tokio::time::sleep(Duration::from_millis(100)).await;
    r.script.publish(leader(4, Duration::from_secs(600)));
    wait_line(&r.file, "start 4 pod-a_1").await;
    let (outcome, lines) = r.shut_down().await;
    assert_eq!(lines, ["start 4 pod-a_1", "term"]);
    assert_eq!(exited(&outcome), Some(0), "{outcome:?}");
}

#[tokio::test]
async fn the_end_of_a_leadership_sends_sigterm_and_the_next_one_starts_it_again() {
    let r = start(
        POLITE,
        settings(Duration::from_secs(5), ExecRestart::Always),
        leader(1, Duration::from_secs(600)),
    );
    wait_line(&r.file, "start 1 pod-a_1").await;
    r.script.publish(follower());
    wait_line(&r.file, "term").await;
    r.script.publish(leader(2, Duration::from_secs(600)));
    wait_line(&r.file, "start 2 pod-a_1").await;
    // Another term published straight over this one ends this one's run too.
    r.script.publish(leader(3, Duration::from_secs(600)));
    wait_line(&r.file, "start 3 pod-a_1").await;
    let (_, lines) = r.shut_down().await;
    assert_eq!(
        lines,
        [
            "start 1 pod-a_1",
            "term",
            "start 2 pod-a_1",
            "term",
            "start 3 pod-a_1",
            "term"
        ]
    );
}

#[tokio::test]
async fn a_validity_deadline_that_passes_unrenewed_stops_the_command_without_the_elector() {
    let valid_for = Duration::from_secs(1);
    let began = Instant::now();
    let r = start(
        POLITE,
        settings(Duration::from_secs(5), ExecRestart::Never),
        leader(7, valid_for),
    );
    // The elector publishes nothing more: the deadline alone ends the run.
    let (outcome, lines) = r.outcome().await;
    assert!(began.elapsed() >= valid_for, "stopped before the deadline");
    assert_eq!(lines, ["start 7 pod-a_1", "term"]);
    assert_eq!(exited(&outcome), Some(0), "{outcome:?}");
}

#[tokio::test]
async fn renewals_keep_the_command_running() {
    let r = start(
        POLITE,
        settings(Duration::from_secs(5), ExecRestart::Never),
        leader(7, Duration::from_millis(300)),
    );
    wait_line(&r.file, "start 7 pod-a_1").await;
    for _ in 0..5 {
        r.script.publish(leader(7, Duration::from_millis(300)));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(
        lines(&r.file),
        ["start 7 pod-a_1"],
        "stopped despite renewals"
    );
    let (_, lines) = r.outcome().await;
    assert_eq!(lines, ["start 7 pod-a_1", "term"]);
}

#[tokio::test]
async fn a_command_that_ignores_sigterm_gets_sigkill_after_the_grace() {
    let grace = Duration::from_millis(700);
    let r = start(
        // An ignored signal stays ignored across exec: `sleep` ignores it too.
        r#"trap '' TERM; echo start >> "$F"; while :; do sleep 0.05; done"#,
        settings(grace, ExecRestart::Never),
        leader(1, Duration::from_secs(600)),
    );
    wait_line(&r.file, "start").await;
    let ended = Instant::now();
    r.script.publish(follower());
    let (outcome, _) = r.outcome().await;
    assert!(ended.elapsed() >= grace, "killed before the grace");
    assert_eq!(exited(&outcome), Some(128 + 9), "{outcome:?}");
}

#[tokio::test]
async fn the_signal_reaches_what_the_command_started() {
    let r = start(
        // The shell waits on a background `sleep` whose pid it writes down.
        r#"sleep 600 & echo "$!" >> "$F"; wait"#,
        settings(Duration::from_secs(5), ExecRestart::Always),
        leader(1, Duration::from_secs(600)),
    );
    let deadline = Instant::now() + PATIENCE;
    let grandchild = loop {
        if let Some(pid) = lines(&r.file).first().and_then(|l| l.parse::<i32>().ok()) {
            break nix::unistd::Pid::from_raw(pid);
        }
        assert!(Instant::now() < deadline, "no pid written");
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    r.shut_down().await;
    assert_gone(grandchild).await;
}

#[tokio::test]
async fn what_a_command_leaves_behind_when_it_exits_is_stopped_too() {
    let r = start(
        r#"sleep 600 & echo "$!" >> "$F"; exit 4"#,
        settings(Duration::from_secs(5), ExecRestart::Never),
        leader(1, Duration::from_secs(600)),
    );
    let (outcome, lines) = r.outcome().await;
    assert_eq!(exited(&outcome), Some(4), "{outcome:?}");
    let pid: i32 = lines
        .first()
        .and_then(|l| l.parse().ok())
        .unwrap_or_else(|| panic!("no pid written: {lines:?}"));
    assert_gone(nix::unistd::Pid::from_raw(pid)).await;
}

/// Waits until `pid` is gone, or at most a zombie on its way to be reaped by whoever adopted it.
async fn assert_gone(pid: nix::unistd::Pid) {
    let deadline = Instant::now() + PATIENCE;
    while nix::sys::signal::kill(pid, None).is_ok() {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.split(") ").nth(1).is_some_and(|s| s.starts_with('Z')) {
            return;
        }
        assert!(Instant::now() < deadline, "process {pid} survived");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn with_restart_always_a_command_that_exits_is_started_again() {
    let r = start(
        r#"echo "run $GATEWAY_LEADER_TERM" >> "$F"; exit 3"#,
        settings(Duration::from_secs(5), ExecRestart::Always),
        leader(5, Duration::from_secs(600)),
    );
    let deadline = Instant::now() + PATIENCE;
    while lines(&r.file).len() < 2 {
        assert!(Instant::now() < deadline, "not started again");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let (outcome, lines) = r.shut_down().await;
    assert!(lines.iter().all(|l| l == "run 5"), "{lines:?}");
    assert!(
        matches!(outcome, Outcome::Signal(_)),
        "a stop on request: {outcome:?}"
    );
}

#[tokio::test]
async fn with_restart_never_the_outcome_is_the_commands_exit() {
    let r = start(
        "exit 3",
        settings(Duration::from_secs(5), ExecRestart::Never),
        leader(5, Duration::from_secs(600)),
    );
    let (outcome, _) = r.outcome().await;
    assert_eq!(exited(&outcome), Some(3), "{outcome:?}");
}

#[tokio::test]
async fn a_signal_stops_the_command_before_supervise_returns() {
    let r = start(
        POLITE,
        settings(Duration::from_secs(5), ExecRestart::Always),
        leader(1, Duration::from_secs(600)),
    );
    wait_line(&r.file, "start 1 pod-a_1").await;
    let (outcome, lines) = r.shut_down().await;
    // The caller releases the lock after `supervise` returns: the command had stopped by then.
    assert_eq!(lines.last().map(String::as_str), Some("term"));
    assert!(
        matches!(outcome, Outcome::Signal(Some(Stopped::Exited(_)))),
        "{outcome:?}"
    );
}

#[tokio::test]
async fn a_command_that_cannot_start_is_an_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let spec = Spec {
        program: dir.path().join("missing").into_os_string(),
        args: vec![],
        env: vec![],
    };
    let (_script, leadership) = Leadership::scripted(leader(1, Duration::from_secs(600)));
    let e = supervise(
        &spec,
        "pod-a_1",
        settings(Duration::from_secs(1), ExecRestart::Always),
        &leadership,
        std::future::pending(),
    )
    .await
    .expect_err("no such program");
    assert_eq!(e.source.kind(), std::io::ErrorKind::NotFound);
    // The cause is the error's source, not part of its message: a chain prints it once.
    let cause = e.source.to_string();
    assert!(!e.to_string().contains(&cause), "{e}");
    let chain = format!("{:#}", anyhow::Error::new(e));
    assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
}

#[tokio::test(start_paused = true)]
async fn only_a_leadership_valid_now_counts_as_leading() {
    let (script, leadership) = Leadership::scripted(leader(1, Duration::from_secs(1)));
    tokio::time::advance(Duration::from_secs(2)).await;
    let mut rx = leadership.subscribe();
    // Published as leading, but past its deadline: not yet.
    let waiting = tokio::spawn(async move { leading(&mut rx).await });
    tokio::task::yield_now().await;
    assert!(!waiting.is_finished());
    script.publish(follower());
    script.publish(leader(2, Duration::from_secs(10)));
    let (term, _) = waiting.await.expect("no panic").expect("leading");
    assert_eq!(term, Term(2));
    assert_eq!(
        still_valid(&leader(2, Duration::ZERO), Term(2)),
        Err("its validity deadline passed without a renewal")
    );
    assert_eq!(
        still_valid(&leader(3, Duration::from_secs(1)), Term(2)),
        Err("another term began")
    );
    script.publish(LeaderState::Stopped);
    assert_eq!(leading(&mut leadership.subscribe()).await, None);
}
