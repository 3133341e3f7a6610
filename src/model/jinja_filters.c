/* The filters of la_jinja (jinja_internal.h), each as jinja2 3.1's filters.py defines it,
 * except tojson, which is transformers' (json.dumps(x, ensure_ascii=False, indent=None,
 * separators=None, sort_keys=False): no HTML escaping, keys unsorted). Filters that return
 * generators in jinja2 (items, map, reject, rejectattr, reverse of a list, select,
 * selectattr, unique) return lists flagged JVF_GEN: iterable, filterable, not printable.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/jinja_internal.h"

enum {
    JF_ABS, JF_CAPITALIZE, JF_COUNT, JF_DEFAULT, JF_D, JF_FIRST, JF_FLOAT, JF_INDENT, JF_INT,
    JF_ITEMS, JF_JOIN, JF_LAST, JF_LENGTH, JF_LIST, JF_LOWER, JF_MAP, JF_MAX, JF_MIN, JF_REJECT,
    JF_REJECTATTR, JF_REPLACE, JF_REVERSE, JF_ROUND, JF_SELECT, JF_SELECTATTR, JF_SORT,
    JF_STRING, JF_SUM, JF_TITLE, JF_TOJSON, JF_TRIM, JF_UNIQUE, JF_UPPER, JF_N
};
static const char *const k_filters[JF_N] = {
    "abs", "capitalize", "count", "default", "d", "first", "float", "indent", "int", "items",
    "join", "last", "length", "list", "lower", "map", "max", "min", "reject", "rejectattr",
    "replace", "reverse", "round", "select", "selectattr", "sort", "string", "sum", "title",
    "tojson", "trim", "unique", "upper"};

int jx_filter_id(const char *s, size_t n) {
    for (int i = 0; i < JF_N; i++)
        if (strlen(k_filters[i]) == n && !memcmp(k_filters[i], s, n)) return i;
    return -1;
}

static bool oom(jx_ctx *c, int line) { return jx_fail(c, LA_ERR_NO_MEMORY, line, "out of memory"); }

static bool str_out(jx_ctx *c, jx_buf *b, int line, jv *out) {
    if (!jx_buf_add(b, "", 0)) return oom(c, line);
    *out = jv_str(b->p, b->n);
    return true;
}

/* ---- selecting and mapping -------------------------------------------------------------------- */

/* select / reject (by_attr false) and selectattr / rejectattr: the items whose test (or
 * truth, without a test name) is `keep`. */
static bool select_items(jx_ctx *c, const jv *value, const jx_args *args, bool by_attr, bool keep, int line,
                         jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jlist *items, *res;
    if (!jx_iterate(c, value, line, &items)) return false;
    if (!(res = jv_list_new(a, items->n + 1))) return oom(c, line);
    int first = by_attr ? 1 : 0;
    if (by_attr && (args->n_pos < 1 || args->pos[0].kind != JV_STR))
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "selectattr / rejectattr need an attribute name");
    int test = -1;
    if (args->n_pos > first) {
        if (args->pos[first].kind != JV_STR) return jx_fail(c, LA_ERR_INVALID_ARG, line, "a test name must be a string");
        test = jx_test_id(args->pos[first].s.p, args->pos[first].s.n);
        if (test < 0)
            return jx_fail(c, LA_ERR_UNSUPPORTED, line, "test '%.*s' is not supported", (int)args->pos[first].s.n,
                           args->pos[first].s.p);
    }
    jx_args targs = {.pos = args->n_pos > first + 1 ? args->pos + first + 1 : NULL,
                     .n_pos = args->n_pos > first + 1 ? args->n_pos - first - 1 : 0,
                     .kw = args->kw, .kw_lens = args->kw_lens, .kw_vals = args->kw_vals, .n_kw = args->n_kw};
    for (size_t i = 0; i < items->n; i++) {
        jv x = items->v[i];
        if (!jx_tick(c, line)) return false;
        if (by_attr && !jx_get_path(c, &items->v[i], &args->pos[0], line, &x)) return false;
        bool r;
        if (test < 0) r = jv_truthy(&x);
        else if (!jx_call_test(c, test, &x, &targs, line, &r)) return false;
        if (r == keep && !jv_list_push(a, res, items->v[i])) return oom(c, line);
    }
    *out = jv_list_value(res, JVF_GEN);
    return true;
}

