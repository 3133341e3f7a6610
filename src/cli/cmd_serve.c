/* lazyattn serve: the OpenAI-compatible HTTP server (DESIGN.md §7, §7b).
 *
 *   lazyattn serve [-m DIR] [--host 127.0.0.1] [--port 8000] [--method lazy] [--kv-blocks N]
 *                  [--block-size 16] [--threads N] [--device cpu|cuda] [--max-batch-tokens N]
 *                  [--max-queue N] [--max-running N] [--max-docs N] [--max-context N]
 *                  [--max-body-bytes N] [--chat-format auto|llama3|tulu] [--model-id NAME]
 *                  [--log-requests] [--host-kv-gib N] [--kv-dir DIR] [--kv-dir-gib N]
 *                  [--kv-write through|evict] [--kv-secret-file F] [--kv-store URL]
 *                  [--kv-io-timeout-ms N] [--kv-events EP [--kv-events-topic T]]
 *                  [--ignore-unknown-fields] [--api-key KEY | --api-key-file F]
 *                  [--protect-metrics] [--allowed-origins LIST] [--ssl-certfile F --ssl-keyfile F]
 *                  [--shutdown-timeout S] [--timeout-keep-alive S] [--max-connections N]
 *                  [--max-connections-per-ip N] [--http-threads N]
 *
 * Prints "lazyattn serve: listening on http://HOST:PORT ..." on stderr once it accepts
 * connections (--port 0 picks a free port, named in that line). SIGINT or SIGTERM shut it
 * down cleanly: with --shutdown-timeout S, /health and new requests get 503 while the
 * requests in flight run to completion for up to S seconds (a second signal cuts that
 * short); then what is still in flight is cancelled and answered, the engine is destroyed,
 * exit status 0. The API key: --api-key, else the first line of --api-key-file, else
 * $LAZYATTN_API_KEY.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "cli/engine_flags.h"
#include "lazyattn/lazyattn.h"
#include "server/kv_events.h"
#include "server/server.h"

static void usage(FILE *f) {
    fprintf(f,
            "usage: lazyattn serve [-m DIR] [options]\n"
            "  -m, --model DIR          model directory (default: the bundled model)\n"
            "      --host H             address to bind (127.0.0.1: loopback only)\n"
            "      --port P             TCP port (8000; 0 = any free port)\n"
            "      --method M           default method: recompute | prefix | block | mepic | lazy\n"
            "                           | block-ref (lazy); requests may override it\n"
            "      --device D           cpu | cuda (cpu)\n"
            "      --threads N          CPU threads (every physical core)\n"
            LA_CLI_CPU_WEIGHTS_USAGE
            "      --kv-blocks N        KV pool capacity in blocks (default: 1 GiB worth on the\n"
            "                           CPU; on CUDA --gpu-memory-fraction of the free memory)\n"
            "      --gpu-memory-fraction F  CUDA: share of the memory the weights leave free\n"
            "                           that the KV pool takes (0.8)\n"
            "      --block-size B       KV block size in tokens (16)\n"
            "      --max-batch-tokens N tokens per engine step (0: 1024 on the CPU, 8192 on a\n"
            "                           GPU of 70 GiB or more, else 2048; at least --max-running)\n"
            LA_CLI_ASYNC_USAGE
            "      --max-running N      requests in prefill/decode at once (64)\n"
            "      --max-queue N        waiting requests before 429 (256)\n"
            "      --max-docs N         documents per request (128; 0: none)\n"
            "      --max-context N      tokens per request incl. max_tokens (model's limit)\n"
            "      --max-body-bytes N   largest request body (16777216)\n"
            "      --chat-format F      auto | llama3 | tulu | template (auto: the model's chat\n"
            "                           template; llama3 / tulu: the Block-FT RAG formats;\n"
            "                           template: the chat template, for documents too)\n"
            "      --chat-template FILE a Jinja chat template instead of the model's\n"
            "      --recompute-first N  recovery's default: each later document's first N tokens\n"
            "                           recomputed in context (block-wise methods; 0: off;\n"
            "                           a request's \"recompute_first\" overrides)\n"
            "      --recompute-ratio R  selected recovery's default: the fraction R of the later\n"
            "                           documents' tokens whose layer-1 values change most in\n"
            "                           context, recomputed too (0: off; \"recompute_ratio\")\n"
            "      --doc-context C      alone | preamble: documents after the first computed alone\n"
            "                           (default) or after the preamble (lazy, block, mepic;\n"
            "                           \"doc_context\"; /v1/documents refuses preamble)\n"
            "      --model-id NAME      model id in the API (the directory's name)\n"
            "      --log-requests       on stderr, a line when a request arrives and one when it ends\n"
            "                           (tokens, cache hits, queue, TTFT, TPOT, total ms)\n"
            "      --ignore-unknown-fields  accept unknown request fields (logged once per name)\n"
            "                           instead of answering 400\n"
            "      --api-key KEY        require 'Authorization: Bearer KEY' (also --api-key-file F,\n"
            "                           or $LAZYATTN_API_KEY); /health and /metrics stay open\n"
            "      --protect-metrics    /health and /metrics want the key too\n"
            "      --allowed-origins L  CORS: '*' or a comma-separated list of origins\n"
            "      --ssl-certfile F     HTTPS with this PEM certificate ...\n"
            "      --ssl-keyfile F      ... and this PEM private key\n"
            "      --shutdown-timeout S on SIGTERM / SIGINT, let requests in flight finish for up to S\n"
            "                           seconds (0: cancel them at once)\n"
            "      --timeout-keep-alive S  close a connection idle this long (a kept-alive one, headers\n"
            "                           or a body that stopped coming), and one whose request headers,\n"
            "                           or then its body, take longer to arrive (60; 0: never)\n"
            "      --max-connections N  open connections at most (1000)\n"
            "      --max-connections-per-ip N  from one address at most (0: no limit)\n"
            "      --http-threads N     HTTP worker threads shared by every connection (min(4, cores))\n"
            "      --kv-events EP       publish KV events on ZMQ PUB at EP in vLLM's schema\n"
            "                           (tcp://*:5557 binds; tcp://HOST:PORT connects)\n"
            "      --kv-events-topic T  topic frame of every message (empty)\n"
            "document KV store (README \"Document KV store\"):\n" LA_CLI_STORE_USAGE);
}

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(g_sig_pipe[1], &b, 1);
    (void)n;
}

/* The first line of path, trimmed (heap string), or NULL with a message. */
static char *read_key_file(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "lazyattn serve: --api-key-file %s: %s\n", path, strerror(errno));
        return NULL;
    }
    char line[4096];
    char *got = fgets(line, sizeof line, f);
    fclose(f);
    size_t n = got ? strlen(line) : 0;
    while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r' || line[n - 1] == ' ' || line[n - 1] == '\t'))
        line[--n] = '\0';
    if (n == 0) {
        fprintf(stderr, "lazyattn serve: --api-key-file %s holds no key on its first line\n", path);
        return NULL;
    }
    return strdup(line);
}

