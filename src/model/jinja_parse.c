/* The parser of la_jinja (jinja_internal.h): tokens -> syntax tree, production for
 * production as jinja2's parser.py, so precedence and associativity match:
 *
 *   expression := or ('if' or ('else' expression)?)*
 *   or := and ('or' and)*          and := not ('and' not)*
 *   not := 'not' not | compare     compare := math1 (cmp math1 | 'in' math1 | 'not' 'in' math1)*
 *   math1 := concat (('+'|'-') concat)*        concat := math2 ('~' math2)*
 *   math2 := pow (('*'|'/'|'//'|'%') pow)*     pow := unary ('**' unary)*
 *   unary := ('-'|'+') unary | primary postfix* (filter | test | call)*
 * (so a | f binds tighter than +, ~ binds tighter than +, and ** is left-associative).
 * Filters and tests are checked against what the builtins implement here; statements and the
 * other checks are in jinja_stmt.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "model/jinja_parse.h"

/* ---- helpers ------------------------------------------------------------------------------ */

void *jx_p_fail(parser *P, la_status code, int line, const char *fmt, ...) {
    if (P->failed) return NULL;
    va_list ap;
    va_start(ap, fmt);
    jx_set_error(P->err, code, P->name, line, fmt, ap);
    va_end(ap);
    P->failed = true;
    P->status = code;
    return NULL;
}

const char *jx_p_describe(const jtoken *t) {
    switch (t->kind) {
    case JT_DATA: return "text";
    case JT_VAR_BEGIN: return "'{{'";
    case JT_VAR_END: return "'}}'";
    case JT_BLOCK_BEGIN: return "'{%'";
    case JT_BLOCK_END: return "'%}'";
    case JT_NAME: return "a name";
    case JT_STRING: return "a string";
    case JT_INT: return "an integer";
    case JT_FLOAT: return "a float";
    case JT_OP: return "an operator";
    default: return "the end of the template";
    }
}

bool jx_p_expect_op(parser *P, jo_op op, const char *what) {
    if (is_op(cur(P), op)) {
        next(P);
        return true;
    }
    jx_p_fail(P, LA_ERR_FORMAT, cur(P)->line, "expected '%s', got %s", what, jx_p_describe(cur(P)));
    return false;
}

bool jx_p_expect_kind(parser *P, jt_kind k, const char *what) {
    if (cur(P)->kind == k) {
        next(P);
        return true;
    }
    jx_p_fail(P, LA_ERR_FORMAT, cur(P)->line, "expected %s, got %s", what, jx_p_describe(cur(P)));
    return false;
}

jnode *jx_p_node(parser *P, jn_kind kind, int line) {
    jnode *n = jx_alloc(P->a, sizeof *n);
    if (!n) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
    n->kind = (uint8_t)kind;
    n->line = line;
    return n;
}

bool jx_p_push(parser *P, nvec *v, jnode *x) {
    if (!x) return false;
    if (v->n == v->cap) {
        int cap = v->cap ? 2 * v->cap : 4;
        jnode **nv = jx_alloc(P->a, (size_t)cap * sizeof *nv);
        if (!nv) return jx_p_fail(P, LA_ERR_NO_MEMORY, 0, "out of memory") != NULL;
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = cap;
    }
    v->v[v->n++] = x;
    return true;
}

/* ---- expressions -------------------------------------------------------------------------- */

static jnode *parse_unary(parser *P, bool with_filter);
static jnode *parse_primary(parser *P);
static jnode *parse_postfix(parser *P, jnode *n);

