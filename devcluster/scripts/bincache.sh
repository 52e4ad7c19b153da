# Sourced by devcluster/scripts/build.sh and devcluster/kai/build.sh: built binaries kept per
# source hash outside the checkout, so a fresh clone of the same sources (CI, a second
# worktree) copies them instead of linking them again (about a minute and a half on 2 cores).
# The hash already covers every input of the build (sources, go.mod/go.sum, the Go version,
# the build script and its flags, KAI's patches); nothing else is trusted.
#   GPUSESSIONS_BIN_CACHE=<dir>   where (default: ${XDG_CACHE_HOME:-~/.cache}/gpusessions/bin)
#   GPUSESSIONS_BIN_CACHE=off     never read or write it
BIN_CACHE="${GPUSESSIONS_BIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/gpusessions/bin}"

# bincache_restore <name> <hash> <dest> <path>...: copy the kept paths into <dest>; 1 if absent.
bincache_restore() {
  local name="$1" hash="$2" dest="$3"
  shift 3
  [ "$BIN_CACHE" != off ] || return 1
  local dir="$BIN_CACHE/$name-$hash" p
  [ -f "$dir/.complete" ] || return 1
  for p in "$@"; do [ -e "$dir/$p" ] || return 1; done
  for p in "$@"; do
    rm -rf "${dest:?}/$p.tmp"
    cp -a "$dir/$p" "$dest/$p.tmp" && rm -rf "${dest:?}/$p" && mv "$dest/$p.tmp" "$dest/$p" || return 1
  done
  touch "$dir"  # recently used: the pruning below keeps the newest folders
}

# bincache_save <name> <hash> <src> <path>...: keep the paths; the two newest hashes per name stay.
bincache_save() {
  local name="$1" hash="$2" src="$3"
  shift 3
  [ "$BIN_CACHE" != off ] || return 0
  local dir="$BIN_CACHE/$name-$hash" p
  mkdir -p "$BIN_CACHE" || return 0
  rm -rf "$dir.tmp" && mkdir -p "$dir.tmp" || return 0
  for p in "$@"; do cp -a "$src/$p" "$dir.tmp/$p" || { rm -rf "$dir.tmp"; return 0; }; done
  touch "$dir.tmp/.complete"
  rm -rf "$dir" && mv "$dir.tmp" "$dir" || return 0
  # shellcheck disable=SC2012
  ls -1dt "$BIN_CACHE/$name"-* 2>/dev/null | grep -v '\.tmp$' | tail -n +3 | xargs -r rm -rf
}
