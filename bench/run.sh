#!/usr/bin/env bash
# Builds the benchmark clients (Rust in release mode, the client-go program with the Go module
# proxy) and runs every scenario; extra arguments go to bench-runner (e.g. --runs 5,
# --only S1,S2, --update ../BENCHMARKS.md). See ../BENCHMARKS.md.
set -euo pipefail
cd "$(dirname "$0")"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bins
(cd client-go && GOFLAGS=-mod=mod go build -o "$target/release/client-go-bench" .)
exec "$target/release/bench-runner" --bin "$target/release" "$@"
