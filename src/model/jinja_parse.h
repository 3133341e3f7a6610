/* The parser's state and helpers, shared by jinja_parse.c (expressions) and jinja_stmt.c
 * (statements). Private to src/model/jinja_*.c.
 */
#ifndef LA_MODEL_JINJA_PARSE_H
#define LA_MODEL_JINJA_PARSE_H

#include <stdbool.h>
#include <string.h>

#include "model/jinja_internal.h"

typedef struct parser {
    jx_arena *a;
    const char *name;
    const jtoken *t;
    size_t n, i;
    la_err *err;
    bool failed;
    la_status status; /* of the first failure */
    const char **macros; /* names of the template's macros (for call checks) */
    size_t *macro_lens;
    int n_macros, cap_macros;
} parser;

static inline const jtoken *cur(parser *P) { return &P->t[P->i < P->n ? P->i : P->n - 1]; }
static inline const jtoken *peek(parser *P, size_t k) { return &P->t[P->i + k < P->n ? P->i + k : P->n - 1]; }
static inline void next(parser *P) {
    if (P->i + 1 < P->n) P->i++;
}
static inline bool is_name(const jtoken *t, const char *s) {
    return t->kind == JT_NAME && t->n == strlen(s) && !memcmp(t->s, s, t->n);
}
static inline bool is_op(const jtoken *t, jo_op op) { return t->kind == JT_OP && t->op == op; }

/* Record the first failure ("<name> line N: ...") and return NULL. */
void *jx_p_fail(parser *P, la_status code, int line, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
const char *jx_p_describe(const jtoken *t);
bool jx_p_expect_op(parser *P, jo_op op, const char *what);
bool jx_p_expect_kind(parser *P, jt_kind k, const char *what);
jnode *jx_p_node(parser *P, jn_kind kind, int line);

/* A growable array of nodes in the arena. */
typedef struct nvec {
    jnode **v;
    int n, cap;
} nvec;
bool jx_p_push(parser *P, nvec *v, jnode *x); /* false (failure set) when x is NULL or on OOM */

/* expression (with `a if c else b` when with_condexpr); a tuple of them, up to the tag's
 * end or the name extra_end ("()" allowed with explicit_parens). */
jnode *jx_p_expression(parser *P, bool with_condexpr);
jnode *jx_p_tuple(parser *P, bool with_condexpr, bool explicit_parens, const char *extra_end);

#endif
