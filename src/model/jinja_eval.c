/* Rendering a la_jinja syntax tree (jinja_internal.h), with jinja2's semantics:
 *
 * Scopes. The variables of the render call form the root scope (a template-level
 * {% set %} writes there); every iteration of a for loop runs in a fresh scope whose parent
 * is the loop's, so a {% set %} inside a loop body is gone at the next iteration and after
 * the loop (why templates use namespace()); {% if %} opens no scope; a macro call runs in a
 * scope under the root. Lookups walk up the scopes, then the globals (range, namespace,
 * dict, raise_exception, strftime_now), then give Undefined.
 *   {% set x = 1 %}{% for i in [1, 2] %}{{ x }}{% set x = i * 10 %}{{ x }}{% endfor %}{{ x }}
 *   renders "1101201" in jinja2 and here.
 * Output. Printed values are str() of them; text goes to the current output buffer (a
 * {% set %} block or a macro call redirects it). Work is counted (loop iterations, macro
 * calls) against a budget, and output against 64 MiB, so a template cannot run forever.
 */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/jinja_internal.h"

#define MAX_TICKS 10000000
#define MAX_OUTPUT_BYTES ((size_t)64 << 20)
#define MAX_MACRO_DEPTH 64

typedef struct scope {
    struct scope *parent;
    jdict *vars;
} scope;

struct jx_ctx {
    jx_arena *a;
    const char *name;
    la_err *err;
    la_status status;
    bool failed;
    int64_t ticks;
    scope *root, *cur;
    jx_buf *out;
    size_t out_total;
    int signal; /* 1: break, 2: continue */
    int macro_depth;
};

jx_arena *jx_ctx_arena(jx_ctx *c) { return c->a; }

void jx_set_error(la_err *err, la_status code, const char *name, int line, const char *fmt, va_list ap) {
    char msg[400];
    vsnprintf(msg, sizeof msg, fmt, ap);
    la_err_set(err, code, "%s line %d: %s", name, line, msg);
}

bool jx_fail(jx_ctx *c, la_status code, int line, const char *fmt, ...) {
    if (c->failed) return false;
    va_list ap;
    va_start(ap, fmt);
    jx_set_error(c->err, code, c->name, line, fmt, ap);
    va_end(ap);
    c->failed = true;
    c->status = code;
    return false;
}

bool jx_fail_undefined(jx_ctx *c, const jv *v, int line) {
    if (v->flags & JVF_UNSAFE)
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "access to attribute '%.*s' is unsafe in the sandbox",
                       (int)v->s.n, v->s.p ? v->s.p : "");
    if (v->s.p) return jx_fail(c, LA_ERR_INVALID_ARG, line, "'%.*s' is undefined", (int)v->s.n, v->s.p);
    return jx_fail(c, LA_ERR_INVALID_ARG, line, "an undefined value was used");
}

bool jx_tick(jx_ctx *c, int line) {
    if (++c->ticks <= MAX_TICKS) return true;
    return jx_fail(c, LA_ERR_TOO_LONG, line, "the template ran over %d loop iterations", MAX_TICKS);
}

static bool oom(jx_ctx *c, int line) { return jx_fail(c, LA_ERR_NO_MEMORY, line, "out of memory"); }

/* ---- scopes -------------------------------------------------------------------------------- */

static scope *scope_push(jx_ctx *c, scope *parent) {
    scope *s = jx_alloc(c->a, sizeof *s);
    if (!s || !(s->vars = jv_dict_new(c->a))) return NULL;
    s->parent = parent;
    return s;
}

static bool lookup(jx_ctx *c, const char *name, size_t n, jv *out) {
    for (scope *s = c->cur; s; s = s->parent) {
        const jv *v = jv_dict_get(s->vars, name, n);
        if (v) {
            *out = *v;
            return true;
        }
    }
    int fn = jx_function_id(name, n);
    if (fn >= 0) {
        *out = (jv){.kind = JV_FUNC, .fn = (int16_t)fn};
        return true;
    }
    char *copy = jx_strdup(c->a, name, n);
    if (!copy) return oom(c, 0);
    *out = jv_undef(copy);
    return true;
}

static bool assign(jx_ctx *c, const char *name, size_t n, jv v, int line) {
    return jv_dict_set(c->a, c->cur->vars, name, n, v) || oom(c, line);
}

