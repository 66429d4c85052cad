#!/usr/bin/env bash
# End-to-end tests against a real etcd + kube-apiserver (tests/e2e/README.md).
#
# From .ci/run:
#   source .ci/e2e.sh
#   e2e_build_start      # optional, early: builds the binaries in the background
#   ...                  # other builds and tests
#   run_e2e              # waits for that build (or builds now), then runs the e2e tests
# Or directly: `bash .ci/e2e.sh`.
#
# scripts/build-k8s.sh builds through the Go module proxy into a cache outside the repository:
# about 7.5 minutes cold on 2 cores, a no-op once built. CARGO_TARGET_DIR and the like come from
# the caller's environment.

e2e_build_start() {
    E2E_BUILD_DIR="$(mktemp -d)"
    echo "e2e: building kube-apiserver and etcd in the background (log: $E2E_BUILD_DIR/log)"
    # In a session of its own (setsid execs without forking here: a background job of a shell
    # without job control is no group leader), so that stopping it reaches `go build` and the
    # compilers under the script, and the lock they hold.
    setsid bash scripts/build-k8s.sh >"$E2E_BUILD_DIR/out" 2>"$E2E_BUILD_DIR/log" &
    E2E_BUILD_PID=$!
    # A step that fails before run_e2e must not leave the Go build running behind the script.
    trap 'e2e_build_stop' EXIT
}

e2e_build_stop() {
    if [[ -n "${E2E_BUILD_PID:-}" ]]; then
        kill -- "-$E2E_BUILD_PID" 2>/dev/null || kill "$E2E_BUILD_PID" 2>/dev/null || true
        wait "$E2E_BUILD_PID" 2>/dev/null || true
        unset E2E_BUILD_PID
    fi
    if [[ -n "${E2E_BUILD_DIR:-}" ]]; then
        rm -rf "$E2E_BUILD_DIR"
    fi
}

# Waits for the background build (or builds now) and sets E2E_BIN. Idempotent.
e2e_build_wait() {
    if [[ -n "${E2E_BIN:-}" ]]; then
        return 0
    fi
    if [[ -n "${E2E_BUILD_PID:-}" ]]; then
        echo "e2e: waiting for the background build of kube-apiserver and etcd"
        if ! wait "$E2E_BUILD_PID"; then
            unset E2E_BUILD_PID
            echo "e2e: scripts/build-k8s.sh failed:" >&2
            tail -n 50 "$E2E_BUILD_DIR/log" >&2
            return 1
        fi
        unset E2E_BUILD_PID
        tail -n 3 "$E2E_BUILD_DIR/log"
        E2E_BIN="$(tail -n 1 "$E2E_BUILD_DIR/out")"
        rm -rf "$E2E_BUILD_DIR"
    else
        echo "e2e: building kube-apiserver and etcd (cached after the first run)"
        E2E_BIN="$(bash scripts/build-k8s.sh)" || { echo "e2e: scripts/build-k8s.sh failed" >&2; return 1; }
    fi
}

# Runs a cargo test command and fails unless at least $1 tests passed: a name filter that
# matches nothing (a renamed test) would otherwise pass with "0 passed".
cargo_test_at_least() {
    local min="$1" out passed
    shift
    out="$(mktemp)"
    "$@" 2>&1 | tee "$out" || { rm -f "$out"; return 1; }
    passed="$(awk '/^test result:/ { n += $4 } END { print n + 0 }' "$out")"
    rm -f "$out"
    if (( passed < min )); then
        echo "expected at least $min tests to pass, $passed did: $*" >&2
        return 1
    fi
}

run_e2e() {
    local bin
    e2e_build_wait
    bin="$E2E_BIN"
    echo "e2e: binaries in $bin"
    # tests/e2e/leader.rs runs two replica processes of this example.
    cargo build --quiet --all-features --example leader_election
    # The e2e tests are #[ignore]d so that a plain `cargo test` reports them as not run;
    # --include-ignored runs them here. One cluster per test; on 2 cores they are better started
    # one after the other.
    # This run includes the differential conformance tests against client-go (issue #15,
    # tests/e2e/conformance.rs): each builds conformance/clientgo-trace with `go build` through
    # the Go module proxy (client-go v0.37.2 and, with -modfile=go035.mod, v0.35.10) into
    # ${KUBE_INFORMER_K8S_CACHE:-$HOME/.cache/kube-informer-k8s}/clientgo-trace/, outside the
    # repository, with the flags of scripts/build-k8s.sh so that its compiled packages are
    # reused (seconds once that has run; about a minute more for v0.35 on a clean machine), and
    # fixes its own FIFO mode, so the in-order rerun below leaves them out.
    KUBE_INFORMER_E2E_BIN="$bin" cargo test --all-features --test e2e -- --include-ignored --test-threads=1
    # The informer tests once more in the in-order FIFO mode (what client-go 1.36+ runs): the
    # ones whose handler calls the two modes could deliver differently (relists, restarts,
    # concurrent writes, CRDs, list-then-watch), and the Compact cache, whose relists the two
    # modes apply differently.
    echo "e2e: informer tests again with KUBE_INFORMER_E2E_FIFO=in-order"
    KUBE_INFORMER_E2E_FIFO=in-order KUBE_INFORMER_E2E_BIN="$bin" cargo_test_at_least 8 \
        cargo test --all-features --test e2e -- --include-ignored --test-threads=1 \
        typed_pod_and_config_map relist_after_expiry apiserver_is_killed ten_thousand \
        custom_resource list_then_watch a_compact_cache_equals_the_server
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    cd "$(dirname "$0")/.."
    run_e2e
fi
