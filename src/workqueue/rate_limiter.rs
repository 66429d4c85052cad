//! Rate limiters deciding how long a retried item waits: client-go's
//! `util/workqueue/default_rate_limiters.go`.

use std::{collections::HashMap, fmt, hash::Hash, marker::PhantomData, sync::Arc, time::Duration};

use parking_lot::Mutex;
use tokio::time::Instant;

/// Decides how long an item waits before it is retried (client-go's `RateLimiter`).
///
/// Implementations must be cheap and non-blocking: [`when`](Self::when) is called on the
/// worker's path by [`RateLimitingQueue::add_rate_limited`](super::RateLimitingQueue::add_rate_limited).
pub trait RateLimiter<T>: Send + Sync {
    /// How long `item` should wait now; counts one more failure for per-item limiters.
    fn when(&self, item: &T) -> Duration;
    /// Stops tracking `item` (it succeeded, or was given up on).
    fn forget(&self, item: &T);
    /// How many failures `item` has had since it was last forgotten.
    fn num_requeues(&self, item: &T) -> usize;
}

/// Smart pointers to a limiter are limiters, so one can be shared (`Arc`) or boxed.
macro_rules! forward_rate_limiter {
    ($($ptr:ident),*) => {$(
        impl<T, R: RateLimiter<T> + ?Sized> RateLimiter<T> for $ptr<R> {
            fn when(&self, item: &T) -> Duration {
                (**self).when(item)
            }
            fn forget(&self, item: &T) {
                (**self).forget(item);
            }
            fn num_requeues(&self, item: &T) -> usize {
                (**self).num_requeues(item)
            }
        }
    )*};
}
forward_rate_limiter!(Arc, Box);

/// client-go's `DefaultControllerRateLimiter`: the worse of a per-item exponential backoff
/// (5 ms doubling to 1000 s) and an overall token bucket (10 qps, burst 100), so one failing
/// item backs off on its own while a storm of failures is held to 10 retries a second.
pub fn default_controller_rate_limiter<T>() -> MaxOf<T>
where
    T: Clone + Eq + Hash + Send + Sync + 'static,
{
    MaxOf::new()
        .with(ItemExponentialFailure::default())
        .with(Bucket::default())
}

/// Per-item failure counts shared by the per-item limiters.
struct Failures<T>(Mutex<HashMap<T, usize>>);

impl<T: Clone + Eq + Hash> Failures<T> {
    fn new() -> Self {
        Self(Mutex::new(HashMap::new()))
    }

    /// Counts one more failure; returns the count before it.
    fn bump(&self, item: &T) -> usize {
        let mut map = self.0.lock();
        if let Some(n) = map.get_mut(item) {
            let before = *n;
            *n += 1;
            before
        } else {
            map.insert(item.clone(), 1);
            0
        }
    }

    fn forget(&self, item: &T) {
        self.0.lock().remove(item);
    }

    fn get(&self, item: &T) -> usize {
        self.0.lock().get(item).copied().unwrap_or(0)
    }
}

/// `base * 2^failures`, capped at `max` (client-go's `ItemExponentialFailureRateLimiter`).
///
/// The first [`when`](RateLimiter::when) of an item returns `base`, the next `2 * base`, and so
/// on until [`forget`](RateLimiter::forget). Dealing with a maximum number of retries is left to
/// the caller, through [`num_requeues`](RateLimiter::num_requeues).
pub struct ItemExponentialFailure<T> {
    failures: Failures<T>,
    base: Duration,
    max: Duration,
}

impl<T> fmt::Debug for ItemExponentialFailure<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ItemExponentialFailure")
            .field("base", &self.base)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Eq + Hash> ItemExponentialFailure<T> {
    /// A limiter starting at `base` and never exceeding `max`.
    pub fn new(base: Duration, max: Duration) -> Self {
        Self {
            failures: Failures::new(),
            base,
            max,
        }
    }
}