/* ---- output -------------------------------------------------------------------------------- */

static bool emit(jx_ctx *c, const char *s, size_t n, int line) {
    c->out_total += n;
    if (c->out_total > MAX_OUTPUT_BYTES)
        return jx_fail(c, LA_ERR_TOO_LONG, line, "the template wrote over %zu MiB", MAX_OUTPUT_BYTES >> 20);
    return jx_buf_add(c->out, s, n) || oom(c, line);
}

/* ---- iteration ----------------------------------------------------------------------------- */

bool jx_iterate(jx_ctx *c, const jv *v, int line, jlist **out) {
    switch (v->kind) {
    case JV_LIST: *out = v->list; return true;
    case JV_UNDEF: return (*out = jv_list_new(c->a, 1)) || oom(c, line);
    case JV_DICT: {
        jlist *l = jv_list_new(c->a, v->dict->n);
        if (!l) return oom(c, line);
        for (size_t i = 0; i < v->dict->n; i++)
            if (!jv_list_push(c->a, l, jv_str(v->dict->keys[i], v->dict->key_lens[i]))) return oom(c, line);
        *out = l;
        return true;
    }
    case JV_STR: {
        jlist *l = jv_list_new(c->a, v->s.n);
        if (!l) return oom(c, line);
        for (size_t i = 0; i < v->s.n;) {
            size_t start = i;
            jx_decode(v->s.p, &i);
            if (!jv_list_push(c->a, l, jv_str(v->s.p + start, i - start))) return oom(c, line);
        }
        *out = l;
        return true;
    }
    default:
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "'%s' object is not iterable", jv_type_name(v));
    }
}

/* ---- expressions --------------------------------------------------------------------------- */

static bool eval(jx_ctx *c, const jnode *n, jv *out);

static bool eval_args(jx_ctx *c, const jnode *n, jx_args *args) {
    memset(args, 0, sizeof *args);
    if (n->n_args) {
        args->pos = jx_alloc(c->a, (size_t)n->n_args * sizeof *args->pos);
        if (!args->pos) return oom(c, n->line);
        for (int i = 0; i < n->n_args; i++)
            if (!eval(c, n->args[i], &args->pos[i])) return false;
        args->n_pos = n->n_args;
    }
    if (n->n_kw) {
        args->kw_vals = jx_alloc(c->a, (size_t)n->n_kw * sizeof *args->kw_vals);
        if (!args->kw_vals) return oom(c, n->line);
        for (int i = 0; i < n->n_kw; i++)
            if (!eval(c, n->kw_vals[i], &args->kw_vals[i])) return false;
        args->kw = n->kw_names;
        args->kw_lens = n->kw_lens;
        args->n_kw = n->n_kw;
    }
    return true;
}

static bool is_number(const jv *v) { return v->kind == JV_INT || v->kind == JV_FLOAT || v->kind == JV_BOOL; }
static double as_double(const jv *v) { return v->kind == JV_FLOAT ? v->f : v->kind == JV_INT ? (double)v->i : v->b; }
static int64_t as_int(const jv *v) { return v->kind == JV_INT ? v->i : v->b; }

static bool type_error(jx_ctx *c, const char *op, const jv *a, const jv *b, int line) {
    return jx_fail(c, LA_ERR_INVALID_ARG, line, "unsupported operand type(s) for %s: '%s' and '%s'", op,
                   jv_type_name(a), jv_type_name(b));
}

static bool repeat(jx_ctx *c, const jv *seq, int64_t times, int line, jv *out) {
    if (times < 0) times = 0;
    if (seq->kind == JV_STR) {
        if (seq->s.n && (uint64_t)times > MAX_OUTPUT_BYTES / seq->s.n)
            return jx_fail(c, LA_ERR_TOO_LONG, line, "a string repeated over %zu MiB", MAX_OUTPUT_BYTES >> 20);
        jx_buf b = {.arena = c->a};
        for (int64_t i = 0; i < times; i++)
            if (!jx_buf_add(&b, seq->s.p, seq->s.n)) return oom(c, line);
        if (!jx_buf_add(&b, "", 0)) return oom(c, line);
        *out = jv_str(b.p, b.n);
        return true;
    }
    if (seq->list->n && (uint64_t)times > MAX_TICKS / seq->list->n)
        return jx_fail(c, LA_ERR_TOO_LONG, line, "a list repeated over %d items", MAX_TICKS);
    jlist *l = jv_list_new(c->a, (size_t)times * seq->list->n + 1);
    if (!l) return oom(c, line);
    for (int64_t i = 0; i < times; i++)
        for (size_t k = 0; k < seq->list->n; k++)
            if (!jv_list_push(c->a, l, seq->list->v[k])) return oom(c, line);
    *out = jv_list_value(l, seq->flags & JVF_TUPLE);
    return true;
}

