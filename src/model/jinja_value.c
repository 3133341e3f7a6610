/* Values of la_jinja (jinja_internal.h) with Python's semantics: the arena they live in,
 * str() and repr() as CPython prints them (Objects/unicodeobject.c unicode_repr, float_repr
 * with the shortest round-trip digits), json.dumps as Python's json module writes it
 * (Lib/json/encoder.py), == and < as Python compares.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <utf8proc.h>

#include "model/jinja_internal.h"

/* ---- arena -------------------------------------------------------------------------------- */

struct jx_chunk {
    jx_chunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *jx_alloc(jx_arena *a, size_t n) {
    if (a->failed) return NULL;
    n = (n + 15) & ~(size_t)15;
    jx_chunk *c = a->head;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 60000 ? n : 64000;
        if (a->limit_bytes && a->bytes + cap > a->limit_bytes) {
            a->failed = true;
            return NULL;
        }
        c = malloc(sizeof *c + cap);
        if (!c) {
            a->failed = true;
            return NULL;
        }
        c->next = a->head;
        c->used = 0;
        c->cap = cap;
        a->head = c;
        a->bytes += cap;
    }
    void *p = c->data + c->used;
    c->used += n;
    memset(p, 0, n);
    return p;
}

char *jx_strdup(jx_arena *a, const char *s, size_t n) {
    char *p = jx_alloc(a, n + 1);
    if (p) {
        if (n) memcpy(p, s, n);
        p[n] = 0;
    }
    return p;
}

