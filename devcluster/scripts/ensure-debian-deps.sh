#!/usr/bin/env bash
# Installs the Debian packages a step needs when they are missing (as root), or
# says in one line what to install.
set -euo pipefail
need=()
case "${1:-}" in
  python)
    python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
    ;;
  node)
    command -v npm >/dev/null 2>&1 || need+=(npm)
    command -v node >/dev/null 2>&1 || need+=(nodejs)
    ;;
  browser)
    [ -x /usr/bin/chromium ] || need+=(chromium)
    ;;
  *) echo "usage: $0 python|node|browser" >&2; exit 2 ;;
esac
[ ${#need[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ] || ! command -v apt-get >/dev/null 2>&1; then
  echo "gpusessions: missing ${need[*]}; install them with your package manager and retry." >&2
  exit 1
fi
echo "gpusessions: installing Debian packages: ${need[*]} ..."
apt-get update -qq >/dev/null
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
