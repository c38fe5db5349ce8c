//! The machine's monotonic clock as a number, so that instants logged by different processes
//! can be compared: a leadership line of one replica with a status write of another, or with the
//! instant a benchmark signalled a replica (the split-brain checker in docs/benchmarks.md).
//!
//! Wall-clock timestamps can step (NTP) and `Instant` cannot leave its process; `CLOCK_MONOTONIC`
//! is one clock for every process of the machine since boot.

use rustix::time::{clock_gettime, ClockId};

/// Milliseconds on `CLOCK_MONOTONIC` now (microsecond resolution).
pub fn mono_ms() -> f64 {
    // rustix's safe wrapper: CLOCK_MONOTONIC cannot fail on Linux, hence no NaN path left.
    let t = clock_gettime(ClockId::Monotonic);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// The `CLOCK_MONOTONIC` milliseconds of a Tokio instant of this process (past or future).
pub fn instant_mono_ms(at: tokio::time::Instant) -> f64 {
    let now = tokio::time::Instant::now();
    let base = mono_ms();
    if at >= now {
        base + (at - now).as_secs_f64() * 1e3
    } else {
        base - (now - at).as_secs_f64() * 1e3
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn monotonic_and_in_milliseconds() {
        let a = mono_ms();
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = mono_ms();
        assert!(b - a >= 5.0 && b - a < 5_000.0, "{a} {b}");
        let later = tokio::time::Instant::now() + std::time::Duration::from_secs(1);
        let m = instant_mono_ms(later);
        assert!((m - mono_ms() - 1e3).abs() < 50.0);
    }
}