/* Python's binary operators on two values (the operands of and / or are not here). */
static bool arith(jx_ctx *c, jo_op op, const jv *a, const jv *b, int line, jv *out) {
    static const char *const k_names[] = {[JO_ADD] = "+", [JO_SUB] = "-", [JO_MUL] = "*", [JO_DIV] = "/",
                                          [JO_FLOORDIV] = "//", [JO_MOD] = "%", [JO_POW] = "**"};
    if (a->kind == JV_UNDEF) return jx_fail_undefined(c, a, line);
    if (b->kind == JV_UNDEF) return jx_fail_undefined(c, b, line);
    bool nums = is_number(a) && is_number(b);
    bool ints = nums && a->kind != JV_FLOAT && b->kind != JV_FLOAT;
    int64_t x = ints ? as_int(a) : 0, y = ints ? as_int(b) : 0, r;
    switch (op) {
    case JO_ADD:
        if (ints) {
            if (__builtin_add_overflow(x, y, &r)) break;
            *out = jv_int(r);
            return true;
        }
        if (nums) {
            *out = jv_float(as_double(a) + as_double(b));
            return true;
        }
        if (a->kind == JV_STR && b->kind == JV_STR) {
            char *p = jx_alloc(c->a, a->s.n + b->s.n + 1);
            if (!p) return oom(c, line);
            memcpy(p, a->s.p, a->s.n);
            memcpy(p + a->s.n, b->s.p, b->s.n);
            *out = jv_str(p, a->s.n + b->s.n);
            return true;
        }
        if (a->kind == JV_LIST && b->kind == JV_LIST && !((a->flags | b->flags) & JVF_GEN) &&
            (a->flags & JVF_TUPLE) == (b->flags & JVF_TUPLE)) {
            jlist *l = jv_list_new(c->a, a->list->n + b->list->n + 1);
            if (!l) return oom(c, line);
            for (size_t i = 0; i < a->list->n; i++) jv_list_push(c->a, l, a->list->v[i]);
            for (size_t i = 0; i < b->list->n; i++) jv_list_push(c->a, l, b->list->v[i]);
            *out = jv_list_value(l, a->flags & JVF_TUPLE);
            return true;
        }
        return type_error(c, "+", a, b, line);
    case JO_SUB:
        if (ints) {
            if (__builtin_sub_overflow(x, y, &r)) break;
            *out = jv_int(r);
            return true;
        }
        if (nums) {
            *out = jv_float(as_double(a) - as_double(b));
            return true;
        }
        return type_error(c, "-", a, b, line);
    case JO_MUL:
        if (ints) {
            if (__builtin_mul_overflow(x, y, &r)) break;
            *out = jv_int(r);
            return true;
        }
        if (nums) {
            *out = jv_float(as_double(a) * as_double(b));
            return true;
        }
        if ((a->kind == JV_STR || (a->kind == JV_LIST && !(a->flags & JVF_GEN))) &&
            (b->kind == JV_INT || b->kind == JV_BOOL))
            return repeat(c, a, as_int(b), line, out);
        if ((b->kind == JV_STR || (b->kind == JV_LIST && !(b->flags & JVF_GEN))) &&
            (a->kind == JV_INT || a->kind == JV_BOOL))
            return repeat(c, b, as_int(a), line, out);
        return type_error(c, "*", a, b, line);
    case JO_DIV:
        if (!nums) return type_error(c, "/", a, b, line);
        if (as_double(b) == 0) return jx_fail(c, LA_ERR_INVALID_ARG, line, "division by zero");
        *out = jv_float(as_double(a) / as_double(b));
        return true;
    case JO_FLOORDIV:
    case JO_MOD:
        if (a->kind == JV_STR && op == JO_MOD)
            return jx_fail(c, LA_ERR_UNSUPPORTED, line, "string formatting with %% is not supported");
        if (!nums) return type_error(c, k_names[op], a, b, line);
        if (as_double(b) == 0)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "integer division or modulo by zero");
        if (ints) {
            if (x == INT64_MIN && y == -1) break;
            int64_t q = x / y, m = x % y;
            if (m != 0 && ((m < 0) != (y < 0))) { /* Python floors */
                q--;
                m += y;
            }
            *out = jv_int(op == JO_FLOORDIV ? q : m);
            return true;
        }
        {
            double fx = as_double(a), fy = as_double(b), m = fmod(fx, fy);
            if (m != 0 && ((m < 0) != (fy < 0))) m += fy;
            *out = jv_float(op == JO_FLOORDIV ? floor(fx / fy) : m);
        }
        return true;
    case JO_POW:
        if (!nums) return type_error(c, "**", a, b, line);
        if (ints && y >= 0) {
            int64_t acc = 1, base = x;
            bool over = false;
            for (int64_t e = y; e > 0 && !over; e >>= 1) {
                if (e & 1) over = __builtin_mul_overflow(acc, base, &acc);
                if (e > 1 && !over) over = __builtin_mul_overflow(base, base, &base);
            }
            if (over) break;
            *out = jv_int(acc);
            return true;
        }
        *out = jv_float(pow(as_double(a), as_double(b)));
        return true;
    default: break;
    }
    return jx_fail(c, LA_ERR_UNSUPPORTED, line, "an integer result outside 64 bits");
}