void jx_arena_free(jx_arena *a) {
    for (jx_chunk *c = a->head, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    a->head = NULL;
    a->bytes = 0;
}

bool jx_buf_add(jx_buf *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? 2 * b->cap : 64;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = jx_alloc(b->arena, cap);
        if (!p) return false;
        if (b->n) memcpy(p, b->p, b->n);
        b->p = p;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return true;
}

bool jx_buf_str(jx_buf *b, const char *s) { return jx_buf_add(b, s, strlen(s)); }

bool jx_buf_cp(jx_buf *b, uint32_t cp) {
    unsigned char s[4];
    utf8proc_ssize_t n = utf8proc_encode_char((utf8proc_int32_t)cp, s);
    return n > 0 && jx_buf_add(b, (const char *)s, (size_t)n);
}

/* ---- UTF-8 -------------------------------------------------------------------------------- */

uint32_t jx_decode(const char *s, size_t *i) {
    const unsigned char *u = (const unsigned char *)s + *i;
    if (u[0] < 0x80) {
        (*i)++;
        return u[0];
    }
    if (u[0] < 0xE0) {
        *i += 2;
        return ((uint32_t)(u[0] & 0x1F) << 6) | (u[1] & 0x3F);
    }
    if (u[0] < 0xF0) {
        *i += 3;
        return ((uint32_t)(u[0] & 0x0F) << 12) | ((uint32_t)(u[1] & 0x3F) << 6) | (u[2] & 0x3F);
    }
    *i += 4;
    return ((uint32_t)(u[0] & 0x07) << 18) | ((uint32_t)(u[1] & 0x3F) << 12) |
           ((uint32_t)(u[2] & 0x3F) << 6) | (u[3] & 0x3F);
}

size_t jx_cp_count(const char *s, size_t n) {
    size_t k = 0;
    for (size_t i = 0; i < n; i++) k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

size_t jx_cp_offset(const char *s, size_t n, size_t k) {
    size_t i = 0;
    while (i < n && k > 0) {
        jx_decode(s, &i);
        k--;
    }
    return i < n ? i : n;
}

bool jx_is_space(uint32_t c) {
    if (c <= 0x20) return c == 0x20 || (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x1F);
    return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 ||
           c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- containers --------------------------------------------------------------------------- */

jlist *jv_list_new(jx_arena *a, size_t cap) {
    jlist *l = jx_alloc(a, sizeof *l);
    if (!l) return NULL;
    l->cap = cap ? cap : 4;
    l->v = jx_alloc(a, l->cap * sizeof *l->v);
    return l->v ? l : NULL;
}

bool jv_list_push(jx_arena *a, jlist *l, jv v) {
    if (l->n == l->cap) {
        jv *nv = jx_alloc(a, 2 * l->cap * sizeof *nv);
        if (!nv) return false;
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap *= 2;
    }
    l->v[l->n++] = v;
    return true;
}

jv jv_list_value(jlist *l, uint8_t flags) { return (jv){.kind = JV_LIST, .flags = flags, .list = l}; }

jdict *jv_dict_new(jx_arena *a) { return jx_alloc(a, sizeof(jdict)); }

const jv *jv_dict_get(const jdict *d, const char *k, size_t kn) {
    for (size_t i = 0; i < d->n; i++)
        if (d->key_lens[i] == kn && !memcmp(d->keys[i], k, kn)) return &d->vals[i];
    return NULL;
}

bool jv_dict_set(jx_arena *a, jdict *d, const char *k, size_t kn, jv v) {
    for (size_t i = 0; i < d->n; i++) {
        if (d->key_lens[i] == kn && !memcmp(d->keys[i], k, kn)) {
            d->vals[i] = v;
            return true;
        }
    }
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 4;
        const char **keys = jx_alloc(a, cap * sizeof *keys);
        size_t *lens = jx_alloc(a, cap * sizeof *lens);
        jv *vals = jx_alloc(a, cap * sizeof *vals);
        if (!keys || !lens || !vals) return false;
        if (d->n) {
            memcpy(keys, d->keys, d->n * sizeof *keys);
            memcpy(lens, d->key_lens, d->n * sizeof *lens);
            memcpy(vals, d->vals, d->n * sizeof *vals);
        }
        d->keys = keys;
        d->key_lens = lens;
        d->vals = vals;
        d->cap = cap;
    }
    d->keys[d->n] = k;
    d->key_lens[d->n] = kn;
    d->vals[d->n] = v;
    d->n++;
    return true;
}

const char *jv_type_name(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: return "Undefined";
    case JV_NONE: return "NoneType";
    case JV_BOOL: return "bool";
    case JV_INT: return "int";
    case JV_FLOAT: return "float";
    case JV_STR: return "str";
    case JV_LIST: return v->flags & JVF_GEN ? "generator" : v->flags & JVF_TUPLE ? "tuple" : "list";
    case JV_DICT: return "dict";
    case JV_NS: return "Namespace";
    case JV_LOOP: return "LoopContext";
    case JV_FUNC: return "function";
    case JV_METHOD: return "builtin_function_or_method";
    case JV_MACRO: return "Macro";
    }
    return "object";
}

/* ---- str() and repr() ---------------------------------------------------------------------- */

/* float.__repr__: the shortest digits that read back the same double, in Python's layout
 * (repr uses 'r' formatting: scientific when the exponent is < -4 or >= 16). */
static bool float_repr(double f, jx_buf *b) {
    if (isnan(f)) return jx_buf_str(b, "nan");
    if (isinf(f)) return jx_buf_str(b, f < 0 ? "-inf" : "inf");
    char digits[40];
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(digits, sizeof digits, "%.*e", prec - 1, f);
        if (strtod(digits, NULL) == f) break;
    }
    /* digits is [-]d[.ddd]e[+-]XX: split into mantissa digits and exponent */
    char mant[32];
    size_t m = 0;
    const char *p = digits;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') mant[m++] = *p;
    mant[m] = 0;
    int exp10 = atoi(p + 1); /* value = 0.mant * 10^(exp10+1) */
    while (m > 1 && mant[m - 1] == '0') mant[--m] = 0;
    if (neg && !jx_buf_add(b, "-", 1)) return false;
    if (exp10 < -4 || exp10 >= 16) {
        char e[16];
        if (!jx_buf_add(b, mant, 1)) return false;
        if (m > 1 && (!jx_buf_add(b, ".", 1) || !jx_buf_add(b, mant + 1, m - 1))) return false;
        snprintf(e, sizeof e, "e%c%02d", exp10 < 0 ? '-' : '+', exp10 < 0 ? -exp10 : exp10);
        return jx_buf_str(b, e);
    }
    if (exp10 < 0) {
        if (!jx_buf_str(b, "0.")) return false;
        for (int z = -1; z > exp10; z--)
            if (!jx_buf_add(b, "0", 1)) return false;
        return jx_buf_add(b, mant, m);
    }
    size_t int_digits = (size_t)exp10 + 1;
    for (size_t k = 0; k < int_digits; k++)
        if (!jx_buf_add(b, k < m ? &mant[k] : "0", 1)) return false;
    if (!jx_buf_add(b, ".", 1)) return false;
    return m > int_digits ? jx_buf_add(b, mant + int_digits, m - int_digits) : jx_buf_add(b, "0", 1);
}

