/* JSON Schema -> la_json_grammar (json_schema.h): schema keywords are checked against the
 * supported subset, then each schema becomes nodes; shortest lengths are solved at the end
 * (a fixed point, since "any value" is recursive).
 */
#include "grammar/json_schema.h"

#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

/* Larger than any reachable length: "impossible" (a ',' with no property left). */
#define LA_JG_INF (INT32_MAX / 4)

/* ============================================================ building ================ */

typedef struct builder {
    la_json_grammar *g;
    char *bad_path;
    size_t bad_cap;
    la_err *err;
    char path[512]; /* the keyword path being compiled */
} builder;

#define GROW(arr, n, cap, extra)                                                          \
    do {                                                                                  \
        if ((n) + (extra) > (cap)) {                                                      \
            int32_t c_ = (cap) ? (cap) : 16;                                              \
            while (c_ < (n) + (extra)) c_ *= 2;                                           \
            void *p_ = realloc((arr), sizeof(*(arr)) * (size_t)c_);                       \
            if (!p_) return -1;                                                           \
            (arr) = p_;                                                                   \
            (cap) = c_;                                                                   \
        }                                                                                 \
    } while (0)

static int32_t add_node(la_json_grammar *g, la_jg_kind kind, int32_t a, int32_t n) {
    GROW(g->nodes, g->n_nodes, g->cap_nodes, 1);
    g->nodes[g->n_nodes] = (la_jg_node){kind, a, n, LA_JG_INF};
    return g->n_nodes++;
}

static int32_t add_text(la_json_grammar *g, const char *s, size_t n) {
    if (n > 60000) return -1;
    GROW(g->text, g->n_text, g->cap_text, (int32_t)n);
    memcpy(g->text + g->n_text, s, n);
    int32_t at = g->n_text;
    g->n_text += (int32_t)n;
    return at;
}

static int32_t add_literal(la_json_grammar *g, const char *s, size_t n) {
    int32_t at = add_text(g, s, n);
    return at < 0 ? -1 : add_node(g, LA_JG_LITERAL, at, (int32_t)n);
}

/* An ANY_OF over nodes[0:n] (copied). */
static int32_t add_any_of(la_json_grammar *g, const int32_t *alts, int32_t n) {
    GROW(g->alts, g->n_alts, g->cap_alts, n);
    memcpy(g->alts + g->n_alts, alts, sizeof(int32_t) * (size_t)n);
    int32_t a = g->n_alts;
    g->n_alts += n;
    return add_node(g, LA_JG_ANY_OF, a, n);
}