impl<T: Clone + Eq + Hash> Default for ItemExponentialFailure<T> {
    /// 5 ms doubling to 1000 s, as in client-go's `DefaultControllerRateLimiter`.
    fn default() -> Self {
        Self::new(Duration::from_millis(5), Duration::from_secs(1000))
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for ItemExponentialFailure<T> {
    fn when(&self, item: &T) -> Duration {
        let exp = self.failures.bump(item);
        if self.base.is_zero() {
            // Zero at any count: `0 × 2^1024` would be NaN below, and so the cap.
            return Duration::ZERO;
        }
        // In floating point, as client-go, so a large exponent saturates instead of overflowing.
        let exp = i32::try_from(exp).unwrap_or(i32::MAX);
        let backoff = self.base.as_secs_f64() * 2f64.powi(exp);
        if !backoff.is_finite() || backoff >= self.max.as_secs_f64() {
            return self.max;
        }
        Duration::try_from_secs_f64(backoff).map_or(self.max, |d| d.min(self.max))
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.get(item)
    }
}

/// `fast` for the first `max_fast_attempts` failures of an item, `slow` after
/// (client-go's `ItemFastSlowRateLimiter`).
pub struct FastSlow<T> {
    failures: Failures<T>,
    fast: Duration,
    slow: Duration,
    max_fast_attempts: usize,
}

impl<T> fmt::Debug for FastSlow<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FastSlow")
            .field("fast", &self.fast)
            .field("slow", &self.slow)
            .field("max_fast_attempts", &self.max_fast_attempts)
            .finish_non_exhaustive()
    }
}

impl<T: Clone + Eq + Hash> FastSlow<T> {
    /// A limiter answering `fast` for `max_fast_attempts` failures, then `slow`.
    pub fn new(fast: Duration, slow: Duration, max_fast_attempts: usize) -> Self {
        Self {
            failures: Failures::new(),
            fast,
            slow,
            max_fast_attempts,
        }
    }
}

impl<T: Clone + Eq + Hash + Send + Sync> RateLimiter<T> for FastSlow<T> {
    fn when(&self, item: &T) -> Duration {
        if self.failures.bump(item) < self.max_fast_attempts {
            self.fast
        } else {
            self.slow
        }
    }

    fn forget(&self, item: &T) {
        self.failures.forget(item);
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.failures.get(item)
    }
}

/// An overall token bucket shared by all items (client-go's `BucketRateLimiter` over
/// `golang.org/x/time/rate`): `burst` tokens, refilled at `qps` per second; each
/// [`when`](RateLimiter::when) reserves one token and returns how long until it is available.
///
/// Reservation style like `rate.Limiter.Reserve().Delay()`: no background task, tokens may go
/// negative (a queue of reservations), time from `tokio::time` so a paused clock drives it.
/// It tracks no item: `forget` does nothing and `num_requeues` is always 0.
///
/// As in `x/time/rate`, a `qps` of zero (or negative, or NaN) hands out the burst and then never
/// another token, infinite `qps` never waits, and a zero `burst` with finite `qps` never grants
/// a token; "never" is [`Duration::MAX`], which a delaying queue treats as never adding the item.
pub struct Bucket {
    qps: f64,
    burst: f64,
    state: Mutex<BucketState>,
}

struct BucketState {
    tokens: f64,
    /// When `tokens` was computed; `None` before the first reservation (bucket full).
    last: Option<Instant>,
}

impl fmt::Debug for Bucket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Bucket")
            .field("qps", &self.qps)
            .field("burst", &self.burst)
            .finish_non_exhaustive()
    }
}

impl Bucket {
    /// A full bucket of `burst` tokens refilled at `qps` per second.
    pub fn new(qps: f64, burst: u32) -> Self {
        let qps = if qps.is_nan() || qps < 0.0 { 0.0 } else { qps };
        Self {
            qps,
            burst: f64::from(burst),
            state: Mutex::new(BucketState {
                tokens: f64::from(burst),
                last: None,
            }),
        }
    }

    /// Reserves one token; returns how long until it may be used.
    pub fn reserve(&self) -> Duration {
        if self.qps == f64::INFINITY {
            return Duration::ZERO;
        }
        if self.burst < 1.0 {
            return Duration::MAX;
        }
        let now = Instant::now();
        let mut state = self.state.lock();
        // Refill for the time elapsed, capped at the burst (`advance` in x/time/rate).
        let elapsed = state
            .last
            .map_or(Duration::ZERO, |last| now.saturating_duration_since(last));
        let refilled = (state.tokens + elapsed.as_secs_f64() * self.qps).min(self.burst);
        if self.qps == 0.0 && refilled < 1.0 {
            // Nothing left and never refilled: refuse without consuming (x/time/rate's `ok=false`).
            state.tokens = refilled;
            state.last = Some(now);
            return Duration::MAX;
        }
        let tokens = refilled - 1.0;
        state.tokens = tokens;
        state.last = Some(now);
        if tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-tokens / self.qps).unwrap_or(Duration::MAX)
        }
    }
}

impl Default for Bucket {
    /// 10 qps, burst 100, as in client-go's `DefaultControllerRateLimiter`.
    fn default() -> Self {
        Self::new(10.0, 100)
    }
}

impl<T> RateLimiter<T> for Bucket {
    fn when(&self, _item: &T) -> Duration {
        self.reserve()
    }

    fn forget(&self, _item: &T) {}