static bool contains(jx_ctx *c, const jv *item, const jv *seq, int line, bool *out) {
    switch (seq->kind) {
    case JV_STR:
        if (item->kind != JV_STR)
            return jx_fail(c, LA_ERR_INVALID_ARG, line, "'in <string>' requires string as left operand, not %s",
                           jv_type_name(item));
        *out = item->s.n == 0 || (item->s.n <= seq->s.n && memmem(seq->s.p, seq->s.n, item->s.p, item->s.n));
        return true;
    case JV_LIST:
        *out = false;
        for (size_t i = 0; i < seq->list->n && !*out; i++) *out = jv_eq(item, &seq->list->v[i]);
        return true;
    case JV_DICT:
    case JV_NS:
        *out = item->kind == JV_STR && jv_dict_get(seq->dict, item->s.p, item->s.n) != NULL;
        return true;
    case JV_UNDEF:
        *out = false;
        return true;
    default:
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "argument of type '%s' is not iterable", jv_type_name(seq));
    }
}

static bool compare(jx_ctx *c, jo_op op, const jv *a, const jv *b, int line, bool *out) {
    bool ok = true;
    switch (op) {
    case JO_EQ: *out = jv_eq(a, b); return true;
    case JO_NE: *out = !jv_eq(a, b); return true;
    case JO_IN: return contains(c, a, b, line, out);
    case JO_NOTIN:
        if (!contains(c, a, b, line, out)) return false;
        *out = !*out;
        return true;
    case JO_LT: *out = jv_lt(a, b, &ok); break;
    case JO_GT: *out = jv_lt(b, a, &ok); break;
    case JO_LE: *out = !jv_lt(b, a, &ok); break;
    case JO_GE: *out = !jv_lt(a, b, &ok); break;
    default: ok = false;
    }
    if (ok) return true;
    if (a->kind == JV_UNDEF) return jx_fail_undefined(c, a, line);
    if (b->kind == JV_UNDEF) return jx_fail_undefined(c, b, line);
    return jx_fail(c, LA_ERR_INVALID_ARG, line, "'<' not supported between instances of '%s' and '%s'",
                   jv_type_name(a), jv_type_name(b));
}

