#!/usr/bin/env bash
# Checks the layering of DESIGN.md §6 from the #include "..." lines of src/ and include/:
#
#   1. no include circle: a module is a file stem in its folder (x.c, x.h, x.cu, x.cuh are
#      one module), and the module graph of the include lines must be acyclic (tsort);
#   2. no arrow up: a module includes only modules of its own layer or of a lower one,
#      in this order, top first:
#        cli  bench  server  engine  kv  model  tokenizer  backend  base
#      (grammar/, structured output's JSON grammars and token masks, ranks with tokenizer/)
#      and model/ and tokenizer/ are siblings that never include backend/ (backends take
#      shapes and dtypes, not configs): the rank below says model > tokenizer > backend,
#      and the extra rule forbids model -> backend.
#      include/lazyattn/status.h, types.h and abi.h are value types and macros every layer may use;
#      include/lazyattn/lazyattn.h is the engine's public API (layer engine).
#
# Prints every violation and exits 1 if there is one; run by `make test` (ctest: layers).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"

rank_of() { # module path (relative to src/ or include/) -> rank
    case "$1" in
    lazyattn/status | lazyattn/types | lazyattn/abi) echo 0 ;;
    lazyattn/*) echo 6 ;;
    cli/*) echo 9 ;;
    bench/*) echo 8 ;;
    server/*) echo 7 ;;
    engine/*) echo 6 ;;
    kv/*) echo 5 ;;
    model/*) echo 4 ;;
    tokenizer/*) echo 3 ;;
    grammar/*) echo 3 ;;
    backend/*) echo 2 ;;
    base/*) echo 1 ;;
    *) echo "?" ;;
    esac
}

fail=0
edges=$(mktemp)
trap 'rm -f "$edges"' EXIT
while IFS= read -r f; do
    rel=${f#src/}
    rel=${rel#include/}
    mod=${rel%.*}
    r_from=$(rank_of "$mod")
    if [ "$r_from" = "?" ]; then
        echo "check_layers: $f is in no layer (add its folder to scripts/check_layers.sh)"
        fail=1
        continue
    fi
    echo "$mod $mod" >>"$edges"
    while IFS= read -r inc; do
        [ -n "$inc" ] || continue
        if [ ! -e "src/$inc" ] && [ ! -e "include/$inc" ]; then
            echo "check_layers: $f includes \"$inc\", which is neither under src/ nor include/"
            fail=1
            continue
        fi
        to=${inc%.*}
        r_to=$(rank_of "$to")
        [ "$to" = "$mod" ] && continue
        echo "$mod $to" >>"$edges"
        if [ "$r_to" = "?" ] || [ "$r_to" -gt "$r_from" ]; then
            echo "check_layers: arrow up: $f (${mod%%/*}) includes \"$inc\" (${to%%/*})"
            fail=1
        elif [ "${mod%%/*}" = model ] && [ "${to%%/*}" = backend ]; then
            echo "check_layers: model/ must not know backends: $f includes \"$inc\""
            fail=1
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done < <(find src include -type f \( -name '*.c' -o -name '*.h' -o -name '*.cu' -o -name '*.cuh' \) | sort)

# tsort reports each loop it finds on stderr ("input contains a loop:" then its members)
loops=$(tsort "$edges" 2>&1 >/dev/null || true)
if [ -n "$loops" ]; then
    echo "check_layers: include circle between modules (file stems):"
    echo "$loops" | sed -e "s|^tsort: .*: input contains a loop:|  loop:|" -e "s|^tsort: |    |"
    fail=1
fi
[ $fail = 0 ] && echo "check_layers: ok ($(sort -u "$edges" | awk '$1 != $2' | wc -l) module edges, no circle, no arrow up)"
exit $fail
