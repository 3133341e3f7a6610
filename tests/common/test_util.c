#include "common/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"

char *la_test_path(const char *rel) { return la_path_join(LA_SOURCE_DIR, rel); }

const char *la_test_shared_dir(void) {
    const char *env = getenv("LA_SHARED_DIR");
    if (env && *env) return env;
    return LA_SOURCE_DIR "/../shared";
}

char *la_test_tmpdir(void) {
    char tmpl[] = "/tmp/lazyattn-test-XXXXXX";
    char *d = mkdtemp(tmpl);
    cr_assert(d != NULL, "mkdtemp failed");
    return strdup(d);
}

double la_test_max_abs_diff(const float *a, const float *b, size_t n, size_t *at) {
    double m = 0;
    size_t where = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (isnan(d)) d = INFINITY;
        if (d > m) {
            m = d;
            where = i;
        }
    }
    if (at) *at = where;
    return m;
}
