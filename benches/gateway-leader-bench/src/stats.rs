//! Order statistics of a set of samples.

use serde::Serialize;

/// n, min, p50, p90, p99 and max of some samples (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Summary {
    /// How many samples.
    pub n: usize,
    /// The smallest.
    pub min: f64,
    /// The median.
    pub p50: f64,
    /// The 90th percentile.
    pub p90: f64,
    /// The 99th percentile.
    pub p99: f64,
    /// The largest.
    pub max: f64,
}

/// The `p`th percentile of sorted samples by the nearest-rank method: a value that was measured,
/// never an interpolation between two (with 20 samples, p99 is the largest).
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

impl Summary {
    /// The summary of the samples `samples` yields; `None` when there are none.
    pub fn over(samples: impl IntoIterator<Item = f64>) -> Option<Summary> {
        Self::of(&samples.into_iter().collect::<Vec<_>>())
    }

    /// The summary of `samples` (in any order); `None` when there are none.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        let mut s: Vec<f64> = samples.iter().copied().filter(|x| x.is_finite()).collect();
        if s.is_empty() {
            return None;
        }
        s.sort_by(f64::total_cmp);
        Some(Summary {
            n: s.len(),
            min: s[0],
            p50: percentile(&s, 50.0),
            p90: percentile(&s, 90.0),
            p99: percentile(&s, 99.0),
            max: s[s.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let s: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentile(&s, 50.0), 50.0);
        assert_eq!(percentile(&s, 99.0), 99.0);
        assert_eq!(percentile(&s, 0.0), 1.0);
        let sum = Summary::of(&[3.0, 1.0, 2.0]).expect("samples");
        assert_eq!((sum.n, sum.min, sum.p50, sum.max), (3, 1.0, 2.0, 3.0));
        assert!(Summary::of(&[]).is_none());
    }
}
