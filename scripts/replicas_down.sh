#!/usr/bin/env bash
# Stop what scripts/replicas_up.sh started under DIR, by the PIDs it wrote: nginx first (no
# new requests), then the replicas (SIGTERM: they finish, flush their store writes and exit),
# then redis-server. Waits up to 30 s for each; SIGKILL after that.
#   scripts/replicas_down.sh DIR
set -u
dir=${1:?usage: replicas_down.sh DIR}
[ -f "$dir/pids" ] || { echo "replicas_down: no $dir/pids" >&2; exit 1; }
stop() { # pid
    kill -TERM "$1" 2>/dev/null || return 0
    for _ in $(seq 1 300); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
    kill -KILL "$1" 2>/dev/null || true
}
for kind in nginx replica redis; do
    grep "^$kind" "$dir/pids" | while read -r _ pid; do stop "$pid"; done
done
: >"$dir/pids"
echo "replicas_down: stopped ($dir)"
