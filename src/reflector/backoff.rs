//! Exponential backoff with jitter and reset, as client-go's reflector uses between failures.

use std::time::Duration;

use tokio::time::Instant;

/// Backoff settings. The defaults are client-go's reflector defaults
/// (`NewExponentialBackoffManager(800ms, 30s, 2min, 2.0, 1.0)` in `reflector.go`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// First delay after a failure. Default 800 ms.
    pub initial: Duration,
    /// The delay never grows past this (before jitter). Default 30 s.
    pub max: Duration,
    /// Each consecutive failure multiplies the delay by this. Default 2.0.
    pub factor: f64,
    /// Each delay `d` becomes a uniform random value in `[d, d × (1 + jitter)]`; 0 disables
    /// jitter. Default 1.0, as client-go (`wait.Jitter(d, 1.0)`), so many informers that failed
    /// together do not retry together.
    pub jitter: f64,
    /// After this long without a backoff the delay starts again from `initial`. Default 2 min.
    pub reset_after: Duration,
}

impl Default for BackoffConfig {
    fn default() -> Self {
        Self {
            initial: Duration::from_millis(800),
            max: Duration::from_secs(30),
            factor: 2.0,
            jitter: 1.0,
            reset_after: Duration::from_secs(120),
        }
    }
}

/// Backoff state: call [`Backoff::next_delay`] at each failure.
#[derive(Debug)]
pub(crate) struct Backoff {
    config: BackoffConfig,
    current: Duration,
    last: Option<Instant>,
    rng: fastrand::Rng,
}

impl Backoff {
    pub(crate) fn new(config: BackoffConfig) -> Self {
        Self {
            config,
            current: Duration::ZERO,
            last: None,
            rng: fastrand::Rng::new(),
        }
    }

    #[cfg(test)]
    pub(crate) fn with_seed(config: BackoffConfig, seed: u64) -> Self {
        Self {
            rng: fastrand::Rng::with_seed(seed),
            ..Self::new(config)
        }
    }

    /// The delay to wait before the next attempt.
    pub(crate) fn next_delay(&mut self) -> Duration {
        let now = Instant::now();
        let healthy_for = self.last.map(|t| now.saturating_duration_since(t));
        if self.current.is_zero() || healthy_for.is_some_and(|d| d >= self.config.reset_after) {
            self.current = self.config.initial;
        } else {
            self.current = self
                .current
                .mul_f64(self.config.factor)
                .min(self.config.max);
        }
        self.last = Some(now);
        let jitter = self.config.jitter.max(0.0);
        if jitter == 0.0 {
            self.current
        } else {
            self.current.mul_f64(1.0 + jitter * self.rng.f64())
        }
    }

    /// Called after a delay has been waited: the reset clock counts from the end of the wait,
    /// so only healthy time counts toward a reset.
    pub(crate) fn waited(&mut self) {
        self.last = Some(Instant::now());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_jitter() -> BackoffConfig {
        BackoffConfig {
            jitter: 0.0,
            ..Default::default()
        }
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_doubles_from_800ms_and_caps_at_30s() {
        let mut b = Backoff::new(no_jitter());
        let got: Vec<_> = (0..8).map(|_| b.next_delay().as_millis()).collect();
        assert_eq!(got, [800, 1600, 3200, 6400, 12800, 25600, 30000, 30000]);
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_resets_after_two_minutes_without_failure() {
        let mut b = Backoff::new(no_jitter());
        b.next_delay();
        b.next_delay();
        b.waited();
        tokio::time::advance(Duration::from_secs(119)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(3200));
        b.waited();
        tokio::time::advance(Duration::from_secs(120)).await;
        assert_eq!(b.next_delay(), Duration::from_millis(800));
    }

    #[tokio::test(start_paused = true)]
    async fn backoff_jitter_stays_within_one_to_two_times_the_delay() {
        let mut b = Backoff::with_seed(BackoffConfig::default(), 7);
        let mut base = Duration::from_millis(800);
        for _ in 0..10 {
            let d = b.next_delay();
            assert!(
                d >= base && d <= base * 2,
                "{d:?} outside [{base:?}, {:?}]",
                base * 2
            );
            base = (base * 2).min(Duration::from_secs(30));
        }
    }
}
