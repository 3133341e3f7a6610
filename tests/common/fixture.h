/* Reading the oracle fixtures (tools/oracle/make_models.py; format in tools/oracle/README.md).
 * Regenerate with: python3 tools/oracle/make_models.py */
#ifndef LA_TEST_FIXTURE_H
#define LA_TEST_FIXTURE_H

#include <cjson/cJSON.h>
#include <stdint.h>

/* The tiny models under tests/fixtures/models/. */
#define LA_TEST_N_MODELS 6
extern const char *const la_test_models[LA_TEST_N_MODELS];

/* Load <model_dir>/oracle.json (fails the test on error). Free with cJSON_Delete. */
cJSON *la_test_oracle(const char *model_dir);

/* An int array field as a heap int32 array (caller frees); *n its length. */
int32_t *la_test_json_ints(const cJSON *arr, int32_t *n);
/* A float array as a heap float array (caller frees); *n its length. */
float *la_test_json_floats(const cJSON *arr, int32_t *n);

#endif
