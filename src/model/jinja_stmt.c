/* The statements of la_jinja's parser (jinja_internal.h): for, if/elif/else, set, macro,
 * break, continue, generation, and the template body; then the checks: every global
 * function and method named in the template must be one the builtins implement (or a macro
 * of the template), break / continue must be in a loop. Anything else is a compile-time
 * error naming it (LA_ERR_UNSUPPORTED for the constructs outside the subset). Expressions
 * are parsed in jinja_parse.c.
 */
#include <string.h>

#include "base/err.h"
#include "model/jinja_parse.h"

/* ---- statements --------------------------------------------------------------------------- */

static jnode *parse_body(parser *P, const char *const *ends, int n_ends, int *which);

/* Names to assign to: "a", "a, b" or "(a, b)". */
static bool parse_targets(parser *P, jnode *n, const char *extra_end) {
    bool parens = is_op(cur(P), JO_LPAREN);
    if (parens) next(P);
    const char *names[16];
    size_t lens[16];
    int k = 0;
    for (;;) {
        const jtoken *t = cur(P);
        if (t->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, t->line, "expected a name to assign to") != NULL;
        if (k == 16) return jx_p_fail(P, LA_ERR_UNSUPPORTED, t->line, "more than 16 names to assign to") != NULL;
        names[k] = t->s;
        lens[k++] = t->n;
        next(P);
        if (!is_op(cur(P), JO_COMMA)) break;
        next(P);
        if ((parens && is_op(cur(P), JO_RPAREN)) || (extra_end && is_name(cur(P), extra_end))) break;
    }
    if (parens && !jx_p_expect_op(P, JO_RPAREN, ")")) return false;
    n->targets = jx_alloc(P->a, (size_t)k * sizeof *n->targets);
    n->target_lens = jx_alloc(P->a, (size_t)k * sizeof *n->target_lens);
    if (!n->targets || !n->target_lens) return jx_p_fail(P, LA_ERR_NO_MEMORY, n->line, "out of memory") != NULL;
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    memcpy(n->target_lens, lens, (size_t)k * sizeof *lens);
    n->n_targets = k;
    if (k > 1 || parens) n->op = 1; /* unpack */
    return true;
}

/* After "{% endx": the block end. */
static bool close_tag(parser *P) { return jx_p_expect_kind(P, JT_BLOCK_END, "'%}'"); }

static jnode *parse_for(parser *P, int line) {
    jnode *n = jx_p_node(P, JN_FOR, line);
    if (!n || !parse_targets(P, n, "in")) return NULL;
    if (!is_name(cur(P), "in")) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected 'in' in a for loop");
    next(P);
    if (!(n->a = jx_p_tuple(P, false, false, "recursive"))) return NULL;
    if (is_name(cur(P), "if")) {
        next(P);
        if (!(n->d = jx_p_expression(P, true))) return NULL;
    }
    if (is_name(cur(P), "recursive")) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "recursive for loops are not supported");
    if (!close_tag(P)) return NULL;
    static const char *const k_ends[] = {"endfor", "else"};
    int which;
    if (!(n->b = parse_body(P, k_ends, 2, &which)) || !close_tag(P)) return NULL;
    if (which == 1) {
        if (!(n->c = parse_body(P, k_ends, 1, &which)) || !close_tag(P)) return NULL;
    }
    return n;
}

static jnode *parse_if(parser *P, int line) {
    jnode *n = jx_p_node(P, JN_IF, line);
    if (!n || !(n->a = jx_p_tuple(P, false, false, NULL)) || !close_tag(P)) return NULL;
    static const char *const k_ends[] = {"endif", "elif", "else"};
    int which;
    if (!(n->b = parse_body(P, k_ends, 3, &which))) return NULL;
    if (which == 1) { /* elif: the rest is a nested if */
        return (n->c = parse_if(P, cur(P)->line)) ? n : NULL;
    }
    if (!close_tag(P)) return NULL;
    if (which == 2) {
        if (!(n->c = parse_body(P, k_ends, 1, &which)) || !close_tag(P)) return NULL;
    }
    return n;
}

