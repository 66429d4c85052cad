//! Decode-time projection against the serde_json floor, on the benchmarks' generated Pods
//! (`bench/src/podgen.rs`, 7.4–7.9 KB of JSON each, two `managedFields` entries).
//!
//! `cargo bench --bench projection -- --quick`
//!
//! - `floor`: `serde_json::from_slice::<Pod>`, everything built (what S1's floor does);
//! - `strip transform`: the floor plus `strip_managed_fields` afterwards (what
//!   `strip_managed_fields_transform` costs: managedFields built, then freed);
//! - `projection`: `Projection::strip_managed_fields()`, managedFields skipped by the parser;
//! - `relist check`: each managedFields entry's `fieldsV1` read as strictly as a
//!   `serde_json::Value` but not built (`Projection::checking`), what an in-order relist into a
//!   Compact cache checks listed JSON of a k8s-openapi kind with.
//!
//! The `list` group does the same through the reflector's `ListDecoder` on a 1,000-Pod list
//! body. Heap bytes and allocations per Pod: `cargo bench --bench projection_heap`.

use std::hint::black_box;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube_informer::{Projection, reflector::decode::ListDecoder, strip_managed_fields};

#[allow(dead_code, unused_imports)]
#[path = "../bench/src/podgen.rs"]
mod podgen;

const PODS: usize = 200;
const LIST: usize = 1000;

fn pods(managed_fields: bool) -> Vec<Vec<u8>> {
    let f = podgen::Fixture::with_managed_fields(42, PODS, managed_fields);
    (0..PODS)
        .map(|i| {
            let mut b = Vec::new();
            f.write_pod(i, podgen::Fixture::base_rv(i), &mut b);
            b
        })
        .collect()
}

fn per_pod(c: &mut Criterion) {
    let bodies = pods(true);
    let bytes: usize = bodies.iter().map(Vec::len).sum();
    let projection = Projection::strip_managed_fields();
    let mut g = c.benchmark_group(format!("decode {PODS} Pods"));
    g.throughput(Throughput::Bytes(bytes as u64));
    g.bench_function("floor: serde_json::from_slice::<Pod>", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(serde_json::from_slice::<Pod>(body).unwrap());
            }
        })
    });
    g.bench_function("full decode + strip_managed_fields", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(strip_managed_fields(
                    serde_json::from_slice::<Pod>(body).unwrap(),
                ));
            }
        })
    });
    // What an in-order relist into a Compact cache checks listed JSON of a k8s-openapi kind
    // with before it stores the bytes (`CacheStats::checked`): a decode that skips `fieldsV1`.
    let check = Projection::checking("metadata.managedFields[*].fieldsV1").unwrap();
    g.bench_function("relist check: fieldsV1 read, not built", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(check.from_slice::<Pod>(body).unwrap());
            }
        })
    });
    g.bench_function("projection: strip_managed_fields", |b| {
        b.iter(|| {
            for body in &bodies {
                black_box(projection.from_slice::<Pod>(body).unwrap());
            }
        })
    });
    // The same Pods encoded without managedFields: what no parser-side skip can beat.
    let without = pods(false);
    g.bench_function(
        "reference: from_slice of Pods sent without managedFields",
        |b| {
            b.iter(|| {
                for body in &without {
                    black_box(serde_json::from_slice::<Pod>(body).unwrap());
                }
            })
        },
    );
    g.finish();
}

fn list(c: &mut Criterion) {
    let body = podgen::Fixture::new(42, LIST).list(7, podgen::Fixture::base_rv);
    let mut g = c.benchmark_group(format!("decode a list of {LIST} Pods"));
    g.throughput(Throughput::Bytes(body.len() as u64));
    g.sample_size(20);
    g.bench_function("floor: serde_json::from_slice::<List<Pod>>", |b| {
        b.iter(|| black_box(serde_json::from_slice::<k8s_openapi::List<Pod>>(&body).unwrap()))
    });
    let decode = |projection: Option<Projection>, strip: bool| {
        let mut decoder = ListDecoder::<Pod, Pod>::new();
        if let Some(p) = projection {
            decoder = decoder.projection(p);
        }
        let mut map = |p: Pod| if strip { strip_managed_fields(p) } else { p };
        decoder.push(&body, &mut map).unwrap();
        decoder.finish(&mut map).unwrap()
    };
    g.bench_function("ListDecoder", |b| b.iter(|| black_box(decode(None, false))));
    g.bench_function("ListDecoder + strip_managed_fields", |b| {
        b.iter(|| black_box(decode(None, true)))
    });
    g.bench_function("ListDecoder with projection", |b| {
        b.iter(|| black_box(decode(Some(Projection::strip_managed_fields()), false)))
    });
    g.finish();
}

criterion_group!(benches, per_pod, list);
criterion_main!(benches);