static la_status fail(builder *b, la_status s, const char *key, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static la_status fail(builder *b, la_status s, const char *key, const char *fmt, ...) {
    char where[600];
    if (key) snprintf(where, sizeof where, "%s%s%s", b->path, b->path[0] ? "." : "", key);
    else snprintf(where, sizeof where, "%s", b->path);
    if (b->bad_path) snprintf(b->bad_path, b->bad_cap, "%s", where);
    if (b->err) {
        char msg[LA_ERR_MSG_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        la_err_set(b->err, s, "schema%s%s: %s", where[0] ? " at " : "", where, msg);
    }
    return s;
}

static la_status oom(builder *b) { return fail(b, LA_ERR_NO_MEMORY, NULL, "out of memory"); }

/* The "any JSON value" node: ANY_OF[any object, any array, string, number, true, false,
 * null], the containers holding "any value" again. */
static int32_t add_any(la_json_grammar *g) {
    int32_t any = add_node(g, LA_JG_ANY_OF, 0, 0); /* alternatives filled below */
    if (any < 0) return -1;
    int32_t alts[7];
    alts[0] = add_node(g, LA_JG_OBJECT_ANY, any, 0);
    alts[1] = add_node(g, LA_JG_ARRAY, any, 0);
    alts[2] = g->string_node >= 0 ? g->string_node : add_node(g, LA_JG_STRING, 0, 0);
    alts[3] = add_node(g, LA_JG_NUMBER, 0, 0);
    alts[4] = add_literal(g, "true", 4);
    alts[5] = add_literal(g, "false", 5);
    alts[6] = add_literal(g, "null", 4);
    for (int i = 0; i < 7; i++)
        if (alts[i] < 0) return -1;
    g->string_node = alts[2];
    GROW(g->alts, g->n_alts, g->cap_alts, 7);
    memcpy(g->alts + g->n_alts, alts, sizeof alts);
    g->nodes[any].a = g->n_alts;
    g->nodes[any].n = 7;
    g->n_alts += 7;
    return any;
}

/* ============================================================ the subset ============== */

static const char *const k_annotations[] = {"title", "description", "$schema", "$comment",
                                            "default", "examples", "$id", NULL};

static bool is_annotation(const char *k) {
    for (int i = 0; k_annotations[i]; i++)
        if (!strcmp(k, k_annotations[i])) return true;
    return false;
}

/* Keywords allowed beside a given type (plus "type", "enum", "anyOf", annotations). */
static bool keyword_ok(const char *k, unsigned types) {
    enum { T_OBJ = 1, T_ARR = 2 };
    if (!strcmp(k, "type") || !strcmp(k, "enum") || !strcmp(k, "anyOf") || is_annotation(k)) return true;
    if ((types & T_OBJ) && (!strcmp(k, "properties") || !strcmp(k, "required") ||
                            !strcmp(k, "additionalProperties")))
        return true;
    if ((types & T_ARR) && !strcmp(k, "items")) return true;
    return false;
}

typedef struct path_save {
    size_t len;
} path_save;

static path_save path_push(builder *b, const char *a, const char *c) {
    path_save s = {strlen(b->path)};
    size_t n = s.len;
    snprintf(b->path + n, sizeof b->path - n, "%s%s%s%s", n ? "." : "", a, c ? "." : "", c ? c : "");
    return s;
}

static void path_pop(builder *b, path_save s) { b->path[s.len] = '\0'; }

static la_status compile_node(builder *b, const cJSON *s, int depth, int32_t *out);

/* JSON text of a scalar (an enum value or an object key). Heap string. */
static char *json_text(const cJSON *v) { return cJSON_PrintUnformatted(v); }

/* Whether scalar v is of JSON Schema type name t. */
static bool scalar_is(const cJSON *v, const char *t) {
    if (!strcmp(t, "string")) return cJSON_IsString(v);
    if (!strcmp(t, "number")) return cJSON_IsNumber(v);
    if (!strcmp(t, "integer")) return cJSON_IsNumber(v) && v->valuedouble == (double)(long long)v->valuedouble;
    if (!strcmp(t, "boolean")) return cJSON_IsBool(v);
    if (!strcmp(t, "null")) return cJSON_IsNull(v);
    return false;
}

/* Whether enum value v satisfies "type" (absent: any). */
static bool of_type(const cJSON *v, const cJSON *type) {
    if (!type) return true;
    if (cJSON_IsString(type)) return scalar_is(v, type->valuestring);
    for (const cJSON *t = cJSON_IsArray(type) ? type->child : NULL; t; t = t->next)
        if (cJSON_IsString(t) && scalar_is(v, t->valuestring)) return true;
    return false;
}

/* enum (with "type" beside it, only the values of that type validate: the others are
 * never generated). */
static la_status compile_enum(builder *b, const cJSON *e, const cJSON *type, int32_t *out) {
    path_save ps = path_push(b, "enum", NULL);
    if (!cJSON_IsArray(e) || cJSON_GetArraySize(e) == 0) {
        la_status s = fail(b, LA_ERR_INVALID_ARG, NULL, "'enum' must be a non-empty array");
        path_pop(b, ps);
        return s;
    }
    int32_t n = cJSON_GetArraySize(e);
    int32_t *alts = malloc(sizeof(int32_t) * (size_t)n);
    if (!alts) return oom(b);
    int32_t k = 0;
    for (const cJSON *v = e->child; v; v = v->next) {
        if (cJSON_IsObject(v) || cJSON_IsArray(v)) {
            free(alts);
            la_status s = fail(b, LA_ERR_UNSUPPORTED, NULL, "enum values must be JSON scalars");
            path_pop(b, ps);
            return s;
        }
        if (!of_type(v, type)) continue;
        char *t = json_text(v);
        int32_t node = t ? add_literal(b->g, t, strlen(t)) : -1;
        free(t);
        if (node < 0) {
            free(alts);
            return oom(b);
        }
        alts[k++] = node;
    }
    if (k == 0) {
        free(alts);
        la_status s = fail(b, LA_ERR_INVALID_ARG, NULL, "no enum value is of the schema's 'type'");
        path_pop(b, ps);
        return s;
    }
    path_pop(b, ps);
    *out = k == 1 ? alts[0] : add_any_of(b->g, alts, k);
    free(alts);
    return *out < 0 ? oom(b) : LA_OK;
}

static la_status compile_object(builder *b, const cJSON *s, int depth, int32_t *out) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *addl = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (addl && !cJSON_IsBool(addl))
        return fail(b, LA_ERR_UNSUPPORTED, "additionalProperties",
                    "only true or false is supported (a schema for extra properties is not)");
    if (req && !cJSON_IsArray(req)) return fail(b, LA_ERR_INVALID_ARG, "required", "must be an array");
    if (props && !cJSON_IsObject(props))
        return fail(b, LA_ERR_INVALID_ARG, "properties", "must be an object");
    for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
        if (!cJSON_IsString(r) || !props || !cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return fail(b, LA_ERR_INVALID_ARG, "required", "'%s' is not one of the listed properties",
                        cJSON_IsString(r) ? r->valuestring : "(not a string)");
    if (!props) { /* any object */
        *out = add_node(b->g, LA_JG_OBJECT_ANY, b->g->any, 0);
        return *out < 0 ? oom(b) : LA_OK;
    }
    int32_t n = cJSON_GetArraySize(props);
    int32_t *keys = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    int32_t *vals = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    bool *reqd = calloc((size_t)(n ? n : 1), sizeof(bool));
    la_status st = keys && vals && reqd ? LA_OK : oom(b);
    int32_t i = 0;
    for (const cJSON *p = props->child; st == LA_OK && p; p = p->next, i++) {
        for (const cJSON *q = props->child; q != p; q = q->next)
            if (!strcmp(q->string, p->string))
                st = fail(b, LA_ERR_INVALID_ARG, "properties", "'%s' is listed twice", p->string);
        if (st != LA_OK) break;
        cJSON *key = cJSON_CreateString(p->string);
        char *t = key ? json_text(key) : NULL;
        cJSON_Delete(key);
        keys[i] = t ? add_literal(b->g, t, strlen(t)) : -1;
        free(t);
        if (keys[i] < 0) {
            st = oom(b);
            break;
        }
        path_save ps = path_push(b, "properties", p->string);
        st = compile_node(b, p, depth + 1, &vals[i]);
        if (st == LA_OK) path_pop(b, ps);
        for (const cJSON *r = req ? req->child : NULL; r; r = r->next)
            if (!strcmp(r->valuestring, p->string)) reqd[i] = true;
    }
    if (st == LA_OK) {
        la_json_grammar *g = b->g;
        if (g->n_props + n > g->cap_props) {
            int32_t c = g->cap_props ? g->cap_props : 16;
            while (c < g->n_props + n) c *= 2;
            la_jg_prop *pp = realloc(g->props, sizeof *pp * (size_t)c);
            if (!pp) st = oom(b);
            else g->props = pp, g->cap_props = c;
        }
        if (st == LA_OK) {
            for (int32_t k = 0; k < n; k++)
                g->props[g->n_props + k] = (la_jg_prop){keys[k], vals[k], reqd[k], 0, 0};
            *out = add_node(g, LA_JG_OBJECT, g->n_props, n);
            g->n_props += n;
            if (*out < 0) st = oom(b);
        }
    }
    free(keys);
    free(vals);
    free(reqd);
    return st;
}

/* One schema of one type name (the keywords of s apply to it). */
static la_status compile_typed(builder *b, const cJSON *s, const char *type, int depth, int32_t *out) {
    la_json_grammar *g = b->g;
    if (!strcmp(type, "object")) return compile_object(b, s, depth, out);
    if (!strcmp(type, "array")) {
        const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
        int32_t item = g->any;
        if (items) {
            if (cJSON_IsArray(items))
                return fail(b, LA_ERR_UNSUPPORTED, "items", "tuple items (an array) are not supported");
            path_save ps = path_push(b, "items", NULL);
            LA_TRY(compile_node(b, items, depth + 1, &item));
            path_pop(b, ps);
        }
        *out = add_node(g, LA_JG_ARRAY, item, 0);
    } else if (!strcmp(type, "string")) {
        *out = g->string_node;
    } else if (!strcmp(type, "number")) {
        *out = add_node(g, LA_JG_NUMBER, 0, 0);
    } else if (!strcmp(type, "integer")) {
        *out = add_node(g, LA_JG_INTEGER, 0, 0);
    } else if (!strcmp(type, "boolean")) {
        int32_t alts[2] = {add_literal(g, "true", 4), add_literal(g, "false", 5)};
        if (alts[0] < 0 || alts[1] < 0) return oom(b);
        *out = add_any_of(g, alts, 2);
    } else if (!strcmp(type, "null")) {
        *out = add_literal(g, "null", 4);
    } else {
        return fail(b, LA_ERR_INVALID_ARG, "type", "'%s' is not a JSON Schema type", type);
    }
    return *out < 0 ? oom(b) : LA_OK;
}

static unsigned type_bits(const cJSON *type) {
    unsigned bits = 0;
    const cJSON *one = cJSON_IsArray(type) ? type->child : type;
    for (; one; one = cJSON_IsArray(type) ? one->next : NULL) {
        if (!cJSON_IsString(one)) continue;
        if (!strcmp(one->valuestring, "object")) bits |= 1;
        if (!strcmp(one->valuestring, "array")) bits |= 2;
    }
    return bits;
}

static la_status compile_node(builder *b, const cJSON *s, int depth, int32_t *out) {
    if (depth > LA_JG_MAX_DEPTH - 4)
        return fail(b, LA_ERR_INVALID_ARG, NULL, "the schema nests deeper than %d levels",
                    LA_JG_MAX_DEPTH - 4);
    if (cJSON_IsBool(s)) {
        if (!cJSON_IsTrue(s)) return fail(b, LA_ERR_UNSUPPORTED, NULL, "the schema false matches nothing");
        *out = b->g->any;
        return LA_OK;
    }
    if (!cJSON_IsObject(s)) return fail(b, LA_ERR_INVALID_ARG, NULL, "a schema must be an object");
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(s, "type");
    const cJSON *en = cJSON_GetObjectItemCaseSensitive(s, "enum");
    const cJSON *any_of = cJSON_GetObjectItemCaseSensitive(s, "anyOf");
    unsigned bits = type_bits(type);
    for (const cJSON *k = s->child; k; k = k->next)
        if (!keyword_ok(k->string, bits))
            return fail(b, LA_ERR_UNSUPPORTED, k->string, "the keyword '%s' is not supported%s", k->string,
                        (!strcmp(k->string, "properties") || !strcmp(k->string, "items")) && !type
                            ? " without a 'type'"
                            : "");
    if (en && any_of) return fail(b, LA_ERR_UNSUPPORTED, "enum", "'enum' beside 'anyOf' is not supported");
    if (en) return compile_enum(b, en, type, out);
    if (any_of) {
        if (type) return fail(b, LA_ERR_UNSUPPORTED, "anyOf", "'anyOf' beside 'type' is not supported");
        if (!cJSON_IsArray(any_of) || cJSON_GetArraySize(any_of) == 0)
            return fail(b, LA_ERR_INVALID_ARG, "anyOf", "must be a non-empty array");
        int32_t n = cJSON_GetArraySize(any_of), i = 0;
        int32_t *alts = malloc(sizeof(int32_t) * (size_t)n);
        if (!alts) return oom(b);
        char idx[16];
        for (const cJSON *a = any_of->child; a; a = a->next, i++) {
            snprintf(idx, sizeof idx, "%d", (int)i);
            path_save ps = path_push(b, "anyOf", idx);
            la_status st = compile_node(b, a, depth + 1, &alts[i]);
            if (st != LA_OK) {
                free(alts);
                return st;
            }
            path_pop(b, ps);
        }
        *out = n == 1 ? alts[0] : add_any_of(b->g, alts, n);
        free(alts);
        return *out < 0 ? oom(b) : LA_OK;
    }
    if (!type) {
        *out = b->g->any; /* {} (annotations only): any value */
        return LA_OK;
    }
    if (cJSON_IsString(type)) return compile_typed(b, s, type->valuestring, depth, out);
    if (!cJSON_IsArray(type) || cJSON_GetArraySize(type) == 0)
        return fail(b, LA_ERR_INVALID_ARG, "type", "must be a type name or a non-empty array of them");
    int32_t n = cJSON_GetArraySize(type), i = 0;
    int32_t *alts = malloc(sizeof(int32_t) * (size_t)n);
    if (!alts) return oom(b);
    for (const cJSON *t = type->child; t; t = t->next, i++) {
        la_status st = cJSON_IsString(t) ? compile_typed(b, s, t->valuestring, depth, &alts[i])
                                         : fail(b, LA_ERR_INVALID_ARG, "type", "type names must be strings");
        if (st != LA_OK) {
            free(alts);
            return st;
        }
    }
    *out = n == 1 ? alts[0] : add_any_of(b->g, alts, n);
    free(alts);
    return *out < 0 ? oom(b) : LA_OK;
}

/* ============================================================ shortest lengths ======== */

static int32_t sat_add(int32_t a, int32_t b) { return a >= LA_JG_INF || b >= LA_JG_INF ? LA_JG_INF : a + b; }

static int32_t key_len(const la_json_grammar *g, const la_jg_prop *p) { return g->nodes[p->key].n; }

/* R(i): bytes to close an object whose next property to consider is i, at least one
 * property already out: ',' key ':' value for every required one from i, then '}'. */
static int32_t obj_rest(const la_json_grammar *g, const la_jg_node *o, int32_t i) {
    int32_t r = 1;
    for (int32_t j = i; j < o->n; j++) {
        const la_jg_prop *p = &g->props[o->a + j];
        if (p->required) r = sat_add(r, sat_add(2 + key_len(g, p), g->nodes[p->value].min_len));
    }
    return r;
}

/* C(i): after a ',' a property >= i must come: the cheapest allowed one (no required
 * property skipped before it), then R past it. */
static int32_t obj_commit(const la_json_grammar *g, const la_jg_node *o, int32_t i) {
    int32_t best = LA_JG_INF;
    for (int32_t q = i; q < o->n; q++) {
        const la_jg_prop *p = &g->props[o->a + q];
        int32_t c = sat_add(sat_add(1 + key_len(g, p), g->nodes[p->value].min_len), obj_rest(g, o, q + 1));
        if (c < best) best = c;
        if (p->required) break; /* cannot skip a required one */
    }
    return best;
}

/* Bytes right after '{': nothing out yet, so the first property has no comma. */
static int32_t obj_first(const la_json_grammar *g, const la_jg_node *o) {
    int32_t best = 1; /* '}' when nothing is required */
    for (int32_t j = 0; j < o->n; j++)
        if (g->props[o->a + j].required) best = LA_JG_INF;
    for (int32_t q = 0; q < o->n; q++) {
        const la_jg_prop *p = &g->props[o->a + q];
        int32_t c = sat_add(sat_add(1 + key_len(g, p), g->nodes[p->value].min_len), obj_rest(g, o, q + 1));
        if (c < best) best = c;
        if (p->required) break;
    }
    return best;
}

static int32_t node_min(const la_json_grammar *g, const la_jg_node *nd) {
    switch (nd->kind) {
    case LA_JG_LITERAL: return nd->n;
    case LA_JG_STRING: return 2;
    case LA_JG_NUMBER:
    case LA_JG_INTEGER: return 1;
    case LA_JG_OBJECT: return sat_add(1, obj_first(g, nd));
    case LA_JG_OBJECT_ANY:
    case LA_JG_ARRAY: return 2;
    case LA_JG_ANY_OF: {
        int32_t best = LA_JG_INF;
        for (int32_t i = 0; i < nd->n; i++)
            if (g->nodes[g->alts[nd->a + i]].min_len < best) best = g->nodes[g->alts[nd->a + i]].min_len;
        return best;
    }
    }
    return LA_JG_INF;
}

static la_status solve_lengths(builder *b) {
    la_json_grammar *g = b->g;
    for (bool changed = true; changed;) {
        changed = false;
        for (int32_t i = 0; i < g->n_nodes; i++) {
            int32_t m = node_min(g, &g->nodes[i]);
            if (m < g->nodes[i].min_len) g->nodes[i].min_len = m, changed = true;
        }
    }
    g->obj_first = calloc((size_t)g->n_nodes, sizeof(int32_t));
    if (!g->obj_first) return oom(b);
    for (int32_t i = 0; i < g->n_nodes; i++) {
        const la_jg_node *nd = &g->nodes[i];
        if (nd->min_len >= LA_JG_INF) return fail(b, LA_ERR_INVALID_ARG, NULL, "a value the schema can never end");
        if (nd->kind != LA_JG_OBJECT) continue;
        g->obj_first[i] = obj_first(g, nd);
        for (int32_t j = 0; j < nd->n; j++) {
            la_jg_prop *p = &g->props[nd->a + j];
            p->rest = obj_rest(g, nd, j + 1);
            p->commit = obj_commit(g, nd, j + 1);
        }
    }
    return LA_OK;
}

/* ============================================================ entry points ============ */

static la_status start(builder *b, la_json_grammar **gp) {
    la_json_grammar *g = calloc(1, sizeof *g);
    if (!g) return la_err_set(b->err, LA_ERR_NO_MEMORY, "schema: out of memory");
    g->string_node = -1;
    b->g = g;
    g->any = add_any(g);
    if (g->any < 0) {
        la_json_grammar_destroy(g);
        return la_err_set(b->err, LA_ERR_NO_MEMORY, "schema: out of memory");
    }
    *gp = g;
    return LA_OK;
}

la_status la_json_grammar_compile(const cJSON *schema, la_json_grammar **out, char *bad_path,
                                  size_t bad_cap, la_err *err) {
    builder b = {.bad_path = bad_path, .bad_cap = bad_cap, .err = err};
    if (bad_path && bad_cap) bad_path[0] = '\0';
    la_json_grammar *g;
    LA_TRY(start(&b, &g));
    la_status s = compile_node(&b, schema, 0, &g->root);
    if (s == LA_OK) s = solve_lengths(&b);
    if (s != LA_OK) {
        la_json_grammar_destroy(g);
        return s;
    }
    *out = g;
    return LA_OK;
}

la_status la_json_grammar_object(la_json_grammar **out, la_err *err) {
    builder b = {.err = err};
    la_json_grammar *g;
    LA_TRY(start(&b, &g));
    g->root = add_node(g, LA_JG_OBJECT_ANY, g->any, 0);
    la_status s = g->root < 0 ? oom(&b) : solve_lengths(&b);
    if (s != LA_OK) {
        la_json_grammar_destroy(g);
        return s;
    }
    *out = g;
    return LA_OK;
}

void la_json_grammar_destroy(la_json_grammar *g) {
    if (!g) return;
    free(g->nodes);
    free(g->props);
    free(g->alts);
    free(g->text);
    free(g->obj_first);
    free(g);
}
