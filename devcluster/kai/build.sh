#!/usr/bin/env bash
# Builds KAI Scheduler's scheduler, binder, podgrouper, podgroupcontroller and
# queuecontroller for the local cluster, into $BIN_DIR as kai-<name>, from a
# copy of KAI's source with the project's patches (devcluster/kai/patches/)
# applied. Only when the source, the patches, the Go version or this script
# changed since the last successful build.
#
# Where the source comes from, first that exists:
#   $KAI_SRC                       (a checkout of KAI at the commit below)
#   <repo>/../shared/kai-scheduler (the snapshot next to the project)
#   <repo>/.cache/kai/clone        (cloned here from GitHub when git and the network allow)
#
#   build.sh                  build if needed
#   build.sh --source-hash    print the hash that decides, and build nothing
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
BIN_DIR="${BIN_DIR:-$root/.cache/devcluster/bin}"
WORK="$root/.cache/kai"
KAI_REPO="https://github.com/kai-scheduler/KAI-Scheduler"
KAI_COMMIT="df7f140767683699eb88bd60e0f36c6238c22d0d"
KAI_VERSION="v0.17.0-df7f140"
COMPONENTS=(scheduler binder podgrouper podgroupcontroller queuecontroller)

fail() {
  echo "kai: $*" >&2
  exit 1
}

command -v go >/dev/null 2>&1 || fail "the Go toolchain is missing (need go >= 1.26 on PATH, or an older Go that may fetch it); install Go and retry."

find_source() {
  if [ -n "${KAI_SRC:-}" ]; then
    [ -f "$KAI_SRC/go.mod" ] || fail "KAI_SRC=$KAI_SRC has no go.mod: point it at a checkout of $KAI_REPO at commit $KAI_COMMIT."
    src="$(cd "$KAI_SRC" && pwd)"
    return
  fi
  if [ -f "$root/../shared/kai-scheduler/go.mod" ]; then
    src="$(cd "$root/../shared/kai-scheduler" && pwd)"
    return
  fi
  if [ -f "$WORK/clone/go.mod" ]; then
    src="$WORK/clone"
    return
  fi
  if command -v git >/dev/null 2>&1; then
    echo "kai: no KAI source at ../shared/kai-scheduler; cloning $KAI_REPO at $KAI_COMMIT into $WORK/clone ..."
    rm -rf "$WORK/clone.tmp"
    mkdir -p "$WORK"
    if git init -q "$WORK/clone.tmp" &&
      git -C "$WORK/clone.tmp" fetch -q --depth 1 "$KAI_REPO" "$KAI_COMMIT" 2>/dev/null &&
      git -C "$WORK/clone.tmp" checkout -q FETCH_HEAD; then
      mv "$WORK/clone.tmp" "$WORK/clone"
      src="$WORK/clone"
      return
    fi
    rm -rf "$WORK/clone.tmp"
  fi
  fail "KAI Scheduler's source was not found and could not be cloned: run 'git clone $KAI_REPO /path/to/kai && git -C /path/to/kai checkout $KAI_COMMIT', then 'make devcluster-build KAI_SRC=/path/to/kai'."
}

find_source
# KAI v0.17 wants go 1.26.3: an older local Go fetches that toolchain through the module proxy.
export GOTOOLCHAIN="${GOTOOLCHAIN:-auto}"

hash="$({
  echo "$KAI_COMMIT"
  go version
  (cd "$src" && { find cmd pkg -name '*.go' -not -name '*_test.go'; ls deployments/kai-scheduler/crds/*.yaml; echo go.mod; echo go.sum; } | LC_ALL=C sort | xargs sha256sum)
  (cd "$here" && { ls patches/*.patch; echo build.sh; } | LC_ALL=C sort | xargs sha256sum)
} | sha256sum | cut -d' ' -f1)"
if [ "${1:-}" = "--source-hash" ]; then
  echo "$hash"
  exit 0
fi
mkdir -p "$BIN_DIR"
stamp="$BIN_DIR/.kai-source-hash"
missing=0
for c in "${COMPONENTS[@]}"; do [ -x "$BIN_DIR/kai-$c" ] || missing=1; done
[ -d "$BIN_DIR/kai-crds" ] || missing=1
if [ "$missing" = 0 ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$hash" ]; then
  echo "kai: KAI Scheduler binaries are up to date in $BIN_DIR"
  exit 0
fi
# shellcheck source=../scripts/bincache.sh
. "$here/../scripts/bincache.sh"
kept=(kai-crds)
for c in "${COMPONENTS[@]}"; do kept+=("kai-$c"); done
if bincache_restore kai "$hash" "$BIN_DIR" "${kept[@]}"; then
  echo "$hash" >"$stamp"
  echo "kai: KAI Scheduler binaries of these sources copied from $BIN_CACHE"
  exit 0
fi

echo "kai: building KAI Scheduler ($KAI_VERSION: ${COMPONENTS[*]}) from $src into $BIN_DIR"
echo "kai: the first build compiles KAI and what the Kubernetes build did not: about 6 minutes on 2 cores; later builds reuse Go's cache."
start=$(date +%s)
# A fresh copy each build: the project's patches apply to it, never to the source.
rm -rf "$WORK/src"
mkdir -p "$WORK/src"
(cd "$src" && tar --exclude=.git -cf - cmd pkg go.mod go.sum LICENSE NOTICE) | tar -C "$WORK/src" -xf -
chmod -R u+w "$WORK/src"
for p in "$here"/patches/*.patch; do
  echo "kai: applying $(basename "$p")"
  patch -s -p1 -d "$WORK/src" <"$p" || fail "the patch $p does not apply to $src (is it commit $KAI_COMMIT?)"
done
cd "$WORK/src"
echo "kai: [1/2] downloading Go modules ..."
go mod download
echo "kai: [2/2] compiling ${COMPONENTS[*]} ..."
( while sleep 60; do echo "kai:   ... still compiling ($(( $(date +%s) - start ))s)"; done ) &
beat=$!
trap 'kill $beat 2>/dev/null || true' EXIT
rm -rf "$WORK/out"
mkdir -p "$WORK/out"
pkgs=()
for c in "${COMPONENTS[@]}"; do pkgs+=("./cmd/$c"); done
# -trimpath as in the Kubernetes build, so both share the packages they have in common in Go's cache.
if ! go build -trimpath -ldflags "-s -w" -o "$WORK/out/" "${pkgs[@]}"; then
  fail "building KAI failed (see the compiler output above)."
fi
for c in "${COMPONENTS[@]}"; do mv "$WORK/out/$c" "$BIN_DIR/kai-$c"; done
# KAI's CRDs (Queue, PodGroup, BindRequest, Topology, ...) for the cluster to apply.
rm -rf "$BIN_DIR/kai-crds"
mkdir -p "$BIN_DIR/kai-crds"
cp "$src"/deployments/kai-scheduler/crds/*.yaml "$BIN_DIR/kai-crds/"
echo "$hash" >"$stamp"
bincache_save kai "$hash" "$BIN_DIR" "${kept[@]}"
echo "kai: built in $(( $(date +%s) - start ))s"