/* Python slice of a str (by code point) or a list. */
static bool slice(jx_ctx *c, const jnode *n, const jv *obj, jv *out) {
    jv parts[3];
    const jnode *nodes[3] = {n->b, n->c, n->d};
    int64_t v[3];
    bool given[3];
    for (int k = 0; k < 3; k++) {
        given[k] = false;
        if (!nodes[k]) continue;
        if (!eval(c, nodes[k], &parts[k])) return false;
        if (parts[k].kind == JV_NONE) continue;
        if (parts[k].kind != JV_INT && parts[k].kind != JV_BOOL) { /* TypeError: jinja2 gives Undefined */
            *out = jv_undef(NULL);
            return true;
        }
        v[k] = as_int(&parts[k]);
        given[k] = true;
    }
    if (obj->kind == JV_UNDEF) return jx_fail_undefined(c, obj, n->line);
    if (obj->kind != JV_STR && (obj->kind != JV_LIST || (obj->flags & JVF_GEN))) {
        *out = jv_undef(NULL);
        return true;
    }
    int64_t len = obj->kind == JV_STR ? (int64_t)jx_cp_count(obj->s.p, obj->s.n) : (int64_t)obj->list->n;
    int64_t step = given[2] ? v[2] : 1;
    if (step == 0) return jx_fail(c, LA_ERR_INVALID_ARG, n->line, "slice step cannot be zero");
    int64_t lo = step > 0 ? 0 : -1, hi = step > 0 ? len : len - 1;
    int64_t start = step > 0 ? lo : hi, stop = step > 0 ? hi : lo;
    if (given[0]) start = v[0] < 0 ? (v[0] + len < lo ? lo : v[0] + len) : (v[0] > hi ? hi : v[0]);
    if (given[1]) stop = v[1] < 0 ? (v[1] + len < lo ? lo : v[1] + len) : (v[1] > hi ? hi : v[1]);
    if (obj->kind == JV_STR) {
        /* code point offsets, then bytes */
        size_t *offs = jx_alloc(c->a, ((size_t)len + 1) * sizeof *offs);
        if (!offs) return oom(c, n->line);
        size_t i = 0;
        for (int64_t k = 0; k < len; k++) {
            offs[k] = i;
            jx_decode(obj->s.p, &i);
        }
        offs[len] = obj->s.n;
        jx_buf b = {.arena = c->a};
        for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
            if (!jx_buf_add(&b, obj->s.p + offs[k], offs[k + 1] - offs[k])) return oom(c, n->line);
        if (!jx_buf_add(&b, "", 0)) return oom(c, n->line);
        *out = jv_str(b.p, b.n);
        return true;
    }
    jlist *l = jv_list_new(c->a, 4);
    if (!l) return oom(c, n->line);
    for (int64_t k = start; step > 0 ? k < stop : k > stop; k += step)
        if (!jv_list_push(c->a, l, obj->list->v[k])) return oom(c, n->line);
    *out = jv_list_value(l, obj->flags & JVF_TUPLE);
    return true;
}