static jnode *parse_set(parser *P, int line) {
    jnode *n = jx_p_node(P, JN_SET, line);
    if (!n) return NULL;
    const jtoken *t = cur(P);
    if (t->kind == JT_NAME && is_op(peek(P, 1), JO_DOT)) { /* namespace attribute */
        const jtoken *attr = peek(P, 2);
        if (attr->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected a name after '.'");
        n->targets = jx_alloc(P->a, sizeof *n->targets);
        n->target_lens = jx_alloc(P->a, sizeof *n->target_lens);
        if (!n->targets || !n->target_lens) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
        n->targets[0] = t->s;
        n->target_lens[0] = t->n;
        n->n_targets = 1;
        n->name = attr->s;
        n->name_len = attr->n;
        next(P);
        next(P);
        next(P);
    } else if (!parse_targets(P, n, NULL)) {
        return NULL;
    }
    if (is_op(cur(P), JO_ASSIGN)) {
        next(P);
        if (!(n->a = jx_p_tuple(P, true, false, NULL)) || !close_tag(P)) return NULL;
        return n;
    }
    /* {% set x %}...{% endset %} */
    if (n->name || n->n_targets != 1 || n->op)
        return jx_p_fail(P, LA_ERR_FORMAT, line, "a {%% set %%} block assigns one name");
    if (is_op(cur(P), JO_PIPE)) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "filters on {%% set %%} blocks are not supported");
    if (!close_tag(P)) return NULL;
    n->kind = JN_SET_BLOCK;
    n->name = n->targets[0];
    n->name_len = n->target_lens[0];
    static const char *const k_ends[] = {"endset"};
    int which;
    if (!(n->b = parse_body(P, k_ends, 1, &which)) || !close_tag(P)) return NULL;
    return n;
}

