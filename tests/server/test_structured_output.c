/* Acceptance 2 of issue 21: structured output on the bundled model, through HTTP. Starts
 * `lazyattn serve -m models/rag-tiny` and runs tests/server/test_structured_output.py
 * against it: 200 seeded schemas of the supported subset x greedy and sampled decoding,
 * each output parsed and validated with Python `jsonschema`, and keywords outside the
 * subset answered 400 naming them. Fails, naming scripts/install-deps.sh (which installs
 * it), when `import jsonschema` does. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>

#include "server_util.h"
#include "serve_proc.h"

Test(structured_output, two_hundred_schemas_greedy_and_sampled_validate, .timeout = 900) {
    la_test_require("python3 -c 'import jsonschema'", "the Python package 'jsonschema'");
    static const char *const args[] = {"-m", "models/rag-tiny", "--threads", "2", "--max-running", "32", NULL};
    la_serve_proc p;
    cr_assert(la_serve_start(&p, args) == 0, "serve did not start: %s", p.log);
    char cmd[512];
    snprintf(cmd, sizeof cmd, "python3 %s/tests/server/test_structured_output.py %d 200 21 2>&1", LA_SOURCE_DIR, p.port);
    FILE *f = popen(cmd, "r");
    cr_assert(f);
    char line[8192];
    while (fgets(line, sizeof line, f)) fputs(line, stdout);
    int rc = pclose(f);
    int serve_rc = la_serve_stop(&p, SIGTERM, 60);
    cr_assert(WIFEXITED(rc) && WEXITSTATUS(rc) == 0, "test_structured_output.py failed (status %d)", rc);
    cr_assert_eq(serve_rc, 0, "serve exit status %d: %s", serve_rc, p.log);
}
