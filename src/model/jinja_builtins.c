/* Tests, global functions, argument binding and attribute access of la_jinja
 * (jinja_internal.h), each as jinja2 3.1 defines it (jinja2/tests.py, jinja2/defaults.py,
 * SandboxedEnvironment.getattr / getitem, filters.make_attrgetter) and transformers adds it
 * (raise_exception, strftime_now). Filters are in jinja_filters.c, methods in
 * jinja_methods.c.
 */
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "model/jinja_internal.h"

/* ---- names ---------------------------------------------------------------------------------- */

enum {
    JT_BOOLEAN, JT_CALLABLE, JT_DEFINED, JT_DIVISIBLEBY, JT_EQ, JT_EQUALTO, JT_EQ_OP, JT_EVEN,
    JT_FALSE, JT_FLOAT_T, JT_GE, JT_GE_OP, JT_GT, JT_GREATERTHAN, JT_GT_OP, JT_IN, JT_INTEGER,
    JT_ITERABLE, JT_LE, JT_LE_OP, JT_LESSTHAN, JT_LOWER, JT_LT, JT_LT_OP, JT_MAPPING, JT_NE,
    JT_NE_OP, JT_NONE, JT_NUMBER, JT_ODD, JT_SAMEAS, JT_SEQUENCE, JT_STRING_T, JT_TRUE,
    JT_UNDEFINED, JT_UPPER, JT_N
};
static const char *const k_tests[JT_N] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "even", "false",
    "float", "ge", ">=", "gt", "greaterthan", ">", "in", "integer", "iterable", "le", "<=",
    "lessthan", "lower", "lt", "<", "mapping", "ne", "!=", "none", "number", "odd", "sameas",
    "sequence", "string", "true", "undefined", "upper"};

enum { JFN_RANGE, JFN_NAMESPACE, JFN_DICT, JFN_RAISE_EXCEPTION, JFN_STRFTIME_NOW, JFN_N };
static const char *const k_functions[JFN_N] = {"range", "namespace", "dict", "raise_exception",
                                                "strftime_now"};

static int find_name(const char *const *names, int n, const char *s, size_t len) {
    for (int i = 0; i < n; i++)
        if (strlen(names[i]) == len && !memcmp(names[i], s, len)) return i;
    return -1;
}

int jx_test_id(const char *s, size_t n) { return find_name(k_tests, JT_N, s, n); }
int jx_function_id(const char *s, size_t n) { return find_name(k_functions, JFN_N, s, n); }

/* ---- argument binding ----------------------------------------------------------------------- */

bool jx_bind_params(jx_ctx *c, const char *what, const jx_args *a, const char *const *names, int n,
                        jv *slots, bool *given, int line) {
    if (a->n_pos > n)
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s takes at most %d argument(s) (%d given)", what, n, a->n_pos);
    for (int i = 0; i < n; i++) {
        slots[i] = jv_undef(NULL);
        given[i] = i < a->n_pos;
        if (given[i]) slots[i] = a->pos[i];
    }
    for (int k = 0; k < a->n_kw; k++) {
        int i = find_name(names, n, a->kw[k], a->kw_lens[k]);
        if (i < 0)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s got an unexpected keyword argument '%.*s'", what,
                           (int)a->kw_lens[k], a->kw[k]);
        if (given[i])
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s got multiple values for argument '%s'", what, names[i]);
        slots[i] = a->kw_vals[k];
        given[i] = true;
    }
    return true;
}

static bool oom(jx_ctx *c, int line) { return jx_fail(c, LA_ERR_NO_MEMORY, line, "out of memory"); }

bool jx_want_int(jx_ctx *c, const jv *v, const char *what, int line, int64_t *out) {
    if (v->kind == JV_INT || v->kind == JV_BOOL) {
        *out = v->kind == JV_INT ? v->i : v->b;
        return true;
    }
    return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s must be an integer, not '%s'", what, jv_type_name(v));
}

