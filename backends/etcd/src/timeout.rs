//! The deadline of each request to one member: the config's, or derived from the timing the
//! elector validates the lock with, as the Lease lock derives its own.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use leader_lock::Timing;

use crate::config::EtcdConfig;

/// No request deadline is shorter: below it a healthy member on a busy machine times out.
const FLOOR: Duration = Duration::from_millis(100);

/// The per-request deadline, shared by the lock and its members (a member's connect and the
/// election wait use it too).
#[derive(Debug, Clone)]
pub(crate) struct RequestTimeout {
    /// The deadline in nanoseconds; an atomic, so reading it takes no lock.
    nanos: Arc<AtomicU64>,
    /// Given by the config: [`adopt`](Self::adopt) leaves it alone.
    fixed: bool,
}

impl RequestTimeout {
    /// The config's deadline; without one, a quarter of the default timing's renew deadline
    /// until [`adopt`](Self::adopt) is told the real timing (connecting comes before that).
    pub(crate) fn new(configured: Option<Duration>) -> Self {
        let start = configured
            .unwrap_or_else(|| EtcdConfig::request_timeout_for(&Timing::default()))
            .max(FLOOR);
        RequestTimeout {
            nanos: Arc::new(AtomicU64::new(as_nanos(start))),
            fixed: configured.is_some(),
        }
    }

    /// The deadline now.
    pub(crate) fn get(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::Relaxed))
    }

    /// The deadline the lock will have under `timing`: the config's, or a quarter of the renew
    /// deadline.
    pub(crate) fn under(&self, timing: &Timing) -> Duration {
        if self.fixed {
            self.get()
        } else {
            EtcdConfig::request_timeout_for(timing).max(FLOOR)
        }
    }

    /// Takes on the deadline [`under`](Self::under) `timing` gives.
    pub(crate) fn adopt(&self, timing: &Timing) {
        self.nanos
            .store(as_nanos(self.under(timing)), Ordering::Relaxed);
    }
}

fn as_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_derived_deadline_follows_the_timing_and_a_given_one_stays() {
        let s = Duration::from_secs;
        let timing = Timing::new(s(6), s(4), s(1)).expect("valid timing");
        let derived = RequestTimeout::new(None);
        assert_eq!(
            derived.get(),
            Duration::from_millis(2500),
            "before the timing"
        );
        derived.clone().adopt(&timing);
        assert_eq!(derived.get(), s(1), "shared by the clones");
        let fixed = RequestTimeout::new(Some(s(3)));
        fixed.adopt(&timing);
        assert_eq!(fixed.get(), s(3));
        assert_eq!(RequestTimeout::new(Some(Duration::ZERO)).get(), FLOOR);
    }
}
