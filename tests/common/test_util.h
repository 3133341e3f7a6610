/* Shared helpers for the Criterion tests. */
#ifndef LA_TEST_UTIL_H
#define LA_TEST_UTIL_H

#include <criterion/criterion.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "lazyattn/status.h"

/* Absolute path of a file in the source tree (LA_SOURCE_DIR/rel); static buffer per call
 * site is not used: returns a heap string the caller frees. */
char *la_test_path(const char *rel);
/* Directory of the shared data (../shared next to the checkout, or $LA_SHARED_DIR). */
const char *la_test_shared_dir(void);
/* A fresh temporary directory (removed by the OS; tests may rm it). Heap string. */
char *la_test_tmpdir(void);
/* Remove dir and everything below it, then free the string. */
void la_test_rm_tree(char *dir);
/* Write n bytes to path / a string to dir/name (the test fails if it cannot). */
void la_test_write_bytes(const char *path, const void *data, size_t n);
void la_test_write_text(const char *dir, const char *name, const char *text);

/* Fail the current test with the err message if s != LA_OK. */
#define LA_CHECK_OK(s, err)                                                          \
    cr_assert((s) == LA_OK, "status %s: %s", la_status_name(s), (err).msg)

/* The built `lazyattn` binary run through the shell: `env lazyattn args` with `input` on
 * stdin (NULL: empty). args are passed to the shell as written. */
typedef struct la_test_cli_result {
    int status; /* exit status */
    char *out, *err;
} la_test_cli_result;
la_test_cli_result la_test_cli(const char *env, const char *args, const char *input);
void la_test_cli_free(la_test_cli_result *r);

/* Fail the test unless the shell command `check` succeeds: a tool or package that
 * scripts/install-deps.sh installs (make test runs it first) is a dependency of the test
 * suite, never a reason to skip. `what` names it in the message. */
void la_test_require(const char *check, const char *what);

/* True when a CUDA backend can be created (a GPU is present). When there is no device (or no
 * CUDA in the build: LA_ERR_UNSUPPORTED) prints "skipped: no GPU (<reason>)" and returns false,
 * so a GPU test can return and pass; fails the test instead for any other error (a bad
 * LA_* setting, a CUDA call that failed) and, with LA_REQUIRE_GPU set (make test-cuda, the
 * device scripts), for no device too. */
bool la_test_have_gpu(void);

/* With the environment variable name set to value, creating a CUDA backend fails with
 * LA_ERR_INVALID_ARG, a message naming the variable and no backend (the test fails
 * otherwise); the variable is unset afterwards. Call only when la_test_have_gpu(). */
void la_test_cuda_env_rejected(const char *name, const char *value);

/* The tiny checkpoint tests/fixtures/models/<name>: its config into *cfg and its weights
 * into *w (the caller frees them with la_weights_destroy); the test fails if either does
 * not load. */
struct la_model_config;
struct la_weights;
void la_test_load_fixture_model(const char *name, struct la_model_config *cfg, struct la_weights **w);

/* One la_forward step of a single sequence on be: tokens ids[p0 .. p0 + n) at positions
 * p0 .., K/V written to slot block0 * B + position; the sequence's block list covers
 * positions [0, p0 + n) in blocks block0 ..; logits (f32 [n_rows][vocab]) of the step's
 * rows rows[0 .. n_rows) (relative to p0; NULL and 0: none). The test fails on an error. */
struct la_backend;
void la_test_seq_step(struct la_backend *be, const int32_t *ids, int32_t p0, int32_t n, int32_t B, int32_t block0,
                      const int32_t *rows, int32_t n_rows, float *logits);

/* Max |a-b| over n floats; *at receives its index. */
double la_test_max_abs_diff(const float *a, const float *b, size_t n, size_t *at);

#endif
