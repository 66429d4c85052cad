#!/usr/bin/env bash
# S5: cold sync of 10,000 Pods from a real kube-apiserver (TLS, token auth), client-go in its
# default protobuf mode against kube-informer in JSON, in protobuf, and in protobuf with the
# Compact cache (DeltaFIFO and in-order), the DeltaFIFO two also with glibc's heap top pad raised. Starts etcd +
# kube-apiserver on free loopback ports the way tests/e2e/support.rs does, loads the seeded
# fixture Pods with s5-load, runs the clients RUNS times interleaved (the order rotated by one
# client each round) and prints medians. See ../BENCHMARKS.md.
#
# Usage: bench/s5.sh [RUNS=5] [PODS=10000]; K8S_BIN overrides the etcd/kube-apiserver directory.
set -euo pipefail
cd "$(dirname "$0")"
runs="${1:-5}"
pods="${2:-10000}"
bin="${K8S_BIN:-/root/.cache/kube-informer-k8s/v1.37.2/bin}"
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --bin client-informer --bin s5-load
(cd client-go && GOFLAGS=-mod=mod go build -o "$target/release/client-go-bench" .)

dir="$(mktemp -d /tmp/kube-informer-s5.XXXXXX)"
pids=()
cleanup() {
    # SIGKILL like tests/e2e/support.rs: a graceful apiserver shutdown takes minutes.
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$dir"
}
trap cleanup EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Credentials, as tests/e2e/support.rs makes them.
token="s5-admin-token"
echo "$token,admin,uid-admin,\"system:masters\"" >"$dir/tokens.csv"
printf 'basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature,keyEncipherment\nextendedKeyUsage=serverAuth\nsubjectAltName=IP:127.0.0.1,DNS:localhost\n' >"$dir/server.ext"
ec="-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
(
    cd "$dir"
    openssl req -x509 $ec -keyout ca.key -out ca.crt -days 2 -subj /CN=kube-informer-s5-ca \
        -addext basicConstraints=critical,CA:TRUE -addext keyUsage=critical,keyCertSign,cRLSign
    openssl req $ec -keyout server.key -out server.csr -subj /CN=kube-apiserver
    openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out server.crt \
        -days 2 -extfile server.ext
    openssl ecparam -name prime256v1 -genkey -noout -out sa.key
    openssl ec -in sa.key -pubout -out sa.pub
) 2>/dev/null

etcd_port="$(free_port)"
peer="http://127.0.0.1:$(free_port)"
"$bin/etcd" --name=s5 --data-dir="$dir/etcd" \
    --listen-client-urls="http://127.0.0.1:$etcd_port" --advertise-client-urls="http://127.0.0.1:$etcd_port" \
    --listen-peer-urls="$peer" --initial-advertise-peer-urls="$peer" --initial-cluster="s5=$peer" \
    --unsafe-no-fsync --log-level=warn >"$dir/etcd.log" 2>&1 &
pids+=($!)
until curl -sf "http://127.0.0.1:$etcd_port/health" | grep -q '"health":"true"'; do sleep 0.2; done

api_port="$(free_port)"
"$bin/kube-apiserver" --etcd-servers="http://127.0.0.1:$etcd_port" --bind-address=127.0.0.1 \
    --secure-port="$api_port" --cert-dir="$dir/apiserver-certs" \
    --tls-cert-file="$dir/server.crt" --tls-private-key-file="$dir/server.key" \
    --token-auth-file="$dir/tokens.csv" --authorization-mode=RBAC \
    --service-account-key-file="$dir/sa.pub" --service-account-signing-key-file="$dir/sa.key" \
    --service-account-issuer=https://kube-informer-s5.invalid \
    --disable-admission-plugins=ServiceAccount --endpoint-reconciler-type=none \
    --etcd-compaction-interval=0 --profiling=false >"$dir/apiserver.log" 2>&1 &
