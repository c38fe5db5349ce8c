//! [`Journal`]: every line a group of processes logged, in the order they were read, and waits
//! that wake on each new one.
//!
//! One journal per group that is read together: a test's replica has its own; the bench's lane
//! and the demo's three replicas share one, so that a wait can look at all of them at once and
//! the order of their lines is the order they arrived in.

use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::line::Line;

/// The lines of a group of processes; cheap to clone (the clones share them).
#[derive(Clone)]
pub struct Journal {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes blocking waits.
    grew: Condvar,
    /// Wakes async waits.
    changed: watch::Sender<()>,
    /// Whether lines that are no event are dropped, and the JSON of those that are.
    events_only: bool,
}

#[derive(Default)]
struct State {
    lines: Vec<Line>,
    /// By process index: its name, and whether its output has ended.
    processes: Vec<(String, bool)>,
}

/// The journal as a wait's probe sees it.
#[derive(Clone, Copy)]
pub struct Snapshot<'a> {
    state: &'a State,
}

// === impl Journal ===

impl Journal {
    /// A journal that keeps every JSON line.
    pub fn new() -> Journal {
        Journal::with(false)
    }

    /// A journal that keeps only the lines that are events, without their JSON: a bench run
    /// reads thousands of lines per replica and needs only those.
    pub fn events_only() -> Journal {
        Journal::with(true)
    }

    fn with(events_only: bool) -> Journal {
        let (changed, _) = watch::channel(());
        Journal {
            shared: Arc::new(Shared {
                state: Mutex::new(State::default()),
                grew: Condvar::new(),
                changed,
                events_only,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves whole lines behind: the data is still good.
        self.shared.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A new process named `name`; returns its index.
    pub(crate) fn join(&self, name: &str) -> usize {
        let mut state = self.lock();
        state.processes.push((name.to_string(), false));
        state.processes.len() - 1
    }

    /// Keeps one line.
    pub(crate) fn push(&self, mut line: Line) {
        if self.shared.events_only {
            if line.event.is_none() {
                return;
            }
            line.json = serde_json::Value::Null;
        }
        self.lock().lines.push(line);
        self.wake();
    }

    /// Notes that process `index`'s output ended: it logs no more.
    pub(crate) fn end(&self, index: usize) {
        if let Some(p) = self.lock().processes.get_mut(index) {
            p.1 = true;
        }
        self.wake();
    }

    fn wake(&self) {
        self.shared.grew.notify_all();
        self.shared.changed.send_replace(());
    }

    /// How many lines it holds now: a mark, after which [`Snapshot::since`] looks.
    pub fn mark(&self) -> usize {
        self.lock().lines.len()
    }

    /// Runs `f` on the journal as it is now.
    pub fn read<T>(&self, f: impl FnOnce(Snapshot<'_>) -> T) -> T {
        f(Snapshot {
            state: &self.lock(),
        })
    }

    /// Blocks until `probe` finds something, running it now and after every new line or end
    /// of a process; `None` once `limit` has passed.
    pub fn wait_blocking<T>(
        &self,
        limit: Duration,
        mut probe: impl FnMut(Snapshot<'_>) -> Option<T>,
    ) -> Option<T> {
        let deadline = Instant::now() + limit;
        let mut state = self.lock();
        loop {
            if let Some(t) = probe(Snapshot { state: &state }) {
                return Some(t);
            }
            let left = deadline.checked_duration_since(Instant::now())?;
            state = self
                .shared
                .grew
                .wait_timeout(state, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
    }

    /// As [`wait_blocking`](Self::wait_blocking), without blocking the runtime.
    pub async fn wait<T>(
        &self,
        limit: Duration,
        mut probe: impl FnMut(Snapshot<'_>) -> Option<T>,
    ) -> Option<T> {
        let deadline = tokio::time::Instant::now() + limit;
        // Subscribed before the first look: a line that comes after it wakes the wait.
        let mut changed = self.shared.changed.subscribe();
        loop {
            if let Some(t) = self.read(&mut probe) {
                return Some(t);
            }
            // The sender lives as long as `self`: `changed()` cannot fail here.
            if tokio::time::timeout_at(deadline, changed.changed())
                .await
                .is_err()
            {
                return None;
            }
        }
    }
}

impl Default for Journal {
    fn default() -> Journal {
        Journal::new()
    }
}

// === impl Snapshot ===

impl<'a> Snapshot<'a> {
    /// Every line so far, in the order read.
    pub fn lines(&self) -> &'a [Line] {
        &self.state.lines
    }

    /// The lines after `mark` ([`Journal::mark`]).
    pub fn since(&self, mark: usize) -> &'a [Line] {
        let lines = self.lines();
        &lines[mark.min(lines.len())..]
    }

    /// The lines of process `index`, in the order read.
    pub fn of(&self, index: usize) -> impl DoubleEndedIterator<Item = &'a Line> {
        self.lines().iter().filter(move |l| l.process == index)
    }

    /// How many processes it has had: the index the next one gets.
    pub fn processes(&self) -> usize {
        self.state.processes.len()
    }

    /// Whether process `index`'s output has ended (it exited, or closed it).
    pub fn ended(&self, index: usize) -> bool {
        self.state.processes.get(index).is_some_and(|p| p.1)
    }

    /// Process `index`'s name.
    pub fn name(&self, index: usize) -> &'a str {
        self.state
            .processes
            .get(index)
            .map_or("?", |p| p.0.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replica::line::Dialect;

    fn line(process: usize, text: &str) -> Line {
        Line::read(process, Dialect::GatewayLeader, text).expect("json")
    }

    #[tokio::test]
    async fn a_wait_wakes_on_a_line_pushed_after_it_began() {
        let journal = Journal::new();
        let a = journal.join("a");
        let writer = journal.clone();
        let pushed = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            writer.push(line(a, r#"{"message":"late"}"#));
        });
        let found = journal
            .wait(Duration::from_secs(10), |s| {
                s.of(a).find(|l| l.message() == "late").cloned()
            })
            .await;
        assert_eq!(found.map(|l| l.process), Some(a));
        pushed.join().expect("the writer");
        let blocking = journal.wait_blocking(Duration::from_secs(10), |s| {
            s.lines().iter().find(|l| l.message() == "late").cloned()
        });
        assert!(blocking.is_some(), "a line already there counts");
    }

    #[test]
    fn a_wait_gives_up_after_its_limit_and_sees_the_end_of_a_process() {
        let journal = Journal::new();
        let a = journal.join("a");
        let none = journal.wait_blocking(Duration::from_millis(30), |s| s.lines().first().cloned());
        assert!(none.is_none());
        journal.end(a);
        assert!(journal.read(|s| s.ended(a)));
        assert_eq!(journal.read(|s| s.name(a).to_string()), "a");
    }

    #[test]
    fn an_events_only_journal_keeps_events_without_their_json() {
        let journal = Journal::events_only();
        let a = journal.join("a");
        journal.push(line(a, r#"{"message":"chatter"}"#));
        journal.push(line(
            a,
            r#"{"message":"leadership: stopped","mono_ms":1.0}"#,
        ));
        let kept = journal.read(|s| s.lines().to_vec());
        assert_eq!(kept.len(), 1);
        assert!(kept[0].json.is_null() && kept[0].event.is_some());
    }
}
