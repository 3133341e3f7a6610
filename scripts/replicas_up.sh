#!/usr/bin/env bash
# A reference deployment on loopback (README "Several replicas"): N `lazyattn serve`
# replicas sharing document KV through one redis-server, behind nginx (round robin), each
# publishing KV events on ZMQ. Everything runs as a child of this script's caller, from
# Debian's packages (redis-server, nginx), on loopback ports; scripts/replicas_down.sh DIR
# stops it by the PIDs written under DIR.
#
#   scripts/replicas_up.sh [-n N] [--dir DIR] [--port P] [--redis-port R] [--events-port E]
#                          [--lazyattn BIN] [--redis-args "..."] [-- SERVE ARGS...]
#
#   -n N            replicas (2)
#   --dir DIR       run directory: pids, logs, nginx.conf, the shared secret, env (a new
#                   temporary directory by default; printed)
#   --port P        nginx's port (0: a free one)
#   --redis-port R  redis-server's port (0: a free one); --redis-url URL uses a running
#                   store instead (nothing started for it)
#   --events-port E replica i publishes KV events on tcp://*:E+i (0: none)
#   --lazyattn BIN  the binary (build/lazyattn)
#   --redis-args    extra redis-server arguments (e.g. "--maxmemory 1gb --maxmemory-policy
#                   allkeys-lru", the policy the shared tier expects in production)
#   --no-shared     no redis-server and no shared tier: replicas that share nothing (the
#                   baseline of bench/bench_replicas.sh)
#   after --         arguments every replica's serve gets (-m DIR, --device, --kv-blocks, ...)
#
# Writes DIR/env (URL, REDIS_URL, REPLICA_PORTS, REPLICA_PIDS, ...) for scripts and tests;
# exits non-zero, after stopping what it started, if any part does not come up.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
n=2 dir="" port=0 redis_port=0 redis_url="" events_port=0 bin="$root/build/lazyattn" redis_args="" shared=1
serve_args=()
while [ $# -gt 0 ]; do
    case "$1" in
    -n) n=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    --port) port=$2; shift 2 ;;
    --redis-port) redis_port=$2; shift 2 ;;
    --redis-url) redis_url=$2; shift 2 ;;
    --events-port) events_port=$2; shift 2 ;;
    --lazyattn) bin=$2; shift 2 ;;
    --redis-args) redis_args=$2; shift 2 ;;
    --no-shared) shared=0; shift ;;
    --) shift; serve_args=("$@"); break ;;
    *) echo "replicas_up: unknown argument $1" >&2; exit 2 ;;
    esac
done
[ -n "$dir" ] || dir=$(mktemp -d /tmp/lazyattn-replicas-XXXXXX)
mkdir -p "$dir"
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
wait_http() { # url seconds [pid: give up as soon as it has exited]
    for _ in $(seq 1 $((${2} * 10))); do
        curl -fs -o /dev/null "$1" && return 0
        [ -z "${3:-}" ] || kill -0 "$3" 2>/dev/null || return 1
        sleep 0.1
    done
    return 1
}
fail() {
    echo "replicas_up: $*" >&2
    "$root/scripts/replicas_down.sh" "$dir" >/dev/null 2>&1 || true
    exit 1
}
: >"$dir/pids"

# the deployment secret every replica derives its keys from
[ -s "$dir/secret" ] || { head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$dir/secret"; chmod 600 "$dir/secret"; }

if [ "$shared" = 0 ]; then
    redis_url=""
elif [ -z "$redis_url" ]; then
    [ "$redis_port" != 0 ] || redis_port=$(free_port)
    # shellcheck disable=SC2086
    redis-server --port "$redis_port" --bind 127.0.0.1 --save '' --appendonly no $redis_args \
        >"$dir/redis.log" 2>&1 &
    echo "redis $!" >>"$dir/pids"
    for _ in $(seq 1 100); do redis-cli -p "$redis_port" ping >/dev/null 2>&1 && break; sleep 0.1; done
    redis-cli -p "$redis_port" ping >/dev/null 2>&1 || fail "redis-server did not start (see $dir/redis.log)"
    redis_url="redis://127.0.0.1:$redis_port"
fi

ports=() pids=()
for i in $(seq 0 $((n - 1))); do
    p=$(free_port)
    ev=()
    [ "$events_port" = 0 ] || ev=(--kv-events "tcp://*:$((events_port + i))")
    store=()
    [ -z "$redis_url" ] || store=(--kv-store "$redis_url")
    "$bin" serve --port "$p" "${store[@]}" --kv-secret-file "$dir/secret" "${ev[@]}" \
        "${serve_args[@]}" >"$dir/replica$i.log" 2>&1 &
    pid=$!
    echo "replica$i $pid" >>"$dir/pids"
    ports+=("$p") pids+=("$pid")
done
for i in $(seq 0 $((n - 1))); do
    wait_http "http://127.0.0.1:${ports[$i]}/health" 120 "${pids[$i]}" ||
        fail "replica $i did not come up: $(tail -3 "$dir/replica$i.log")"
done

[ "$port" != 0 ] || port=$(free_port)
{
    echo "worker_processes 1;"
    echo "pid $dir/nginx.pid;"
    echo "error_log $dir/nginx_error.log;"
    echo "daemon off;"
    echo "events { worker_connections 1024; }"
    echo "http {"
    echo "  access_log $dir/nginx_access.log;"
    echo "  client_body_temp_path $dir/nginx_body; proxy_temp_path $dir/nginx_proxy;"
    echo "  fastcgi_temp_path $dir/nginx_fcgi; uwsgi_temp_path $dir/nginx_uwsgi; scgi_temp_path $dir/nginx_scgi;"
    echo "  client_max_body_size 16m;"
    echo "  upstream lazyattn {"
    for p in "${ports[@]}"; do echo "    server 127.0.0.1:$p max_fails=1 fail_timeout=5s;"; done
    echo "  }"
    echo "  server {"
    echo "    listen 127.0.0.1:$port;"
    echo "    location / {"
    echo "      proxy_pass http://lazyattn;"
    echo "      proxy_http_version 1.1;"
    echo "      proxy_set_header Connection \"\";"
    echo "      proxy_buffering off;            # server-sent events stream through"
    echo "      proxy_read_timeout 300s;"
    echo "      proxy_connect_timeout 2s;"
    echo "      proxy_next_upstream error timeout http_502 http_503 non_idempotent;  # a generation is safe to retry"
    echo "    }"
    echo "  }"
    echo "}"
} >"$dir/nginx.conf"
nginx -c "$dir/nginx.conf" -p "$dir" >"$dir/nginx.log" 2>&1 &
nginx_pid=$!
echo "nginx $nginx_pid" >>"$dir/pids"
wait_http "http://127.0.0.1:$port/health" 20 "$nginx_pid" || fail "nginx did not come up: $(tail -3 "$dir/nginx_error.log" 2>/dev/null)"

{
    echo "URL=http://127.0.0.1:$port"
    echo "REDIS_URL=$redis_url"
    echo "REPLICA_PORTS=\"${ports[*]}\""
    echo "REPLICA_PIDS=\"${pids[*]}\""
    echo "SECRET_FILE=$dir/secret"
    [ "$events_port" = 0 ] || echo "EVENTS_BASE_PORT=$events_port"
} >"$dir/env"
echo "replicas_up: $n replicas behind http://127.0.0.1:$port (redis ${redis_url:-none}); run dir $dir"
