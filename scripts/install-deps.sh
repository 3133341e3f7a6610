#!/usr/bin/env bash
# Installs the Debian packages lazyattn builds against, only those missing.
# Called by `make run` and `make test` every time (a no-op when all are installed); safe
# to run twice. `lazyattn race --record` also needs tmux and imagemagick (not installed here).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libpcre2-dev libcjson-dev
      libxxhash-dev libmicrohttpd-dev libcriterion-dev python3 python3-pip gnuplot-nox)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}" >&2
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
# The end-to-end server test speaks through the official `openai` Python client (PyPI).
if ! python3 -c "import openai" 2>/dev/null; then
  echo "install-deps: installing the openai Python client (tests)" >&2
  python3 -m pip install -q openai 2>/dev/null ||
    python3 -m pip install -q --break-system-packages openai ||
    echo "install-deps: could not install openai; its end-to-end test will be skipped" >&2
fi
