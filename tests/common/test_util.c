#include "common/test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <ftw.h>
#include <sys/wait.h>

#include "base/err.h"
#include "model/config.h"
#include "engine/forward.h"
#include "model/weights.h"
#include <unistd.h>

#include "backend/backend.h"
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

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
    (void)sb, (void)flag, (void)ftw;
    return remove(p);
}

void la_test_rm_tree(char *dir) {
    nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(dir);
}

void la_test_write_bytes(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    if (n) cr_assert_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

void la_test_write_text(const char *dir, const char *name, const char *text) {
    char *p = la_path_join(dir, name);
    la_test_write_bytes(p, text, strlen(text));
    free(p);
}

void la_test_load_fixture_model(const char *name, la_model_config *cfg, la_weights **w) {
    char dir[512];
    snprintf(dir, sizeof dir, "%s/tests/fixtures/models/%s", LA_SOURCE_DIR, name);
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, cfg, &err), err);
    *w = NULL;
    LA_CHECK_OK(la_weights_load(dir, cfg, w, &err), err);
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

static char *slurp_file(const char *path) {
    char *data = NULL;
    la_err e = {0};
    LA_CHECK_OK(la_file_read(path, &data, NULL, &e), e);
    return data;
}

la_test_cli_result la_test_cli(const char *env, const char *args, const char *input) {
    char *dir = la_test_tmpdir();
    char *in = la_path_join(dir, "in"), *out = la_path_join(dir, "out"), *err = la_path_join(dir, "err");
    FILE *f = fopen(in, "wb");
    cr_assert(f);
    if (input) fputs(input, f);
    fclose(f);
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "%s '%s/lazyattn' %s <'%s' >'%s' 2>'%s'", env, LA_BUILD_DIR, args, in, out,
                       err) > 0);
    int st = system(cmd);
    cr_assert(st != -1 && WIFEXITED(st), "%s did not exit normally", cmd);
    la_test_cli_result r = {WEXITSTATUS(st), slurp_file(out), slurp_file(err)};
    free(cmd);
    free(in);
    free(out);
    free(err);
    la_test_rm_tree(dir);
    return r;
}

void la_test_cli_free(la_test_cli_result *r) {
    free(r->out);
    free(r->err);
}

void la_test_cuda_env_rejected(const char *name, const char *value) {
    setenv(name, value, 1);
    la_backend *be = NULL;
    la_err err = {0};
    la_status s = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    unsetenv(name);
    cr_assert_eq(s, LA_ERR_INVALID_ARG, "%s=%s: status %s", name, value, la_status_name(s));
    cr_assert_null(be, "%s=%s: a backend came back", name, value);
    cr_assert(strstr(err.msg, name), "%s=%s: message '%s'", name, value, err.msg);
}

void la_test_require(const char *check, const char *what) {
    char *cmd = NULL;
    cr_assert(asprintf(&cmd, "(%s) >/dev/null 2>&1", check) > 0);
    int rc = system(cmd);
    free(cmd);
    cr_assert(rc == 0, "%s is missing (`%s` failed): run scripts/install-deps.sh (make test does)", what, check);
}

bool la_test_have_gpu(void) {
    la_backend *be = NULL;
    la_err err = {0};
    const la_status s = la_backend_create(LA_DEVICE_CUDA, 0, &be, &err);
    if (s == LA_OK) {
        la_backend_destroy(be);
        return true;
    }
    /* only "no device" (or a build without CUDA) skips; a backend that fails to start fails */
    cr_assert_eq(s, LA_ERR_UNSUPPORTED, "the CUDA backend failed to start: %s: %s", la_status_name(s), err.msg);
    const char *req = getenv("LA_REQUIRE_GPU");
    cr_assert(!req || !*req || strcmp(req, "0") == 0, "LA_REQUIRE_GPU is set and there is no GPU: %s", err.msg);
    printf("skipped: no GPU (%s)\n", err.msg);
    fflush(stdout);
    return false;
}

void la_test_seq_step(la_backend *be, const int32_t *ids, int32_t p0, int32_t n, int32_t B, int32_t block0,
                      const int32_t *rows, int32_t n_rows, float *logits) {
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    int64_t *slots = malloc(sizeof(int64_t) * (size_t)n);
    const int32_t end = p0 + n, nb = (end + B - 1) / B;
    la_attn_block *blocks = malloc(sizeof(la_attn_block) * (size_t)nb);
    cr_assert(pos && slots && blocks);
    for (int32_t t = 0; t < n; t++) pos[t] = p0 + t, slots[t] = (int64_t)block0 * B + p0 + t;
    for (int32_t b = 0; b < nb; b++) blocks[b] = (la_attn_block){block0 + b, end - b * B < B ? end - b * B : B, b * B, 0, 0};
    la_batch_seq seq = {0, n, 0, nb};
    la_batch batch = {n, ids + p0, pos, pos, slots, 1, &seq, nb, blocks, n_rows, rows};
    la_err err = {0};
    LA_CHECK_OK(la_forward(be, &batch, logits, &err), err);
    free(pos), free(slots), free(blocks);
}
