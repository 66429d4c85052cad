#!/usr/bin/env bash
# Builds kube-apiserver and etcd from source through the Go module proxy, for the end-to-end
# tests in tests/e2e/. Binaries land in a cache directory outside the repository and are reused
# when present, so a second run is a fast no-op.
#
# Usage: scripts/build-k8s.sh            # prints the bin dir on its last line of stdout
# Environment:
#   KUBE_INFORMER_K8S_VERSION  Kubernetes release to build (default below)
#   KUBE_INFORMER_K8S_CACHE    cache root (default $HOME/.cache/kube-informer-k8s)
#
# No etcdctl is built: the tests compact etcd through its gRPC gateway (plain HTTP/JSON on the
# client port), which etcd enables by default.
set -euo pipefail

version="${KUBE_INFORMER_K8S_VERSION:-1.37.2}"
version="${version#v}"
cache_root="${KUBE_INFORMER_K8S_CACHE:-$HOME/.cache/kube-informer-k8s}"
dir="$cache_root/v$version"
bin="$dir/bin"
stamp="$bin/.complete"

log() { echo "build-k8s: $*" >&2; }

# Downloads module@version and prints the path of its go.mod file.
gomod_of() {
    local answer gomod
    if ! answer="$(go mod download -json "$1" 2>&1)"; then
        log "error: cannot download $1 from the Go module proxy: $answer"
        exit 1
    fi
    gomod="$(sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p' <<<"$answer")"
    [[ -f "$gomod" ]] || { log "error: no go.mod for $1 in: $answer"; exit 1; }
    echo "$gomod"
}

if [[ -f "$stamp" && -x "$bin/kube-apiserver" && -x "$bin/etcd" ]]; then
    log "cached: $(cat "$stamp")"
    echo "$bin"
    exit 0
fi

command -v go >/dev/null || { log "error: go is not installed"; exit 1; }
mkdir -p "$bin"
# Two builds at once (say CI's background build and a developer's run) would clobber each
# other's module dirs: the second waits, then finds the binaries built.
if command -v flock >/dev/null; then
    exec 9>"$dir/.lock"
    flock 9
    if [[ -f "$stamp" && -x "$bin/kube-apiserver" && -x "$bin/etcd" ]]; then
        log "built meanwhile: $(cat "$stamp")"
        echo "$bin"
        exit 0
    fi
fi
export CGO_ENABLED=0 GOFLAGS="${GOFLAGS:-} -mod=mod"
go_version="$(go env GOVERSION)"
started=$SECONDS

# --- kube-apiserver -------------------------------------------------------------------------
# k8s.io/kubernetes requires its staging modules (k8s.io/api, k8s.io/apiserver, ...) at v0.0.0
# and resolves them with `replace => ./staging/...`, which Go ignores outside the main module.
# Pin every such requirement to the published v0.MINOR.PATCH tag of the same release instead.
kube_mod="$dir/kube-apiserver-mod"
rm -rf "$kube_mod"
mkdir -p "$kube_mod"
cd "$kube_mod"
gomod_file="$(gomod_of "k8s.io/kubernetes@v$version")"
staging_version="v0.${version#*.}"
go_directive="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$gomod_file")"
{
    echo "module kube-informer.local/k8s-build"
    echo
    echo "go $go_directive"
    echo
    echo "require k8s.io/kubernetes v$version"
    echo
    echo "replace ("
    # Every `k8s.io/NAME v0.0.0` requirement is a staging module.
    sed -n 's/^[[:space:]]*\(k8s\.io\/[A-Za-z0-9._-]*\) v0\.0\.0\( .*\)\{0,1\}$/\t\1 => \1 '"$staging_version"'/p' "$gomod_file" | sort -u
    echo ")"
} > go.mod
log "building kube-apiserver v$version (staging modules at $staging_version) with $go_version"
go get "k8s.io/kubernetes/cmd/kube-apiserver@v$version" >&2
# Stamp the real version into /version (otherwise it reports v0.0.0-master).
minor="${version#*.}"
minor="${minor%%.*}"
ver_pkg="k8s.io/component-base/version"
ldflags="-s -w -X $ver_pkg.gitVersion=v$version -X $ver_pkg.gitMajor=1 -X $ver_pkg.gitMinor=$minor -X $ver_pkg.gitTreeState=clean"
t0=$SECONDS
go build -trimpath -ldflags="$ldflags" -o "$bin/kube-apiserver.tmp" k8s.io/kubernetes/cmd/kube-apiserver
mv "$bin/kube-apiserver.tmp" "$bin/kube-apiserver"
kube_secs=$((SECONDS - t0))
log "kube-apiserver built in ${kube_secs}s"

# --- etcd -----------------------------------------------------------------------------------
# The etcd version this Kubernetes release was tested against: its go.etcd.io/etcd/server/v3
# requirement. In etcd 3.5+ that module's root package is the etcd main package.
etcd_version="$(sed -n 's/^[[:space:]]*go\.etcd\.io\/etcd\/server\/v3 \(v[^ ]*\).*$/\1/p' "$gomod_file" | head -n1)"
[[ -n "$etcd_version" ]] || { log "error: no go.etcd.io/etcd/server/v3 requirement in k8s.io/kubernetes@v$version"; exit 1; }
etcd_mod="$dir/etcd-mod"
rm -rf "$etcd_mod"
mkdir -p "$etcd_mod"
cd "$etcd_mod"
etcd_gomod="$(gomod_of "go.etcd.io/etcd/server/v3@$etcd_version")"
etcd_go_directive="$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$etcd_gomod")"
{
    echo "module kube-informer.local/etcd-build"
    echo
    echo "go $etcd_go_directive"
    echo
    echo "require go.etcd.io/etcd/server/v3 $etcd_version"
} > go.mod
log "building etcd $etcd_version"
go get "go.etcd.io/etcd/server/v3@$etcd_version" >&2
t0=$SECONDS
go build -trimpath -ldflags="-s -w" -o "$bin/etcd.tmp" go.etcd.io/etcd/server/v3
mv "$bin/etcd.tmp" "$bin/etcd"
etcd_secs=$((SECONDS - t0))
log "etcd built in ${etcd_secs}s"

echo "kube-apiserver v$version (${kube_secs}s), etcd $etcd_version (${etcd_secs}s), $go_version, total $((SECONDS - started))s" > "$stamp"
log "done: $(cat "$stamp")"
echo "$bin"
