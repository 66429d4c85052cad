//! Heap bytes and allocations per decoded Pod, with a counting global allocator: the serde_json
//! floor, the floor plus the strip transform, and the decode-time projection (see
//! `benches/projection.rs` for their CPU).
//!
//! `cargo bench --bench projection_heap`
//!
//! "kept" is what the decoded Pods hold (live after decoding, the Pods kept); "made" is every
//! allocation the decode performed, including what was built and freed again (a transform's
//! managedFields, serde_json's scratch).

use std::{
    alloc::{GlobalAlloc, Layout, System},
    hint::black_box,
    sync::atomic::{AtomicU64, Ordering::Relaxed},
};

use k8s_openapi::api::core::v1::Pod;
use kube_informer::{Projection, strip_managed_fields};

#[allow(dead_code, unused_imports)]
#[path = "../bench/src/podgen.rs"]
mod podgen;

struct Counting;

static ALLOCS: AtomicU64 = AtomicU64::new(0);
static FREES: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);

// SAFETY: every call is forwarded to `System` with the same arguments; the counters are only
// atomics on the side.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCS.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: as `GlobalAlloc::alloc`, whose contract the caller upholds.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREES.fetch_add(1, Relaxed);
        FREED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: as `GlobalAlloc::dealloc`, whose contract the caller upholds.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // A move to a new block: one allocation made, one freed.
        ALLOCS.fetch_add(1, Relaxed);
        FREES.fetch_add(1, Relaxed);
        ALLOCATED.fetch_add(new_size as u64, Relaxed);
        FREED.fetch_add(layout.size() as u64, Relaxed);
        // SAFETY: as `GlobalAlloc::realloc`, whose contract the caller upholds.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

#[derive(Clone, Copy)]
struct Counts {
    allocs: u64,
    frees: u64,
    allocated: u64,
    freed: u64,
}

fn counts() -> Counts {
    Counts {
        allocs: ALLOCS.load(Relaxed),
        frees: FREES.load(Relaxed),
        allocated: ALLOCATED.load(Relaxed),
        freed: FREED.load(Relaxed),
    }
}

const PODS: usize = 1000;

fn bodies(managed_fields: bool) -> Vec<Vec<u8>> {
    let f = podgen::Fixture::with_managed_fields(42, PODS, managed_fields);
    (0..PODS)
        .map(|i| {
            let mut b = Vec::new();
            f.write_pod(i, podgen::Fixture::base_rv(i), &mut b);
            b
        })
        .collect()
}

/// Decodes every body with `decode`, keeping the Pods, and prints the heap per Pod.
fn row(what: &str, bodies: &[Vec<u8>], decode: impl Fn(&[u8]) -> Pod) {
    let mut kept = Vec::with_capacity(bodies.len());
    let before = counts();
    for b in bodies {
        kept.push(decode(b));
    }
    let after = counts();
    let n = bodies.len() as f64;
    let live_bytes =
        (after.allocated - before.allocated) as f64 - (after.freed - before.freed) as f64;
    let live_allocs = (after.allocs - before.allocs) as f64 - (after.frees - before.frees) as f64;
    println!(
        "| {what} | {:.1} | {:.0} | {:.1} | {:.0} |",
        live_bytes / n / 1024.0,
        live_allocs / n,
        (after.allocated - before.allocated) as f64 / n / 1024.0,
        (after.allocs - before.allocs) as f64 / n,
    );
    black_box(kept);
}

fn main() {
    let with = bodies(true);
    let without = bodies(false);
    let json = with.iter().map(Vec::len).sum::<usize>() as f64 / PODS as f64;
    println!(
        "{PODS} podgen Pods, {:.1} KB of JSON each on average\n",
        json / 1000.0
    );
    println!(
        "| decode | kept KiB/Pod | kept allocations/Pod | made KiB/Pod | made allocations/Pod |"
    );
    println!("|---|---|---|---|---|");
    row("floor: serde_json::from_slice::<Pod>", &with, |b| {
        serde_json::from_slice(b).unwrap()
    });
    row("full decode + strip_managed_fields", &with, |b| {
        strip_managed_fields(serde_json::from_slice(b).unwrap())
    });
    let p = Projection::strip_managed_fields();
    row("projection: strip_managed_fields", &with, |b| {
        p.from_slice(b).unwrap()
    });
    row(
        "reference: Pods sent without managedFields",
        &without,
        |b| serde_json::from_slice(b).unwrap(),
    );
}
