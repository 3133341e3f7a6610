#include "common/fixture.h"

#include <stdio.h>
#include <stdlib.h>

#include "base/json.h"
#include "common/test_util.h"

/* the Llama fixtures, then one of each other family (tools/oracle/make_models.py) */
const char *const la_test_models[LA_TEST_N_MODELS] = {"tiny-f32-tied", "tiny-bf16-untied", "tiny-f32-linear",
                                                      "tiny-qwen2",    "tiny-qwen3",       "tiny-mistral"};

cJSON *la_test_oracle(const char *model_dir) {
    char path[1024];
    snprintf(path, sizeof path, "%s/oracle.json", model_dir);
    cJSON *j = NULL;
    la_err err = {0};
    la_status s = la_json_load_file(path, &j, &err);
    cr_assert(s == LA_OK, "%s", err.msg);
    return j;
}

int32_t *la_test_json_ints(const cJSON *arr, int32_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n + 1));
    int32_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (int32_t)x->valuedouble;
    return v;
}

float *la_test_json_floats(const cJSON *arr, int32_t *n) {
    *n = cJSON_GetArraySize(arr);
    float *v = malloc(sizeof(float) * (size_t)(*n + 1));
    int32_t i = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, arr) v[i++] = (float)x->valuedouble;
    return v;
}
