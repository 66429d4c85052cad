//! Workqueue throughput: 100,000 distinct items through add / get / done, drained by 1 and 2
//! worker tasks on a multi-thread runtime; plus the rate-limiting path (`add_rate_limited` with a
//! zero-delay limiter, then `forget`).
//!
//! `cargo bench --bench workqueue`

use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use kube_informer::{RateLimiter, RateLimitingQueue, WorkQueue};

const ITEMS: u64 = 100_000;

/// Producer adds every item, `workers` tasks get and done them, then the queue is drained.
async fn add_get_done(workers: usize) {
    let queue = WorkQueue::<u64>::new();
    let handles: Vec<_> = (0..workers)
        .map(|_| {
            let queue = queue.clone();
            tokio::spawn(async move {
                let mut n = 0u64;
                while let Some(item) = queue.get().await {
                    queue.done(&item);
                    n += 1;
                }
                n
            })
        })
        .collect();
    for i in 0..ITEMS {
        queue.add(i).expect("queue is live");
    }
    queue.shutdown_with_drain().await;
    let mut total = 0;
    for h in handles {
        total += h.await.expect("worker panicked");
    }
    assert_eq!(total, ITEMS);
}

/// A limiter that never delays, so the bench measures the queue's retry path, not the clock.
struct NoDelay;
impl<T> RateLimiter<T> for NoDelay {
    fn when(&self, _: &T) -> Duration {
        Duration::ZERO
    }
    fn forget(&self, _: &T) {}
    fn num_requeues(&self, _: &T) -> usize {
        0
    }
}

async fn rate_limited_add_get_done() {
    let queue = RateLimitingQueue::<u64>::with_rate_limiter(NoDelay);
    let worker = {
        let queue = queue.clone();
        tokio::spawn(async move {
            while let Some(item) = queue.get().await {
                queue.forget(&item);
                queue.done(&item);
            }
        })
    };
    for i in 0..ITEMS {
        queue.add_rate_limited(i).expect("queue is live");
    }
    queue.shutdown_with_drain().await;
    worker.await.expect("worker panicked");
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut group = c.benchmark_group("workqueue");
    group.throughput(Throughput::Elements(ITEMS));
    group.sample_size(20);
    for workers in [1, 2] {
        group.bench_function(format!("add_get_done_100k/{workers}_workers"), |b| {
            b.to_async(&rt).iter(|| add_get_done(workers));
        });
    }
    group.bench_function("add_rate_limited_get_done_100k/1_worker", |b| {
        b.to_async(&rt).iter(rate_limited_add_get_done);
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