/* "(" args ")" into n's args / keyword args. */
static bool parse_call_args(parser *P, jnode *n) {
    int line = cur(P)->line;
    if (!jx_p_expect_op(P, JO_LPAREN, "(")) return false;
    nvec args = {0}, kw = {0};
    const char *names[64];
    size_t lens[64];
    bool need_comma = false;
    while (!is_op(cur(P), JO_RPAREN)) {
        if (need_comma) {
            if (!jx_p_expect_op(P, JO_COMMA, ",")) return false;
            if (is_op(cur(P), JO_RPAREN)) break;
        }
        if (is_op(cur(P), JO_MUL) || is_op(cur(P), JO_POW))
            return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "*args and **kwargs in calls are not supported") != NULL;
        if (cur(P)->kind == JT_NAME && is_op(peek(P, 1), JO_ASSIGN)) {
            if (kw.n == 64) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "too many keyword arguments") != NULL;
            names[kw.n] = cur(P)->s;
            lens[kw.n] = cur(P)->n;
            next(P);
            next(P);
            if (!jx_p_push(P, &kw, jx_p_expression(P, true))) return false;
        } else {
            if (kw.n) return jx_p_fail(P, LA_ERR_FORMAT, line, "a positional argument after a keyword argument") != NULL;
            if (!jx_p_push(P, &args, jx_p_expression(P, true))) return false;
        }
        need_comma = true;
    }
    if (!jx_p_expect_op(P, JO_RPAREN, ")")) return false;
    n->args = args.v;
    n->n_args = args.n;
    n->kw_vals = kw.v;
    n->n_kw = kw.n;
    if (kw.n) {
        n->kw_names = jx_alloc(P->a, (size_t)kw.n * sizeof *n->kw_names);
        n->kw_lens = jx_alloc(P->a, (size_t)kw.n * sizeof *n->kw_lens);
        if (!n->kw_names || !n->kw_lens) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory") != NULL;
        memcpy(n->kw_names, names, (size_t)kw.n * sizeof *names);
        memcpy(n->kw_lens, lens, (size_t)kw.n * sizeof *lens);
    }
    return true;
}

/* callee "(" args ")" */
static jnode *parse_call(parser *P, jnode *callee) {
    jnode *c = jx_p_node(P, JN_CALL, cur(P)->line);
    if (!c) return NULL;
    c->a = callee;
    return parse_call_args(P, c) ? c : NULL;
}

static jnode *parse_filter(parser *P, jnode *value) {
    while (is_op(cur(P), JO_PIPE)) {
        next(P);
        const jtoken *t = cur(P);
        if (t->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, t->line, "expected a filter name after '|'");
        if (is_op(peek(P, 1), JO_DOT)) return jx_p_fail(P, LA_ERR_UNSUPPORTED, t->line, "dotted filter names are not supported");
        jnode *f = jx_p_node(P, JN_FILTER, t->line);
        if (!f) return NULL;
        f->name = t->s;
        f->name_len = t->n;
        f->id = (int16_t)jx_filter_id(t->s, t->n);
        if (f->id < 0) return jx_p_fail(P, LA_ERR_UNSUPPORTED, t->line, "filter '%.*s' is not supported", (int)t->n, t->s);
        next(P);
        f->a = value;
        if (is_op(cur(P), JO_LPAREN) && !parse_call_args(P, f)) return NULL;
        value = f;
    }
    return value;
}

static jnode *parse_test(parser *P, jnode *value) {
    int line = cur(P)->line;
    next(P); /* is */
    bool negated = false;
    if (is_name(cur(P), "not")) {
        negated = true;
        next(P);
    }
    const jtoken *t = cur(P);
    if (t->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected a test name after 'is'");
    jnode *n = jx_p_node(P, JN_TEST, line);
    if (!n) return NULL;
    n->name = t->s;
    n->name_len = t->n;
    n->id = (int16_t)jx_test_id(t->s, t->n);
    if (n->id < 0) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "test '%.*s' is not supported", (int)t->n, t->s);
    n->a = value;
    n->op = negated;
    next(P);
    if (is_op(cur(P), JO_DOT)) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "dotted test names are not supported");
    const jtoken *c = cur(P);
    if (is_op(c, JO_LPAREN)) {
        if (!parse_call_args(P, n)) return NULL;
    } else if ((c->kind == JT_NAME || c->kind == JT_STRING || c->kind == JT_INT || c->kind == JT_FLOAT ||
                is_op(c, JO_LBRACKET) || is_op(c, JO_LBRACE)) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is")) return jx_p_fail(P, LA_ERR_FORMAT, line, "tests cannot be chained with 'is'");
        jnode *arg = parse_postfix(P, parse_primary(P));
        if (!arg) return NULL;
        n->args = jx_alloc(P->a, sizeof *n->args);
        if (!n->args) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
        n->args[0] = arg;
        n->n_args = 1;
    }
    return n;
}

