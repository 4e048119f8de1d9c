#!/usr/bin/env bash
# Build kube-apiserver and etcd for KubeMoon's integration tests and demo.
#
#   testenv/build.sh              build once into the cache dir (instant when already built)
#   testenv/build.sh --force      rebuild even if the binaries exist
#   testenv/build.sh --print-dir  print the cache dir and exit (no Go needed)
#
# Cache dir: ${KUBEMOON_TESTENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubemoon/testenv}/v1.37.2
# Needs only Go (>= the go line of go.mod) and access to the Go module proxy.
# Binaries are built into temporary files and renamed into place, so an interrupted
# build never leaves a half-written binary behind.
set -euo pipefail

K8S_VERSION=v1.37.2
K8S_MINOR=37

HERE=$(cd -- "$(dirname -- "${BASH_SOURCE[0]}")" && pwd)
BASE=${KUBEMOON_TESTENV_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/kubemoon/testenv}
DIR=$BASE/$K8S_VERSION
APISERVER=$DIR/kube-apiserver
ETCD=$DIR/etcd

force=0
case "${1:-}" in
    --print-dir) echo "$DIR"; exit 0 ;;
    --force) force=1 ;;
    "") ;;
    -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "build.sh: unknown argument: $1 (try --help)" >&2; exit 2 ;;
esac

if [[ $force == 0 && -x $APISERVER && -x $ETCD ]]; then
    echo "testenv: kube-apiserver and etcd $K8S_VERSION already built in $DIR"
    exit 0
fi

if ! command -v go >/dev/null 2>&1; then
    echo "testenv: the 'go' command is required to build kube-apiserver and etcd" >&2
    exit 1
fi

mkdir -p -- "$DIR"

# Serialize concurrent builds (two make targets, two CI jobs on one runner); the rename
# below keeps results correct without the lock, the lock only avoids doing the work twice.
if command -v flock >/dev/null 2>&1; then
    exec 9>"$DIR/.build.lock"
    if ! flock -n 9; then
        echo "testenv: another build is running; waiting for it..."
        flock 9
    fi
    if [[ $force == 0 && -x $APISERVER && -x $ETCD ]]; then
        echo "testenv: built by the other build in $DIR"
        exit 0
    fi
    # Holding the lock, any temp file left here belongs to a build that was SIGKILLed.
    rm -f -- "$DIR"/.kube-apiserver.?????? "$DIR"/.etcd.??????
fi

tmp_files=()
cleanup() { rm -f -- "${tmp_files[@]+"${tmp_files[@]}"}"; }
trap cleanup EXIT
# Turn signals into a normal exit so that the EXIT trap removes the temp files.
trap 'exit 130' INT
trap 'exit 143' TERM

cd -- "$HERE"
# The wrapper module alone decides versions: no go.work from a parent directory, and
# go.mod/go.sum are never edited by a build (-mod=readonly; never `go get -u` here).
export GOWORK=off
export CGO_ENABLED=0

start=$SECONDS
modcache=$(go env GOMODCACHE)
echo "testenv: $(go version)"
echo "testenv: downloading modules into $modcache ..."
t=$SECONDS
go mod download
echo "testenv: modules ready ($((SECONDS - t)) s)"

etcd_version=$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)

# build <output> <package> <ldflags>: build to a temp name, then rename into place.
build() {
    local out=$1 pkg=$2 ldflags=$3 name tmp t
    name=$(basename -- "$out")
    tmp=$(mktemp "$DIR/.$name.XXXXXX")
    tmp_files+=("$tmp")
    echo "testenv: building $name ($pkg) ..."
    t=$SECONDS
    go build -mod=readonly -trimpath -pgo=off -ldflags "$ldflags" -o "$tmp" "$pkg"
    chmod 0755 -- "$tmp"
    mv -f -- "$tmp" "$out"
    echo "testenv: built $name in $((SECONDS - t)) s"
}

vpkg=k8s.io/component-base/version
build "$APISERVER" k8s.io/kubernetes/cmd/kube-apiserver \
    "-s -w -X $vpkg.gitVersion=$K8S_VERSION -X $vpkg.gitMajor=1 -X $vpkg.gitMinor=$K8S_MINOR -X $vpkg.gitTreeState=clean"
build "$ETCD" go.etcd.io/etcd/server/v3 \
    "-s -w -X go.etcd.io/etcd/api/v3/version.GitSHA=module-$etcd_version"

echo "testenv: done in $((SECONDS - start)) s"
echo "$APISERVER"
echo "$ETCD"