static int parse_chat_format(const char *s, la_chat_format *out) {
    if (!strcmp(s, "auto")) *out = LA_CHAT_FORMAT_AUTO;
    else if (!strcmp(s, "llama3")) *out = LA_CHAT_FORMAT_LLAMA3;
    else if (!strcmp(s, "tulu")) *out = LA_CHAT_FORMAT_TULU;
    else if (!strcmp(s, "template")) *out = LA_CHAT_FORMAT_TEMPLATE;
    else {
        fprintf(stderr, "lazyattn serve: --chat-format '%s' is not one of auto, llama3, tulu, template\n", s);
        return LA_EXIT_USAGE;
    }
    return 0;
}

int la_cli_serve(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, LA_CLI_OPT_MODEL},  {"host", required_argument, 0, 1},
        {"port", required_argument, 0, 2},                  {"method", required_argument, 0, 3},
        {"kv-blocks", required_argument, 0, LA_CLI_OPT_KV_BLOCKS},
        {"block-size", required_argument, 0, LA_CLI_OPT_BLOCK_SIZE},
        {"threads", required_argument, 0, LA_CLI_OPT_THREADS},
        {"cpu-weights", required_argument, 0, LA_CLI_OPT_CPU_WEIGHTS},
        {"cpu-kv", required_argument, 0, LA_CLI_OPT_CPU_KV},
        {"device", required_argument, 0, LA_CLI_OPT_DEVICE},
        {"max-batch-tokens", required_argument, 0, LA_CLI_OPT_MAX_BATCH_TOKENS},
        {"async-scheduling", required_argument, 0, LA_CLI_OPT_ASYNC},
        {"prefill-first", no_argument, 0, LA_CLI_OPT_PREFILL_FIRST},
        {"doc-token-cache-mib", required_argument, 0, LA_CLI_OPT_DOC_TOKEN_CACHE_MIB},
        {"max-queue", required_argument, 0, LA_CLI_OPT_MAX_QUEUE},
        {"max-running", required_argument, 0, LA_CLI_OPT_MAX_RUNNING},
        {"max-docs", required_argument, 0, LA_CLI_OPT_MAX_DOCS},
        {"max-context", required_argument, 0, LA_CLI_OPT_MAX_CONTEXT},
        {"max-body-bytes", required_argument, 0, 13},       {"chat-format", required_argument, 0, 14},
        {"model-id", required_argument, 0, 15},             {"log-requests", no_argument, 0, 16},
        {"help", no_argument, 0, 'h'},
        {"gpu-memory-fraction", required_argument, 0, LA_CLI_OPT_GPU_MEMORY_FRACTION},
        {"kv-events", required_argument, 0, 25},          {"kv-events-topic", required_argument, 0, 26},
        LA_CLI_STORE_OPTIONS,
        {"chat-template", required_argument, 0, LA_CLI_OPT_CHAT_TEMPLATE},
        {"recompute-first", required_argument, 0, LA_CLI_OPT_RECOMPUTE_FIRST},
        {"recompute-ratio", required_argument, 0, LA_CLI_OPT_RECOMPUTE_RATIO},
        {"doc-context", required_argument, 0, LA_CLI_OPT_DOC_CONTEXT},
        {"ignore-unknown-fields", no_argument, 0, 17},      {"api-key", required_argument, 0, 18},
        {"api-key-file", required_argument, 0, 19},         {"protect-metrics", no_argument, 0, 20},
        {"allowed-origins", required_argument, 0, 21},      {"ssl-certfile", required_argument, 0, 22},
        {"ssl-keyfile", required_argument, 0, 23},          {"shutdown-timeout", required_argument, 0, 24},
        {"timeout-keep-alive", required_argument, 0, 27},   {"max-connections", required_argument, 0, 28},
        {"max-connections-per-ip", required_argument, 0, 29}, {"http-threads", required_argument, 0, 30},
        {0, 0, 0, 0}};
    const char *key_file = NULL;
    int32_t shutdown_s = 0;
    la_engine_options eo;
    la_cli_engine_options_init(&eo);
    la_server_options so;
    la_server_options_init(&so);
    la_err err = {0};
    int c;
    int32_t port = so.port;
    int64_t body_bytes = (int64_t)so.max_body_bytes;
    const char *events_ep = NULL, *events_topic = NULL;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        la_cli_flag ef = la_cli_engine_flag_reported(c, optarg, &eo, "serve");
        if (ef == LA_CLI_FLAG_SET) continue;
        if (ef != LA_CLI_FLAG_OTHER) return LA_EXIT_USAGE;
        switch (c) {
        case 1: so.host = optarg; break;
        case 2:
            if (la_cli_parse_i32(optarg, "--port", &port) != 0) return LA_EXIT_USAGE;
            if (port < 0 || port > 65535) {
                fprintf(stderr, "lazyattn serve: --port %d is outside [0, 65535]\n", port);
                return LA_EXIT_USAGE;
            }
            break;
        case 3:
            if (la_method_parse(optarg, &eo.method, &err) != LA_OK) {
                fprintf(stderr, "lazyattn serve: --method: %s\n", err.msg);
                return LA_EXIT_USAGE;
            }
            break;
        case 13:
            if (la_cli_parse_i64(optarg, "--max-body-bytes", &body_bytes) != 0) return LA_EXIT_USAGE;
            if (body_bytes < 1) {
                fprintf(stderr, "lazyattn serve: --max-body-bytes must be >= 1\n");
                return LA_EXIT_USAGE;
            }
            break;
        case 14:
            if (parse_chat_format(optarg, &so.chat_format) != 0) return LA_EXIT_USAGE;
            break;
        case 15: so.model_id = optarg; break;
        case 16: so.log_requests = true; break;
        case 25: events_ep = optarg; break;
        case 26: events_topic = optarg; break;
        case 17: so.ignore_unknown_fields = true; break;
        case 18: so.api_key = optarg; break;
        case 19: key_file = optarg; break;
        case 20: so.protect_metrics = true; break;
        case 21: so.allowed_origins = optarg; break;
        case 22: so.ssl_certfile = optarg; break;
        case 23: so.ssl_keyfile = optarg; break;
        case 24:
            if (la_cli_parse_i32(optarg, "--shutdown-timeout", &shutdown_s) != 0) return LA_EXIT_USAGE;
            if (shutdown_s < 0) {
                fprintf(stderr, "lazyattn serve: --shutdown-timeout must be >= 0 seconds\n");
                return LA_EXIT_USAGE;
            }
            break;
        case 27:
        case 28:
        case 29:
        case 30: {
            const char *name = c == 27   ? "--timeout-keep-alive"
                               : c == 28 ? "--max-connections"
                               : c == 29 ? "--max-connections-per-ip"
                                         : "--http-threads";
            int32_t v = 0;
            if (la_cli_parse_i32(optarg, name, &v) != 0) return LA_EXIT_USAGE;
            if (v < (c == 28 || c == 30 ? 1 : 0) || (c == 30 && v > 256)) {
                fprintf(stderr, "lazyattn serve: %s must be %s\n", name,
                        c == 30 ? "in [1, 256]" : c == 28 ? ">= 1" : ">= 0");
                return LA_EXIT_USAGE;
            }
            if (c == 27) so.idle_timeout_s = (unsigned)v;
            else if (c == 28) so.max_connections = (unsigned)v;
            else if (c == 29) so.max_connections_per_ip = (unsigned)v;
            else so.http_threads = (unsigned)v;
            break;
        }
        case 'h': usage(stdout); return LA_EXIT_OK;
        default: usage(stderr); return LA_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lazyattn serve: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    if (la_cli_store_flags_check(&eo, "serve")) return LA_EXIT_USAGE;
    if ((so.ssl_certfile != NULL) != (so.ssl_keyfile != NULL)) {
        fprintf(stderr, "lazyattn serve: HTTPS needs both --ssl-certfile and --ssl-keyfile\n");
        return LA_EXIT_USAGE;
    }
    char *file_key = NULL;
    if (!so.api_key && key_file) {
        if (!(file_key = read_key_file(key_file))) return LA_EXIT_USAGE;
        so.api_key = file_key;
    }
    const char *env_key = getenv("LAZYATTN_API_KEY");
    if (!so.api_key && env_key && env_key[0]) so.api_key = env_key;
    if (so.api_key && !so.api_key[0]) {
        fprintf(stderr, "lazyattn serve: --api-key is empty\n");
        return LA_EXIT_USAGE;
    }
    so.port = port;
    so.max_body_bytes = (size_t)body_bytes;
    so.max_docs = eo.max_docs;
    so.method = eo.method;
    so.doc_context = eo.doc_context;

    /* SIGINT/SIGTERM write their number to a pipe the main thread reads: a handler works
     * whichever thread the signal lands on (libraries such as OpenBLAS start threads before
     * main, so blocking the signals for sigwait() cannot cover every thread) */
    if (pipe(g_sig_pipe) != 0) {
        perror("lazyattn serve: pipe");
        return LA_EXIT_ERROR;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);

    la_kv_events *events = NULL;
    if (events_ep) {
        la_status es = la_kv_events_create(events_ep, events_topic, 0, &events, &err);
        if (es != LA_OK) {
            fprintf(stderr, "lazyattn serve: %s\n", err.msg);
            return es == LA_ERR_INVALID_ARG ? LA_EXIT_USAGE : LA_EXIT_ERROR;
        }
        eo.on_kv_event = la_kv_events_on_engine_event;
        eo.kv_event_user = events;
        so.kv_events = events;
    }
    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn serve: %s\n", err.msg);
        la_kv_events_destroy(events);
        free(file_key);
        return LA_EXIT_FOR(cs);
    }
    la_server *srv = NULL;
    if (la_server_create(e, &so, &srv, &err) != LA_OK) {
        fprintf(stderr, "lazyattn serve: %s\n", err.msg);
        la_engine_destroy(e);
        la_kv_events_destroy(events);
        free(file_key);
        return LA_EXIT_ERROR;
    }
    const char *host = so.host;
    bool v6 = strchr(host, ':') != NULL;
    la_engine_stats est;
    la_engine_get_stats(e, &est);
    fprintf(stderr, "lazyattn serve: listening on %s://%s%s%s:%d (model %s, device %s, method %s, async scheduling %s%s%s)\n",
            so.ssl_certfile ? "https" : "http", v6 ? "[" : "", host, v6 ? "]" : "", la_server_port(srv),
            la_engine_model_name(e), la_engine_device_name(e), la_method_name(eo.method),
            est.async_scheduling ? "on" : "off", eo.prefill_first ? ", prefill first" : "",
            so.api_key ? ", API key required" : "");
    /* wait for a signal; the timeout only makes the wait robust where signal delivery is
     * deferred until the receiving thread makes a call (e.g. under ThreadSanitizer) */
    unsigned char sig = 0;
    for (;;) {
        struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, 250) > 0 && read(g_sig_pipe[0], &sig, 1) == 1) break;
    }
    fprintf(stderr, "lazyattn serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    if (shutdown_s > 0) { /* drain: in flight finishes, new requests get 503 */
        fprintf(stderr, "lazyattn serve: draining: requests in flight may finish for up to %d s\n", shutdown_s);
        bool drained = false, again = false;
        for (int ms = 0; ms < shutdown_s * 1000 && !drained && !again; ms += 200) {
            drained = la_server_drain(srv, 200);
            struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
            again = poll(&pfd, 1, 0) > 0; /* a second signal: stop waiting */
        }
        fprintf(stderr, "lazyattn serve: %s\n", drained ? "drained"
                                                   : again ? "second signal: cancelling what is left"
                                                           : "shutdown timeout: cancelling what is left");
    }
    la_server_destroy(srv);
    la_engine_destroy(e);
    la_kv_events_destroy(events); /* after the engine: its last events (the cache) are sent */
    fprintf(stderr, "lazyattn serve: stopped\n");
    free(file_key);
    return LA_EXIT_OK;
}
