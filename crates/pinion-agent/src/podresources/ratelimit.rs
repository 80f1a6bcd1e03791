//! kubelet's rate limit of the podresources server: one token bucket for
//! every RPC of both API versions; a call that finds it empty is refused
//! with `ResourceExhausted` "rejected by rate limit".

use std::sync::{Mutex, PoisonError};
use std::time::Instant;

/// kubelet's refusal text (`ErrorLimitExceeded`).
pub const REJECTED: &str = "rejected by rate limit";

/// A token bucket: `burst` tokens, refilled at `qps` per second.
#[derive(Debug)]
pub struct TokenBucket {
    qps: f64,
    burst: f64,
    state: Mutex<(f64, Instant)>,
}

impl TokenBucket {
    /// A full bucket.
    #[must_use]
    pub fn new(qps: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            qps: f64::from(qps.max(1)),
            burst,
            state: Mutex::new((burst, now)),
        }
    }

    /// Takes a token at `now` if there is one.
    pub fn allow(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, last) = &mut *state;
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * self.qps).min(self.burst);
        *last = (*last).max(now);
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_full_bucket_allows_burst_calls_then_refills_at_qps() {
        let start = Instant::now();
        let bucket = TokenBucket::new(100, 10, start);
        let allowed = (0..15).filter(|_| bucket.allow(start)).count();
        assert_eq!(allowed, 10);
        // 100 per second: one token every 10 ms.
        assert!(!bucket.allow(start + Duration::from_millis(5)));
        assert!(bucket.allow(start + Duration::from_millis(10)));
        assert!(!bucket.allow(start + Duration::from_millis(10)));
        // A long pause refills no more than the burst.
        let later = start + Duration::from_secs(60);
        assert_eq!((0..20).filter(|_| bucket.allow(later)).count(), 10);
    }
}