static bool eval(jx_ctx *c, const jnode *n, jv *out) {
    if (c->failed) return false;
    jv a, b;
    switch (n->kind) {
    case JN_CONST: *out = n->value; return true;
    case JN_NAME: return lookup(c, n->name, n->name_len, out);
    case JN_GETATTR: return eval(c, n->a, &a) && jx_getattr(c, &a, n->name, n->name_len, n->line, out);
    case JN_GETITEM: return eval(c, n->a, &a) && eval(c, n->b, &b) && jx_getitem(c, &a, &b, n->line, out);
    case JN_SLICE: return eval(c, n->a, &a) && slice(c, n, &a, out);
    case JN_CALL: {
        jx_args args;
        return eval(c, n->a, &a) && eval_args(c, n, &args) && jx_call_value(c, &a, &args, n->line, out);
    }
    case JN_FILTER: {
        jx_args args;
        return eval(c, n->a, &a) && eval_args(c, n, &args) && jx_call_filter(c, n->id, &a, &args, n->line, out);
    }
    case JN_TEST: {
        jx_args args;
        bool r;
        if (!eval(c, n->a, &a) || !eval_args(c, n, &args) || !jx_call_test(c, n->id, &a, &args, n->line, &r))
            return false;
        *out = jv_bool(n->op ? !r : r);
        return true;
    }
    case JN_UNARY:
        if (!eval(c, n->a, &a)) return false;
        if (n->op == JO_NOT) {
            *out = jv_bool(!jv_truthy(&a));
            return true;
        }
        if (a.kind == JV_UNDEF) return jx_fail_undefined(c, &a, n->line);
        if (!is_number(&a))
            return jx_fail(c, LA_ERR_INVALID_ARG, n->line, "bad operand type for unary %s: '%s'",
                           n->op == JO_NEG ? "-" : "+", jv_type_name(&a));
        if (a.kind == JV_FLOAT) *out = jv_float(n->op == JO_NEG ? -a.f : a.f);
        else if (n->op == JO_NEG && as_int(&a) == INT64_MIN) return jx_fail(c, LA_ERR_UNSUPPORTED, n->line, "an integer result outside 64 bits");
        else *out = jv_int(n->op == JO_NEG ? -as_int(&a) : as_int(&a));
        return true;
    case JN_BINARY:
        if (!eval(c, n->a, &a)) return false;
        if (n->op == JO_AND || n->op == JO_OR) {
            if (jv_truthy(&a) == (n->op == JO_OR)) {
                *out = a;
                return true;
            }
            return eval(c, n->b, out);
        }
        return eval(c, n->b, &b) && arith(c, (jo_op)n->op, &a, &b, n->line, out);
    case JN_COMPARE: {
        if (!eval(c, n->a, &a)) return false;
        for (int i = 0; i < n->n_args; i++) {
            bool r;
            if (!eval(c, n->args[i], &b) || !compare(c, (jo_op)n->ops[i], &a, &b, n->line, &r)) return false;
            if (!r) {
                *out = jv_bool(false);
                return true;
            }
            a = b;
        }
        *out = jv_bool(true);
        return true;
    }
    case JN_CONCAT: {
        jx_buf buf = {.arena = c->a};
        const char *why;
        for (int i = 0; i < n->n_args; i++) {
            if (!eval(c, n->args[i], &a)) return false;
            if (!jv_to_str(&a, &buf, &why))
                return why ? jx_fail(c, LA_ERR_UNSUPPORTED, n->line, "%s", why) : oom(c, n->line);
        }
        if (!jx_buf_add(&buf, "", 0)) return oom(c, n->line);
        *out = jv_str(buf.p, buf.n);
        return true;
    }
    case JN_COND:
        if (!eval(c, n->a, &a)) return false;
        if (jv_truthy(&a)) return eval(c, n->b, out);
        if (n->c) return eval(c, n->c, out);
        *out = jv_undef(NULL);
        return true;
    case JN_LIST:
    case JN_TUPLE: {
        jlist *l = jv_list_new(c->a, (size_t)n->n_args + 1);
        if (!l) return oom(c, n->line);
        for (int i = 0; i < n->n_args; i++)
            if (!eval(c, n->args[i], &a) || !jv_list_push(c->a, l, a)) return c->failed ? false : oom(c, n->line);
        *out = jv_list_value(l, n->kind == JN_TUPLE ? JVF_TUPLE : 0);
        return true;
    }
    case JN_DICT: {
        jdict *d = jv_dict_new(c->a);
        if (!d) return oom(c, n->line);
        for (int i = 0; i < n->n_args; i++) {
            if (!eval(c, n->args[i], &a) || !eval(c, n->kw_vals[i], &b)) return false;
            if (a.kind != JV_STR)
                return jx_fail(c, LA_ERR_UNSUPPORTED, n->line, "dict keys that are not strings are not supported");
            if (!jv_dict_set(c->a, d, a.s.p, a.s.n, b)) return oom(c, n->line);
        }
        *out = (jv){.kind = JV_DICT, .dict = d};
        return true;
    }
    default:
        return jx_fail(c, LA_ERR_INTERNAL, n->line, "statement node in an expression");
    }
}

/* ---- statements ----------------------------------------------------------------------------- */

static bool exec(jx_ctx *c, const jnode *n);

static bool exec_body(jx_ctx *c, const jnode *body) {
    for (int i = 0; body && i < body->n_args && !c->signal; i++)
        if (!exec(c, body->args[i])) return false;
    return true;
}

/* Bind the for / set targets of n to v (unpacking when there are several). */
static bool bind(jx_ctx *c, const jnode *n, const jv *v) {
    if (!n->op) return assign(c, n->targets[0], n->target_lens[0], *v, n->line);
    jlist *items;
    if (!jx_iterate(c, v, n->line, &items)) return false;
    if ((int)items->n != n->n_targets)
        return jx_fail(c, LA_ERR_INVALID_ARG, n->line, "%s values to unpack (expected %d, got %zu)",
                       (int)items->n > n->n_targets ? "too many" : "not enough", n->n_targets, items->n);
    for (int k = 0; k < n->n_targets; k++)
        if (!assign(c, n->targets[k], n->target_lens[k], items->v[k], n->line)) return false;
    return true;
}