static jnode *parse_filter_expr(parser *P, jnode *n) {
    while (n) {
        const jtoken *t = cur(P);
        if (is_op(t, JO_PIPE)) {
            n = parse_filter(P, n);
        } else if (is_name(t, "is")) {
            n = parse_test(P, n);
        } else if (is_op(t, JO_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

/* [a:b:c] parts, each may be absent. */
static jnode *parse_subscribed(parser *P) {
    int line = cur(P)->line;
    jnode *start = NULL;
    if (!is_op(cur(P), JO_COLON)) {
        start = jx_p_expression(P, true);
        if (!start || !is_op(cur(P), JO_COLON)) return start;
    }
    next(P); /* : */
    jnode *s = jx_p_node(P, JN_SLICE, line);
    if (!s) return NULL;
    s->b = start;
    if (!is_op(cur(P), JO_COLON) && !is_op(cur(P), JO_RBRACKET) && !is_op(cur(P), JO_COMMA))
        if (!(s->c = jx_p_expression(P, true))) return NULL;
    if (is_op(cur(P), JO_COLON)) {
        next(P);
        if (!is_op(cur(P), JO_RBRACKET) && !is_op(cur(P), JO_COMMA))
            if (!(s->d = jx_p_expression(P, true))) return NULL;
    }
    return s;
}

static jnode *parse_postfix(parser *P, jnode *n) {
    while (n) {
        const jtoken *t = cur(P);
        if (is_op(t, JO_DOT)) {
            next(P);
            const jtoken *a = cur(P);
            if (a->kind == JT_NAME) {
                jnode *g = jx_p_node(P, JN_GETATTR, t->line);
                if (!g) return NULL;
                g->a = n;
                g->name = a->s;
                g->name_len = a->n;
                next(P);
                n = g;
            } else if (a->kind == JT_INT) {
                jnode *g = jx_p_node(P, JN_GETITEM, t->line), *k = jx_p_node(P, JN_CONST, t->line);
                if (!g || !k) return NULL;
                k->value = jv_int(a->i);
                g->a = n;
                g->b = k;
                next(P);
                n = g;
            } else {
                return jx_p_fail(P, LA_ERR_FORMAT, a->line, "expected a name or a number after '.'");
            }
        } else if (is_op(t, JO_LBRACKET)) {
            next(P);
            nvec parts = {0};
            while (!is_op(cur(P), JO_RBRACKET)) {
                if (parts.n && !jx_p_expect_op(P, JO_COMMA, ",")) return NULL;
                if (!jx_p_push(P, &parts, parse_subscribed(P))) return NULL;
            }
            if (!jx_p_expect_op(P, JO_RBRACKET, "]")) return NULL;
            if (parts.n != 1) return jx_p_fail(P, LA_ERR_UNSUPPORTED, t->line, "subscripts with several parts are not supported");
            jnode *sub = parts.v[0];
            if (sub->kind == JN_SLICE) {
                sub->a = n;
                n = sub;
            } else {
                jnode *g = jx_p_node(P, JN_GETITEM, t->line);
                if (!g) return NULL;
                g->a = n;
                g->b = sub;
                n = g;
            }
        } else if (is_op(t, JO_LPAREN)) {
            n = parse_call(P, n);
        } else {
            break;
        }
    }
    return n;
}

static jnode *parse_primary(parser *P) {
    const jtoken *t = cur(P);
    jnode *n;
    if (t->kind == JT_NAME) {
        n = jx_p_node(P, JN_CONST, t->line);
        if (!n) return NULL;
        if (is_name(t, "true") || is_name(t, "True")) {
            n->value = jv_bool(true);
        } else if (is_name(t, "false") || is_name(t, "False")) {
            n->value = jv_bool(false);
        } else if (is_name(t, "none") || is_name(t, "None")) {
            n->value = jv_none();
        } else {
            n->kind = JN_NAME;
            n->name = t->s;
            n->name_len = t->n;
        }
        next(P);
        return n;
    }
    if (t->kind == JT_STRING) { /* adjacent strings are one */
        jx_buf b = {.arena = P->a};
        int line = t->line;
        while (cur(P)->kind == JT_STRING) {
            if (!jx_buf_add(&b, cur(P)->s, cur(P)->n)) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
            next(P);
        }
        if (!jx_buf_add(&b, "", 0)) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
        n = jx_p_node(P, JN_CONST, line);
        if (n) n->value = jv_str(b.p, b.n);
        return n;
    }
    if (t->kind == JT_INT || t->kind == JT_FLOAT) {
        n = jx_p_node(P, JN_CONST, t->line);
        if (n) n->value = t->kind == JT_INT ? jv_int(t->i) : jv_float(t->f);
        next(P);
        return n;
    }
    if (is_op(t, JO_LPAREN)) {
        next(P);
        n = jx_p_tuple(P, true, true, NULL);
        return n && jx_p_expect_op(P, JO_RPAREN, ")") ? n : NULL;
    }
    if (is_op(t, JO_LBRACKET)) {
        next(P);
        n = jx_p_node(P, JN_LIST, t->line);
        nvec items = {0};
        while (n && !is_op(cur(P), JO_RBRACKET)) {
            if (items.n && !jx_p_expect_op(P, JO_COMMA, ",")) return NULL;
            if (is_op(cur(P), JO_RBRACKET)) break;
            if (!jx_p_push(P, &items, jx_p_expression(P, true))) return NULL;
        }
        if (!n || !jx_p_expect_op(P, JO_RBRACKET, "]")) return NULL;
        n->args = items.v;
        n->n_args = items.n;
        return n;
    }
    if (is_op(t, JO_LBRACE)) {
        next(P);
        n = jx_p_node(P, JN_DICT, t->line);
        nvec keys = {0}, vals = {0};
        while (n && !is_op(cur(P), JO_RBRACE)) {
            if (keys.n && !jx_p_expect_op(P, JO_COMMA, ",")) return NULL;
            if (is_op(cur(P), JO_RBRACE)) break;
            if (!jx_p_push(P, &keys, jx_p_expression(P, true)) || !jx_p_expect_op(P, JO_COLON, ":") ||
                !jx_p_push(P, &vals, jx_p_expression(P, true)))
                return NULL;
        }
        if (!n || !jx_p_expect_op(P, JO_RBRACE, "}")) return NULL;
        n->args = keys.v;
        n->kw_vals = vals.v;
        n->n_args = keys.n;
        return n;
    }
    return jx_p_fail(P, LA_ERR_FORMAT, t->line, "unexpected %s in an expression", jx_p_describe(t));
}

static jnode *parse_unary(parser *P, bool with_filter) {
    const jtoken *t = cur(P);
    jnode *n;
    if (is_op(t, JO_SUB) || is_op(t, JO_ADD)) {
        next(P);
        n = jx_p_node(P, JN_UNARY, t->line);
        if (!n) return NULL;
        n->op = t->op == JO_SUB ? JO_NEG : JO_POS;
        if (!(n->a = parse_unary(P, false))) return NULL;
    } else {
        n = parse_primary(P);
    }
    n = parse_postfix(P, n);
    return with_filter ? parse_filter_expr(P, n) : n;
}

static jnode *binary(parser *P, jo_op op, jnode *a, jnode *b, int line) {
    if (!a || !b) return NULL;
    jnode *n = jx_p_node(P, JN_BINARY, line);
    if (!n) return NULL;
    n->op = (uint8_t)op;
    n->a = a;
    n->b = b;
    return n;
}

static jnode *parse_pow(parser *P) {
    jnode *l = parse_unary(P, true);
    while (l && is_op(cur(P), JO_POW)) {
        int line = cur(P)->line;
        next(P);
        l = binary(P, JO_POW, l, parse_unary(P, true), line);
    }
    return l;
}

static jnode *parse_math2(parser *P) {
    jnode *l = parse_pow(P);
    while (l && cur(P)->kind == JT_OP &&
           (cur(P)->op == JO_MUL || cur(P)->op == JO_DIV || cur(P)->op == JO_FLOORDIV || cur(P)->op == JO_MOD)) {
        jo_op op = cur(P)->op;
        int line = cur(P)->line;
        next(P);
        l = binary(P, op, l, parse_pow(P), line);
    }
    return l;
}

static jnode *parse_concat(parser *P) {
    jnode *first = parse_math2(P);
    if (!first || !is_op(cur(P), JO_TILDE)) return first;
    jnode *n = jx_p_node(P, JN_CONCAT, cur(P)->line);
    nvec parts = {0};
    if (!n || !jx_p_push(P, &parts, first)) return NULL;
    while (is_op(cur(P), JO_TILDE)) {
        next(P);
        if (!jx_p_push(P, &parts, parse_math2(P))) return NULL;
    }
    n->args = parts.v;
    n->n_args = parts.n;
    return n;
}

static jnode *parse_math1(parser *P) {
    jnode *l = parse_concat(P);
    while (l && (is_op(cur(P), JO_ADD) || is_op(cur(P), JO_SUB))) {
        jo_op op = cur(P)->op;
        int line = cur(P)->line;
        next(P);
        l = binary(P, op, l, parse_concat(P), line);
    }
    return l;
}

static jnode *parse_compare(parser *P) {
    int line = cur(P)->line;
    jnode *first = parse_math1(P);
    if (!first) return NULL;
    nvec operands = {0};
    uint8_t ops[32];
    for (;;) {
        const jtoken *t = cur(P);
        jo_op op;
        if (t->kind == JT_OP && (t->op == JO_EQ || t->op == JO_NE || t->op == JO_LT || t->op == JO_LE ||
                                 t->op == JO_GT || t->op == JO_GE)) {
            op = t->op;
            next(P);
        } else if (is_name(t, "in")) {
            op = JO_IN;
            next(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = JO_NOTIN;
            next(P);
            next(P);
        } else {
            break;
        }
        if (operands.n == 32) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "a comparison chain over 32 operators");
        ops[operands.n] = (uint8_t)op;
        if (!jx_p_push(P, &operands, parse_math1(P))) return NULL;
    }
    if (!operands.n) return first;
    jnode *n = jx_p_node(P, JN_COMPARE, line);
    if (!n) return NULL;
    n->a = first;
    n->args = operands.v;
    n->n_args = operands.n;
    n->ops = jx_alloc(P->a, (size_t)operands.n);
    if (!n->ops) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
    memcpy(n->ops, ops, (size_t)operands.n);
    return n;
}

static jnode *parse_not(parser *P) {
    if (is_name(cur(P), "not")) {
        int line = cur(P)->line;
        next(P);
        jnode *n = jx_p_node(P, JN_UNARY, line);
        if (!n) return NULL;
        n->op = JO_NOT;
        n->a = parse_not(P);
        return n->a ? n : NULL;
    }
    return parse_compare(P);
}

static jnode *parse_and(parser *P) {
    jnode *l = parse_not(P);
    while (l && is_name(cur(P), "and")) {
        int line = cur(P)->line;
        next(P);
        l = binary(P, JO_AND, l, parse_not(P), line);
    }
    return l;
}

static jnode *parse_or(parser *P) {
    jnode *l = parse_and(P);
    while (l && is_name(cur(P), "or")) {
        int line = cur(P)->line;
        next(P);
        l = binary(P, JO_OR, l, parse_and(P), line);
    }
    return l;
}

jnode *jx_p_expression(parser *P, bool with_condexpr) {
    jnode *e = parse_or(P);
    while (with_condexpr && e && is_name(cur(P), "if")) {
        int line = cur(P)->line;
        next(P);
        jnode *c = jx_p_node(P, JN_COND, line);
        if (!c || !(c->a = parse_or(P))) return NULL;
        c->b = e;
        if (is_name(cur(P), "else")) {
            next(P);
            if (!(c->c = jx_p_expression(P, true))) return NULL;
        }
        e = c;
    }
    return e;
}

static bool tuple_end(parser *P, const char *extra_end) {
    const jtoken *t = cur(P);
    return t->kind == JT_VAR_END || t->kind == JT_BLOCK_END || is_op(t, JO_RPAREN) ||
           (extra_end && is_name(t, extra_end));
}

jnode *jx_p_tuple(parser *P, bool with_condexpr, bool explicit_parens, const char *extra_end) {
    int line = cur(P)->line;
    nvec items = {0};
    bool is_tuple = false;
    for (;;) {
        if (items.n && !jx_p_expect_op(P, JO_COMMA, ",")) return NULL;
        if (tuple_end(P, extra_end)) break;
        if (!jx_p_push(P, &items, jx_p_expression(P, with_condexpr))) return NULL;
        if (!is_op(cur(P), JO_COMMA)) break;
        is_tuple = true;
    }
    if (!is_tuple) {
        if (items.n) return items.v[0];
        if (!explicit_parens) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected an expression, got %s", jx_p_describe(cur(P)));
    }
    jnode *n = jx_p_node(P, JN_TUPLE, line);
    if (!n) return NULL;
    n->args = items.v;
    n->n_args = items.n;
    return n;
}