bool jx_str_value(jx_ctx *c, const jv *v, int line, jv *out) {
    if (v->kind == JV_STR) {
        *out = *v;
        return true;
    }
    jx_buf b = {.arena = jx_ctx_arena(c)};
    const char *why;
    if (!jv_to_str(v, &b, &why)) return why ? jx_fail(c, LA_ERR_UNSUPPORTED, line, "%s", why) : oom(c, line);
    if (!jx_buf_add(&b, "", 0)) return oom(c, line);
    *out = jv_str(b.p, b.n);
    return true;
}

/* ---- attribute access ----------------------------------------------------------------------- */

static const char *const k_dict_methods_safe[] = {"items", "keys", "values", "get"};
static const char *const k_dict_methods_other[] = {"copy", "pop", "popitem", "setdefault", "update",
                                                    "clear", "fromkeys"};
static const char *const k_list_methods[] = {"append", "extend", "insert", "remove", "pop", "clear",
                                              "index", "count", "sort", "reverse", "copy"};

static bool method_value(jx_ctx *c, const jv *self, int id, int line, jv *out) {
    jmethod *m = jx_alloc(jx_ctx_arena(c), sizeof *m);
    if (!m) return oom(c, line);
    m->self = *self;
    m->id = id;
    *out = (jv){.kind = JV_METHOD, .method = m};
    return true;
}

static jv unsafe(const char *name) {
    jv v = jv_undef(name);
    v.flags = JVF_UNSAFE;
    return v;
}

static bool loop_attr(jx_ctx *c, const jv *obj, const char *name, size_t n, int line, jv *out) {
    const jloop *L = obj->loop;
    int64_t len = (int64_t)L->items->n, i = L->index0;
    static const char *const k_attrs[] = {"index", "index0", "revindex", "revindex0", "first", "last",
                                          "length", "previtem", "nextitem", "depth", "depth0", "cycle"};
    switch (find_name(k_attrs, 12, name, n)) {
    case 0: *out = jv_int(i + 1); return true;
    case 1: *out = jv_int(i); return true;
    case 2: *out = jv_int(len - i); return true;
    case 3: *out = jv_int(len - i - 1); return true;
    case 4: *out = jv_bool(i == 0); return true;
    case 5: *out = jv_bool(i == len - 1); return true;
    case 6: *out = jv_int(len); return true;
    case 7: *out = i > 0 ? L->items->v[i - 1] : jv_undef("previtem"); return true;
    case 8: *out = i + 1 < len ? L->items->v[i + 1] : jv_undef("nextitem"); return true;
    case 9: *out = jv_int(1); return true;
    case 10: *out = jv_int(0); return true;
    case 11: return method_value(c, obj, JM_LOOP_CYCLE, line, out);
    default: *out = jv_undef(jx_strdup(jx_ctx_arena(c), name, n)); return true;
    }
}

bool jx_getattr(jx_ctx *c, const jv *obj, const char *name, size_t n, int line, jv *out) {
    char *copy = NULL;
    switch (obj->kind) {
    case JV_UNDEF: return jx_fail_undefined(c, obj, line);
    case JV_DICT: {
        int m = find_name(k_dict_methods_safe, 4, name, n);
        if (m >= 0) return method_value(c, obj, JM_DICT_ITEMS + m, line, out);
        if (find_name(k_dict_methods_other, 7, name, n) >= 0) {
            *out = unsafe(jx_strdup(jx_ctx_arena(c), name, n));
            return true;
        }
        const jv *v = jv_dict_get(obj->dict, name, n);
        if (v) {
            *out = *v;
            return true;
        }
        break;
    }
    case JV_NS: {
        const jv *v = jv_dict_get(obj->dict, name, n);
        if (v) {
            *out = *v;
            return true;
        }
        break;
    }
    case JV_STR: {
        int m = jx_str_method_id(name, n);
        if (m >= 0) return method_value(c, obj, m, line, out);
        break;
    }
    case JV_LIST:
        if (find_name(k_list_methods, 11, name, n) >= 0) {
            *out = unsafe(jx_strdup(jx_ctx_arena(c), name, n));
            return true;
        }
        break;
    case JV_LOOP: return loop_attr(c, obj, name, n, line, out);
    default: break;
    }
    copy = jx_strdup(jx_ctx_arena(c), name, n);
    if (!copy) return oom(c, line);
    *out = jv_undef(copy);
    return true;
}

