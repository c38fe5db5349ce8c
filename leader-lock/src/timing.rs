//! The three durations of leader election ([`Timing`]), client-go's rules between them
//! ([`TimingError`]) and the bounds every backend supports.

use std::time::Duration;

/// The three durations that drive leader election, with client-go's defaults.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Timing {
    /// How long a lease lasts after its last renew before others may take it.
    pub lease_duration: Duration,
    /// How long after the last successful renew was *sent* the leader may still write.
    pub renew_deadline: Duration,
    /// How often the leader renews and a follower without a watch polls.
    pub retry_period: Duration,
}

/// A broken timing rule, naming the settings involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TimingError {
    /// `lease_duration` must exceed `renew_deadline`.
    #[error("lease-duration ({lease:?}) must be greater than renew-deadline ({renew:?})")]
    LeaseNotAboveRenew {
        /// The lease duration given.
        lease: Duration,
        /// The renew deadline given.
        renew: Duration,
    },
    /// `renew_deadline` must exceed 1.2 × `retry_period`.
    #[error("renew-deadline ({renew:?}) must be greater than 1.2 × retry-period ({retry:?})")]
    RenewNotAboveRetry {
        /// The renew deadline given.
        renew: Duration,
        /// The retry period given.
        retry: Duration,
    },
    /// A duration must be positive.
    #[error("{setting} must be greater than zero")]
    Zero {
        /// The setting's name.
        setting: &'static str,
    },
    /// A backend needs whole seconds.
    #[error("{setting} ({value:?}) must be a whole number of seconds for this backend")]
    NotWholeSeconds {
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: Duration,
    },
    /// A backend's per-request timeout must end before the leader's validity could.
    #[error(
        "the {backend} request timeout ({value:?}) must be above zero and below \
         renew-deadline ({renew:?})"
    )]
    RequestTimeout {
        /// The backend whose timeout it is.
        backend: &'static str,
        /// The timeout given.
        value: Duration,
        /// The renew deadline given.
        renew: Duration,
    },
    /// A duration outside the range every backend supports ([`MIN_RETRY_PERIOD`],
    /// [`MAX_LEASE_DURATION`]).
    #[error("{setting} ({value:?}) must be {rule} {limit:?}")]
    OutOfRange {
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: Duration,
        /// "at least" or "at most".
        rule: &'static str,
        /// The bound.
        limit: Duration,
    },
    /// A backend cannot express durations this small.
    #[error("{setting} ({value:?}) is below this backend's minimum of {min:?}")]
    BelowMinimum {
        /// The setting's name.
        setting: &'static str,
        /// The value given.
        value: Duration,
        /// The backend's minimum.
        min: Duration,
    },
}

/// The shortest retry period. A leader renews and a follower polls once per period, so this caps
/// each replica at 10 requests a second; anything faster only loads the backend without making
/// a takeover noticeably quicker (docs/benchmarks.md, "What the figures mean for choosing timing
/// settings").
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(100);

/// The longest lease. A crashed leader blocks the election for up to a lease, so more than an hour
/// is never wanted; the Kubernetes backend also counts any longer recorded lease as an hour, and
/// the stored records of etcd and Redis stay far inside what they accept.
pub const MAX_LEASE_DURATION: Duration = Duration::from_secs(3600);

/// client-go's jitter factor: followers poll at a random point in `[retry, 1.2 × retry)`.
pub const JITTER_FACTOR: f64 = 1.2;

impl TimingError {
    /// The one setting this error is about; `None` for a rule between settings.
    pub fn setting(&self) -> Option<&'static str> {
        match self {
            TimingError::Zero { setting }
            | TimingError::NotWholeSeconds { setting, .. }
            | TimingError::OutOfRange { setting, .. }
            | TimingError::BelowMinimum { setting, .. } => Some(setting),
            TimingError::LeaseNotAboveRenew { .. }
            | TimingError::RenewNotAboveRetry { .. }
            | TimingError::RequestTimeout { .. } => None,
        }
    }
}