/* map("filter", args...) or map(attribute="a", default=d). */
static bool map_items(jx_ctx *c, const jv *value, const jx_args *args, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jlist *items, *res;
    if (!jx_iterate(c, value, line, &items)) return false;
    if (!(res = jv_list_new(a, items->n + 1))) return oom(c, line);
    const jv *attr = NULL, *dflt = NULL;
    for (int k = 0; k < args->n_kw; k++) {
        if (args->kw_lens[k] == 9 && !memcmp(args->kw[k], "attribute", 9)) attr = &args->kw_vals[k];
        else if (args->kw_lens[k] == 7 && !memcmp(args->kw[k], "default", 7)) dflt = &args->kw_vals[k];
    }
    int filter = -1;
    if (!attr) {
        if (args->n_pos < 1 || args->pos[0].kind != JV_STR)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "map needs a filter name or attribute=");
        filter = jx_filter_id(args->pos[0].s.p, args->pos[0].s.n);
        if (filter < 0)
            return jx_fail(c, LA_ERR_UNSUPPORTED, line, "filter '%.*s' is not supported", (int)args->pos[0].s.n,
                           args->pos[0].s.p);
    } else if (args->n_pos || args->n_kw > (dflt ? 2 : 1)) {
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "map with attribute= takes only default=");
    }
    jx_args fargs = {.pos = args->n_pos > 1 ? args->pos + 1 : NULL, .n_pos = args->n_pos > 1 ? args->n_pos - 1 : 0,
                     .kw = args->kw, .kw_lens = args->kw_lens, .kw_vals = args->kw_vals, .n_kw = args->n_kw};
    for (size_t i = 0; i < items->n; i++) {
        jv x;
        if (!jx_tick(c, line)) return false;
        if (attr) {
            if (!jx_get_path(c, &items->v[i], attr, line, &x)) return false;
            if (x.kind == JV_UNDEF && dflt) x = *dflt;
        } else if (!jx_call_filter(c, filter, &items->v[i], &fargs, line, &x)) {
            return false;
        }
        if (!jv_list_push(a, res, x)) return oom(c, line);
    }
    *out = jv_list_value(res, JVF_GEN);
    return true;
}

/* ---- sorting ----------------------------------------------------------------------------------- */

/* What sort / unique / min / max compare: the attribute, lower-cased when a string and not
 * case_sensitive (jinja2's ignore_case). */
static bool sort_key(jx_ctx *c, const jv *item, const jv *attr, bool case_sensitive, int line, jv *out) {
    jv v = *item;
    if (attr && attr->kind != JV_UNDEF && attr->kind != JV_NONE && !jx_get_path(c, item, attr, line, &v)) return false;
    if (!case_sensitive && v.kind == JV_STR) {
        jx_buf b = {.arena = jx_ctx_arena(c)};
        if (!jx_str_case(&v, JX_CASE_LOWER, &b)) return oom(c, line);
        v = jv_str(b.p ? b.p : "", b.n);
    }
    *out = v;
    return true;
}

static bool key_lt(jx_ctx *c, const jv *a, const jv *b, int line, bool *lt) {
    bool ok;
    *lt = jv_lt(a, b, &ok);
    return ok || jx_fail(c, LA_ERR_INVALID_ARG, line, "'<' not supported between instances of '%s' and '%s'",
                         jv_type_name(a), jv_type_name(b));
}

/* Stable insertion sort of items by keys (what Python's sorted gives for these sizes). */
static bool sort_by_keys(jx_ctx *c, jv *items, jv *keys, size_t n, bool reverse, int line) {
    for (size_t i = 1; i < n; i++) {
        jv x = items[i], kx = keys[i];
        size_t j = i;
        while (j > 0) {
            bool lt;
            if (!jx_tick(c, line) || !key_lt(c, reverse ? &keys[j - 1] : &kx, reverse ? &kx : &keys[j - 1], line, &lt))
                return false;
            if (!lt) break;
            items[j] = items[j - 1];
            keys[j] = keys[j - 1];
            j--;
        }
        items[j] = x;
        keys[j] = kx;
    }
    return true;
}

/* ---- the filters -------------------------------------------------------------------------------- */

