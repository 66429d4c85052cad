//! The same Pods decoded from protobuf and from JSON into k8s-openapi's `Pod`.
//!
//! `cargo bench --bench protobuf -- --warm-up-time 1 --measurement-time 3`
//!
//! `pod/protobuf` is the direct decoder (`protobuf::direct`), `pod/protobuf_serde` the serde
//! `Deserializer` on the same bytes, `pod/json` serde_json on the same object's JSON.
//!
//! The bytes are the golden fixtures of `tests/fixtures/protobuf` (apimachinery's own
//! serializers' output for one object): `pod.pb` / `pod.json` and, for the list decoders,
//! `podlist.pb` / `podlist.json` when present. `PROTOBUF_FIXTURES` names another directory.

use std::{hint::black_box, path::PathBuf};

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Pod;
use kube_informer::{
    protobuf::{ProtobufListDecoder, decode_object, decode_object_via_serde},
    reflector::decode::{ListDecoder, Projection},
};

fn fixture(name: &str) -> Option<Vec<u8>> {
    let dir = std::env::var_os("PROTOBUF_FIXTURES").map_or_else(
        || PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf"),
        PathBuf::from,
    );
    std::fs::read(dir.join(name)).ok()
}

fn pod(c: &mut Criterion) {
    let (Some(pb), Some(json)) = (fixture("pod.pb"), fixture("pod.json")) else {
        eprintln!("no pod.pb / pod.json fixture");
        return;
    };
    let none = Projection::none();
    // Both decode to the same Pod, or the comparison means nothing.
    let from_pb: Pod = decode_object(&pb, &none).unwrap();
    assert_eq!(from_pb, serde_json::from_slice::<Pod>(&json).unwrap());
    let mut g = c.benchmark_group("pod");
    g.throughput(Throughput::Elements(1));
    g.bench_function("protobuf", |b| {
        b.iter(|| decode_object::<Pod>(black_box(&pb), &none).unwrap())
    });
    g.bench_function("json", |b| {
        b.iter(|| serde_json::from_slice::<Pod>(black_box(&json)).unwrap())
    });
    // The same protobuf through the serde `Deserializer` alone (what every decode took before
    // the direct decoders, and what a non-k8s-openapi target type still takes).
    g.bench_function("protobuf_serde", |b| {
        b.iter(|| decode_object_via_serde::<Pod>(black_box(&pb), &none).unwrap())
    });
    g.finish();
}

fn pod_list(c: &mut Criterion) {
    let (Some(pb), Some(json)) = (fixture("podlist.pb"), fixture("podlist.json")) else {
        eprintln!("no podlist.pb / podlist.json fixture");
        return;
    };
    let decode_pb = |body: &[u8]| {
        let mut d = ProtobufListDecoder::<Pod, Pod>::new();
        for chunk in body.chunks(16 * 1024) {
            d.push(chunk, &mut |p| p).unwrap();
        }
        d.finish(&mut |p| p).unwrap()
    };
    let decode_json = |body: &[u8]| {
        let mut d = ListDecoder::<Pod, Pod>::new();
        for chunk in body.chunks(16 * 1024) {
            d.push(chunk, &mut |p| p).unwrap();
        }
        d.finish(&mut |p| p).unwrap()
    };
    let items = decode_pb(&pb).items;
    assert_eq!(items, decode_json(&json).items);
    let mut g = c.benchmark_group("pod_list");
    g.throughput(Throughput::Elements(items.len() as u64));
    g.bench_function("protobuf", |b| b.iter(|| decode_pb(black_box(&pb))));
    g.bench_function("json", |b| b.iter(|| decode_json(black_box(&json))));
    g.finish();
}

criterion_group!(benches, pod, pod_list);
criterion_main!(benches);
