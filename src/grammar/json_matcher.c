/* The byte-level matcher of JSON grammars (json_matcher.h). */
#include "grammar/json_matcher.h"

#include <stdlib.h>
#include <string.h>

/* Phases per kind (0 is always "not started"). */
enum { O_START = 0, O_FIRST, O_COLON, O_AFTER_COLON, O_SPACED, O_AFTER_VALUE, O_AFTER_COMMA, O_COMMA_SPACED };
enum { A_START = 0, A_FIRST, A_AFTER_VALUE, A_AFTER_COMMA, A_SPACED };
enum {
    S_START = 0, S_IN, S_ESC, S_U1, S_U2, S_U3, S_U4, /* S_Uk: k hex digits still to come */
    S_C1, S_C2, S_C3,                                 /* UTF-8: k continuation bytes to come */
    S_E0, S_ED, S_F0, S_F4                            /* first continuation restricted */
};
enum { N_START = 0, N_MINUS, N_ZERO, N_INT, N_DOT, N_FRAC, N_E, N_ESIGN, N_EXP };

static bool is_digit(uint8_t c) { return c >= '0' && c <= '9'; }
static bool is_hex(uint8_t c) { return is_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F'); }

/* ============================================================ one stack ============== */

static void emit(la_jg_state *out, const la_jg_stack *s) {
    if (out->n >= LA_JG_MAX_STACKS) return;
    la_jg_stack *d = &out->s[out->n++];
    d->depth = s->depth;
    memcpy(d->f, s->f, sizeof(la_jg_frame) * (size_t)s->depth);
}

static void copy_stack(la_jg_stack *d, const la_jg_stack *s) {
    d->depth = s->depth;
    memcpy(d->f, s->f, sizeof(la_jg_frame) * (size_t)s->depth);
}

static bool push(la_jg_stack *s, int32_t node) {
    if (s->depth >= LA_JG_MAX_DEPTH) return false;
    s->f[s->depth++] = (la_jg_frame){node, 0, 0};
    return true;
}

/* Whether property q of object o may come next when properties [from, q) are skipped. */
static bool prop_allowed(const la_json_grammar *g, const la_jg_node *o, int32_t from, int32_t q) {
    for (int32_t j = from; j < q; j++)
        if (g->props[o->a + j].required) return false;
    return true;
}

static bool required_from(const la_json_grammar *g, const la_jg_node *o, int32_t from) {
    for (int32_t j = from; j < o->n; j++)
        if (g->props[o->a + j].required) return true;
    return false;
}

static void step_stack(const la_json_grammar *g, la_jg_stack *s, uint8_t c, la_jg_state *out);

/* A '"' starting the key of a property >= from: one reading per allowed property. */
static void choose_key(const la_json_grammar *g, const la_jg_stack *s, const la_jg_node *o, int32_t from,
                       uint8_t c, la_jg_state *out) {
    for (int32_t q = from; q < o->n; q++) {
        if (!prop_allowed(g, o, from, q)) break;
        la_jg_stack t;
        copy_stack(&t, s);
        la_jg_frame *f = &t.f[t.depth - 1];
        f->phase = O_COLON;
        f->idx = (uint16_t)q;
        if (push(&t, g->props[o->a + q].key)) step_stack(g, &t, c, out);
    }
}

static int string_step(la_jg_frame *f, uint8_t c) {
    switch (f->phase) {
    case S_START: return c == '"' ? S_IN : -1;
    case S_IN:
        if (c == '"') return -2; /* closed */
        if (c == '\\') return S_ESC;
        if (c < 0x20) return -1;
        if (c < 0x80) return S_IN;
        if (c >= 0xC2 && c <= 0xDF) return S_C1;
        if (c == 0xE0) return S_E0;
        if (c == 0xED) return S_ED;
        if (c >= 0xE1 && c <= 0xEF) return S_C2;
        if (c == 0xF0) return S_F0;
        if (c >= 0xF1 && c <= 0xF3) return S_C3;
        if (c == 0xF4) return S_F4;
        return -1;
    case S_ESC:
        if (c == 'u') return S_U4;
        return strchr("\"\\/bfnrt", c) && c ? S_IN : -1;
    case S_U4: return is_hex(c) ? S_U3 : -1;
    case S_U3: return is_hex(c) ? S_U2 : -1;
    case S_U2: return is_hex(c) ? S_U1 : -1;
    case S_U1: return is_hex(c) ? S_IN : -1;
    case S_C1: return c >= 0x80 && c <= 0xBF ? S_IN : -1;
    case S_C2: return c >= 0x80 && c <= 0xBF ? S_C1 : -1;
    case S_C3: return c >= 0x80 && c <= 0xBF ? S_C2 : -1;
    case S_E0: return c >= 0xA0 && c <= 0xBF ? S_C1 : -1;
    case S_ED: return c >= 0x80 && c <= 0x9F ? S_C1 : -1;
    case S_F0: return c >= 0x90 && c <= 0xBF ? S_C2 : -1;
    case S_F4: return c >= 0x80 && c <= 0x8F ? S_C2 : -1;
    }
    return -1;
}

/* Next number phase after c, or -1 when c cannot continue the number. */
static int number_step(int phase, uint8_t c, bool integer) {
    switch (phase) {
    case N_START:
        if (c == '-') return N_MINUS;
        /* fallthrough */
    case N_MINUS:
        if (c == '0') return N_ZERO;
        return c >= '1' && c <= '9' ? N_INT : -1;
    case N_INT:
        if (is_digit(c)) return N_INT;
        /* fallthrough */
    case N_ZERO:
        if (integer) return -1;
        if (c == '.') return N_DOT;
        return c == 'e' || c == 'E' ? N_E : -1;
    case N_DOT: return is_digit(c) ? N_FRAC : -1;
    case N_FRAC:
        if (is_digit(c)) return N_FRAC;
        return c == 'e' || c == 'E' ? N_E : -1;
    case N_E:
        if (c == '+' || c == '-') return N_ESIGN;
        /* fallthrough */
    case N_ESIGN: return is_digit(c) ? N_EXP : -1;
    case N_EXP: return is_digit(c) ? N_EXP : -1;
    }
    return -1;
}

static bool number_can_end(int phase) {
    return phase == N_ZERO || phase == N_INT || phase == N_FRAC || phase == N_EXP;
}

/* Advance s by c, emitting every resulting reading into out. s is scratch. */
static void step_stack(const la_json_grammar *g, la_jg_stack *s, uint8_t c, la_jg_state *out) {
    for (;;) { /* loops when a byte goes on to the frame below, or to a value just pushed */
        if (s->depth == 0) return;
        la_jg_frame *f = &s->f[s->depth - 1];
        const la_jg_node *nd = &g->nodes[f->node];
        switch (nd->kind) {
        case LA_JG_ANY_OF:
            for (int32_t i = 0; i < nd->n; i++) {
                la_jg_stack t;
                copy_stack(&t, s);
                t.f[t.depth - 1] = (la_jg_frame){g->alts[nd->a + i], 0, 0};
                step_stack(g, &t, c, out);
            }
            return;
        case LA_JG_LITERAL:
            if ((uint8_t)g->text[nd->a + f->idx] != c) return;
            if (++f->idx == nd->n) s->depth--;
            emit(out, s);
            return;
        case LA_JG_STRING: {
            int next = string_step(f, c);
            if (next == -1) return;
            if (next == -2) s->depth--;
            else f->phase = (uint16_t)next;
            emit(out, s);
            return;
        }
        case LA_JG_NUMBER:
        case LA_JG_INTEGER: {
            int next = number_step(f->phase, c, nd->kind == LA_JG_INTEGER);
            if (next >= 0) {
                f->phase = (uint16_t)next;
                emit(out, s);
                return;
            }
            if (!number_can_end(f->phase)) return;
            s->depth--; /* the number ended: c belongs to the frame below */
            continue;
        }
        case LA_JG_ARRAY:
            switch (f->phase) {
            case A_START:
                if (c != '[' || s->depth >= LA_JG_MAX_DEPTH) return; /* room for an item */
                f->phase = A_FIRST;
                emit(out, s);
                return;
            case A_FIRST:
                if (c == ']') {
                    s->depth--;
                    emit(out, s);
                    return;
                }
                /* the first item */
                /* fallthrough */
            case A_AFTER_COMMA:
                if (c == ' ' && f->phase == A_AFTER_COMMA) {
                    f->phase = A_SPACED;
                    emit(out, s);
                    return;
                }
                /* fallthrough */
            case A_SPACED:
                f->phase = A_AFTER_VALUE;
                if (!push(s, nd->a)) return;
                continue;
            case A_AFTER_VALUE:
                if (c == ',') f->phase = A_AFTER_COMMA;
                else if (c == ']') s->depth--;
                else return;
                emit(out, s);
                return;
            }
            return;
        case LA_JG_OBJECT:
        case LA_JG_OBJECT_ANY: {
            bool any = nd->kind == LA_JG_OBJECT_ANY;
            switch (f->phase) {
            case O_START:
                if (c != '{' || s->depth >= LA_JG_MAX_DEPTH) return;
                f->phase = O_FIRST;
                emit(out, s);
                return;
            case O_FIRST:
                if (c == '}') {
                    if (!any && required_from(g, nd, 0)) return;
                    s->depth--;
                    emit(out, s);
                    return;
                }
                if (c != '"') return;
                if (!any) {
                    choose_key(g, s, nd, 0, c, out);
                    return;
                }
                f->phase = O_COLON;
                if (!push(s, g->string_node)) return;
                continue;
            case O_COLON:
                if (c != ':') return;
                f->phase = O_AFTER_COLON;
                emit(out, s);
                return;
            case O_AFTER_COLON:
                if (c == ' ') {
                    f->phase = O_SPACED;
                    emit(out, s);
                    return;
                }
                /* fallthrough */
            case O_SPACED:
                f->phase = O_AFTER_VALUE;
                if (!push(s, any ? nd->a : g->props[nd->a + f->idx].value)) return;
                continue;
            case O_AFTER_VALUE:
                if (c == ',') {
                    if (!any && g->props[nd->a + f->idx].commit >= INT32_MAX / 4) return;
                    f->phase = O_AFTER_COMMA;
                } else if (c == '}') {
                    if (!any && required_from(g, nd, f->idx + 1)) return;
                    s->depth--;
                } else {
                    return;
                }
                emit(out, s);
                return;
            case O_AFTER_COMMA:
                if (c == ' ') {
                    f->phase = O_COMMA_SPACED;
                    emit(out, s);
                    return;
                }
                /* fallthrough */
            case O_COMMA_SPACED:
                if (c != '"') return;
                if (!any) {
                    choose_key(g, s, nd, f->idx + 1, c, out);
                    return;
                }
                f->phase = O_COLON;
                if (!push(s, g->string_node)) return;
                continue;
            }
            return;
        }
        }
        return;
    }
}

/* Bytes frame f still needs, its child (the frame above) not counted. */
static int32_t frame_rest(const la_json_grammar *g, const la_jg_frame *f) {
    const la_jg_node *nd = &g->nodes[f->node];
    if (f->phase == 0 && nd->kind != LA_JG_LITERAL) return nd->min_len;
    switch (nd->kind) {
    case LA_JG_LITERAL: return nd->n - f->idx;
    case LA_JG_STRING:
        switch (f->phase) {
        case S_IN: return 1;
        case S_ESC: return 2;
        case S_U4: return 5;
        case S_U3: return 4;
        case S_U2: return 3;
        case S_U1: return 2;
        case S_C1: return 2;
        case S_C2: case S_E0: case S_ED: return 3;
        default: return 4; /* S_C3, S_F0, S_F4 */
        }
    case LA_JG_NUMBER:
    case LA_JG_INTEGER: return number_can_end(f->phase) ? 0 : 1;
    case LA_JG_ARRAY:
        return f->phase == A_AFTER_COMMA || f->phase == A_SPACED ? g->nodes[nd->a].min_len + 1 : 1;
    case LA_JG_OBJECT_ANY: {
        int32_t v = g->nodes[nd->a].min_len;
        switch (f->phase) {
        case O_FIRST: return 1;
        case O_COLON: return 2 + v;
        case O_AFTER_COLON: case O_SPACED: return 1 + v;
        case O_AFTER_VALUE: return 1;
        default: return 4 + v; /* after ',': "" : value } */
        }
    }
    case LA_JG_OBJECT: {
        if (f->phase == O_FIRST) return g->obj_first[f->node];
        const la_jg_prop *p = &g->props[nd->a + f->idx];
        switch (f->phase) {
        case O_COLON: return 1 + g->nodes[p->value].min_len + p->rest;
        case O_AFTER_COLON: case O_SPACED: return g->nodes[p->value].min_len + p->rest;
        case O_AFTER_VALUE: return p->rest;
        default: return p->commit;
        }
    }
    case LA_JG_ANY_OF: return nd->min_len;
    }
    return 0;
}

/* ============================================================ states ================= */

void la_jg_state_init(const la_json_grammar *g, la_jg_state *st) {
    st->n = 1;
    st->s[0].depth = 1;
    st->s[0].f[0] = (la_jg_frame){g->root, 0, 0};
}

void la_jg_state_copy(la_jg_state *dst, const la_jg_state *src) {
    dst->n = src->n;
    for (int32_t i = 0; i < src->n; i++) copy_stack(&dst->s[i], &src->s[i]);
}

static bool same_stack(const la_jg_stack *a, const la_jg_stack *b) {
    return a->depth == b->depth && !memcmp(a->f, b->f, sizeof(la_jg_frame) * (size_t)a->depth);
}

void la_jg_state_step(const la_json_grammar *g, const la_jg_state *in, uint8_t c, la_jg_state *out) {
    out->n = 0;
    for (int32_t i = 0; i < in->n; i++) {
        la_jg_stack t;
        copy_stack(&t, &in->s[i]);
        int32_t before = out->n;
        step_stack(g, &t, c, out);
        /* drop readings that repeat one kept already */
        for (int32_t k = before; k < out->n;) {
            bool dup = false;
            for (int32_t j = 0; j < k && !dup; j++) dup = same_stack(&out->s[j], &out->s[k]);
            if (dup) copy_stack(&out->s[k], &out->s[--out->n]);
            else k++;
        }
    }
}

bool la_jg_state_feed(const la_json_grammar *g, la_jg_state *st, const char *bytes, size_t n) {
    la_jg_state *tmp = malloc(sizeof *tmp);
    if (!tmp) return false;
    bool ok = true;
    for (size_t i = 0; i < n && ok; i++) {
        la_jg_state_step(g, st, (uint8_t)bytes[i], tmp);
        ok = tmp->n > 0;
        if (ok) la_jg_state_copy(st, tmp);
    }
    free(tmp);
    return ok;
}

static bool stack_can_end(const la_json_grammar *g, const la_jg_stack *s) {
    if (s->depth == 0) return true;
    if (s->depth > 1) return false;
    la_jg_kind k = g->nodes[s->f[0].node].kind;
    return (k == LA_JG_NUMBER || k == LA_JG_INTEGER) && number_can_end(s->f[0].phase);
}

bool la_jg_state_can_end(const la_json_grammar *g, const la_jg_state *st) {
    for (int32_t i = 0; i < st->n; i++)
        if (stack_can_end(g, &st->s[i])) return true;
    return false;
}

bool la_jg_state_done(const la_json_grammar *g, const la_jg_state *st) {
    for (int32_t i = 0; i < st->n; i++)
        if (st->s[i].depth > 0) return false;
    return st->n > 0;
}

int32_t la_jg_state_min_finish(const la_json_grammar *g, const la_jg_state *st) {
    int32_t best = INT32_MAX;
    for (int32_t i = 0; i < st->n; i++) {
        int32_t m = 0;
        for (int32_t d = 0; d < st->s[i].depth; d++) m += frame_rest(g, &st->s[i].f[d]);
        if (m < best) best = m;
    }
    return best;
}

static int cmp_stack(const void *a, const void *b) {
    const la_jg_stack *x = a, *y = b;
    if (x->depth != y->depth) return x->depth < y->depth ? -1 : 1;
    return memcmp(x->f, y->f, sizeof(la_jg_frame) * (size_t)x->depth);
}

size_t la_jg_state_key(const la_jg_state *st, void *buf, size_t cap) {
    const la_jg_stack *order[LA_JG_MAX_STACKS];
    for (int32_t i = 0; i < st->n; i++) order[i] = &st->s[i];
    for (int32_t i = 1; i < st->n; i++) /* insertion sort: a few readings */
        for (int32_t j = i; j > 0 && cmp_stack(order[j - 1], order[j]) > 0; j--) {
            const la_jg_stack *t = order[j];
            order[j] = order[j - 1], order[j - 1] = t;
        }
    size_t need = 0;
    unsigned char *p = buf;
    for (int32_t i = 0; i < st->n; i++) {
        size_t n = sizeof(int32_t) + sizeof(la_jg_frame) * (size_t)order[i]->depth;
        if (need + n <= cap) {
            memcpy(p + need, &order[i]->depth, sizeof(int32_t));
            memcpy(p + need + sizeof(int32_t), order[i]->f, n - sizeof(int32_t));
        }
        need += n;
    }
    return need;
}