impl Default for Timing {
    fn default() -> Self {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

impl Timing {
    /// Builds a timing and checks client-go's rules.
    pub fn new(
        lease_duration: Duration,
        renew_deadline: Duration,
        retry_period: Duration,
    ) -> Result<Self, TimingError> {
        let t = Timing {
            lease_duration,
            renew_deadline,
            retry_period,
        };
        t.validate()?;
        Ok(t)
    }

    /// Checks `lease_duration > renew_deadline > 1.2 × retry_period > 0`, `retry_period` of at
    /// least [`MIN_RETRY_PERIOD`] and `lease_duration` of at most [`MAX_LEASE_DURATION`].
    pub fn validate(&self) -> Result<(), TimingError> {
        for (setting, value) in [
            ("lease-duration", self.lease_duration),
            ("renew-deadline", self.renew_deadline),
            ("retry-period", self.retry_period),
        ] {
            if value.is_zero() {
                return Err(TimingError::Zero { setting });
            }
        }
        if self.retry_period < MIN_RETRY_PERIOD {
            return Err(TimingError::OutOfRange {
                setting: "retry-period",
                value: self.retry_period,
                rule: "at least",
                limit: MIN_RETRY_PERIOD,
            });
        }
        if self.lease_duration > MAX_LEASE_DURATION {
            return Err(TimingError::OutOfRange {
                setting: "lease-duration",
                value: self.lease_duration,
                rule: "at most",
                limit: MAX_LEASE_DURATION,
            });
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(TimingError::LeaseNotAboveRenew {
                lease: self.lease_duration,
                renew: self.renew_deadline,
            });
        }
        if self.renew_deadline <= self.retry_period.mul_f64(JITTER_FACTOR) {
            return Err(TimingError::RenewNotAboveRetry {
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }

    /// Checks that the lease duration is a whole number of seconds, at least `min`.
    pub fn require_whole_seconds(&self, min: Duration) -> Result<(), TimingError> {
        if self.lease_duration.subsec_nanos() != 0 {
            return Err(TimingError::NotWholeSeconds {
                setting: "lease-duration",
                value: self.lease_duration,
            });
        }
        if self.lease_duration < min {
            return Err(TimingError::BelowMinimum {
                setting: "lease-duration",
                value: self.lease_duration,
                min,
            });
        }
        Ok(())
    }

    /// Checks a backend's per-request timeout: above zero and below the renew deadline, so a
    /// hanging request cannot outlast the leader's validity.
    pub fn check_request_timeout(
        &self,
        backend: &'static str,
        value: Duration,
    ) -> Result<(), TimingError> {
        if value.is_zero() || value >= self.renew_deadline {
            return Err(TimingError::RequestTimeout {
                backend,
                value,
                renew: self.renew_deadline,
            });
        }
        Ok(())
    }

    /// A random follower poll interval in `[retry_period, 1.2 × retry_period)`, so followers
    /// spread out.
    pub fn jittered_retry(&self) -> Duration {
        let factor = 1.0 + rand::random::<f64>() * (JITTER_FACTOR - 1.0);
        self.retry_period.mul_f64(factor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_follow_client_go() {
        let t = Timing::default();
        assert_eq!(t.lease_duration, Duration::from_secs(15));
        assert_eq!(t.renew_deadline, Duration::from_secs(10));
        assert_eq!(t.retry_period, Duration::from_secs(2));
        t.validate().expect("defaults are valid");
    }

    #[test]
    fn rules_are_enforced() {
        let s = Duration::from_secs;
        assert!(matches!(
            Timing::new(s(10), s(10), s(2)),
            Err(TimingError::LeaseNotAboveRenew { .. })
        ));
        assert!(matches!(
            Timing::new(s(15), Duration::from_millis(2400), s(2)),
            Err(TimingError::RenewNotAboveRetry { .. })
        ));
        assert!(matches!(
            Timing::new(s(15), s(10), s(0)),
            Err(TimingError::Zero { .. })
        ));
        assert!(Timing::new(s(15), Duration::from_millis(2401), s(2)).is_ok());
    }

    #[test]
    fn durations_are_bounded() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        let e = Timing::new(s(15), s(10), Duration::from_nanos(1)).unwrap_err();
        assert_eq!(e.to_string(), "retry-period (1ns) must be at least 100ms");
        assert!(Timing::new(ms(1000), ms(800), MIN_RETRY_PERIOD).is_ok());
        let e = Timing::new(MAX_LEASE_DURATION + s(1), s(10), s(2)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "lease-duration (3601s) must be at most 3600s"
        );
        assert!(Timing::new(MAX_LEASE_DURATION, s(10), s(2)).is_ok());
    }

    #[test]
    fn whole_seconds() {
        let t = Timing::new(
            Duration::from_millis(1500),
            Duration::from_secs(1),
            Duration::from_millis(200),
        )
        .expect("valid");
        assert!(t.require_whole_seconds(Duration::from_secs(1)).is_err());
        let t = Timing::default();
        assert!(t.require_whole_seconds(Duration::from_secs(1)).is_ok());
        assert!(
            t.require_whole_seconds(Duration::from_secs(15)).is_ok(),
            "the minimum itself"
        );
        assert!(t.require_whole_seconds(Duration::from_secs(16)).is_err());
    }

    #[test]
    fn request_timeouts_end_before_the_renew_deadline() {
        let t = Timing::default();
        assert!(t.check_request_timeout("x", Duration::from_secs(5)).is_ok());
        assert!(t.check_request_timeout("x", Duration::ZERO).is_err());
        let e = t
            .check_request_timeout("etcd", Duration::from_secs(10))
            .unwrap_err();
        assert!(e.to_string().contains("renew-deadline"), "{e}");
    }

    #[test]
    fn jitter_stays_in_range() {
        let t = Timing::default();
        for _ in 0..100 {
            let j = t.jittered_retry();
            assert!(j >= t.retry_period && j < t.retry_period.mul_f64(JITTER_FACTOR));
        }
    }
}
