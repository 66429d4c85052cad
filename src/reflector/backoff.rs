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

/// Why a [`BackoffConfig`] cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum BackoffConfigError {
    /// `initial` is zero: every retry would be immediate.
    #[error("backoff initial delay must be positive")]
    ZeroInitial,
    /// `max` is below `initial`.
    #[error("backoff max ({max:?}) is below the initial delay ({initial:?})")]
    MaxBelowInitial {
        /// The initial delay.
        initial: Duration,
        /// The maximum delay.
        max: Duration,
    },
    /// `factor` is not a finite number of at least 1.
    #[error("backoff factor must be a finite number >= 1, got {0}")]
    Factor(f64),
    /// `jitter` is not a finite number between 0 and 10.
    #[error("backoff jitter must be a finite number in [0, 10], got {0}")]
    Jitter(f64),
}

impl BackoffConfig {
    /// Checks the settings: `initial` positive, `max >= initial`, `factor` finite and at least 1,
    /// `jitter` finite in `[0, 10]`. A reflector given an invalid backoff logs the error and uses
    /// the default instead.
    ///
    /// # Errors
    ///
    /// The first setting that is out of range.
    pub fn validate(&self) -> Result<(), BackoffConfigError> {
        if self.initial.is_zero() {
            return Err(BackoffConfigError::ZeroInitial);
        }
        if self.max < self.initial {
            return Err(BackoffConfigError::MaxBelowInitial {
                initial: self.initial,
                max: self.max,
            });
        }
        if !self.factor.is_finite() || self.factor < 1.0 {
            return Err(BackoffConfigError::Factor(self.factor));
        }
        if !self.jitter.is_finite() || !(0.0..=10.0).contains(&self.jitter) {
            return Err(BackoffConfigError::Jitter(self.jitter));
        }
        Ok(())
    }
}

/// `d × f`, saturating at `cap` instead of panicking on overflow (`Duration::mul_f64` panics).
fn scaled(d: Duration, f: f64, cap: Duration) -> Duration {
    Duration::try_from_secs_f64(d.as_secs_f64() * f).map_or(cap, |v| v.min(cap))
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
            self.current = scaled(self.current, self.config.factor, self.config.max);
        }
        self.last = Some(now);
        let jitter = self.config.jitter.max(0.0);
        if jitter == 0.0 {
            self.current
        } else {
            // The jittered delay may exceed `max`, as in client-go (`wait.Jitter` after the cap),
            // but never overflows.
            let ceiling = self.config.max.saturating_mul(11);
            scaled(self.current, 1.0 + jitter * self.rng.f64(), ceiling)
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

    #[test]
    fn invalid_configs_are_refused_and_extreme_ones_never_panic() {
        let ok = BackoffConfig::default();
        assert_eq!(ok.validate(), Ok(()));
        let bad = [
            BackoffConfig {
                initial: Duration::ZERO,
                ..ok
            },
            BackoffConfig {
                max: Duration::from_millis(1),
                ..ok
            },
            BackoffConfig {
                factor: f64::NAN,
                ..ok
            },
            BackoffConfig { factor: 0.5, ..ok },
            BackoffConfig {
                factor: f64::INFINITY,
                ..ok
            },
            BackoffConfig { jitter: -1.0, ..ok },
            BackoffConfig {
                jitter: f64::NAN,
                ..ok
            },
        ];
        for b in bad {
            assert!(b.validate().is_err(), "{b:?}");
        }
        // Valid but extreme: huge factor and max saturate instead of overflowing.
        let huge = BackoffConfig {
            initial: Duration::from_secs(1),
            max: Duration::MAX,
            factor: 1e300,
            jitter: 10.0,
            reset_after: Duration::MAX,
        };
        assert_eq!(huge.validate(), Ok(()));
        let mut b = Backoff::new(huge);
        for _ in 0..5 {
            let _ = b.next_delay();
        }
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
