//! Owns the NRI front-end's request timings: how long Pinion took to answer
//! each of the runtime's requests, by Plugin-service method — Pinion's share
//! of a pod's start-up on the runtime's side (`/metrics`:
//! `pinion_nri_request_duration_seconds`, `docs/metrics.md`).

use std::collections::BTreeMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use crate::controller::counters::Histogram;

/// Request durations by method; shared by the NRI front-end, which records,
/// and the metrics endpoint, which reads. The methods are
/// `pinion_nri::service::PLUGIN_METHODS` (a fixed set: the runtime cannot add labels).
#[derive(Debug, Default)]
pub struct RequestTimes {
    by_method: Mutex<BTreeMap<&'static str, Histogram>>,
}

impl RequestTimes {
    /// Records one answered request of `method`.
    pub fn observe(&self, method: &'static str, took: Duration) {
        self.by_method
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(method)
            .or_default()
            .observe(took.as_secs_f64());
    }

    /// Every method answered so far with its histogram, by name.
    #[must_use]
    pub fn snapshot(&self) -> Vec<(&'static str, Histogram)> {
        self.by_method
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .iter()
            .map(|(method, histogram)| (*method, histogram.clone()))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_method_keeps_its_own_count_and_sum() {
        let times = RequestTimes::default();
        times.observe("CreateContainer", Duration::from_micros(300));
        times.observe("CreateContainer", Duration::from_millis(2));
        times.observe("StartContainer", Duration::from_micros(100));
        let snapshot = times.snapshot();
        let names: Vec<&str> = snapshot.iter().map(|(m, _)| *m).collect();
        assert_eq!(names, ["CreateContainer", "StartContainer"]);
        let create = &snapshot[0].1;
        assert_eq!(create.count, 2);
        assert!((create.sum - 0.0023).abs() < 1e-9, "sum {}", create.sum);
        // 300 µs lands in the 0.5 ms bucket, 2 ms in the 2.5 ms one.
        assert_eq!(create.counts[1], 1);
        assert_eq!(create.counts[3], 1);
        assert_eq!(snapshot[1].1.count, 1);
    }
}