static bool exec_for(jx_ctx *c, const jnode *n) {
    jv seq;
    jlist *all;
    if (!eval(c, n->a, &seq) || !jx_iterate(c, &seq, n->line, &all)) return false;
    scope *outer = c->cur;
    jlist *items = all;
    if (n->d) { /* the loop's `if`: filtered first, so loop.length counts what passes */
        items = jv_list_new(c->a, all->n + 1);
        if (!items) return oom(c, n->line);
        scope *s = scope_push(c, outer);
        if (!s) return oom(c, n->line);
        for (size_t i = 0; i < all->n; i++) {
            jv keep;
            s->vars->n = 0; /* a fresh scope per item, its memory reused */
            c->cur = s;
            bool ok = jx_tick(c, n->line) && bind(c, n, &all->v[i]) && eval(c, n->d, &keep);
            c->cur = outer;
            if (!ok) return false;
            if (jv_truthy(&keep) && !jv_list_push(c->a, items, all->v[i])) return oom(c, n->line);
        }
    }
    jloop *loop = jx_alloc(c->a, sizeof *loop);
    if (!loop) return oom(c, n->line);
    loop->items = items;
    scope *s = scope_push(c, outer);
    if (!s) return oom(c, n->line);
    for (size_t i = 0; i < items->n; i++) {
        s->vars->n = 0; /* a fresh scope per iteration, its memory reused */
        c->cur = s;
        loop->index0 = (int64_t)i;
        bool ok = jx_tick(c, n->line) && bind(c, n, &items->v[i]) &&
                  assign(c, "loop", 4, (jv){.kind = JV_LOOP, .loop = loop}, n->line) && exec_body(c, n->b);
        c->cur = outer;
        if (!ok) return false;
        int sig = c->signal;
        c->signal = 0;
        if (sig == 1) break;
    }
    if (items->n == 0 && n->c) {
        s->vars->n = 0;
        c->cur = s;
        bool ok = exec_body(c, n->c);
        c->cur = outer;
        return ok;
    }
    return true;
}

/* Render body into a string (a {% set %} block, a macro call). */
static bool capture(jx_ctx *c, const jnode *body, jv *out) {
    jx_buf *saved = c->out, buf = {.arena = c->a};
    c->out = &buf;
    bool ok = exec_body(c, body) && (jx_buf_add(&buf, "", 0) || oom(c, body->line));
    c->out = saved;
    if (ok) *out = jv_str(buf.p ? buf.p : "", buf.n);
    return ok;
}

static bool exec(jx_ctx *c, const jnode *n) {
    if (c->failed) return false;
    jv v;
    const char *why;
    switch (n->kind) {
    case JN_DATA: return emit(c, n->value.s.p, n->value.s.n, n->line);
    case JN_PRINT: {
        if (!eval(c, n->a, &v)) return false;
        if (v.kind == JV_STR) return emit(c, v.s.p, v.s.n, n->line);
        jx_buf b = {.arena = c->a};
        if (!jv_to_str(&v, &b, &why)) return why ? jx_fail(c, LA_ERR_UNSUPPORTED, n->line, "%s", why) : oom(c, n->line);
        return emit(c, b.p ? b.p : "", b.n, n->line);
    }
    case JN_IF:
        if (!eval(c, n->a, &v)) return false;
        if (jv_truthy(&v)) return exec_body(c, n->b);
        if (!n->c) return true;
        return n->c->kind == JN_IF ? exec(c, n->c) : exec_body(c, n->c);
    case JN_FOR: return exec_for(c, n);
    case JN_SET:
        if (!eval(c, n->a, &v)) return false;
        if (n->name) { /* ns.attr = v */
            jv ns;
            if (!lookup(c, n->targets[0], n->target_lens[0], &ns)) return false;
            if (ns.kind != JV_NS)
                return jx_fail(c, LA_ERR_INVALID_ARG, n->line, "cannot assign attribute on non-namespace object");
            return jv_dict_set(c->a, ns.dict, n->name, n->name_len, v) || oom(c, n->line);
        }
        return bind(c, n, &v);
    case JN_SET_BLOCK: return capture(c, n->b, &v) && assign(c, n->name, n->name_len, v, n->line);
    case JN_MACRO:
        return assign(c, n->name, n->name_len, (jv){.kind = JV_MACRO, .macro = n}, n->line);
    case JN_BREAK: c->signal = 1; return true;
    case JN_CONTINUE: c->signal = 2; return true;
    case JN_BODY: return exec_body(c, n);
    default: return jx_fail(c, LA_ERR_INTERNAL, n->line, "expression node as a statement");
    }
}

