//! The Topology Manager's metrics (spec §7): admission counters and the
//! admission-duration histogram with kubelet's buckets. Core has no clock:
//! the front-end times an admission and calls
//! [`AdmissionMetrics::observe_duration`] (see `docs/metrics.md`).

use std::time::Duration;

/// Number of finite buckets of `topology_manager_admission_duration_ms`.
pub const DURATION_BUCKETS: usize = 15;

/// Upper bound of finite bucket `index` in milliseconds: `0.05 × 2^index`
/// (kubelet `ExponentialBuckets(.05, 2, 15)`: 0.05 ms … 819.2 ms).
#[must_use]
pub fn bucket_bound_ms(index: usize) -> f64 {
    0.05 * f64::from(1u32 << index.min(31))
}

/// The same bound in nanoseconds (exact: 50,000 ns × 2^index).
fn bucket_bound_ns(index: usize) -> u128 {
    50_000u128 << index.min(64)
}

/// A histogram of durations with kubelet's buckets. Counts are per bucket
/// (not cumulative); Prometheus' cumulative form is [`Histogram::cumulative`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Histogram {
    /// Observations `<= bucket_bound_ms(i)` and above the previous bound;
    /// the last slot counts those above every bound (`+Inf`).
    pub buckets: [u64; DURATION_BUCKETS + 1],
    pub count: u64,
    pub sum: Duration,
}

impl Histogram {
    /// Records one observation.
    pub fn observe(&mut self, elapsed: Duration) {
        let nanos = elapsed.as_nanos();
        let slot = (0..DURATION_BUCKETS)
            .find(|&i| nanos <= bucket_bound_ns(i))
            .unwrap_or(DURATION_BUCKETS);
        self.buckets[slot] += 1;
        self.count += 1;
        self.sum = self.sum.saturating_add(elapsed);
    }

    /// `(le bound in ms, cumulative count)` for every finite bucket; the
    /// `+Inf` bucket is [`Histogram::count`].
    #[must_use]
    pub fn cumulative(&self) -> Vec<(f64, u64)> {
        let mut total = 0;
        (0..DURATION_BUCKETS)
            .map(|i| {
                total += self.buckets[i];
                (bucket_bound_ms(i), total)
            })
            .collect()
    }

    /// The sum of observations in milliseconds (`_sum`).
    #[must_use]
    pub fn sum_ms(&self) -> f64 {
        self.sum.as_secs_f64() * 1000.0
    }
}

/// `topology_manager_admission_requests_total`,
/// `topology_manager_admission_errors_total` and
/// `topology_manager_admission_duration_ms`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AdmissionMetrics {
    pub requests_total: u64,
    pub errors_total: u64,
    pub duration_ms: Histogram,
}

impl AdmissionMetrics {
    /// Records the duration of one pod admission, timed by the caller.
    pub fn observe_duration(&mut self, elapsed: Duration) {
        self.duration_ms.observe(elapsed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_kubelets() {
        assert!((bucket_bound_ms(0) - 0.05).abs() < 1e-12);
        assert!((bucket_bound_ms(14) - 819.2).abs() < 1e-9);
        let mut h = Histogram::default();
        h.observe(Duration::from_micros(50)); // exactly on the first bound
        h.observe(Duration::from_micros(51));
        h.observe(Duration::from_millis(1));
        h.observe(Duration::from_secs(1)); // above 819.2 ms: +Inf
        assert_eq!(h.buckets[0], 1);
        assert_eq!(h.buckets[1], 1);
        // 1 ms lies in (0.8, 1.6]: bucket 5.
        assert_eq!(h.buckets[5], 1);
        assert_eq!(h.buckets[DURATION_BUCKETS], 1);
        assert_eq!(h.count, 4);
        let cumulative = h.cumulative();
        assert_eq!(cumulative.len(), DURATION_BUCKETS);
        assert_eq!(cumulative[4].1, 2);
        assert_eq!(cumulative[14].1, 3);
        assert!((h.sum_ms() - 1001.101).abs() < 1e-9);
    }
}
