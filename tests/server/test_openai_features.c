/* Acceptance 3 of issue 21: the official `openai` Python client against `lazyattn serve
 * --api-key` on the bundled model (tests/server/test_openai_features.py: logprobs streamed
 * and not, n, response_format, the key right, wrong and missing, X-Request-Id). The key
 * travels in $LAZYATTN_API_KEY, which serve reads when no --api-key is given. Fails, naming
 * scripts/install-deps.sh, when `import openai` does. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "server_util.h"
#include "serve_proc.h"

Test(openai_features, logprobs_n_response_format_and_api_key_through_the_official_client, .timeout = 600) {
    la_test_require("python3 -c 'import openai'", "the Python package 'openai'");
    setenv("LAZYATTN_API_KEY", "sk-test-21", 1);
    static const char *const args[] = {"-m", "models/rag-tiny", "--threads", "2", NULL};
    la_serve_proc p;
    int started = la_serve_start(&p, args);
    unsetenv("LAZYATTN_API_KEY");
    cr_assert(started == 0, "serve did not start: %s", p.log);
    cr_assert(strstr(p.log, "API key required"), "%s", p.log);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/server/test_openai_features.py %d sk-test-21 2>&1", LA_SOURCE_DIR, p.port);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char line[8192];
    while (fgets(line, sizeof line, f)) fputs(line, stdout);
    int rc = pclose(f);
    int serve_rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "test_openai_features.py failed (status %d)", rc);
    cr_assert_eq(serve_rc, 0, "serve exit status %d: %s", serve_rc, p.log);
}