/* ---- calls ---------------------------------------------------------------------------------- */

static bool call_macro(jx_ctx *c, const jnode *m, const jx_args *args, int line, jv *out) {
    if (c->macro_depth >= MAX_MACRO_DEPTH)
        return jx_fail(c, LA_ERR_TOO_LONG, line, "macros nested over %d calls deep", MAX_MACRO_DEPTH);
    if (args->n_pos > m->n_targets)
        return jx_fail(c, LA_ERR_INVALID_ARG, line, "macro '%.*s' takes not more than %d argument(s)",
                       (int)m->name_len, m->name, m->n_targets);
    if (!jx_tick(c, line)) return false;
    scope *saved = c->cur, *s = scope_push(c, c->root);
    if (!s) return oom(c, line);
    c->cur = s;
    bool ok = true;
    for (int k = 0; k < m->n_targets && ok; k++) {
        jv v = jv_undef(m->targets[k]);
        bool have = false;
        if (k < args->n_pos) {
            v = args->pos[k];
            have = true;
        }
        for (int j = 0; j < args->n_kw; j++) {
            if (args->kw_lens[j] == m->target_lens[k] && !memcmp(args->kw[j], m->targets[k], m->target_lens[k])) {
                if (have) ok = jx_fail(c, LA_ERR_INVALID_ARG, line, "macro '%.*s' got multiple values for '%.*s'",
                                       (int)m->name_len, m->name, (int)m->target_lens[k], m->targets[k]);
                v = args->kw_vals[j];
                have = true;
            }
        }
        if (ok && !have && m->args[k]) ok = eval(c, m->args[k], &v);
        if (ok) ok = assign(c, m->targets[k], m->target_lens[k], v, line);
    }
    for (int j = 0; ok && j < args->n_kw; j++) {
        bool known = false;
        for (int k = 0; k < m->n_targets && !known; k++)
            known = args->kw_lens[j] == m->target_lens[k] && !memcmp(args->kw[j], m->targets[k], m->target_lens[k]);
        if (!known)
            ok = jx_fail(c, LA_ERR_INVALID_ARG, line, "macro '%.*s' takes no keyword argument '%.*s'",
                         (int)m->name_len, m->name, (int)args->kw_lens[j], args->kw[j]);
    }
    c->macro_depth++;
    int signal = c->signal;
    ok = ok && capture(c, m->b, out);
    c->signal = signal;
    c->macro_depth--;
    c->cur = saved;
    return ok;
}

bool jx_call_value(jx_ctx *c, const jv *callee, const jx_args *args, int line, jv *out) {
    switch (callee->kind) {
    case JV_FUNC: return jx_call_function(c, callee->fn, args, line, out);
    case JV_METHOD: return jx_call_method(c, callee->method, args, line, out);
    case JV_MACRO: return call_macro(c, callee->macro, args, line, out);
    case JV_UNDEF: return jx_fail_undefined(c, callee, line);
    default: return jx_fail(c, LA_ERR_INVALID_ARG, line, "'%s' object is not callable", jv_type_name(callee));
    }
}

/* ---- the render call ------------------------------------------------------------------------- */

la_status jx_render_tree(const jnode *root, const char *name, jdict *vars, jx_arena *a, jx_buf *out,
                         la_err *err);

la_status jx_render_tree(const jnode *root, const char *name, jdict *vars, jx_arena *a, jx_buf *out,
                         la_err *err) {
    jx_ctx c = {.a = a, .name = name, .err = err, .out = out};
    scope *root_scope = jx_alloc(a, sizeof *root_scope);
    if (!root_scope) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    root_scope->vars = vars;
    c.root = c.cur = root_scope;
    if (!exec_body(&c, root) || !jx_buf_add(out, "", 0)) {
        if (!c.failed) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
        return c.status;
    }
    return LA_OK;
}