static const char *const k_no_params[] = {NULL};
static const char *const k_default[] = {"default_value", "boolean"};
static const char *const k_float[] = {"default"};
static const char *const k_int[] = {"default", "base"};
static const char *const k_indent[] = {"width", "first", "blank"};
static const char *const k_join[] = {"d", "attribute"};
static const char *const k_minmax[] = {"case_sensitive", "attribute"};
static const char *const k_replace[] = {"old", "new", "count"};
static const char *const k_round[] = {"precision", "method"};
static const char *const k_sort[] = {"reverse", "case_sensitive", "attribute"};
static const char *const k_sum[] = {"attribute", "start"};
static const char *const k_tojson[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
static const char *const k_trim[] = {"chars"};
static const char *const k_unique[] = {"case_sensitive", "attribute"};

static bool tojson(jx_ctx *c, const jv *v, const jv *p, const bool *given, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jx_json_opts o = {.ensure_ascii = given[0] && jv_truthy(&p[0]), .sort_keys = given[3] && jv_truthy(&p[3]),
                      .item_sep = ", ", .key_sep = ": "};
    if (given[1] && p[1].kind != JV_NONE) { /* Python json: an int is that many spaces */
        if (p[1].kind == JV_STR) {
            o.indent = p[1].s.p;
        } else {
            int64_t k;
            if (!jx_want_int(c, &p[1], "tojson's indent", line, &k)) return false;
            if (k > 256) k = 256;
            char *sp = jx_alloc(a, (size_t)(k > 0 ? k : 0) + 1);
            if (!sp) return oom(c, line);
            for (int64_t i = 0; i < k; i++) sp[i] = ' ';
            o.indent = sp;
        }
        o.item_sep = ",";
    }
    if (given[2] && p[2].kind != JV_NONE) {
        if (p[2].kind != JV_LIST || p[2].list->n != 2 || p[2].list->v[0].kind != JV_STR || p[2].list->v[1].kind != JV_STR)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "tojson's separators must be two strings");
        o.item_sep = jx_strdup(a, p[2].list->v[0].s.p, p[2].list->v[0].s.n);
        o.key_sep = jx_strdup(a, p[2].list->v[1].s.p, p[2].list->v[1].s.n);
        if (!o.item_sep || !o.key_sep) return oom(c, line);
    }
    jx_buf b = {.arena = a};
    const char *why;
    if (!jv_to_json(v, &o, &b, &why)) return why ? jx_fail(c, LA_ERR_INVALID_ARG, line, "%s", why) : oom(c, line);
    return str_out(c, &b, line, out);
}

/* jinja2's do_title: each run between [-\s({[<]+ separators gets item[0].upper() +
 * item[1:].lower() (not str.title()). */
static bool jinja_title(jx_ctx *c, const jv *s, int line, jv *out) {
    jx_buf b = {.arena = jx_ctx_arena(c)};
    bool at_start = true;
    for (size_t i = 0; i < s->s.n;) {
        size_t start = i;
        uint32_t cp = jx_decode(s->s.p, &i);
        bool sep = cp == '-' || cp == '(' || cp == '{' || cp == '[' || cp == '<' || jx_is_space(cp);
        jv ch = jv_str(s->s.p + start, i - start);
        if (!jx_str_case(&ch, sep || at_start ? JX_CASE_UPPER : JX_CASE_LOWER, &b)) return oom(c, line);
        at_start = sep;
    }
    return str_out(c, &b, line, out);
}

static bool indent(jx_ctx *c, const jv *s, const jv *p, const bool *given, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    jx_buf ind = {.arena = a}, b = {.arena = a};
    if (given[0] && p[0].kind == JV_STR) {
        if (!jx_buf_add(&ind, p[0].s.p, p[0].s.n)) return oom(c, line);
    } else {
        int64_t w = 4;
        if (given[0] && !jx_want_int(c, &p[0], "indent's width", line, &w)) return false;
        for (int64_t i = 0; i < w && i < 1024; i++)
            if (!jx_buf_add(&ind, " ", 1)) return oom(c, line);
    }
    bool first = given[1] && jv_truthy(&p[1]), blank = given[2] && jv_truthy(&p[2]);
    /* s + "\n", splitlines (jinja2: "this quirk is necessary for splitlines method") */
    jx_buf sn = {.arena = a};
    if (!jx_buf_add(&sn, s->s.p, s->s.n) || !jx_buf_add(&sn, "\n", 1)) return oom(c, line);
    jv whole = jv_str(sn.p, sn.n);
    jlist *lines = jx_str_splitlines(a, &whole, false);
    if (!lines) return oom(c, line);
    for (size_t i = 0; i < lines->n; i++) {
        const jv *l = &lines->v[i];
        bool ok = i == 0 || jx_buf_add(&b, "\n", 1);
        if (i > 0 && (blank || l->s.n)) ok = ok && jx_buf_add(&b, ind.p ? ind.p : "", ind.n);
        if (!ok || !jx_buf_add(&b, l->s.p, l->s.n)) return oom(c, line);
    }
    if (first) {
        jx_buf f = {.arena = a};
        if (!jx_buf_add(&f, ind.p ? ind.p : "", ind.n) || !jx_buf_add(&f, b.p ? b.p : "", b.n)) return oom(c, line);
        return str_out(c, &f, line, out);
    }
    return str_out(c, &b, line, out);
}

