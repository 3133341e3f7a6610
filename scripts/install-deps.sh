#!/usr/bin/env bash
# Installs the Debian packages lazyattn builds against, only those missing.
# Called by `make run` and `make test` every time (a no-op when all are installed); safe
# to run twice. `lazyattn race --record` also needs tmux and imagemagick (not installed here).
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libpcre2-dev libcjson-dev
      libxxhash-dev libmicrohttpd-dev libcriterion-dev libhiredis-dev redis-server
      libzmq3-dev libmsgpack-dev nginx curl libutf8proc-dev zlib1g-dev openssl
      python3 python3-pip python3-venv gnuplot-nox clang libclang-rt-dev)
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
# The structured-output test validates with `jsonschema` (PyPI).
if ! python3 -c "import jsonschema" 2>/dev/null; then
  echo "install-deps: installing the jsonschema Python package (tests)" >&2
  python3 -m pip install -q jsonschema 2>/dev/null ||
    python3 -m pip install -q --break-system-packages jsonschema ||
    echo "install-deps: could not install jsonschema; the structured-output test will fail" >&2
fi
# The end-to-end server test speaks through the official `openai` Python client (PyPI).
if ! python3 -c "import openai" 2>/dev/null; then
  echo "install-deps: installing the openai Python client (tests)" >&2
  python3 -m pip install -q openai 2>/dev/null ||
    python3 -m pip install -q --break-system-packages openai ||
    echo "install-deps: could not install openai; the tests that use it will fail" >&2
fi
# The deployment tests (tests/deploy) subscribe to KV events with pyzmq and decode them with
# msgspec, as vLLM's own subscriber does.
for mod in zmq:pyzmq msgspec:msgspec; do
  if ! python3 -c "import ${mod%%:*}" 2>/dev/null; then
    echo "install-deps: installing ${mod#*:} (tests)" >&2
    python3 -m pip install -q "${mod#*:}" 2>/dev/null ||
      python3 -m pip install -q --break-system-packages "${mod#*:}" ||
      { echo "install-deps: could not install ${mod#*:}" >&2; exit 1; }
  fi
done
# The Python tests (tests/python, issue 23) run under pytest (PyPI), as the openai client does.
if ! python3 -c "import pytest" 2>/dev/null; then
  echo "install-deps: installing pytest (the Python tests)" >&2
  python3 -m pip install -q pytest 2>/dev/null ||
    python3 -m pip install -q --break-system-packages pytest ||
    echo "install-deps: could not install pytest; make test's python/pytest will fail" >&2
fi
