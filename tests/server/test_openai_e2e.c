/* End-to-end with the official `openai` Python client: starts `lazyattn serve` on the tiny
 * fixture model with a KV pool small enough to force eviction (64 blocks of 16 tokens)
 * and runs tests/server/test_openai_client.py against it (completions and chat, streamed
 * and not, documents via extra_body, cached_tokens of reordered documents per method, 32
 * concurrent clients = sequential answers under lazy and prefix). Fails, naming
 * scripts/install-deps.sh, when `import openai` does. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "server_util.h"
#include "serve_proc.h"

Test(openai_e2e, official_client_against_a_real_server) {
    la_test_require("python3 -c 'import openai'", "the Python package 'openai'");
    static const char *const args[] = {"-m", TS_MODEL, "--threads", "2", "--kv-blocks", "64", NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/server/test_openai_client.py %d 2>&1", LA_SOURCE_DIR, p.port);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char line[4096];
    while (fgets(line, sizeof line, f)) fputs(line, stdout);
    int rc = pclose(f);
    int serve_rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "test_openai_client.py failed (status %d)", rc);
    cr_assert_eq(serve_rc, 0, "serve exit status %d: %s", serve_rc, p.log);
}
