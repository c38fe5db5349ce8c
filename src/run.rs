//! `gateway-leader run`: the status writer guarded by the elector, until SIGTERM or Ctrl-C.

use gateway_leader_log::{field, message};
use gateway_leader_status::{StatusController, WriterConfig};
use leader_lock::clock;
use leader_lock::readiness::Readiness;
use leader_lock::{Identity, LeaderState, Leadership};
use tokio::sync::watch;
use tracing::{debug, info};

use crate::config::Settings;
use crate::replica::{Kubernetes, Replica, Started, PROCESS_SHUTDOWN_BUDGET};

/// Logs every change of leadership with its term, so operators see who writes and under which term.
pub(crate) fn log_changes(leadership: &Leadership) -> tokio::task::JoinHandle<()> {
    // Every publication with the instant it took effect: the lines say when a leadership began
    // and ended, not when this task got round to looking (on a busy machine that can be after
    // the lock was released and taken by another replica).
    let (first, mut rx) = leadership.record();
    tokio::spawn(async move {
        let mut last: Option<LeaderState> = None;
        let mut next = Some(first);
        while let Some((at, state)) = next.take() {
            // A renewal only moves the validity deadline: not a change of leadership.
            let same = match (&last, &state) {
                (
                    Some(LeaderState::Leader { term: a, .. }),
                    LeaderState::Leader { term: b, .. },
                ) => a == b,
                (Some(prev), cur) => prev == cur,
                (None, _) => false,
            };
            last = Some(state.clone());
            // Lines that machines read (gateway-leader-log declares them): `mono_ms`
            // (CLOCK_MONOTONIC) lets the bench and its split-brain checker compare these instants
            // across processes; the validity deadline moves with each renew (logged at debug, so
            // only when asked for).
            let mono_ms = clock::instant_mono_ms(at);
            if same {
                if let LeaderState::Leader { term, valid_until } = state {
                    debug!({ field::TERM } = %term, { field::MONO_MS } = mono_ms,
                        { field::VALID_UNTIL_MONO_MS } = clock::instant_mono_ms(valid_until),
                        "{}", message::RENEWED);
                }
            } else {
                match state {
                    // Terms are logged as text (`Display`), so `term` has one JSON type
                    // everywhere, the disabled marker included.
                    LeaderState::Leader { term, valid_until } => info!(
                        { field::TERM } = %term,
                        { field::MONO_MS } = mono_ms,
                        { field::VALID_UNTIL_MONO_MS } = clock::instant_mono_ms(valid_until),
                        "{}", message::LEADING
                    ),
                    LeaderState::Follower { holder, term } => info!(
                        { field::HOLDER } = holder.as_deref().unwrap_or(field::HOLDER_UNKNOWN),
                        // `display` comes with the macro.
                        { field::TERM } = term.map(display),
                        { field::MONO_MS } = mono_ms,
                        "{}",
                        message::FOLLOWING
                    ),
                    LeaderState::Starting => {}
                    LeaderState::Stopped => {
                        info!({ field::MONO_MS } = mono_ms, "{}", message::STOPPED);
                        return;
                    }
                }
            }
            next = rx.recv().await;
        }
    })
}

pub use crate::PROGRAM;

/// The longest field manager name the apiserver accepts.
const FIELD_MANAGER_MAX: usize = 128;
/// The field manager of this replica's status writes: it names the replica in `managedFields`,
/// so an object shows which replica wrote which of its fields.
pub fn field_manager(identity: &Identity) -> String {
    let mut m = format!("{PROGRAM}/{}", identity.name());
    if m.len() > FIELD_MANAGER_MAX {
        let mut end = FIELD_MANAGER_MAX;
        while !m.is_char_boundary(end) {
            end -= 1;
        }
        m.truncate(end);
    }
    m
}

/// Runs until a shutdown signal: watches and computes statuses on every replica, writes them
/// while leading, and on the way out stops writing, lets writes in flight finish, then releases
/// the lock (when configured to).
pub async fn run(settings: Settings) -> anyhow::Result<()> {
    info!(
        identity = %settings.identity,
        controller = %settings.controller_name,
        leader_election = !settings.disabled,
        version = env!("CARGO_PKG_VERSION"),
        "starting gateway-leader"
    );
    let (synced_tx, synced_rx) = watch::channel(Readiness::default());
    let mut replica = match Replica::start(&settings, synced_rx, Kubernetes::Needed).await? {
        Started::Replica(r) => r,
        Started::Stopped => return Ok(()),
    };
    let writer = WriterConfig::default()
        .with_controller_name(&settings.controller_name)
        .with_field_manager(field_manager(&replica.identity))
        .with_identity(replica.identity.to_string())
        // The elector drains for as long; writes still in flight then are abandoned.
        .with_shutdown_grace(
            settings
                .timing
                .renew_deadline
                .min(leader_lock::elector::SHUTDOWN_BUDGET / 2),
        )
        .with_metrics(replica.metrics.status.clone());
    let mut status = StatusController::start(
        replica.client()?,
        replica.leadership.clone(),
        writer,
        synced_tx,
    );
    let sig = replica.signals.recv().await;
    info!(
        signal = sig,
        budget = ?PROCESS_SHUTDOWN_BUDGET,
        mono_ms = clock::mono_ms(),
        "shutting down: no new writes, draining, then releasing"
    );
    // The writer stops scheduling while the elector refuses new permits and waits for the
    // writes in flight (each bounded by its validity deadline); only then is the lock released.
    // The rest (watches, computation, the last Event) is torn down after the release.
    let deadline = replica.release(status.stop_writing()).await;
    status.stop().await;
    replica.finish(deadline).await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// Log lines written to memory.
    #[derive(Clone, Default)]
    struct Buf(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Buf {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .extend_from_slice(b);
            Ok(b.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    #[tokio::test(start_paused = true)]
    async fn leadership_lines_carry_the_instant_of_the_change_not_of_the_log() {
        let buf = Buf::default();
        let writer = buf.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .flatten_event(true)
            .with_writer(move || writer.clone())
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);
        tracing::callsite::rebuild_interest_cache();
        let (script, leadership) = Leadership::scripted(LeaderState::Starting);
        let logger = log_changes(&leadership);
        script.publish(LeaderState::Leader {
            term: leader_lock::Term(3),
            valid_until: tokio::time::Instant::now() + Duration::from_secs(60),
        });
        // The logger gets round to the change five seconds after it happened (a busy machine).
        tokio::time::advance(Duration::from_secs(5)).await;
        script.publish(LeaderState::Stopped);
        logger.await.expect("the logger ends after Stopped");
        let logged_at = clock::mono_ms();
        let text = String::from_utf8(buf.0.lock().unwrap_or_else(|p| p.into_inner()).clone())
            .expect("utf-8");
        // Read as the bench reads it: the line is the declared event.
        let leading: serde_json::Value = text
            .lines()
            .filter_map(|l| serde_json::from_str(l).ok())
            .find(|v| {
                matches!(
                    gateway_leader_log::Event::from_json(v),
                    Some(gateway_leader_log::Event::Leading { term: 3, .. })
                )
            })
            .unwrap_or_else(|| panic!("no leading line in {text}"));
        let at = gateway_leader_log::mono_ms(&leading).expect("mono_ms");
        // Stamped five (paused) seconds before the logger looked, not when it looked.
        assert!(logged_at - at >= 4_000.0, "{logged_at} - {at}: {text}");
    }
}
