/* la_jinja (model/jinja.h): compile = lex + parse into an arena the template keeps;
 * render = the variables converted from JSON into a rendering arena, the tree run over
 * them (jinja_eval.c), the text copied out, the arena freed.
 */
#include "model/jinja.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/jinja_internal.h"

/* jinja_eval.c */
la_status jx_render_tree(const jnode *root, const char *name, jdict *vars, jx_arena *a, jx_buf *out,
                         la_err *err);

#define RENDER_ARENA_BYTES ((size_t)512 << 20)

struct la_jinja {
    jx_arena arena;
    jnode *root;
    char *name;
};

/* Offset of the first byte that is not well-formed UTF-8 (Unicode Table 3-7), or n. */
static size_t utf8_invalid_at(const unsigned char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        unsigned char b = s[i];
        if (b < 0x80) {
            i++;
            continue;
        }
        int need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) need = 1;
        else if (b >= 0xE0 && b <= 0xEF) need = 2, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) need = 3, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else return i;
        for (int k = 1; k <= need; k++) {
            if (i + (size_t)k >= n) return i;
            unsigned char c = s[i + (size_t)k];
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return i;
        }
        i += (size_t)need + 1;
    }
    return n;
}

la_status la_jinja_compile(const char *text, size_t len, const char *name, la_jinja **out, la_err *err) {
    if (!name) name = "chat template";
    if (!text && len) return la_err_set(err, LA_ERR_INVALID_ARG, "%s: NULL text", name);
    size_t bad = utf8_invalid_at((const unsigned char *)text, len);
    if (bad < len) return la_err_set(err, LA_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", name, bad);
    la_jinja *t = calloc(1, sizeof *t);
    if (!t) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    t->name = jx_strdup(&t->arena, name, strlen(name));
    la_err local = {0};
    jtoken *toks = NULL;
    size_t n_toks = 0;
    la_status s = t->name ? LA_OK : la_err_set(&local, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    if (s == LA_OK) s = jx_lex(&t->arena, name, text ? text : "", len, &toks, &n_toks, &local);
    if (s == LA_OK) s = jx_parse(&t->arena, name, toks, n_toks, &t->root, &local);
    if (s != LA_OK) {
        if (err) *err = local;
        la_jinja_destroy(t);
        return s;
    }
    *out = t;
    return LA_OK;
}

void la_jinja_destroy(la_jinja *t) {
    if (!t) return;
    jx_arena_free(&t->arena);
    free(t);
}

/* A JSON value as a template value (strings copied; numbers that are whole and fit int64
 * become ints, as Python's json gives for integer literals). */
static bool from_json(jx_arena *a, const cJSON *j, jv *out, int depth, const char **why) {
    if (depth > 64) {
        *why = "nested over 64 levels";
        return false;
    }
    if (cJSON_IsNull(j)) *out = jv_none();
    else if (cJSON_IsBool(j)) *out = jv_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        *out = d == floor(d) && fabs(d) < 9.2e18 ? jv_int((int64_t)d) : jv_float(d);
    } else if (cJSON_IsString(j)) {
        size_t n = strlen(j->valuestring);
        if (utf8_invalid_at((const unsigned char *)j->valuestring, n) < n) {
            *why = "a string that is not UTF-8";
            return false;
        }
        char *p = jx_strdup(a, j->valuestring, n);
        if (!p) return false;
        *out = jv_str(p, n);
    } else if (cJSON_IsArray(j)) {
        jlist *l = jv_list_new(a, (size_t)cJSON_GetArraySize(j) + 1);
        if (!l) return false;
        const cJSON *e;
        cJSON_ArrayForEach(e, j) {
            jv v;
            if (!from_json(a, e, &v, depth + 1, why) || !jv_list_push(a, l, v)) return false;
        }
        *out = jv_list_value(l, 0);
    } else if (cJSON_IsObject(j)) {
        jdict *d = jv_dict_new(a);
        if (!d) return false;
        const cJSON *e;
        cJSON_ArrayForEach(e, j) {
            jv v;
            size_t kn = strlen(e->string);
            char *k = jx_strdup(a, e->string, kn);
            if (!k || !from_json(a, e, &v, depth + 1, why) || !jv_dict_set(a, d, k, kn, v)) return false;
        }
        *out = (jv){.kind = JV_DICT, .dict = d};
    } else {
        *why = "an unknown JSON value";
        return false;
    }
    return true;
}

la_status la_jinja_render(const la_jinja *t, const cJSON *vars, char **out, size_t *out_len, la_err *err) {
    if (!t || !out || (vars && !cJSON_IsObject(vars)))
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_jinja_render: bad argument");
    jx_arena a = {.limit_bytes = RENDER_ARENA_BYTES};
    jv root;
    const char *why = NULL;
    la_status s = LA_OK;
    la_err local = {0};
    cJSON *empty = vars ? NULL : cJSON_CreateObject();
    if (!from_json(&a, vars ? vars : empty, &root, 0, &why))
        s = why ? la_err_set(&local, LA_ERR_INVALID_ARG, "%s: a variable holds %s", t->name, why)
                : la_err_set(&local, LA_ERR_NO_MEMORY, "%s: out of memory", t->name);
    cJSON_Delete(empty);
    jx_buf buf = {.arena = &a};
    if (s == LA_OK) s = jx_render_tree(t->root, t->name, root.dict, &a, &buf, &local);
    if (s == LA_OK && a.failed)
        s = la_err_set(&local, LA_ERR_NO_MEMORY, "%s: the rendering used over %zu MiB", t->name, RENDER_ARENA_BYTES >> 20);
    char *text = NULL;
    if (s == LA_OK) {
        text = malloc(buf.n + 1);
        if (!text) s = la_err_set(&local, LA_ERR_NO_MEMORY, "%s: out of memory", t->name);
        else memcpy(text, buf.p ? buf.p : "", buf.n + 1);
    }
    if (s == LA_OK) {
        *out = text;
        if (out_len) *out_len = buf.n;
    } else if (err) {
        *err = local;
    }
    jx_arena_free(&a);
    return s;
}
