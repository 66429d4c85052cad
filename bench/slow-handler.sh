#!/usr/bin/env bash
# A slow handler on a Compact cache (issue #12 part 4): each handler call sleeps SLEEP µs (like a
# controller that calls an API per event), so the handler falls behind the informer. S1, a cold
# sync of N Pods, and S2, M watched updates in bursts of 1,000 once synced, in protobuf, with
# each FIFO; each client once with `CompactConfig::decoded_backlog` at its default (a handler
# that far behind is sent compressed objects) and once at `max` (never: every notification holds
# decoded objects, as before the option existed), interleaved RUNS times on one replay server per
# scenario. With SLEEP=0 the same runs show what the option costs a handler that keeps up.
# Prints one RESULT line per run. Build first (bench/run.sh builds everything), or set
# CARGO_TARGET_DIR to where the release binaries are. See ../BENCHMARKS.md.
#
# Usage: bench/slow-handler.sh [RUNS=3]; N=10000, M=5000, SLEEP=200 by default.
set -u
cd "$(dirname "$0")"
. ./lib.sh
runs=${1:-3}
n=${N:-10000}
m=${M:-5000}
sleep_us=${SLEEP:-200}
port=18096
for mode in sync watch; do
    start_replay $port --pods "$n" --events "$m" --burst 1000 --gate-watch true --protobuf true
    for r in $(seq "$runs"); do
        for fifo in delta in-order; do
            for backlog in default max; do
                curl -s "127.0.0.1:$port/reset" >/dev/null
                args=(--addr "127.0.0.1:$port" --mode "$mode" --wire protobuf --fifo "$fifo"
                    --cache compact --events "$m" --handler-sleep-us "$sleep_us")
                [ "$backlog" = max ] && args+=(--decoded-backlog max)
                echo "n=$n m=$m sleep_us=$sleep_us run=$r $mode $fifo backlog=$backlog $("$T/client-informer" "${args[@]}" 2>&1 | grep '^RESULT')"
            done
        done
    done
    stop_replay
done