pids+=($!)
for _ in $(seq 600); do
    [ "$(curl -s --cacert "$dir/ca.crt" -H "Authorization: Bearer $token" "https://127.0.0.1:$api_port/readyz")" = ok ] && break
    sleep 0.2
done
echo "s5: apiserver ready at $(date +%T)" >&2

cat >"$dir/kubeconfig" <<EOF
apiVersion: v1
kind: Config
clusters:
- name: s5
  cluster:
    server: https://127.0.0.1:$api_port
    certificate-authority: $dir/ca.crt
users:
- name: admin
  user:
    token: $token
contexts:
- name: s5
  context: {cluster: s5, user: admin}
current-context: s5
EOF

"$target/release/s5-load" --kubeconfig "$dir/kubeconfig" --pods "$pods"
sleep 5 # let the apiserver settle (watch cache filled, load-time GC done)

results="$dir/results"
pad="glibc.malloc.top_pad=67108864"
clients=(informer informer-pb informer-pb-compact informer-pb-compact-inorder informer-pb-pad informer-pb-compact-pad go)
for i in $(seq "$runs"); do
    # Each round starts one client further along the list, so no client always runs first (on
    # a freshly settled apiserver) or right after the same neighbour.
    k=$(( (i - 1) % ${#clients[@]} ))
    for client in "${clients[@]:k}" "${clients[@]:0:k}"; do
        case $client in
            informer) line="$("$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire json | grep '^RESULT')" ;;
            informer-pb) line="$("$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire protobuf | grep '^RESULT')" ;;
            informer-pb-compact) line="$("$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire protobuf --cache compact | grep '^RESULT')" ;;
            informer-pb-compact-inorder) line="$("$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire protobuf --cache compact --fifo in-order | grep '^RESULT')" ;;
            # The same two with glibc told to grow its heaps 64 MiB at a time (BENCHMARKS.md,
            # "glibc's heap growth"): a setting of the binary's, like an allocator.
            informer-pb-pad) line="$(GLIBC_TUNABLES=$pad "$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire protobuf | grep '^RESULT')" ;;
            informer-pb-compact-pad) line="$(GLIBC_TUNABLES=$pad "$target/release/client-informer" --kubeconfig "$dir/kubeconfig" --wire protobuf --cache compact | grep '^RESULT')" ;;
            go) line="$(GOMAXPROCS=2 "$target/release/client-go-bench" --kubeconfig "$dir/kubeconfig" | grep '^RESULT')" ;;
        esac
        echo "run $i $client: $line" >&2
        echo "$client $line" >>"$results"
    done
done

python3 - "$results" "$pods" <<'EOF'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    client, _, *kv = line.split()
    rows.setdefault(client, []).append(dict(p.split("=", 1) for p in kv))
def med(client, key):
    return statistics.median(float(r[key]) for r in rows[client])
for client in rows:
    objects = {r["objects"] for r in rows[client]}
    assert objects == {sys.argv[2]}, f"{client} synced {objects} objects, not {sys.argv[2]}"
print(f"### S5: cold sync from a real kube-apiserver, N = {sys.argv[2]} Pods\n")
# "Handled": every handler has been called for every listed Pod (an in-order Compact sync is
# synced before its handlers have decoded anything; see BENCHMARKS.md).
print("| client | CPU to synced (s) | CPU to handled (s) | wall to handled (s) | peak RSS (MiB) | CPU ÷ client-go | wall ÷ client-go | RSS ÷ client-go |")
print("|---|---|---|---|---|---|---|---|")
names = {"informer": "kube-informer (JSON)", "informer-pb": "kube-informer (protobuf)",
         "informer-pb-compact": "kube-informer (protobuf, Compact cache)",
         "informer-pb-compact-inorder": "kube-informer (protobuf, Compact cache, in-order FIFO)",
         "informer-pb-pad": "kube-informer (protobuf), glibc top_pad 64 MiB",
         "informer-pb-compact-pad": "kube-informer (protobuf, Compact cache), glibc top_pad 64 MiB",
         "go": "client-go (protobuf)"}
keys = ("cpu_sync_s", "cpu_handled_s", "handled_s", "hwm_kb")
g = [med("go", k) for k in keys]
for client in ("informer", "informer-pb", "informer-pb-compact", "informer-pb-compact-inorder", "informer-pb-pad", "informer-pb-compact-pad", "go"):
    c = [med(client, k) for k in keys]
    print(f"| {names[client]} | {c[0]:.3f} | {c[1]:.3f} | {c[2]:.3f} | {c[3] / 1024:.0f} | {c[1] / g[1]:.2f}× | {c[2] / g[2]:.2f}× | {c[3] / g[3]:.2f}× |")
print(f"\nMedians of {len(rows['go'])} runs.")
EOF
