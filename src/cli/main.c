/* lazyattn: command-line entry point. Dispatches to the subcommands in cli/cmd_*.c. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"

static const struct {
    const char *name;
    int (*fn)(int, char **);
    const char *help;
} k_commands[] = {
    {"run", la_cli_run, "generate a completion (with documents) and print it"},
    {"tokenize", la_cli_tokenize, "print token ids of text (or --jsonl lines on stdin)"},
    {"info", la_cli_info, "print the model's architecture"},
    {"serve", la_cli_serve, "serve the OpenAI-compatible HTTP API (with documents)"},
    {"race", la_cli_race, "two methods answer the same reordered RAG question side by side"},
    {"eval", la_cli_eval, "answer a RAG question set and score exact match per method"},
    {"bench", la_cli_bench, "serving benchmark: TTFT, TPOT, throughput, cache hits per method"},
    {"ingest", la_cli_ingest, "precompute a corpus's document KV into the disk tier (--kv-dir)"},
};

#ifndef LA_VERSION
#define LA_VERSION "unknown"
#endif
#ifdef LA_HAVE_CUDA
#define LA_BUILD_DEVICES "cpu, cuda"
#else
#define LA_BUILD_DEVICES "cpu"
#endif

static void usage(FILE *out) {
    fprintf(out, "usage: lazyattn <command> [options]\n       lazyattn --version\n\ncommands:\n");
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        fprintf(out, "  %-10s %s\n", k_commands[i].name, k_commands[i].help);
    fprintf(out, "\n`lazyattn <command> --help` describes a command's options.\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return LA_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "help") && argc == 3) /* help CMD: the command's own --help */
        for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
            if (!strcmp(argv[2], k_commands[i].name)) {
                char *args[] = {argv[2], "--help", NULL};
                return k_commands[i].fn(2, args);
            }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help") || !strcmp(argv[1], "help")) {
        usage(stdout);
        return LA_EXIT_OK;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V") || !strcmp(argv[1], "version")) {
        printf("lazyattn %s (devices: %s)\n", LA_VERSION, LA_BUILD_DEVICES);
        return LA_EXIT_OK;
    }
    for (size_t i = 0; i < sizeof k_commands / sizeof k_commands[0]; i++)
        if (!strcmp(argv[1], k_commands[i].name)) return k_commands[i].fn(argc - 1, argv + 1);
    fprintf(stderr, "lazyattn: unknown command '%s'\n", argv[1]);
    usage(stderr);
    return LA_EXIT_USAGE;
}
