//! A bounded, seeded fuzz run of the `fuzz/` targets on stable Rust, so CI exercises them without
//! libFuzzer: every seed of `fuzz/corpus/<target>/`, then random mutations of them.
//!
//! `FUZZ_ITERS` (mutations per target, default 3000) and `FUZZ_SEED` (default fixed, so a failure
//! reproduces) tune the run; a failing input is written to `fuzz-failures/` under Cargo's target
//! tmp dir before the panic is re-raised, ready to replay with
//! `cargo fuzz run --dev --sanitizer none <target> <file>` (what `.ci/fuzz.sh` builds).

use std::{
    fs,
    panic::{AssertUnwindSafe, catch_unwind, resume_unwind},
    path::{Path, PathBuf},
};

#[path = "../fuzz/src/lib.rs"]
mod targets;

/// Tokens that steer mutations towards the interesting parts of the grammar.
const TOKENS: &[&[u8]] = &[
    // Protobuf: the magic, tags of fields 1 and 2 (length-delimited), a long varint, a
    // four-byte frame length.
    b"k8s\0",
    b"\x0a",
    b"\x12",
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
    b"\x00\x00\x10\x00",
    b"\n",
    b"\r\n",
    b"\r",
    b"{",
    b"}",
    b"[",
    b"]",
    b",",
    b":",
    b"\"",
    b"null",
    b"true",
    b"0",
    b"-1",
    b"1e999",
    b"18446744073709551616",
    b"\"type\"",
    b"\"object\"",
    b"\"ADDED\"",
    b"\"MODIFIED\"",
    b"\"DELETED\"",
    b"\"BOOKMARK\"",
    b"\"ERROR\"",
    b"\"metadata\"",
    b"\"items\"",
    b"\"resourceVersion\"",
    b"\"k8s.io/initial-events-end\"",
    b"\"\\u0000\"",
    b"\"\\ud800\"",
    b"\xff\xfe",
    b"{\"a\":{\"a\":{\"a\":{\"a\":{\"a\":{}}}}}}",
];

fn seeds(target: &str) -> Vec<Vec<u8>> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fuzz/corpus")
        .join(target);
    let mut files: Vec<PathBuf> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("seed corpus {}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    let seeds: Vec<Vec<u8>> = files.iter().map(|f| fs::read(f).unwrap()).collect();
    assert!(!seeds.is_empty(), "no seeds in {}", dir.display());
    seeds
}

/// One random edit of `input`, drawing spliced material from `pool`.
fn mutate(rng: &mut fastrand::Rng, input: &mut Vec<u8>, pool: &[Vec<u8>]) {
    let len = input.len();
    match rng.u8(..8) {
        0 if len > 0 => {
            let i = rng.usize(..len);
            input[i] ^= 1 << rng.u8(..8);
        }
        1 if len > 0 => {
            let i = rng.usize(..len);
            input[i] = rng.u8(..);
        }
        2 if len > 0 => {
            let start = rng.usize(..len);
            let end = (start + rng.usize(1..=16)).min(len);
            input.drain(start..end);
        }
        3 if len > 0 => {
            let start = rng.usize(..len);
            let end = (start + rng.usize(1..=64)).min(len);
            let copy = input[start..end].to_vec();
            let at = rng.usize(..=len);
            input.splice(at..at, copy);
        }
        4 if len > 0 => input.truncate(rng.usize(..len)),
        5 => {
            let other = &pool[rng.usize(..pool.len())];
            if !other.is_empty() {
                let start = rng.usize(..other.len());
                let end = (start + rng.usize(1..=256)).min(other.len());
                let at = rng.usize(..=len);
                input.splice(at..at, other[start..end].iter().copied());
            }
        }
        6 if len > 1 => {
            // Header bytes of `watch_stream`: chunking seed and largest chunk.
            input[rng.usize(..2)] = rng.u8(..);
        }
        _ => {
            let token = TOKENS[rng.usize(..TOKENS.len())];
            let at = rng.usize(..=len);
            input.splice(at..at, token.iter().copied());
        }
    }
}

fn run(name: &str, target: fn(&[u8])) {
    let iters: usize = std::env::var("FUZZ_ITERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(3000);
    let seed: u64 = std::env::var("FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0x6b75_6265);
    let pool = seeds(name);
    let mut rng = fastrand::Rng::with_seed(seed);
    let check = |input: &[u8]| {
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| target(input))) {
            let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("fuzz-failures");
            let _ = fs::create_dir_all(&dir);
            let file = dir.join(format!("{name}-{seed}"));
            let _ = fs::write(&file, input);
            eprintln!("{name}: failing input saved to {}", file.display());
            resume_unwind(panic);
        }
    };
    for s in &pool {
        check(s);
    }
    for _ in 0..iters {
        let mut input = pool[rng.usize(..pool.len())].clone();
        for _ in 0..rng.usize(1..=8) {
            mutate(&mut rng, &mut input, &pool);
        }
        check(&input);
    }
}

#[test]
fn watch_stream_never_panics_on_mutated_seeds() {
    run("watch_stream", targets::watch_stream);
}

#[test]
fn list_decode_never_panics_on_mutated_seeds() {
    run("list_decode", targets::list_decode);
}

#[test]
fn protobuf_list_never_panics_on_mutated_seeds() {
    run("protobuf_list", targets::protobuf_list);
}

#[test]
fn protobuf_watch_never_panics_on_mutated_seeds() {
    run("protobuf_watch", targets::protobuf_watch);
}

#[test]
fn chunking_covers_the_body_in_order() {
    let body: Vec<u8> = (0..=255).collect();
    for seed in [0, 1, 77, 255] {
        for max in [0, 1, 3, 127] {
            let chunks = targets::chunk(&body, seed, max);
            assert_eq!(chunks.concat(), body);
            if max > 0 {
                assert!(
                    chunks
                        .iter()
                        .all(|c| !c.is_empty() && c.len() <= max as usize)
                );
            }
        }
    }
}