static bool to_int(jx_ctx *c, const jv *v, const jv *p, const bool *given, int line, jv *out) {
    int64_t base = 10;
    if (given[1] && !jx_want_int(c, &p[1], "int's base", line, &base)) return false;
    jv dflt = given[0] ? p[0] : jv_int(0);
    switch (v->kind) {
    case JV_INT: *out = *v; return true;
    case JV_BOOL: *out = jv_int(v->b); return true;
    case JV_FLOAT:
        if (!isfinite(v->f) || fabs(v->f) >= 9.2e18) *out = dflt;
        else *out = jv_int((int64_t)v->f);
        return true;
    case JV_STR: {
        char buf[80], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v->s.n < 79 ? v->s.n : 79), v->s.p);
        const char *s = buf;
        while (*s == ' ' || (*s >= '\t' && *s <= '\r')) s++;
        long long x = strtoll(s, &end, (int)base);
        while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
        if (end != s && !*end && v->s.n < 79) {
            *out = jv_int(x);
            return true;
        }
        double f = strtod(s, &end); /* "42.23"|int is 42 */
        while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
        *out = end != s && !*end && isfinite(f) && fabs(f) < 9.2e18 ? jv_int((int64_t)f) : dflt;
        return true;
    }
    default: *out = dflt; return true;
    }
}

static bool to_float(const jv *v, const jv *dflt, jv *out) {
    switch (v->kind) {
    case JV_INT: *out = jv_float((double)v->i); return true;
    case JV_BOOL: *out = jv_float(v->b); return true;
    case JV_FLOAT: *out = *v; return true;
    case JV_STR: {
        char buf[80], *end;
        snprintf(buf, sizeof buf, "%.*s", (int)(v->s.n < 79 ? v->s.n : 79), v->s.p);
        double f = strtod(buf, &end);
        while (*end == ' ' || (*end >= '\t' && *end <= '\r')) end++;
        *out = end != buf && !*end ? jv_float(f) : *dflt;
        return true;
    }
    default: *out = *dflt; return true;
    }
}

/* Python round(x, ndigits): correctly rounded, half to even (printf rounds exactly). */
static double round_half_even(double x, int64_t digits) {
    if (digits > 300 || !isfinite(x)) return x;
    char buf[400];
    if (digits >= 0) {
        snprintf(buf, sizeof buf, "%.*f", (int)digits, x);
        return strtod(buf, NULL);
    }
    double p = pow(10.0, (double)-digits);
    return nearbyint(x / p) * p;
}

static bool minmax(jx_ctx *c, const jv *v, const jv *p, const bool *given, bool max, int line, jv *out) {
    jlist *items;
    if (!jx_iterate(c, v, line, &items)) return false;
    if (items->n == 0) {
        *out = jv_undef(NULL);
        return true;
    }
    bool cs = given[0] && jv_truthy(&p[0]);
    size_t best = 0;
    jv bk;
    if (!sort_key(c, &items->v[0], given[1] ? &p[1] : NULL, cs, line, &bk)) return false;
    for (size_t i = 1; i < items->n; i++) {
        jv k;
        bool lt;
        if (!sort_key(c, &items->v[i], given[1] ? &p[1] : NULL, cs, line, &k) ||
            !key_lt(c, max ? &bk : &k, max ? &k : &bk, line, &lt))
            return false;
        if (lt) {
            best = i;
            bk = k;
        }
    }
    *out = items->v[best];
    return true;
}

