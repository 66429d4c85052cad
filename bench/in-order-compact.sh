#!/usr/bin/env bash
# The in-order FIFO with the Compact cache (issue #12 part 4 in the mode client-go 1.36 runs):
# S1, a cold sync of N Pods, and S4, a relist of them after a 410 (every 10th Pod changed), in
# protobuf. kube-informer in-order Compact against DeltaFIFO Compact and in-order Decoded,
# interleaved RUNS times on one replay server; with BASE=<directory of another build's release
# binaries>, that build's in-order Compact client runs in the same rounds too (an A/B of a
# change). Prints one RESULT line per run. Build first (bench/run.sh builds everything), or set
# CARGO_TARGET_DIR to where the release binaries are. See ../BENCHMARKS.md.
#
# Usage: bench/in-order-compact.sh [RUNS=3]; N=10000 by default.
set -u
cd "$(dirname "$0")"
. ./lib.sh
runs=${1:-3}
n=${N:-10000}
port=18095
start_replay $port --pods "$n" --relist true --protobuf true
for r in $(seq "$runs"); do
    for mode in sync relist; do
        for c in delta-compact in-order-compact in-order-decoded ${BASE:+base-in-order-compact}; do
            curl -s "127.0.0.1:$port/reset" >/dev/null
            bin=$T
            case $c in base-*) bin=$BASE ;; esac
            args=(--addr "127.0.0.1:$port" --mode "$mode" --wire protobuf --changed $((n / 10)))
            case $c in *in-order*) args+=(--fifo in-order) ;; *) args+=(--fifo delta) ;; esac
            case $c in *compact) args+=(--cache compact) ;; esac
            echo "n=$n run=$r $mode $c $(BENCH_TRIM=1 "$bin/client-informer" "${args[@]}" 2>&1 | grep '^RESULT')"
        done
    done
done