static jnode *parse_macro(parser *P, int line) {
    const jtoken *t = cur(P);
    if (t->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected a macro name");
    jnode *n = jx_p_node(P, JN_MACRO, line);
    if (!n) return NULL;
    n->name = t->s;
    n->name_len = t->n;
    next(P);
    if (!jx_p_expect_op(P, JO_LPAREN, "(")) return NULL;
    const char *names[32];
    size_t lens[32];
    jnode *defaults[32];
    int k = 0;
    while (!is_op(cur(P), JO_RPAREN)) {
        if (k && !jx_p_expect_op(P, JO_COMMA, ",")) return NULL;
        if (cur(P)->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected a parameter name");
        if (k == 32) return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "a macro with over 32 parameters");
        names[k] = cur(P)->s;
        lens[k] = cur(P)->n;
        defaults[k] = NULL;
        next(P);
        if (is_op(cur(P), JO_ASSIGN)) {
            next(P);
            if (!(defaults[k] = jx_p_expression(P, true))) return NULL;
        } else if (k && defaults[k - 1]) {
            return jx_p_fail(P, LA_ERR_FORMAT, line, "a parameter without a default after one with a default");
        }
        k++;
    }
    next(P);
    if (!close_tag(P)) return NULL;
    n->targets = jx_alloc(P->a, (size_t)(k + 1) * sizeof *n->targets);
    n->target_lens = jx_alloc(P->a, (size_t)(k + 1) * sizeof *n->target_lens);
    n->args = jx_alloc(P->a, (size_t)(k + 1) * sizeof *n->args);
    if (!n->targets || !n->target_lens || !n->args) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
    memcpy(n->targets, names, (size_t)k * sizeof *names);
    memcpy(n->target_lens, lens, (size_t)k * sizeof *lens);
    memcpy(n->args, defaults, (size_t)k * sizeof *defaults);
    n->n_targets = n->n_args = k;
    static const char *const k_ends[] = {"endmacro"};
    int which;
    if (!(n->b = parse_body(P, k_ends, 1, &which))) return NULL;
    if (cur(P)->kind == JT_NAME) next(P); /* {% endmacro name %} */
    if (!close_tag(P)) return NULL;
    if (P->n_macros == P->cap_macros) {
        int cap = P->cap_macros ? 2 * P->cap_macros : 8;
        const char **m = jx_alloc(P->a, (size_t)cap * sizeof *m);
        size_t *ml = jx_alloc(P->a, (size_t)cap * sizeof *ml);
        if (!m || !ml) return jx_p_fail(P, LA_ERR_NO_MEMORY, line, "out of memory");
        if (P->n_macros) {
            memcpy(m, P->macros, (size_t)P->n_macros * sizeof *m);
            memcpy(ml, P->macro_lens, (size_t)P->n_macros * sizeof *ml);
        }
        P->macros = m;
        P->macro_lens = ml;
        P->cap_macros = cap;
    }
    P->macros[P->n_macros] = n->name;
    P->macro_lens[P->n_macros++] = n->name_len;
    return n;
}

static jnode *parse_statement(parser *P) {
    const jtoken *t = cur(P);
    int line = t->line;
    if (t->kind != JT_NAME) return jx_p_fail(P, LA_ERR_FORMAT, line, "expected a statement name after '{%%'");
    next(P);
    if (is_name(t, "for")) return parse_for(P, line);
    if (is_name(t, "if")) return parse_if(P, line);
    if (is_name(t, "set")) return parse_set(P, line);
    if (is_name(t, "macro")) return parse_macro(P, line);
    if (is_name(t, "break") || is_name(t, "continue")) {
        jnode *n = jx_p_node(P, is_name(t, "break") ? JN_BREAK : JN_CONTINUE, line);
        return n && close_tag(P) ? n : NULL;
    }
    if (is_name(t, "generation")) { /* transformers' AssistantTracker: renders its body */
        static const char *const k_ends[] = {"endgeneration"};
        int which;
        if (!close_tag(P)) return NULL;
        jnode *body = parse_body(P, k_ends, 1, &which);
        return body && close_tag(P) ? body : NULL;
    }
    static const char *const k_unsupported[] = {"call", "filter", "block", "extends", "include", "import",
                                                 "from", "with", "autoescape", "do", "trans", "raw"};
    for (size_t i = 0; i < sizeof k_unsupported / sizeof k_unsupported[0]; i++)
        if (is_name(t, k_unsupported[i]))
            return jx_p_fail(P, LA_ERR_UNSUPPORTED, line, "{%% %s %%} is not supported", k_unsupported[i]);
    return jx_p_fail(P, LA_ERR_FORMAT, line, "unknown statement '%.*s'", (int)t->n, t->s);
}

/* Statements until EOF (n_ends 0) or "{% <one of ends>": *which is its index, and the
 * current token is the one after that name. */
static jnode *parse_body(parser *P, const char *const *ends, int n_ends, int *which) {
    jnode *body = jx_p_node(P, JN_BODY, cur(P)->line);
    nvec items = {0};
    *which = -1;
    while (body) {
        const jtoken *t = cur(P);
        if (t->kind == JT_EOF) {
            if (n_ends) return jx_p_fail(P, LA_ERR_FORMAT, t->line, "unexpected end of template: '{%% %s %%}' is missing", ends[0]);
            break;
        }
        if (t->kind == JT_DATA) {
            jnode *d = jx_p_node(P, JN_DATA, t->line);
            if (!d) return NULL;
            d->value = jv_str(t->s, t->n);
            if (!jx_p_push(P, &items, d)) return NULL;
            next(P);
        } else if (t->kind == JT_VAR_BEGIN) {
            next(P);
            jnode *p = jx_p_node(P, JN_PRINT, t->line);
            if (!p || !(p->a = jx_p_tuple(P, true, false, NULL)) || !jx_p_expect_kind(P, JT_VAR_END, "'}}'") ||
                !jx_p_push(P, &items, p))
                return NULL;
        } else if (t->kind == JT_BLOCK_BEGIN) {
            next(P);
            for (int k = 0; k < n_ends; k++) {
                if (is_name(cur(P), ends[k])) {
                    next(P);
                    *which = k;
                    body->args = items.v;
                    body->n_args = items.n;
                    return body;
                }
            }
            const jtoken *s = cur(P);
            static const char *const k_closers[] = {"endfor", "endif", "elif", "else", "endset", "endmacro", "endgeneration"};
            for (size_t k = 0; k < sizeof k_closers / sizeof k_closers[0]; k++)
                if (is_name(s, k_closers[k]))
                    return jx_p_fail(P, LA_ERR_FORMAT, s->line, "unexpected '{%% %s %%}'", k_closers[k]);
            if (!jx_p_push(P, &items, parse_statement(P))) return NULL;
        } else {
            return jx_p_fail(P, LA_ERR_FORMAT, t->line, "unexpected %s", jx_p_describe(t));
        }
    }
    if (!body) return NULL;
    body->args = items.v;
    body->n_args = items.n;
    return body;
}

/* ---- checks ------------------------------------------------------------------------------ */

/* Calls of names must be globals or the template's macros, calls of attributes known
 * methods, break / continue inside a loop. */
static bool name_is(const jnode *n, const char *s) {
    return n->name_len == strlen(s) && !memcmp(n->name, s, n->name_len);
}

/* map / select / reject / selectattr / rejectattr name a filter or a test in a string
 * argument: when it is a literal, it is checked here, not when the template renders. */
static bool check_named_builtin(parser *P, const jnode *n) {
    bool by_filter = name_is(n, "map"), attr = name_is(n, "selectattr") || name_is(n, "rejectattr");
    if (!by_filter && !attr && !name_is(n, "select") && !name_is(n, "reject")) return true;
    int at = attr ? 1 : 0;
    if (n->n_args <= at) return true;
    const jnode *a = n->args[at];
    if (a->kind != JN_CONST || a->value.kind != JV_STR) return true;
    const char *s = a->value.s.p;
    size_t len = a->value.s.n;
    if (by_filter ? jx_filter_id(s, len) >= 0 : jx_test_id(s, len) >= 0) return true;
    return jx_p_fail(P, LA_ERR_UNSUPPORTED, n->line, "%s '%.*s' (named in %.*s) is not supported",
                     by_filter ? "filter" : "test", (int)len, s, (int)n->name_len, n->name) != NULL;
}

static bool check(parser *P, const jnode *n, int loop_depth) {
    if (!n || P->failed) return !P->failed;
    if (n->kind == JN_FILTER && !check_named_builtin(P, n)) return false;
    if (n->kind == JN_CALL) {
        const jnode *f = n->a;
        if (f->kind == JN_NAME) {
            bool known = jx_function_id(f->name, f->name_len) >= 0;
            for (int i = 0; !known && i < P->n_macros; i++)
                known = P->macro_lens[i] == f->name_len && !memcmp(P->macros[i], f->name, f->name_len);
            if (!known)
                return jx_p_fail(P, LA_ERR_UNSUPPORTED, n->line, "function '%.*s' is not supported",
                            (int)f->name_len, f->name) != NULL;
        } else if (f->kind == JN_GETATTR && !jx_method_known(f->name, f->name_len)) {
            return jx_p_fail(P, LA_ERR_UNSUPPORTED, n->line, "method '.%.*s()' is not supported",
                        (int)f->name_len, f->name) != NULL;
        }
    }
    if ((n->kind == JN_BREAK || n->kind == JN_CONTINUE) && loop_depth == 0)
        return jx_p_fail(P, LA_ERR_FORMAT, n->line, "'%s' outside a for loop", n->kind == JN_BREAK ? "break" : "continue") != NULL;
    if (n->kind == JN_MACRO) loop_depth = 0;
    bool ok = check(P, n->a, loop_depth) && check(P, n->c, loop_depth) && check(P, n->d, loop_depth) &&
              check(P, n->b, loop_depth + (n->kind == JN_FOR));
    for (int i = 0; ok && i < n->n_args; i++) ok = check(P, n->args[i], loop_depth);
    for (int i = 0; ok && i < n->n_kw; i++) ok = check(P, n->kw_vals[i], loop_depth);
    if (ok && n->kind == JN_DICT)
        for (int i = 0; ok && i < n->n_args; i++) ok = check(P, n->kw_vals[i], loop_depth);
    return ok;
}

la_status jx_parse(jx_arena *a, const char *name, const jtoken *toks, size_t n, jnode **root,
                   la_err *err) {
    parser P = {.a = a, .name = name, .t = toks, .n = n, .err = err};
    int which;
    jnode *body = parse_body(&P, NULL, 0, &which);
    if (body && !P.failed) check(&P, body, 0);
    if (P.failed || !body) return P.failed ? P.status : la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", name);
    *root = body;
    return LA_OK;
}