bool jx_call_filter(jx_ctx *c, int id, const jv *v, const jx_args *args, int line, jv *out) {
    jx_arena *a = jx_ctx_arena(c);
    const char *name = k_filters[id];
    jv p[4], s;
    bool given[4];
    const char *const *params = k_no_params;
    int n_params = 0;
    switch (id) {
    case JF_DEFAULT: case JF_D: params = k_default; n_params = 2; break;
    case JF_FLOAT: params = k_float; n_params = 1; break;
    case JF_INT: params = k_int; n_params = 2; break;
    case JF_INDENT: params = k_indent; n_params = 3; break;
    case JF_JOIN: params = k_join; n_params = 2; break;
    case JF_MAX: case JF_MIN: params = k_minmax; n_params = 2; break;
    case JF_REPLACE: params = k_replace; n_params = 3; break;
    case JF_ROUND: params = k_round; n_params = 2; break;
    case JF_SORT: params = k_sort; n_params = 3; break;
    case JF_SUM: params = k_sum; n_params = 2; break;
    case JF_TOJSON: params = k_tojson; n_params = 4; break;
    case JF_TRIM: params = k_trim; n_params = 1; break;
    case JF_UNIQUE: params = k_unique; n_params = 2; break;
    case JF_MAP: return map_items(c, v, args, line, out);
    case JF_SELECT: case JF_REJECT: return select_items(c, v, args, false, id == JF_SELECT, line, out);
    case JF_SELECTATTR: case JF_REJECTATTR: return select_items(c, v, args, true, id == JF_SELECTATTR, line, out);
    default: break;
    }
    if (!jx_bind_params(c, name, args, params, n_params, p, given, line)) return false;
    /* filters on strings take str(value) (jinja2's soft_str) */
    bool on_str = id == JF_CAPITALIZE || id == JF_LOWER || id == JF_UPPER || id == JF_TITLE || id == JF_TRIM ||
                  id == JF_REPLACE || id == JF_STRING || id == JF_INDENT;
    if (on_str && !jx_str_value(c, v, line, &s)) return false;
    jx_buf b = {.arena = a};
    switch (id) {
    case JF_ABS:
        if (v->kind == JV_INT && v->i != INT64_MIN) *out = jv_int(v->i < 0 ? -v->i : v->i);
        else if (v->kind == JV_BOOL) *out = jv_int(v->b);
        else if (v->kind == JV_FLOAT) *out = jv_float(fabs(v->f));
        else return jx_fail(c, LA_ERR_INVALID_ARG, line, "bad operand type for abs(): '%s'", jv_type_name(v));
        return true;
    case JF_CAPITALIZE: return jx_str_case(&s, JX_CASE_CAPITALIZE, &b) ? str_out(c, &b, line, out) : oom(c, line);
    case JF_LOWER: return jx_str_case(&s, JX_CASE_LOWER, &b) ? str_out(c, &b, line, out) : oom(c, line);
    case JF_UPPER: return jx_str_case(&s, JX_CASE_UPPER, &b) ? str_out(c, &b, line, out) : oom(c, line);
    case JF_TITLE: return jinja_title(c, &s, line, out);
    case JF_STRING: *out = s; return true;
    case JF_TRIM:
        if (given[0] && p[0].kind != JV_NONE && !(p[0].kind == JV_STR))
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "trim's chars must be a string");
        *out = jx_str_strip(&s, given[0] && p[0].kind == JV_STR ? &p[0] : NULL, true, true);
        return true;
    case JF_REPLACE: {
        jv old, new_;
        int64_t count = -1;
        if (!given[0] || !given[1]) return jx_fail(c, LA_ERR_INVALID_ARG, line, "replace needs old and new");
        if (!jx_str_value(c, &p[0], line, &old) || !jx_str_value(c, &p[1], line, &new_)) return false;
        if (given[2] && p[2].kind != JV_NONE && !jx_want_int(c, &p[2], "replace's count", line, &count)) return false;
        return jx_str_replace(&s, &old, &new_, count, &b) ? str_out(c, &b, line, out) : oom(c, line);
    }
    case JF_INDENT: return indent(c, &s, p, given, line, out);
    case JF_DEFAULT:
    case JF_D:
        *out = v->kind == JV_UNDEF || (given[1] && jv_truthy(&p[1]) && !jv_truthy(v))
                   ? (given[0] ? p[0] : jv_str("", 0))
                   : *v;
        return true;
    case JF_LENGTH:
    case JF_COUNT:
        switch (v->kind) {
        case JV_UNDEF: *out = jv_int(0); return true;
        case JV_STR: *out = jv_int((int64_t)jx_cp_count(v->s.p, v->s.n)); return true;
        case JV_LIST:
            if (v->flags & JVF_GEN) return jx_fail(c, LA_ERR_INVALID_ARG, line, "object of type 'generator' has no len()");
            *out = jv_int((int64_t)v->list->n);
            return true;
        case JV_DICT: *out = jv_int((int64_t)v->dict->n); return true;
        default: return jx_fail(c, LA_ERR_INVALID_ARG, line, "object of type '%s' has no len()", jv_type_name(v));
        }
    case JF_FIRST:
    case JF_LAST: {
        if (id == JF_LAST && v->kind == JV_LIST && (v->flags & JVF_GEN))
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "'generator' object is not reversible");
        jlist *items;
        if (!jx_iterate(c, v, line, &items)) return false;
        *out = items->n ? items->v[id == JF_FIRST ? 0 : items->n - 1] : jv_undef(NULL);
        return true;
    }
    case JF_LIST: {
        jlist *items, *copy;
        if (!jx_iterate(c, v, line, &items)) return false;
        if (!(copy = jv_list_new(a, items->n + 1))) return oom(c, line);
        for (size_t i = 0; i < items->n; i++)
            if (!jv_list_push(a, copy, items->v[i])) return oom(c, line);
        *out = jv_list_value(copy, 0);
        return true;
    }
    case JF_ITEMS: {
        jlist *res = jv_list_new(a, 4);
        if (!res) return oom(c, line);
        if (v->kind == JV_UNDEF) {
            *out = jv_list_value(res, JVF_GEN);
            return true;
        }
        if (v->kind != JV_DICT) return jx_fail(c, LA_ERR_INVALID_ARG, line, "Can only get item pairs from a mapping.");
        for (size_t i = 0; i < v->dict->n; i++) {
            jlist *pair = jv_list_new(a, 2);
            if (!pair || !jv_list_push(a, pair, jv_str(v->dict->keys[i], v->dict->key_lens[i])) ||
                !jv_list_push(a, pair, v->dict->vals[i]) || !jv_list_push(a, res, jv_list_value(pair, JVF_TUPLE)))
                return oom(c, line);
        }
        *out = jv_list_value(res, JVF_GEN);
        return true;
    }
    case JF_JOIN: {
        jlist *items;
        jv sep = jv_str("", 0);
        if (given[0] && !jx_str_value(c, &p[0], line, &sep)) return false;
        if (!jx_iterate(c, v, line, &items)) return false;
        const char *why;
        for (size_t i = 0; i < items->n; i++) {
            jv x = items->v[i];
            if (given[1] && p[1].kind != JV_NONE && !jx_get_path(c, &items->v[i], &p[1], line, &x)) return false;
            if ((i && !jx_buf_add(&b, sep.s.p, sep.s.n)) || !jv_to_str(&x, &b, &why))
                return why ? jx_fail(c, LA_ERR_UNSUPPORTED, line, "%s", why) : oom(c, line);
        }
        return str_out(c, &b, line, out);
    }
    case JF_FLOAT: {
        jv dflt = given[0] ? p[0] : jv_float(0);
        return to_float(v, &dflt, out);
    }
    case JF_INT: return to_int(c, v, p, given, line, out);
    case JF_ROUND: {
        int64_t prec = 0;
        if (given[0] && !jx_want_int(c, &p[0], "round's precision", line, &prec)) return false;
        const char *method = given[1] && p[1].kind == JV_STR ? p[1].s.p : "common";
        if (v->kind != JV_INT && v->kind != JV_FLOAT && v->kind != JV_BOOL)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "round of a '%s'", jv_type_name(v));
        double x = v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : v->b;
        if (!strcmp(method, "common")) {
            if (v->kind != JV_FLOAT) { /* round(int, n) is an int */
                *out = v->kind == JV_BOOL ? jv_int(v->b) : *v;
                return true;
            }
            *out = jv_float(round_half_even(x, prec));
            return true;
        }
        double scale = pow(10.0, (double)prec);
        if (!strcmp(method, "ceil")) *out = jv_float(ceil(x * scale) / scale);
        else if (!strcmp(method, "floor")) *out = jv_float(floor(x * scale) / scale);
        else return jx_fail(c, LA_ERR_INVALID_ARG, line, "method must be common, ceil or floor");
        return true;
    }
    case JF_REVERSE: {
        if (v->kind == JV_STR) {
            for (size_t i = v->s.n; i > 0;) {
                size_t end = i;
                i--;
                while (i > 0 && ((unsigned char)v->s.p[i] & 0xC0) == 0x80) i--;
                if (!jx_buf_add(&b, v->s.p + i, end - i)) return oom(c, line);
            }
            return str_out(c, &b, line, out);
        }
        jlist *items, *res;
        if (!jx_iterate(c, v, line, &items)) return false;
        if (!(res = jv_list_new(a, items->n + 1))) return oom(c, line);
        for (size_t i = items->n; i > 0; i--)
            if (!jv_list_push(a, res, items->v[i - 1])) return oom(c, line);
        *out = jv_list_value(res, JVF_GEN);
        return true;
    }
    case JF_SORT:
    case JF_UNIQUE: {
        bool reverse = id == JF_SORT && given[0] && jv_truthy(&p[0]);
        bool cs = id == JF_SORT ? given[1] && jv_truthy(&p[1]) : given[0] && jv_truthy(&p[0]);
        const jv *attr = id == JF_SORT ? (given[2] ? &p[2] : NULL) : (given[1] ? &p[1] : NULL);
        jlist *items;
        if (!jx_iterate(c, v, line, &items)) return false;
        jlist *res = jv_list_new(a, items->n + 1);
        jv *keys = jx_alloc(a, (items->n + 1) * sizeof *keys);
        if (!res || !keys) return oom(c, line);
        for (size_t i = 0; i < items->n; i++) {
            jv k;
            if (!sort_key(c, &items->v[i], attr, cs, line, &k)) return false;
            if (id == JF_UNIQUE) {
                bool seen = false;
                for (size_t j = 0; j < res->n && !seen; j++) seen = jv_eq(&keys[j], &k);
                if (seen) continue;
            }
            keys[res->n] = k;
            if (!jv_list_push(a, res, items->v[i])) return oom(c, line);
        }
        if (id == JF_SORT && !sort_by_keys(c, res->v, keys, res->n, reverse, line)) return false;
        *out = jv_list_value(res, id == JF_UNIQUE ? JVF_GEN : 0);
        return true;
    }
    case JF_MAX:
    case JF_MIN: return minmax(c, v, p, given, id == JF_MAX, line, out);
    case JF_SUM: {
        jlist *items;
        if (!jx_iterate(c, v, line, &items)) return false;
        jv acc = given[1] ? p[1] : jv_int(0);
        for (size_t i = 0; i < items->n; i++) {
            jv x = items->v[i];
            if (given[0] && p[0].kind != JV_NONE && !jx_get_path(c, &items->v[i], &p[0], line, &x)) return false;
            bool ints = (acc.kind == JV_INT || acc.kind == JV_BOOL) && (x.kind == JV_INT || x.kind == JV_BOOL);
            bool nums = (acc.kind == JV_INT || acc.kind == JV_BOOL || acc.kind == JV_FLOAT) &&
                        (x.kind == JV_INT || x.kind == JV_BOOL || x.kind == JV_FLOAT);
            if (!nums)
                return jx_fail(c, LA_ERR_INVALID_ARG, line, "unsupported operand type(s) for +: '%s' and '%s'",
                               jv_type_name(&acc), jv_type_name(&x));
            if (ints) {
                int64_t r, xa = acc.kind == JV_INT ? acc.i : acc.b, xb = x.kind == JV_INT ? x.i : x.b;
                if (__builtin_add_overflow(xa, xb, &r))
                    return jx_fail(c, LA_ERR_UNSUPPORTED, line, "an integer result outside 64 bits");
                acc = jv_int(r);
            } else {
                double xa = acc.kind == JV_FLOAT ? acc.f : acc.kind == JV_INT ? (double)acc.i : acc.b;
                double xb = x.kind == JV_FLOAT ? x.f : x.kind == JV_INT ? (double)x.i : x.b;
                acc = jv_float(xa + xb);
            }
        }
        *out = acc;
        return true;
    }
    case JF_TOJSON: return tojson(c, v, p, given, line, out);
    default: return jx_fail(c, LA_ERR_INTERNAL, line, "unknown filter id %d", id);
    }
}