/* Whether Python prints cp as itself in a repr (str.isprintable). */
static bool printable(uint32_t cp) {
    if (cp == ' ') return true;
    utf8proc_category_t c = utf8proc_category((utf8proc_int32_t)cp);
    switch (c) {
    case UTF8PROC_CATEGORY_CC: case UTF8PROC_CATEGORY_CF: case UTF8PROC_CATEGORY_CS:
    case UTF8PROC_CATEGORY_CO: case UTF8PROC_CATEGORY_CN: case UTF8PROC_CATEGORY_ZL:
    case UTF8PROC_CATEGORY_ZP: case UTF8PROC_CATEGORY_ZS:
        return false;
    default:
        return true;
    }
}

static bool str_repr(const char *s, size_t n, jx_buf *b) {
    bool has_sq = memchr(s, '\'', n) != NULL, has_dq = memchr(s, '"', n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    if (!jx_buf_add(b, &q, 1)) return false;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = jx_decode(s, &i);
        char esc[16];
        const char *e = NULL;
        if (cp == (uint32_t)q || cp == '\\') {
            esc[0] = '\\';
            esc[1] = (char)cp;
            esc[2] = 0;
            e = esc;
        } else if (cp == '\n') {
            e = "\\n";
        } else if (cp == '\r') {
            e = "\\r";
        } else if (cp == '\t') {
            e = "\\t";
        } else if (cp < 0x20 || cp == 0x7F) {
            snprintf(esc, sizeof esc, "\\x%02x", cp);
            e = esc;
        } else if (cp >= 0x80 && !printable(cp)) {
            if (cp < 0x100) snprintf(esc, sizeof esc, "\\x%02x", cp);
            else if (cp < 0x10000) snprintf(esc, sizeof esc, "\\u%04x", cp);
            else snprintf(esc, sizeof esc, "\\U%08x", cp);
            e = esc;
        }
        if (!(e ? jx_buf_str(b, e) : jx_buf_add(b, s + start, i - start))) return false;
    }
    return jx_buf_add(b, &q, 1);
}

static bool repr_any(const jv *v, jx_buf *b, const char **why, int depth);

static bool to_str_any(const jv *v, jx_buf *b, const char **why, int depth) {
    char num[32];
    switch (v->kind) {
    case JV_UNDEF: return true;
    case JV_NONE: return jx_buf_str(b, "None");
    case JV_BOOL: return jx_buf_str(b, v->b ? "True" : "False");
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->i);
        return jx_buf_str(b, num);
    case JV_FLOAT: return float_repr(v->f, b);
    case JV_STR: return jx_buf_add(b, v->s.p, v->s.n);
    default: return repr_any(v, b, why, depth);
    }
}

static bool repr_any(const jv *v, jx_buf *b, const char **why, int depth) {
    if (depth > 64) {
        *why = "a value nested too deep to print";
        return false;
    }
    switch (v->kind) {
    case JV_UNDEF: return jx_buf_str(b, "Undefined");
    case JV_STR: return str_repr(v->s.p, v->s.n, b);
    case JV_LIST: {
        if (v->flags & (JVF_GEN | JVF_RANGE)) {
            *why = v->flags & JVF_GEN ? "printing a generator (the result of select, map, items, "
                                        "reverse, ...) is not supported: add |list"
                                      : "printing a range() is not supported: add |list";
            return false;
        }
        bool tuple = v->flags & JVF_TUPLE;
        if (!jx_buf_str(b, tuple ? "(" : "[")) return false;
        for (size_t i = 0; i < v->list->n; i++) {
            if (i && !jx_buf_str(b, ", ")) return false;
            if (!repr_any(&v->list->v[i], b, why, depth + 1)) return false;
        }
        if (tuple && v->list->n == 1 && !jx_buf_str(b, ",")) return false;
        return jx_buf_str(b, tuple ? ")" : "]");
    }
    case JV_DICT:
    case JV_NS: {
        if (v->kind == JV_NS && !jx_buf_str(b, "<Namespace ")) return false;
        if (!jx_buf_str(b, "{")) return false;
        for (size_t i = 0; i < v->dict->n; i++) {
            if (i && !jx_buf_str(b, ", ")) return false;
            if (!str_repr(v->dict->keys[i], v->dict->key_lens[i], b) || !jx_buf_str(b, ": ") ||
                !repr_any(&v->dict->vals[i], b, why, depth + 1))
                return false;
        }
        return jx_buf_str(b, v->kind == JV_NS ? "}>" : "}");
    }
    case JV_LOOP:
    case JV_FUNC:
    case JV_METHOD:
    case JV_MACRO:
        *why = "printing a function, macro or loop object is not supported";
        return false;
    default: return to_str_any(v, b, why, depth);
    }
}

