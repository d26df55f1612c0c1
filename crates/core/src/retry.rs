//! The one retry policy of the system: exponential backoff with jitter (`backon`). The
//! Voyage client retries its requests with it; the workers wait by it before a message they
//! could not process goes back to the bus.

use std::time::Duration;

use backon::{BackoffBuilder, ExponentialBuilder};

/// `times` delays from `min`, doubling up to `max`, each stretched by a random factor in
/// [1, 2) so that clients failing together do not retry together.
pub fn backoff(min: Duration, max: Duration, times: usize) -> ExponentialBuilder {
    ExponentialBuilder::new()
        .with_min_delay(min)
        .with_max_delay(max)
        .with_max_times(times)
        .with_jitter()
}

/// The waits of [`backoff`], for a loop that retries by hand (it decides per error whether
/// to go on).
pub fn delays(min: Duration, max: Duration, times: usize) -> impl Iterator<Item = Duration> {
    backoff(min, max, times).build()
}

/// First wait before a worker hands back a message it failed on.
pub const REDELIVERY_MIN: Duration = Duration::from_millis(100);
/// Longest wait before a worker hands back a message it failed on.
pub const REDELIVERY_MAX: Duration = Duration::from_secs(5);

/// How long a worker waits before handing back a message on its `attempt`-th failure (1 for
/// the first): [`backoff`] from [`REDELIVERY_MIN`] up to [`REDELIVERY_MAX`].
pub fn redelivery_delay(attempt: u32) -> Duration {
    let n = attempt.max(1) as usize;
    delays(REDELIVERY_MIN, REDELIVERY_MAX, n)
        .nth(n - 1)
        .unwrap_or(REDELIVERY_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redelivery_waits_grow_with_jitter_up_to_the_cap() {
        for _ in 0..20 {
            let first = redelivery_delay(1);
            assert!(
                first >= REDELIVERY_MIN && first < 2 * REDELIVERY_MIN,
                "{first:?}"
            );
            let third = redelivery_delay(3);
            assert!(
                third >= 4 * REDELIVERY_MIN && third < 8 * REDELIVERY_MIN,
                "{third:?}"
            );
            let late = redelivery_delay(40);
            assert!(
                late >= REDELIVERY_MAX && late < 2 * REDELIVERY_MAX,
                "{late:?}"
            );
        }
        assert!(redelivery_delay(0) < 2 * REDELIVERY_MIN);
    }
}
