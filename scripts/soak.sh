#!/usr/bin/env bash
# A long soak (tests/deploy/soak.py: 32 clients, forced eviction, orders, salts, cut
# streams; answers against a sequential reference, no pinned block at idle, flat memory),
# recorded in bench/results/soak.json. make test runs 90 s of it.
#
#   scripts/soak.sh [SECONDS (1800)] [BUILD_DIR (build)]
set -euo pipefail
cd "$(dirname "$0")/.."
exec python3 tests/deploy/soak.py "${2:-build}" --seconds "${1:-1800}" --json bench/results/soak.json