bool jv_to_str(const jv *v, jx_buf *b, const char **why) {
    *why = NULL;
    return to_str_any(v, b, why, 0);
}

bool jv_repr(const jv *v, jx_buf *b, const char **why) {
    *why = NULL;
    return repr_any(v, b, why, 0);
}

/* ---- json.dumps --------------------------------------------------------------------------- */

static bool json_str(const char *s, size_t n, bool ascii, jx_buf *b) {
    if (!jx_buf_add(b, "\"", 1)) return false;
    for (size_t i = 0; i < n;) {
        size_t start = i;
        uint32_t cp = jx_decode(s, &i);
        char esc[16];
        const char *e = NULL;
        switch (cp) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (cp < 0x20 || (ascii && cp > 0x7E)) {
                if (cp >= 0x10000) { /* a surrogate pair, as Python's ensure_ascii */
                    uint32_t v = cp - 0x10000;
                    snprintf(esc, sizeof esc, "\\u%04x\\u%04x", 0xD800 + (v >> 10), 0xDC00 + (v & 0x3FF));
                } else {
                    snprintf(esc, sizeof esc, "\\u%04x", cp);
                }
                e = esc;
            }
        }
        if (!(e ? jx_buf_str(b, e) : jx_buf_add(b, s + start, i - start))) return false;
    }
    return jx_buf_add(b, "\"", 1);
}

static bool json_newline(const jx_json_opts *o, int level, jx_buf *b) {
    if (!jx_buf_add(b, "\n", 1)) return false;
    for (int i = 0; i < level; i++)
        if (!jx_buf_str(b, o->indent)) return false;
    return true;
}

static bool json_any(const jv *v, const jx_json_opts *o, int level, jx_buf *b, const char **why) {
    char num[32];
    if (level > 64) {
        *why = "a value nested too deep for tojson";
        return false;
    }
    switch (v->kind) {
    case JV_NONE: return jx_buf_str(b, "null");
    case JV_BOOL: return jx_buf_str(b, v->b ? "true" : "false");
    case JV_INT:
        snprintf(num, sizeof num, "%lld", (long long)v->i);
        return jx_buf_str(b, num);
    case JV_FLOAT:
        if (isnan(v->f)) return jx_buf_str(b, "NaN");
        if (isinf(v->f)) return jx_buf_str(b, v->f < 0 ? "-Infinity" : "Infinity");
        return float_repr(v->f, b);
    case JV_STR: return json_str(v->s.p, v->s.n, o->ensure_ascii, b);
    case JV_LIST: {
        if (v->flags & JVF_GEN) {
            *why = "tojson of a generator (add |list)";
            return false;
        }
        if (v->list->n == 0) return jx_buf_str(b, "[]");
        if (!jx_buf_str(b, "[")) return false;
        for (size_t i = 0; i < v->list->n; i++) {
            if (i && !jx_buf_str(b, o->item_sep)) return false;
            if (o->indent && !json_newline(o, level + 1, b)) return false;
            if (!json_any(&v->list->v[i], o, level + 1, b, why)) return false;
        }
        if (o->indent && !json_newline(o, level, b)) return false;
        return jx_buf_str(b, "]");
    }
    case JV_DICT: {
        const jdict *d = v->dict;
        if (d->n == 0) return jx_buf_str(b, "{}");
        size_t *order = jx_alloc(b->arena, d->n * sizeof *order);
        if (!order) return false;
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) { /* insertion sort by code point order (= UTF-8 byte order) */
            for (size_t i = 1; i < d->n; i++) {
                size_t x = order[i], j = i;
                while (j > 0) {
                    size_t y = order[j - 1];
                    size_t m = d->key_lens[x] < d->key_lens[y] ? d->key_lens[x] : d->key_lens[y];
                    int c = memcmp(d->keys[x], d->keys[y], m);
                    if (c > 0 || (c == 0 && d->key_lens[x] >= d->key_lens[y])) break;
                    order[j] = y;
                    j--;
                }
                order[j] = x;
            }
        }
        if (!jx_buf_str(b, "{")) return false;
        for (size_t k = 0; k < d->n; k++) {
            size_t i = order[k];
            if (k && !jx_buf_str(b, o->item_sep)) return false;
            if (o->indent && !json_newline(o, level + 1, b)) return false;
            if (!json_str(d->keys[i], d->key_lens[i], o->ensure_ascii, b) || !jx_buf_str(b, o->key_sep) ||
                !json_any(&d->vals[i], o, level + 1, b, why))
                return false;
        }
        if (o->indent && !json_newline(o, level, b)) return false;
        return jx_buf_str(b, "}");
    }
    default:
        *why = v->kind == JV_UNDEF ? "tojson of an undefined value" : "tojson of a value JSON cannot hold";
        return false;
    }
}

