#!/usr/bin/env bash
# End-to-end tests against a real etcd + kube-apiserver. Source this file from .ci/run and call
# `run_e2e`, or run it directly: `bash .ci/e2e.sh`.
#
# scripts/build-k8s.sh builds the binaries through the Go module proxy into a cache outside the
# repository (cold: see tests/e2e/README.md for the time it takes on 2 cores; warm: a no-op).
# CARGO_TARGET_DIR and friends are taken from the caller's environment.

run_e2e() {
    local bin
    echo "e2e: building kube-apiserver and etcd (cached after the first run)"
    bin="$(bash scripts/build-k8s.sh)" || { echo "e2e: scripts/build-k8s.sh failed" >&2; return 1; }
    echo "e2e: binaries in $bin"
    KUBE_INFORMER_E2E_BIN="$bin" cargo test --all-features --test e2e -- --test-threads=1
}

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    set -euo pipefail
    cd "$(dirname "$0")/.."
    run_e2e
fi
