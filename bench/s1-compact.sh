#!/usr/bin/env bash
# S1 cold sync with the Compact cache (issue #12 part 4): client-go (JSON, protobuf) against
# kube-informer Decoded and Compact (JSON, protobuf; Compact with the DeltaFIFO and in order),
# interleaved RUNS times on one replay server per N; prints one RESULT line per run. Build first (bench/run.sh builds everything), or set
# CARGO_TARGET_DIR to where the release binaries are. See ../BENCHMARKS.md.
#
# Usage: bench/s1-compact.sh [RUNS=2]; NS="10000 50000" picks the sizes.
set -u
cd "$(dirname "$0")"
. ./lib.sh
runs=${1:-2}
port=18093
for n in ${NS:-10000 50000}; do
    start_replay $port --pods "$n" --protobuf true
    for r in $(seq "$runs"); do
        for c in go-json go-pb inf-json inf-pb inf-json-compact inf-pb-compact inf-json-compact-io inf-pb-compact-io; do
            curl -s "127.0.0.1:$port/reset" >/dev/null
            inf=(env BENCH_TRIM=1 "$T/client-informer" --addr "127.0.0.1:$port" --mode sync)
            case $c in
                go-json) cmd=("$T/client-go-bench" --addr "127.0.0.1:$port" --mode sync) ;;
                go-pb) cmd=("$T/client-go-bench" --addr "127.0.0.1:$port" --mode sync --protobuf true) ;;
                inf-json) cmd=("${inf[@]}" --wire json) ;;
                inf-pb) cmd=("${inf[@]}" --wire protobuf) ;;
                inf-json-compact) cmd=("${inf[@]}" --wire json --cache compact) ;;
                inf-pb-compact) cmd=("${inf[@]}" --wire protobuf --cache compact) ;;
                inf-json-compact-io) cmd=("${inf[@]}" --wire json --cache compact --fifo in-order) ;;
                inf-pb-compact-io) cmd=("${inf[@]}" --wire protobuf --cache compact --fifo in-order) ;;
            esac
            echo "n=$n run=$r $c $("${cmd[@]}" 2>&1 | grep '^RESULT')"
        done
    done
    stop_replay
done
