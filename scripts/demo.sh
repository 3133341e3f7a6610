#!/usr/bin/env bash
# The main job (`make run`): the race on the bundled model. LazyAttention and prefix caching
# answer the same question whose documents come back in a new order; first-token times and
# the answers are shown side by side.
set -euo pipefail
bin=${1:-build/lazyattn}
"$bin" info | head -3
echo
# question 5: a two-hop question the model answers correctly (models/rag-tiny/eval)
"$bin" race --question 5 "${@:2}"
