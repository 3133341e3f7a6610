/* lazyattn serve: the OpenAI-compatible HTTP server (DESIGN.md §7, §7b).
 *
 *   lazyattn serve [-m DIR] [--host 127.0.0.1] [--port 8000] [--method lazy] [--kv-blocks N]
 *                  [--block-size 16] [--threads N] [--device cpu|cuda] [--max-batch-tokens N]
 *                  [--max-queue N] [--max-running N] [--max-docs N] [--max-context N]
 *                  [--max-body-bytes N] [--chat-format auto|llama3|tulu] [--model-id NAME]
 *                  [--log-requests]
 *
 * Prints "lazyattn serve: listening on http://HOST:PORT ..." on stderr once it accepts
 * connections (--port 0 picks a free port, named in that line). SIGINT or SIGTERM shut it
 * down cleanly: requests in flight are cancelled and answered, the engine is destroyed,
 * exit status 0.
 */
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli_util.h"
#include "cli/commands.h"
#include "lazyattn/lazyattn.h"
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
            "      --threads N          CPU threads (all cores)\n"
            "      --kv-blocks N        KV pool capacity in blocks (default: 1 GiB worth on the\n"
            "                           CPU; on CUDA --gpu-memory-fraction of the free memory)\n"
            "      --gpu-memory-fraction F  CUDA: share of the memory the weights leave free\n"
            "                           that the KV pool takes (0.8)\n"
            "      --block-size B       KV block size in tokens (16)\n"
            "      --max-batch-tokens N tokens per engine step (1024)\n"
            "      --max-running N      requests in prefill/decode at once (64)\n"
            "      --max-queue N        waiting requests before 429 (256)\n"
            "      --max-docs N         documents per request (128)\n"
            "      --max-context N      tokens per request incl. max_tokens (model's limit)\n"
            "      --max-body-bytes N   largest request body (16777216)\n"
            "      --chat-format F      auto | llama3 | tulu (auto: from the chat_template)\n"
            "      --model-id NAME      model id in the API (the directory's name)\n"
            "      --log-requests       on stderr, a line when a request arrives and one when it ends\n"
            "                           (tokens, cache hits, queue, TTFT, TPOT, total ms)\n");
}

static int g_sig_pipe[2] = {-1, -1};

static void on_signal(int sig) {
    unsigned char b = (unsigned char)sig;
    ssize_t n = write(g_sig_pipe[1], &b, 1);
    (void)n;
}

static int parse_chat_format(const char *s, la_chat_format *out) {
    if (!strcmp(s, "auto")) *out = LA_CHAT_FORMAT_AUTO;
    else if (!strcmp(s, "llama3")) *out = LA_CHAT_FORMAT_LLAMA3;
    else if (!strcmp(s, "tulu")) *out = LA_CHAT_FORMAT_TULU;
    else {
        fprintf(stderr, "lazyattn serve: --chat-format '%s' is not one of auto, llama3, tulu\n", s);
        return LA_EXIT_USAGE;
    }
    return 0;
}

