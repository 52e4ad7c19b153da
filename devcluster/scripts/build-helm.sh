#!/usr/bin/env bash
# Builds helm (for the chart's tests) from its Go module into <bin dir>, or copies the same
# build from the binary cache (bincache.sh).
#   build-helm.sh <version> <bin dir>
set -euo pipefail
version="$1"
bin="$2"
here="$(cd "$(dirname "$0")" && pwd)"
command -v go >/dev/null || { echo "gpusessions: the Go toolchain is missing (need go >= 1.25 on PATH) to build helm" >&2; exit 1; }
ldflags="-s -w -X helm.sh/helm/v4/internal/version.version=$version"
hash="$({ echo "$version"; echo "$ldflags"; go version; sha256sum <"$here/build-helm.sh"; } | sha256sum | cut -d' ' -f1)"
mkdir -p "$bin"
# shellcheck source=bincache.sh
. "$here/bincache.sh"
if bincache_restore helm "$hash" "$bin" helm; then
  echo "gpusessions: helm $version copied from $BIN_CACHE"
  exit 0
fi
echo "gpusessions: building helm $version from its Go module into $bin (first time: about 2 minutes) ..."
GOBIN="$(cd "$bin" && pwd)" go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v4/cmd/helm@$version"
bincache_save helm "$hash" "$bin" helm
