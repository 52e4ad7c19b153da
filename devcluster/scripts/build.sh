#!/usr/bin/env bash
# Builds the devcluster binaries (etcd, kube-apiserver, kube-scheduler,
# kube-controller-manager and kubectl) from Go modules into $BIN_DIR, and only
# when the Go sources, go.mod, go.sum, the Go version or this script (its
# ldflags) changed since the last successful build.
#   build.sh                  build if needed
#   build.sh --source-hash    print the hash that decides, and build nothing
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
root="$(cd "$here/.." && pwd)"
BIN_DIR="${BIN_DIR:-$root/.cache/devcluster/bin}"
K8S_VERSION="v1.36.5"
K8S_MINOR="${K8S_VERSION#v1.}"
K8S_MINOR="${K8S_MINOR%%.*}"
BINARIES=(etcd kube-apiserver kube-scheduler kube-controller-manager kubectl)

if ! command -v go >/dev/null 2>&1; then
  echo "devcluster: the Go toolchain is missing (need go >= 1.26 on PATH); install Go from your distribution or go.dev and retry." >&2
  exit 1
fi

# Go 1.26 or newer builds Kubernetes 1.36. An older Go (1.21+) fetches the
# toolchain that go.mod asks for through the Go module proxy.
gominor="$(go env GOVERSION | sed -E 's/^go1\.([0-9]+).*/\1/')"
if [ "${gominor:-0}" -lt 21 ] 2>/dev/null; then
  echo "devcluster: $(go env GOVERSION) is too old: install Go 1.26 or newer (it builds Kubernetes 1.36) and retry." >&2
  exit 1
elif [ "$gominor" -lt 26 ]; then
  echo "devcluster: $(go env GOVERSION) is older than 1.26; letting Go fetch the toolchain go.mod names ..."
  export GOTOOLCHAIN=auto
fi

# This script is part of the hash: a change of its ldflags (or anything else here) rebuilds.
hash="$(cd "$here" && { echo "$K8S_VERSION"; go version; { find . -name '*.go' -o -name go.mod -o -name go.sum; echo ./scripts/build.sh; } | LC_ALL=C sort | xargs sha256sum; } | sha256sum | cut -d' ' -f1)"
if [ "${1:-}" = "--source-hash" ]; then
  echo "$hash"
  exit 0
fi
mkdir -p "$BIN_DIR"
stamp="$BIN_DIR/.source-hash"
missing=0
for b in "${BINARIES[@]}"; do [ -x "$BIN_DIR/$b" ] || missing=1; done
if [ "$missing" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "devcluster: binaries are up to date in $BIN_DIR"
  exit 0
fi
# shellcheck source=bincache.sh
. "$here/scripts/bincache.sh"
if bincache_restore k8s "$hash" "$BIN_DIR" "${BINARIES[@]}"; then
  echo "$hash" > "$stamp"
  echo "devcluster: Kubernetes $K8S_VERSION binaries of these sources copied from $BIN_CACHE"
  exit 0
fi

pkg="k8s.io/component-base/version"
ldflags="-s -w -X $pkg.gitVersion=$K8S_VERSION -X $pkg.gitMajor=1 -X $pkg.gitMinor=$K8S_MINOR -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z -X k8s.io/client-go/pkg/version.gitVersion=$K8S_VERSION -X k8s.io/client-go/pkg/version.gitMajor=1 -X k8s.io/client-go/pkg/version.gitMinor=$K8S_MINOR"
echo "devcluster: building Kubernetes $K8S_VERSION components from Go modules into $BIN_DIR"
echo "devcluster: the first build downloads the modules and compiles about 3,000 packages: about 6 minutes on 2 cores. Later builds reuse Go's cache (under a minute)."
cd "$here"
start=$(date +%s)
echo "devcluster: [1/2] downloading Go modules ..."
go mod download
for i in "${!BINARIES[@]}"; do
  b="${BINARIES[$i]}"
  t0=$(date +%s)
  echo "devcluster: [2/2] compiling $b ($((i + 1))/${#BINARIES[@]}) ..."
  # Print a heartbeat so a long compile is not mistaken for a hang.
  ( while sleep 60; do echo "devcluster:   ... still compiling $b ($(( $(date +%s) - t0 ))s)"; done ) &
  beat=$!
  if ! go build -trimpath -ldflags "$ldflags" -o "$BIN_DIR/$b.tmp" "./cmd/$b"; then
    kill "$beat" 2>/dev/null || true
    echo "devcluster: building $b failed (see the compiler output above)." >&2
    exit 1
  fi
  kill "$beat" 2>/dev/null || true
  mv "$BIN_DIR/$b.tmp" "$BIN_DIR/$b"
  echo "devcluster:   $b built in $(( $(date +%s) - t0 ))s"
done
echo "$hash" > "$stamp"
bincache_save k8s "$hash" "$BIN_DIR" "${BINARIES[@]}"
echo "devcluster: all binaries built in $(( $(date +%s) - start ))s"
