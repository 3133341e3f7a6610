#include "base/json.h"

#include <math.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/file.h"

la_status la_json_parse(const char *text, size_t len, const char *what, cJSON **out,
                        la_err *err) {
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        return la_err_set(err, LA_ERR_FORMAT, "%s: invalid JSON near byte %ld", what, at);
    }
    *out = root;
    return LA_OK;
}

la_status la_json_load_file(const char *path, cJSON **out, la_err *err) {
    char *text = NULL;
    size_t len = 0;
    LA_TRY(la_file_read(path, &text, &len, err));
    la_status s = la_json_parse(text, len, path, out, err);
    free(text);
    return s;
}

static const cJSON *get_field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(obj, key);
    if (v && cJSON_IsNull(v)) return NULL;
    return v;
}

la_status la_json_get_int64(const cJSON *obj, const char *key, bool required, int64_t *out,
                            const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsNumber(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be an integer", what, key);
    double d = v->valuedouble;
    if (d != floor(d) || d < -9.2e18 || d > 9.2e18)
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s=%g is not an integer", what, key, d);
    *out = (int64_t)d;
    return LA_OK;
}

la_status la_json_get_double(const cJSON *obj, const char *key, bool required, double *out,
                             const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsNumber(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be a number", what, key);
    *out = v->valuedouble;
    return LA_OK;
}

la_status la_json_get_bool(const cJSON *obj, const char *key, bool required, bool *out,
                           const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsBool(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be true or false", what, key);
    *out = cJSON_IsTrue(v);
    return LA_OK;
}

la_status la_json_get_string(const cJSON *obj, const char *key, bool required,
                             const char **out, const char *what, la_err *err) {
    const cJSON *v = get_field(obj, key);
    if (!v) {
        if (required) return la_err_set(err, LA_ERR_FORMAT, "%s: missing field %s", what, key);
        return LA_OK;
    }
    if (!cJSON_IsString(v))
        return la_err_set(err, LA_ERR_FORMAT, "%s: %s must be a string", what, key);
    *out = v->valuestring;
    return LA_OK;
}
