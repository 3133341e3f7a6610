/* The byte-level matcher of a la_json_grammar (json_schema.h): a pushdown automaton whose
 * state is a small set of stacks (an anyOf, an enum or a choice of object key can keep
 * several readings alive until the bytes tell them apart).
 *
 * ---- A stack --------------------------------------------------------------------------
 * One frame per value being typed, outermost first: an object frame knows which property
 * it is at and in which phase (before the key, after ':', after the value, ...), an array
 * frame whether it wants an item or a ',' / ']', a string frame its escape or UTF-8 state,
 * a number frame where in -?int(.frac)?([eE][+-]?exp)? it is, a literal frame how many of
 * its bytes are matched. A frame is popped the moment its value is complete, except a
 * number, which ends when a byte that cannot continue it arrives (that byte then goes to
 * the frame below). An empty stack is a complete value, which accepts no more bytes.
 *
 *   {"a": [1, "x"]}   after  {"a": [1, "   the stack is
 *   OBJECT(prop a, after its value) / ARRAY(after an item) / STRING(inside)
 *
 * ---- Shortest completion ---------------------------------------------------------------
 * la_jg_stack_min_finish is the least number of bytes that completes the value: the sum
 * over frames of what each still needs (a string inside: 1, its '"'; an object after a
 * value: every required property left plus '}'; ...). Along the cheapest continuation it
 * drops by exactly one per byte, so with one-byte tokens a value can always be finished in
 * that many tokens (token_mask.h relies on it to end within max_tokens).
 */
#ifndef LA_GRAMMAR_JSON_MATCHER_H
#define LA_GRAMMAR_JSON_MATCHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "grammar/json_schema.h"

typedef struct la_jg_frame {
    int32_t node;   /* la_json_grammar.nodes index */
    uint16_t phase; /* per node kind (json_matcher.c); 0: the value has not started */
    uint16_t idx;   /* OBJECT: the property; LITERAL: bytes matched */
} la_jg_frame;

typedef struct la_jg_stack {
    int32_t depth;
    la_jg_frame f[LA_JG_MAX_DEPTH];
} la_jg_stack;

/* Readings kept at once; more are dropped (each kept one still ends validly). */
#define LA_JG_MAX_STACKS 16

typedef struct la_jg_state {
    int32_t n;
    la_jg_stack s[LA_JG_MAX_STACKS];
} la_jg_state;

/* The state before the first byte of g's root value. */
void la_jg_state_init(const la_json_grammar *g, la_jg_state *st);

/* out = in after byte c (out->n == 0: c is not allowed). out must not be in. */
void la_jg_state_step(const la_json_grammar *g, const la_jg_state *in, uint8_t c, la_jg_state *out);

/* Feed bytes[0:n] into st; false (st unspecified) when one is not allowed. */
bool la_jg_state_feed(const la_json_grammar *g, la_jg_state *st, const char *bytes, size_t n);

/* Whether the value may end here (some reading is complete). */
bool la_jg_state_can_end(const la_json_grammar *g, const la_jg_state *st);

/* Whether the value is complete and no byte may follow. */
bool la_jg_state_done(const la_json_grammar *g, const la_jg_state *st);

/* Bytes that complete the value at least (over the readings); 0 when it can end. */
int32_t la_jg_state_min_finish(const la_json_grammar *g, const la_jg_state *st);

/* Canonical bytes of st (readings sorted), for cache keys: writes at most cap bytes and
 * returns the length it needs. */
size_t la_jg_state_key(const la_jg_state *st, void *buf, size_t cap);

/* Copy only the used part of src. */
void la_jg_state_copy(la_jg_state *dst, const la_jg_state *src);

#endif
