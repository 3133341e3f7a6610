#!/usr/bin/env bash
# Installs the Debian packages lazyattn builds against, only those missing.
# Called by `make` when pkg-config cannot find one of them; safe to run twice.
set -euo pipefail
pkgs=(build-essential cmake pkg-config libopenblas-dev libpcre2-dev libcjson-dev
      libxxhash-dev libmicrohttpd-dev libcriterion-dev python3)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
echo "install-deps: installing ${missing[*]}" >&2
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO="sudo"
$SUDO apt-get update -qq
DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
