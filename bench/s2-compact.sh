#!/usr/bin/env bash
# S2 with the Compact cache: M MODIFIED events (bursts of 1,000, once synced) after a list of N
# Pods, to kube-informer with a Decoded cache (protobuf) and a Compact one (protobuf and JSON),
# interleaved RUNS times on one replay server; prints one RESULT line per run. With
# BASE=<directory of another build's release binaries>, that build's Compact clients run in the
# same rounds too (an A/B of a change). Build first (bench/run.sh builds everything), or set
# CARGO_TARGET_DIR to where the release binaries are. See ../BENCHMARKS.md.
#
# Usage: bench/s2-compact.sh [RUNS=3]; N=10000 and M=30000 by default.
set -u
cd "$(dirname "$0")"
. ./lib.sh
runs=${1:-3}
n=${N:-10000}
m=${M:-30000}
port=18094
start_replay $port --pods "$n" --events "$m" --burst 1000 --gate-watch true --protobuf true
for r in $(seq "$runs"); do
    for c in pb pb-compact json-compact ${BASE:+base-pb-compact base-json-compact}; do
        curl -s "127.0.0.1:$port/reset" >/dev/null
        bin=$T
        case $c in base-*) bin=$BASE ;; esac
        args=(--addr "127.0.0.1:$port" --mode watch --events "$m")
        case $c in *pb*) args+=(--wire protobuf) ;; *) args+=(--wire json) ;; esac
        case $c in *compact) args+=(--cache compact) ;; esac
        echo "run=$r $c $("$bin/client-informer" "${args[@]}" 2>&1 | grep '^RESULT')"
    done
done
