//! Chooses the Compact cache's encoding and compression by measurement (issue #12): for each
//! encoding of a typed object (JSON, CBOR, MessagePack) × each compression (none, lz4, zstd plain,
//! zstd with a dictionary trained on the first objects), the bytes held per object, the time to
//! encode + compress one, and the time to decompress + decode one back into a `Pod`.
//!
//! ```text
//! cargo run --release --bin codecs -- [n=5000] [train=1000] [level=3]
//! ```
//!
//! Objects: bench/src/podgen.rs Pods, with and without `managedFields`.

use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use kube_informer_bench::podgen::pod_json;

#[derive(Clone, Copy, Debug)]
enum Enc {
    Json,
    Cbor,
    MsgPack,
}

impl Enc {
    fn encode(self, pod: &Pod) -> Vec<u8> {
        match self {
            Enc::Json => serde_json::to_vec(pod).unwrap(),
            Enc::Cbor => {
                let mut out = Vec::new();
                ciborium::into_writer(pod, &mut out).unwrap();
                out
            }
            // Maps with field names, as serde_json: k8s-openapi's types skip absent fields, which
            // a positional (array) encoding cannot express.
            Enc::MsgPack => rmp_serde::to_vec_named(pod).unwrap(),
        }
    }

    fn decode(self, bytes: &[u8]) -> Pod {
        match self {
            Enc::Json => serde_json::from_slice(bytes).unwrap(),
            Enc::Cbor => ciborium::from_reader(bytes).unwrap(),
            Enc::MsgPack => rmp_serde::from_slice(bytes).unwrap(),
        }
    }
}

enum Comp {
    None,
    Lz4,
    Zstd,
    ZstdDict(Vec<u8>),
}

impl Comp {
    fn name(&self) -> &'static str {
        match self {
            Comp::None => "none",
            Comp::Lz4 => "lz4_flex",
            Comp::Zstd => "zstd",
            Comp::ZstdDict(_) => "zstd+dict",
        }
    }
}

struct Row {
    bytes_per_obj: f64,
    encode_us: f64,
    decode_us: f64,
}

fn measure(enc: Enc, comp: &Comp, pods: &[Pod], level: i32) -> Row {
    let (mut c, mut d) = match comp {
        Comp::ZstdDict(dict) => (
            Some(zstd::bulk::Compressor::with_dictionary(level, dict).unwrap()),
            Some(zstd::bulk::Decompressor::with_dictionary(dict).unwrap()),
        ),
        Comp::Zstd => (
            Some(zstd::bulk::Compressor::new(level).unwrap()),
            Some(zstd::bulk::Decompressor::new().unwrap()),
        ),
        _ => (None, None),
    };
    let start = Instant::now();
    let blobs: Vec<(Vec<u8>, usize)> = pods
        .iter()
        .map(|p| {
            let raw = enc.encode(p);
            let n = raw.len();
            let blob = match comp {
                Comp::None => raw,
                Comp::Lz4 => lz4_flex::compress(&raw),
                Comp::Zstd | Comp::ZstdDict(_) => c.as_mut().unwrap().compress(&raw).unwrap(),
            };
            (blob, n)
        })
        .collect();
    let encode = start.elapsed();
    let start = Instant::now();
    for (blob, n) in &blobs {
        let raw = match comp {
            Comp::None => blob.clone(),
            Comp::Lz4 => lz4_flex::decompress(blob, *n).unwrap(),
            Comp::Zstd | Comp::ZstdDict(_) => d.as_mut().unwrap().decompress(blob, *n).unwrap(),
        };
        std::hint::black_box(enc.decode(&raw));
    }
    let decode = start.elapsed();
    let total: usize = blobs.iter().map(|(b, _)| b.len()).sum();
    Row {
        bytes_per_obj: total as f64 / pods.len() as f64,
        encode_us: encode.as_secs_f64() * 1e6 / pods.len() as f64,
        decode_us: decode.as_secs_f64() * 1e6 / pods.len() as f64,
    }
}

fn main() {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse().expect("numeric argument"))
        .collect();
    let n = args.first().copied().unwrap_or(5000);
    let train = args.get(1).copied().unwrap_or(1000).min(n);
    let level = args.get(2).copied().unwrap_or(3) as i32;
    for managed in [true, false] {
        let pods: Vec<Pod> = (0..n)
            .map(|i| {
                let mut v = pod_json(7, i, &(1000 + i).to_string());
                if !managed {
                    v["metadata"]
                        .as_object_mut()
                        .unwrap()
                        .remove("managedFields");
                }
                serde_json::from_value(v).unwrap()
            })
            .collect();
        println!(
            "podgen Pods, managedFields {}, n={n}, dictionary from the first {train}, zstd level {level}",
            if managed { "kept" } else { "stripped" }
        );
        println!(
            "{:<8} {:<10} {:>10} {:>12} {:>12}",
            "encoding", "compress", "B/object", "enc+comp µs", "decomp+dec µs"
        );
        for enc in [Enc::Json, Enc::Cbor, Enc::MsgPack] {
            let samples: Vec<Vec<u8>> = pods[..train].iter().map(|p| enc.encode(p)).collect();
            let start = Instant::now();
            let dict = zstd::dict::from_samples(&samples, 64 * 1024).unwrap();
            println!(
                "{:<8} dictionary of 64 KiB trained from {train} samples ({} KB) in {} ms",
                format!("{enc:?}"),
                samples.iter().map(Vec::len).sum::<usize>() / 1000,
                start.elapsed().as_millis()
            );
            for comp in [Comp::None, Comp::Lz4, Comp::Zstd, Comp::ZstdDict(dict)] {
                let r = measure(enc, &comp, &pods, level);
                println!(
                    "{:<8} {:<10} {:>10.0} {:>12.1} {:>12.1}",
                    format!("{enc:?}"),
                    comp.name(),
                    r.bytes_per_obj,
                    r.encode_us,
                    r.decode_us
                );
            }
        }
        println!();
    }
}