bool jv_to_json(const jv *v, const jx_json_opts *o, jx_buf *b, const char **why) {
    *why = NULL;
    return json_any(v, o, 0, b, why);
}

/* ---- truth and comparison ----------------------------------------------------------------- */

bool jv_truthy(const jv *v) {
    switch (v->kind) {
    case JV_UNDEF: case JV_NONE: return false;
    case JV_BOOL: return v->b;
    case JV_INT: return v->i != 0;
    case JV_FLOAT: return v->f != 0;
    case JV_STR: return v->s.n > 0;
    case JV_LIST: return (v->flags & JVF_GEN) || v->list->n > 0; /* a generator is true */
    case JV_DICT: return v->dict->n > 0;
    default: return true;
    }
}

static bool is_num(const jv *v) { return v->kind == JV_BOOL || v->kind == JV_INT || v->kind == JV_FLOAT; }
static double num_of(const jv *v) {
    return v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : (double)v->b;
}
static int64_t int_of(const jv *v) { return v->kind == JV_INT ? v->i : (int64_t)v->b; }

bool jv_eq(const jv *a, const jv *b) {
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) return int_of(a) == int_of(b);
        return num_of(a) == num_of(b);
    }
    if (a->kind != b->kind) return false;
    switch (a->kind) {
    case JV_UNDEF: case JV_NONE: return true;
    case JV_STR: return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
    case JV_LIST:
        if ((a->flags & (JVF_TUPLE | JVF_GEN)) != (b->flags & (JVF_TUPLE | JVF_GEN))) return false;
        if (a->flags & JVF_GEN) return a->list == b->list;
        if (a->list->n != b->list->n) return false;
        for (size_t i = 0; i < a->list->n; i++)
            if (!jv_eq(&a->list->v[i], &b->list->v[i])) return false;
        return true;
    case JV_DICT:
        if (a->dict->n != b->dict->n) return false;
        for (size_t i = 0; i < a->dict->n; i++) {
            const jv *o = jv_dict_get(b->dict, a->dict->keys[i], a->dict->key_lens[i]);
            if (!o || !jv_eq(&a->dict->vals[i], o)) return false;
        }
        return true;
    case JV_NS: return a->dict == b->dict;
    case JV_LOOP: return a->loop == b->loop;
    case JV_FUNC: return a->fn == b->fn;
    case JV_METHOD: return a->method == b->method;
    case JV_MACRO: return a->macro == b->macro;
    default: return false;
    }
}

bool jv_lt(const jv *a, const jv *b, bool *ok) {
    *ok = true;
    if (is_num(a) && is_num(b)) {
        if (a->kind != JV_FLOAT && b->kind != JV_FLOAT) return int_of(a) < int_of(b);
        return num_of(a) < num_of(b);
    }
    if (a->kind == JV_STR && b->kind == JV_STR) {
        size_t m = a->s.n < b->s.n ? a->s.n : b->s.n;
        int c = memcmp(a->s.p, b->s.p, m);
        return c < 0 || (c == 0 && a->s.n < b->s.n);
    }
    if (a->kind == JV_LIST && b->kind == JV_LIST && !((a->flags | b->flags) & JVF_GEN) &&
        (a->flags & JVF_TUPLE) == (b->flags & JVF_TUPLE)) {
        size_t m = a->list->n < b->list->n ? a->list->n : b->list->n;
        for (size_t i = 0; i < m; i++) {
            if (jv_eq(&a->list->v[i], &b->list->v[i])) continue;
            return jv_lt(&a->list->v[i], &b->list->v[i], ok);
        }
        return a->list->n < b->list->n;
    }
    *ok = false;
    return false;
}
