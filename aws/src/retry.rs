//! Which failures are worth another attempt, and how long to wait before it.

use std::time::Duration;

/// Attempts in all (not retries), and the exponential backoff between them: before attempt
/// n+1 a uniformly random wait in [0, min(cap, base * 2^(n-1))] ("full jitter",
/// <https://aws.amazon.com/blogs/architecture/exponential-backoff-and-jitter/>), so that
/// many clients throttled together do not come back together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base: Duration,
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base: Duration::from_millis(200),
            cap: Duration::from_secs(20),
        }
    }
}

impl RetryPolicy {
    /// The wait after failed attempt `attempt` (1-based).
    pub(crate) fn backoff(&self, attempt: u32) -> Duration {
        let shift = attempt.saturating_sub(1).min(30);
        let ceiling = self
            .base
            .checked_mul(1u32 << shift)
            .unwrap_or(self.cap)
            .min(self.cap);
        let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
        Duration::from_nanos(fastrand::u64(0..=nanos))
    }
}

/// Whether an error answer is worth another attempt: throttling (by code, or 429 Too Many
/// Requests), and AWS's own trouble (by code, or any 5xx).
/// A client error (400 with any other code) is not: it would fail the same way again.
pub(crate) fn retryable(status: u16, code: &str) -> bool {
    matches!(
        code,
        "RequestLimitExceeded"
            | "Throttling"
            | "ThrottlingException"
            | "ServiceUnavailable"
            | "InternalError"
            | "Unavailable"
    ) || status == 429
        || status >= 500
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_stays_under_its_ceiling() {
        let p = RetryPolicy::default();
        for (attempt, ceiling) in [(1, 200), (2, 400), (3, 800), (8, 20_000), (40, 20_000)] {
            for _ in 0..200 {
                assert!(p.backoff(attempt) <= Duration::from_millis(ceiling));
            }
        }
        let zero = RetryPolicy {
            base: Duration::ZERO,
            ..p
        };
        assert_eq!(zero.backoff(3), Duration::ZERO);
    }

    #[test]
    fn what_is_retried() {
        for (status, code, retry) in [
            (503, "RequestLimitExceeded", true),
            (400, "RequestLimitExceeded", true),
            (500, "InternalError", true),
            (503, "Unavailable", true),
            (502, "", true),
            (429, "", true),
            (400, "InvalidParameterValue", false),
            (403, "UnauthorizedOperation", false),
            (400, "InsufficientInstanceCapacity", false),
        ] {
            assert_eq!(retryable(status, code), retry, "{status} {code}");
        }
    }
}
