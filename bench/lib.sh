# Shared by the bench/*.sh scripts: sourced, not run. Sets T (the release binaries) and
# manages one replay server at a time.
#
# T: $CARGO_TARGET_DIR/release, or bench/target/release (what bench/run.sh builds).
T="${CARGO_TARGET_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/target}/release"
rs=
trap 'stop_replay' EXIT

# start_replay PORT ARGS...: starts `replay-server --port PORT ARGS...` and waits until it
# answers, for at most 120 s (encoding 50,000 Pods takes a while); exits the script if the
# server dies or never answers, instead of waiting forever.
start_replay() {
    local port=$1
    shift
    [ -x "$T/replay-server" ] || { echo "no $T/replay-server: build first (bench/run.sh)" >&2; exit 1; }
    "$T/replay-server" --port "$port" "$@" >/dev/null 2>&1 &
    rs=$!
    local waited=0
    until curl -sf "127.0.0.1:$port/reset" >/dev/null; do
        kill -0 "$rs" 2>/dev/null || { echo "replay-server $* exited" >&2; exit 1; }
        [ "$waited" -lt 120 ] || { echo "replay-server $* did not answer in 120 s" >&2; exit 1; }
        sleep 1
        waited=$((waited + 1))
    done
}

# stop_replay: stops the server start_replay started, if any.
stop_replay() {
    [ -n "$rs" ] || return 0
    kill "$rs" 2>/dev/null
    wait "$rs" 2>/dev/null
    rs=
}
