#!/usr/bin/env bash
# Bounded libFuzzer runs of the fuzz/ targets with cargo-fuzz, on the stable toolchain.
#
# `--sanitizer none` is cargo-fuzz's supported stable mode: it is the only mode that passes no
# `-Z` flag to rustc (the default AddressSanitizer needs `-Zsanitizer=address`), so stable
# rustc builds it without RUSTC_BOOTSTRAP. The coverage instrumentation libFuzzer needs
# (`-Cpasses=sancov-module`, `-Cllvm-args=...`) is stable. kube-informer forbids unsafe code,
# so what the sanitizer would add (memory errors in unsafe dependencies) is small next to the
# panics, hangs and broken invariants that this mode catches. `--dev` with `opt-level = 1`
# (fuzz/Cargo.toml) keeps the cold build short; fuzz/README.md has the measured alternatives.
# A replay or a longer run uses the same flags, from the repository root:
#   cargo fuzz run --dev --sanitizer none <target> [<artifact>]
#
# Each target runs for KUBE_INFORMER_FUZZ_SECONDS (default 60) on a scratch copy of its seed
# corpus (fuzz/corpus/<target> is never written); a crash or timeout fails the script and
# leaves the input under fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")/.."

CARGO_FUZZ_VERSION=0.13.2
seconds=${KUBE_INFORMER_FUZZ_SECONDS:-60}
targets=(watch_stream list_decode protobuf_list protobuf_watch)
# The build flags, the same for build, run and replay (a mismatch rebuilds).
build_flags=(--dev --sanitizer none)
# -timeout: seconds one input may take before it counts as a hang (saved as timeout-*).
libfuzzer_flags=(-max_total_time="$seconds" -max_len=65536 -timeout=10 -print_final_stats=1)

if [[ "$(cargo fuzz --version 2>/dev/null)" != "cargo-fuzz $CARGO_FUZZ_VERSION" ]]; then
    echo "installing cargo-fuzz $CARGO_FUZZ_VERSION"
    start=$(date +%s)
    cargo install cargo-fuzz --locked --version "$CARGO_FUZZ_VERSION"
    echo "cargo-fuzz installed in $(($(date +%s) - start)) s"
fi

start=$(date +%s)
cargo fuzz build "${build_flags[@]}" </dev/null
echo "fuzz targets built in $(($(date +%s) - start)) s"

logs=$(mktemp -d "${TMPDIR:-/tmp}/kube-informer-fuzz.XXXXXX")
failed=0
for t in "${targets[@]}"; do
    corpus="$logs/corpus-$t"
    mkdir "$corpus"
    cp fuzz/corpus/"$t"/* "$corpus"/
    artifacts="fuzz/artifacts/$t"
    mkdir -p "$artifacts"
    before=$(ls -A "$artifacts")
    log="$logs/$t.log"
    rc=0
    # libFuzzer stops itself after -max_total_time; the outer timeout only guards a wedged run.
    timeout "$((seconds + 300))" cargo fuzz run "${build_flags[@]}" "$t" "$corpus" -- \
        "${libfuzzer_flags[@]}" </dev/null >"$log" 2>&1 || rc=$?
    # libFuzzer's final count: `stat::number_of_executed_units: N` (from -print_final_stats),
    # else its `Done N runs in S second(s)` line.
    execs=$(sed -n 's/^stat::number_of_executed_units: *\([0-9]*\).*/\1/p; s/^Done \([0-9]*\) runs.*/\1/p' "$log" | tail -n 1)
    new=$(comm -13 <(printf '%s\n' "$before" | sort) <(ls -A "$artifacts" | sort))
    if [[ $rc -ne 0 || -n "$new" || -z "$execs" ]]; then
        failed=1
        tail -n 80 "$log"
        echo "fuzz target $t FAILED (exit $rc) after ${execs:-?} executions; full log: $log" >&2
        grep -m 1 'INFO: Seed:' "$log" >&2 || true
        for a in $new; do
            echo "  artifact: $artifacts/$a" >&2
            # The CI machine's files are gone after the run: the input itself, to rebuild it
            # with `base64 -d`.
            echo "  base64:   $(base64 -w 0 "$artifacts/$a")" >&2
            echo "  replay:   cargo fuzz run ${build_flags[*]} $t $artifacts/$a" >&2
        done
    else
        echo "fuzz target $t: ${execs:-?} executions in $seconds s, no crash or timeout" \
            "(corpus $(ls "$corpus" | wc -l) inputs from $(ls fuzz/corpus/"$t" | wc -l) seeds)"
    fi
done
if [[ $failed -ne 0 ]]; then
    rm -rf "$logs"/corpus-*
    exit 1
fi
rm -rf "$logs"