    fn num_requeues(&self, _item: &T) -> usize {
        0
    }
}

/// The worst case of several limiters (client-go's `MaxOfRateLimiter`): `when` asks every one
/// and returns the longest delay, `num_requeues` the highest count, `forget` forgets in all.
///
/// With a token bucket inside, the bucket's burst may appear exceeded when other limiters
/// delayed some items longer than the bucket asked (as client-go notes).
pub struct MaxOf<T> {
    limiters: Vec<Box<dyn RateLimiter<T>>>,
    _item: PhantomData<fn(&T)>,
}

impl<T> fmt::Debug for MaxOf<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MaxOf")
            .field("limiters", &self.limiters.len())
            .finish()
    }
}

impl<T> Default for MaxOf<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T> MaxOf<T> {
    /// An empty combination (always zero delay) to add limiters to with [`with`](Self::with).
    pub fn new() -> Self {
        Self {
            limiters: Vec::new(),
            _item: PhantomData,
        }
    }

    /// Adds a limiter.
    #[must_use]
    pub fn with(mut self, limiter: impl RateLimiter<T> + 'static) -> Self {
        self.limiters.push(Box::new(limiter));
        self
    }
}

impl<T> RateLimiter<T> for MaxOf<T> {
    fn when(&self, item: &T) -> Duration {
        // Every limiter is asked (not short-circuited): each counts the failure or takes a token.
        self.limiters
            .iter()
            .map(|l| l.when(item))
            .max()
            .unwrap_or_default()
    }

    fn forget(&self, item: &T) {
        for l in &self.limiters {
            l.forget(item);
        }
    }

    fn num_requeues(&self, item: &T) -> usize {
        self.limiters
            .iter()
            .map(|l| l.num_requeues(item))
            .max()
            .unwrap_or(0)
    }
}

/// Caps another limiter's delay at `max` (client-go's `WithMaxWaitRateLimiter`).
pub struct WithMaxWait<R> {
    limiter: R,
    max: Duration,
}

impl<R: fmt::Debug> fmt::Debug for WithMaxWait<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WithMaxWait")
            .field("limiter", &self.limiter)
            .field("max", &self.max)
            .finish()
    }
}

impl<R> WithMaxWait<R> {
    /// Wraps `limiter`, never waiting longer than `max`.
    pub fn new(limiter: R, max: Duration) -> Self {
        Self { limiter, max }
    }
}

impl<T, R: RateLimiter<T>> RateLimiter<T> for WithMaxWait<R> {
    fn when(&self, item: &T) -> Duration {
        self.limiter.when(item).min(self.max)
    }
    fn forget(&self, item: &T) {
        self.limiter.forget(item);
    }
    fn num_requeues(&self, item: &T) -> usize {
        self.limiter.num_requeues(item)
    }
}

#[cfg(test)]
mod tests {
    use tokio::time::advance;

    use super::*;

    const MS: Duration = Duration::from_millis(1);

    #[test]
    fn item_exponential_failure_doubles_per_item_up_to_the_cap() {
        let l = ItemExponentialFailure::new(MS, Duration::from_secs(1));
        let got: Vec<_> = (0..5).map(|_| l.when(&"a")).collect();
        assert_eq!(got, vec![MS, 2 * MS, 4 * MS, 8 * MS, 16 * MS]);
        assert_eq!(l.num_requeues(&"a"), 5);
        // Independent per item.
        assert_eq!(l.when(&"b"), MS);
        for _ in 0..20 {
            l.when(&"a");
        }
        assert_eq!(l.when(&"a"), Duration::from_secs(1));
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(l.when(&"a"), MS);
    }

    #[test]
    fn item_exponential_failure_defaults_to_5ms_base_1000s_cap() {
        let l = ItemExponentialFailure::<u8>::default();
        assert_eq!(l.when(&0), Duration::from_millis(5));
        assert_eq!(l.when(&0), Duration::from_millis(10));
        for _ in 0..100 {
            l.when(&0);
        }
        assert_eq!(l.when(&0), Duration::from_secs(1000));
    }

    #[test]
    fn item_exponential_failure_with_a_zero_base_stays_zero() {
        let r = ItemExponentialFailure::new(Duration::ZERO, Duration::from_secs(1));
        for n in 0..1100 {
            assert_eq!(r.when(&"a"), Duration::ZERO, "failure {n}");
        }
    }

    #[test]
    fn item_exponential_failure_saturates_on_huge_exponents() {
        let l = ItemExponentialFailure::new(Duration::from_secs(1), Duration::MAX);
        for _ in 0..2000 {
            l.when(&0);
        }
        assert_eq!(l.when(&0), Duration::MAX);
    }