int la_cli_serve(int argc, char **argv) {
    static const struct option opts[] = {
        {"model", required_argument, 0, 'm'},          {"host", required_argument, 0, 1},
        {"port", required_argument, 0, 2},             {"method", required_argument, 0, 3},
        {"kv-blocks", required_argument, 0, 4},        {"block-size", required_argument, 0, 5},
        {"threads", required_argument, 0, 6},          {"device", required_argument, 0, 7},
        {"max-batch-tokens", required_argument, 0, 8}, {"max-queue", required_argument, 0, 9},
        {"max-running", required_argument, 0, 10},    {"max-docs", required_argument, 0, 11},
        {"max-context", required_argument, 0, 12},     {"max-body-bytes", required_argument, 0, 13},
        {"chat-format", required_argument, 0, 14},     {"model-id", required_argument, 0, 15},
        {"log-requests", no_argument, 0, 16},          {"help", no_argument, 0, 'h'},
        {"gpu-memory-fraction", required_argument, 0, 17},
        {0, 0, 0, 0}};
    la_engine_options eo;
    la_engine_options_init(&eo);
    eo.model_dir = la_cli_default_model_dir();
    la_server_options so;
    la_server_options_init(&so);
    la_err err = {0};
    int c;
    int32_t port = so.port;
    int64_t body_bytes = (int64_t)so.max_body_bytes;
    optind = 1;
    while ((c = getopt_long(argc, argv, "m:h", opts, NULL)) != -1) {
        switch (c) {
        case 'm': eo.model_dir = optarg; break;
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
        case 4:
            if (la_cli_parse_i64(optarg, "--kv-blocks", &eo.kv_blocks) != 0) return LA_EXIT_USAGE;
            break;
        case 17: {
            float f;
            if (la_cli_parse_f32(optarg, "--gpu-memory-fraction", &f) != 0) return LA_EXIT_USAGE;
            eo.gpu_memory_fraction = f;
            break;
        }
        case 5:
            if (la_cli_parse_i32(optarg, "--block-size", &eo.block_size) != 0) return LA_EXIT_USAGE;
            break;
        case 6:
            if (la_cli_parse_i32(optarg, "--threads", &eo.n_threads) != 0) return LA_EXIT_USAGE;
            if (eo.n_threads < 0) {
                fprintf(stderr, "lazyattn serve: --threads must be >= 0 (0: all cores)\n");
                return LA_EXIT_USAGE;
            }
            break;
        case 7:
            if (la_device_parse(optarg, &eo.device, &err) != LA_OK) {
                fprintf(stderr, "lazyattn serve: --device: %s\n", err.msg);
                return LA_EXIT_USAGE;
            }
            break;
        case 8:
            if (la_cli_parse_i32(optarg, "--max-batch-tokens", &eo.max_batch_tokens) != 0)
                return LA_EXIT_USAGE;
            break;
        case 9:
            if (la_cli_parse_i32(optarg, "--max-queue", &eo.max_queue) != 0) return LA_EXIT_USAGE;
            break;
        case 10:
            if (la_cli_parse_i32(optarg, "--max-running", &eo.max_running) != 0) return LA_EXIT_USAGE;
            break;
        case 11:
            if (la_cli_parse_i32(optarg, "--max-docs", &eo.max_docs) != 0) return LA_EXIT_USAGE;
            break;
        case 12:
            if (la_cli_parse_i32(optarg, "--max-context", &eo.max_context) != 0) return LA_EXIT_USAGE;
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
        case 'h': usage(stdout); return LA_EXIT_OK;
        default: usage(stderr); return LA_EXIT_USAGE;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "lazyattn serve: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    so.port = port;
    so.max_body_bytes = (size_t)body_bytes;
    so.max_docs = eo.max_docs;
    so.method = eo.method;

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

    la_engine *e = NULL;
    la_status cs = la_engine_create(&eo, &e, &err);
    if (cs != LA_OK) {
        fprintf(stderr, "lazyattn serve: %s\n", err.msg);
        return LA_EXIT_FOR(cs);
    }
    la_server *srv = NULL;
    if (la_server_create(e, &so, &srv, &err) != LA_OK) {
        fprintf(stderr, "lazyattn serve: %s\n", err.msg);
        la_engine_destroy(e);
        return LA_EXIT_ERROR;
    }
    const char *host = so.host;
    bool v6 = strchr(host, ':') != NULL;
    fprintf(stderr, "lazyattn serve: listening on http://%s%s%s:%d (model %s, device %s, method %s)\n",
            v6 ? "[" : "", host, v6 ? "]" : "", la_server_port(srv), la_engine_model_name(e),
            la_engine_device_name(e), la_method_name(eo.method));
    /* wait for a signal; the timeout only makes the wait robust where signal delivery is
     * deferred until the receiving thread makes a call (e.g. under ThreadSanitizer) */
    unsigned char sig = 0;
    for (;;) {
        struct pollfd pfd = {.fd = g_sig_pipe[0], .events = POLLIN};
        if (poll(&pfd, 1, 250) > 0 && read(g_sig_pipe[0], &sig, 1) == 1) break;
    }
    fprintf(stderr, "lazyattn serve: %s: shutting down\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
    la_server_destroy(srv);
    la_engine_destroy(e);
    fprintf(stderr, "lazyattn serve: stopped\n");
    return LA_EXIT_OK;
}