bool jx_getitem(jx_ctx *c, const jv *obj, const jv *key, int line, jv *out) {
    if (obj->kind == JV_UNDEF) return jx_fail_undefined(c, obj, line);
    bool int_key = key->kind == JV_INT || key->kind == JV_BOOL;
    int64_t k = key->kind == JV_INT ? key->i : key->kind == JV_BOOL ? key->b : 0;
    if (obj->kind == JV_LIST && int_key && !(obj->flags & JVF_GEN)) {
        int64_t len = (int64_t)obj->list->n;
        if (k < 0) k += len;
        *out = k >= 0 && k < len ? obj->list->v[k] : jv_undef(NULL);
        return true;
    }
    if (obj->kind == JV_STR && int_key) {
        int64_t len = (int64_t)jx_cp_count(obj->s.p, obj->s.n);
        if (k < 0) k += len;
        if (k < 0 || k >= len) {
            *out = jv_undef(NULL);
            return true;
        }
        size_t at = jx_cp_offset(obj->s.p, obj->s.n, (size_t)k), end = at;
        jx_decode(obj->s.p, &end);
        *out = jv_str(obj->s.p + at, end - at);
        return true;
    }
    if (obj->kind == JV_DICT && key->kind == JV_STR) {
        const jv *v = jv_dict_get(obj->dict, key->s.p, key->s.n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    if (key->kind == JV_STR) return jx_getattr(c, obj, key->s.p, key->s.n, line, out);
    *out = jv_undef(NULL);
    return true;
}

bool jx_get_path(jx_ctx *c, const jv *item, const jv *attr, int line, jv *out) {
    if (attr->kind != JV_STR) return jx_getitem(c, item, attr, line, out);
    jv v = *item;
    const char *s = attr->s.p;
    size_t n = attr->s.n, start = 0;
    for (size_t i = 0; i <= n; i++) {
        if (i < n && s[i] != '.') continue;
        jv key = jv_str(s + start, i - start);
        bool digits = i > start;
        for (size_t k = start; k < i && digits; k++) digits = s[k] >= '0' && s[k] <= '9';
        if (digits) {
            int64_t x = 0;
            for (size_t k = start; k < i; k++) x = x * 10 + (s[k] - '0');
            key = jv_int(x);
        }
        if (!jx_getitem(c, &v, &key, line, &v)) return false;
        start = i + 1;
    }
    *out = v;
    return true;
}

/* ---- tests ---------------------------------------------------------------------------------- */

static bool cmp_test(jx_ctx *c, int id, const jv *a, const jv *b, int line, bool *out) {
    bool ok = true;
    switch (id) {
    case JT_EQ: case JT_EQUALTO: case JT_EQ_OP: *out = jv_eq(a, b); return true;
    case JT_NE: case JT_NE_OP: *out = !jv_eq(a, b); return true;
    case JT_LT: case JT_LESSTHAN: case JT_LT_OP: *out = jv_lt(a, b, &ok); break;
    case JT_LE: case JT_LE_OP: *out = !jv_lt(b, a, &ok); break;
    case JT_GT: case JT_GREATERTHAN: case JT_GT_OP: *out = jv_lt(b, a, &ok); break;
    default: *out = !jv_lt(a, b, &ok); break; /* ge */
    }
    if (ok) return true;
    if (a->kind == JV_UNDEF) return jx_fail_undefined(c, a, line);
    if (b->kind == JV_UNDEF) return jx_fail_undefined(c, b, line);
    return jx_fail(c, LA_ERR_INVALID_ARG, line, "'%s' and '%s' do not compare", jv_type_name(a), jv_type_name(b));
}

static bool str_cased(const jv *v, bool upper) {
    bool any = false;
    for (size_t i = 0; i < v->s.n;) {
        uint32_t cp = jx_decode(v->s.p, &i);
        int k = jx_case_kind(cp);
        if (k == (upper ? 2 : 1)) return false; /* the other case */
        any = any || k != 0;
    }
    return any;
}

bool jx_call_test(jx_ctx *c, int id, const jv *v, const jx_args *args, int line, bool *out) {
    static const char *const k_one[] = {"value"};
    bool needs_arg = id == JT_DIVISIBLEBY || id == JT_IN || id == JT_SAMEAS ||
                     (id >= JT_EQ && id <= JT_EQ_OP) || id == JT_GE || id == JT_GE_OP || id == JT_GT ||
                     id == JT_GREATERTHAN || id == JT_GT_OP || id == JT_LE || id == JT_LE_OP ||
                     id == JT_LESSTHAN || id == JT_LT || id == JT_LT_OP || id == JT_NE || id == JT_NE_OP;
    jv arg;
    bool given;
    if (!jx_bind_params(c, k_tests[id], args, k_one, needs_arg ? 1 : 0, &arg, &given, line)) return false;
    if (needs_arg && !given) return jx_fail(c, LA_ERR_INVALID_ARG, line, "test '%s' needs an argument", k_tests[id]);
    switch (id) {
    case JT_BOOLEAN: *out = v->kind == JV_BOOL; return true;
    case JT_CALLABLE: *out = v->kind == JV_FUNC || v->kind == JV_METHOD || v->kind == JV_MACRO || v->kind == JV_LOOP; return true;
    case JT_DEFINED: *out = v->kind != JV_UNDEF; return true;
    case JT_UNDEFINED: *out = v->kind == JV_UNDEF; return true;
    case JT_NONE: *out = v->kind == JV_NONE; return true;
    case JT_TRUE: *out = v->kind == JV_BOOL && v->b; return true;
    case JT_FALSE: *out = v->kind == JV_BOOL && !v->b; return true;
    case JT_INTEGER: *out = v->kind == JV_INT; return true;
    case JT_FLOAT_T: *out = v->kind == JV_FLOAT; return true;
    case JT_NUMBER: *out = v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; return true;
    case JT_STRING_T: *out = v->kind == JV_STR; return true;
    case JT_MAPPING: *out = v->kind == JV_DICT; return true;
    case JT_ITERABLE: *out = v->kind == JV_STR || v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_UNDEF || v->kind == JV_LOOP; return true;
    case JT_SEQUENCE: *out = v->kind == JV_STR || (v->kind == JV_LIST && !(v->flags & JVF_GEN)) || v->kind == JV_DICT || v->kind == JV_UNDEF; return true;
    case JT_LOWER: *out = v->kind == JV_STR && str_cased(v, false); return true;
    case JT_UPPER: *out = v->kind == JV_STR && str_cased(v, true); return true;
    case JT_EVEN:
    case JT_ODD:
    case JT_DIVISIBLEBY: {
        int64_t x = 0, d = 2;
        if (v->kind == JV_UNDEF) return jx_fail_undefined(c, v, line);
        if (!jx_want_int(c, v, "the tested value", line, &x)) return false;
        if (id == JT_DIVISIBLEBY && !jx_want_int(c, &arg, "divisibleby's argument", line, &d)) return false;
        if (d == 0) return jx_fail(c, LA_ERR_INVALID_ARG, line, "integer modulo by zero");
        int64_t m = d == -1 ? 0 : x % d;
        *out = id == JT_ODD ? m != 0 : m == 0;
        return true;
    }
    case JT_IN: {
        switch (arg.kind) {
        case JV_STR:
            if (v->kind != JV_STR) return jx_fail(c, LA_ERR_INVALID_ARG, line, "'in <string>' requires string as left operand");
            *out = v->s.n == 0 || (v->s.n <= arg.s.n && memmem(arg.s.p, arg.s.n, v->s.p, v->s.n));
            return true;
        case JV_LIST:
            *out = false;
            for (size_t i = 0; i < arg.list->n && !*out; i++) *out = jv_eq(v, &arg.list->v[i]);
            return true;
        case JV_DICT: *out = v->kind == JV_STR && jv_dict_get(arg.dict, v->s.p, v->s.n); return true;
        case JV_UNDEF: *out = false; return true;
        default: return jx_fail(c, LA_ERR_INVALID_ARG, line, "argument of type '%s' is not iterable", jv_type_name(&arg));
        }
    }
    case JT_SAMEAS:
        if (v->kind != arg.kind) *out = false;
        else if (v->kind == JV_NONE || v->kind == JV_UNDEF) *out = true;
        else if (v->kind == JV_BOOL) *out = v->b == arg.b;
        else if (v->kind == JV_INT) *out = v->i == arg.i && v->i >= -5 && v->i <= 256; /* CPython's cached ints */
        else if (v->kind == JV_LIST || v->kind == JV_DICT || v->kind == JV_NS) *out = v->list == arg.list;
        else *out = false;
        return true;
    default: return cmp_test(c, id, v, &arg, line, out);
    }
}

/* ---- global functions ------------------------------------------------------------------------- */

static bool copy_kwargs(jx_ctx *c, const jx_args *a, jdict *d, int line) {
    for (int k = 0; k < a->n_kw; k++)
        if (!jv_dict_set(jx_ctx_arena(c), d, a->kw[k], a->kw_lens[k], a->kw_vals[k])) return oom(c, line);
    return true;
}

bool jx_call_function(jx_ctx *c, int id, const jx_args *a, int line, jv *out) {
    jx_arena *ar = jx_ctx_arena(c);
    switch (id) {
    case JFN_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->n_kw || a->n_pos < 1 || a->n_pos > 3)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "range takes 1 to 3 integer arguments");
        for (int i = 0; i < a->n_pos; i++)
            if (!jx_want_int(c, &a->pos[i], "range's argument", line, &v[a->n_pos == 1 ? 1 : i])) return false;
        if (v[2] == 0) return jx_fail(c, LA_ERR_INVALID_ARG, line, "range() arg 3 must not be zero");
        jlist *l = jv_list_new(ar, 8);
        if (!l) return oom(c, line);
        for (int64_t x = v[0]; v[2] > 0 ? x < v[1] : x > v[1]; x += v[2]) {
            if (!jx_tick(c, line)) return false;
            if (!jv_list_push(ar, l, jv_int(x))) return oom(c, line);
        }
        *out = jv_list_value(l, JVF_RANGE);
        return true;
    }
    case JFN_NAMESPACE:
    case JFN_DICT: {
        jdict *d = jv_dict_new(ar);
        if (!d) return oom(c, line);
        if (a->n_pos > 1 || (a->n_pos == 1 && a->pos[0].kind != JV_DICT))
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "%s takes an optional mapping and keyword arguments",
                           k_functions[id]);
        if (a->n_pos == 1)
            for (size_t i = 0; i < a->pos[0].dict->n; i++)
                if (!jv_dict_set(ar, d, a->pos[0].dict->keys[i], a->pos[0].dict->key_lens[i], a->pos[0].dict->vals[i]))
                    return oom(c, line);
        if (!copy_kwargs(c, a, d, line)) return false;
        *out = (jv){.kind = id == JFN_NAMESPACE ? JV_NS : JV_DICT, .dict = d};
        return true;
    }
    case JFN_RAISE_EXCEPTION: {
        jv msg = a->n_pos ? a->pos[0] : jv_str("", 0);
        jv s;
        if (!jx_str_value(c, &msg, line, &s)) return false;
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "the template raised an exception: %.*s", (int)s.s.n, s.s.p);
    }
    case JFN_STRFTIME_NOW: {
        if (a->n_pos != 1 || a->pos[0].kind != JV_STR || a->n_kw)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "strftime_now takes one format string");
        char fmt[256], buf[512];
        snprintf(fmt, sizeof fmt, "%.*s", (int)a->pos[0].s.n, a->pos[0].s.p);
        time_t now = time(NULL);
        struct tm tm;
        localtime_r(&now, &tm);
        size_t n = strftime(buf, sizeof buf, fmt, &tm);
        char *p = jx_strdup(ar, buf, n);
        if (!p) return oom(c, line);
        *out = jv_str(p, n);
        return true;
    }
    default: return jx_fail(c, LA_ERR_INTERNAL, line, "unknown function id %d", id);
    }
}