    #[test]
    fn fast_slow_is_fast_for_max_fast_attempts_then_slow() {
        let l = FastSlow::new(5 * MS, Duration::from_secs(10), 3);
        let got: Vec<_> = (0..5).map(|_| l.when(&"a")).collect();
        assert_eq!(
            got,
            vec![
                5 * MS,
                5 * MS,
                5 * MS,
                Duration::from_secs(10),
                Duration::from_secs(10)
            ]
        );
        assert_eq!(l.num_requeues(&"a"), 5);
        l.forget(&"a");
        assert_eq!(l.when(&"a"), 5 * MS);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_grants_the_burst_then_spaces_reservations_at_qps() {
        let l = Bucket::new(10.0, 3);
        let when = |l: &Bucket| RateLimiter::<()>::when(l, &());
        for _ in 0..3 {
            assert_eq!(when(&l), Duration::ZERO);
        }
        assert_eq!(when(&l), Duration::from_millis(100));
        assert_eq!(when(&l), Duration::from_millis(200));
        // Refills with time, never above the burst.
        advance(Duration::from_secs(10)).await;
        for _ in 0..3 {
            assert_eq!(when(&l), Duration::ZERO);
        }
        assert_eq!(when(&l), Duration::from_millis(100));
        assert_eq!(RateLimiter::<()>::num_requeues(&l, &()), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_defaults_to_10_qps_burst_100() {
        let l = Bucket::default();
        for _ in 0..100 {
            assert_eq!(l.reserve(), Duration::ZERO);
        }
        assert_eq!(l.reserve(), Duration::from_millis(100));
    }

    #[tokio::test(start_paused = true)]
    async fn bucket_edge_rates_follow_x_time_rate() {
        let inf = Bucket::new(f64::INFINITY, 0);
        assert_eq!(inf.reserve(), Duration::ZERO);
        let zero = Bucket::new(0.0, 2);
        assert_eq!(zero.reserve(), Duration::ZERO);
        assert_eq!(zero.reserve(), Duration::ZERO);
        assert_eq!(zero.reserve(), Duration::MAX);
        assert_eq!(Bucket::new(f64::NAN, 0).reserve(), Duration::MAX);
        assert_eq!(Bucket::new(10.0, 0).reserve(), Duration::MAX);
    }

    #[tokio::test(start_paused = true)]
    async fn max_of_returns_the_worst_case_and_forgets_everywhere() {
        let l = MaxOf::new()
            .with(FastSlow::new(3 * MS, 7 * MS, 2))
            .with(ItemExponentialFailure::new(MS, Duration::from_secs(1)));
        let got: Vec<_> = (0..4).map(|_| l.when(&"a")).collect();
        assert_eq!(got, vec![3 * MS, 3 * MS, 7 * MS, 8 * MS]);
        assert_eq!(l.num_requeues(&"a"), 4);
        l.forget(&"a");
        assert_eq!(l.num_requeues(&"a"), 0);
        assert_eq!(MaxOf::<u8>::new().when(&1), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn default_controller_rate_limiter_is_max_of_exponential_and_bucket() {
        let l = default_controller_rate_limiter::<String>();
        let a = String::from("a");
        assert_eq!(l.when(&a), Duration::from_millis(5));
        assert_eq!(l.when(&a), Duration::from_millis(10));
        // 98 more distinct items exhaust the burst of 100; the bucket then dominates.
        for i in 0..98 {
            assert_eq!(l.when(&format!("x{i}")), Duration::from_millis(5));
        }
        assert_eq!(l.when(&String::from("b")), Duration::from_millis(100));
        assert_eq!(l.num_requeues(&a), 2);
    }

    #[test]
    fn with_max_wait_caps_the_delay() {
        let l = WithMaxWait::new(FastSlow::new(MS, Duration::from_secs(60), 0), 10 * MS);
        assert_eq!(l.when(&1), 10 * MS);
        assert_eq!(l.num_requeues(&1), 1);
        l.forget(&1);
        assert_eq!(l.num_requeues(&1), 0);
    }

    #[test]
    fn shared_and_boxed_limiters_are_limiters() {
        let shared: Arc<dyn RateLimiter<u8>> = Arc::new(FastSlow::new(MS, 2 * MS, 1));
        let boxed: Box<dyn RateLimiter<u8>> = Box::new(Arc::clone(&shared));
        assert_eq!(boxed.when(&1), MS);
        assert_eq!(shared.when(&1), 2 * MS);
        assert_eq!(boxed.num_requeues(&1), 2);
        boxed.forget(&1);
        assert_eq!(shared.num_requeues(&1), 0);
    }
}
