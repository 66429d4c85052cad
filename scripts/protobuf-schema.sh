#!/usr/bin/env bash
# Regenerates src/protobuf/schema/generated.rs from the Kubernetes Go types
# (scripts/protobuf-schema/main.go), through the Go module proxy; Go's build and module caches
# make a second run take seconds.
#
# Usage: scripts/protobuf-schema.sh            # rewrites src/protobuf/schema/generated.rs
#        scripts/protobuf-schema.sh fixtures   # rewrites tests/fixtures/protobuf/
set -euo pipefail
cd "$(dirname "$0")/.."
command -v go >/dev/null || { echo "protobuf-schema: error: go is not installed" >&2; exit 1; }
export CGO_ENABLED=0 GOFLAGS="-mod=readonly -buildvcs=false"
case "${1:-}" in
"")
    out=src/protobuf/schema/generated.rs
    (cd scripts/protobuf-schema && go run -trimpath .) >"$out.tmp"
    mv "$out.tmp" "$out"
    ;;
fixtures)
    rm -rf tests/fixtures/protobuf
    mkdir -p tests/fixtures/protobuf
    (cd scripts/protobuf-schema && go run -trimpath . fixtures ../../tests/fixtures/protobuf)
    ;;
*)
    echo "usage: scripts/protobuf-schema.sh [fixtures]" >&2
    exit 2
    ;;
esac
