/* la_tokenizer_encode: text -> ids, step for step as HF tokenizers' encode
 * (tokenizer/mod.rs encode_single_sequence, then post_process):
 *
 *   1. added tokens whose normalized flag is false are found in the raw text
 *      (AddedVocabulary::extract_and_normalize, step 1);
 *   2. every other span is normalized on its own, and added tokens with normalized true
 *      are found in the result (step 2);
 *   3. the pre-tokenizers split the remaining spans into words, each step on the pieces
 *      of the one before (PreTokenizedString::split; empty pieces are dropped);
 *   4. the BPE model turns each word into ids (bpe.c);
 *   5. with add_special, the TemplateProcessing ids surround the sequence.
 *
 * Example (Llama 3): "<|begin_of_text|>Hello  world" -> step 1: [<|begin_of_text|>]
 * ["Hello  world"]; step 3 (regex): ["Hello", " ", " world"]; step 4: [9906, 220, 1917].
 *
 * All text lives in one per-call buffer; pieces are (offset, length) into it, so the
 * buffer may grow while pieces are held. Nothing is shared between calls except the
 * read-only tokenizer and the locked word cache.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* ---- per-call state -------------------------------------------------------------------- */

typedef struct piece {
    size_t off, len;
    int32_t id;    /* an added token's id, or -1 for text still to tokenize */
    bool at_start; /* text that starts the input (Metaspace prepend_scheme "first") */
} piece;

typedef struct piece_list {
    piece *v;
    size_t n, cap;
} piece_list;

typedef struct enc {
    const la_tokenizer *tok;
    la_tok_buf buf;
    piece_list cur, next;
    la_tok_ranges ranges;
    pcre2_match_data *md;
    la_tok_bpe_scratch bpe;
    la_tok_ids ids;
    la_status status; /* first failure */
    int regex_rc;     /* PCRE2 error code when status is LA_ERR_INTERNAL */
} enc;

static bool pieces_push(piece_list *l, piece p) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? 2 * l->cap : 64;
        piece *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v;
        l->cap = cap;
    }
    l->v[l->n++] = p;
    return true;
}

/* Text pieces are dropped when empty, as HF drops empty splits. */
static bool push_text(piece_list *l, size_t off, size_t len, bool at_start) {
    if (len == 0) return true;
    return pieces_push(l, (piece){off, len, -1, at_start});
}

/* ---- added tokens -------------------------------------------------------------------- */

/* The longest pattern of t that starts at s, or -1; *len receives its length. */
static int32_t trie_longest(const la_tok_trie *t, const uint8_t *s, size_t n, size_t *len) {
    int32_t node = 0, best = -1;
    for (size_t k = 0; k < n; k++) {
        const la_tok_merge *e = la_tok_pairmap_get(&t->edges, node, s[k]);
        if (!e) break;
        node = e->new_id;
        if (t->terminal[node] >= 0) {
            best = t->terminal[node];
            *len = k + 1;
        }
    }
    return best;
}

static size_t char_start_before(const char *s, size_t at) {
    size_t i = at - 1;
    while (i > 0 && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
    return i;
}

/* Start of the run of White_Space characters that ends s[0..n) (Rust regex \s*$). */
static size_t trailing_space_start(const char *s, size_t n) {
    while (n > 0) {
        size_t i = char_start_before(s, n);
        uint32_t cp;
        la_utf8_decode((const uint8_t *)s + i, &cp);
        if (!la_unicode_is_white_space(cp)) break;
        n = i;
    }
    return n;
}

/* Length of the run of White_Space characters that starts s[0..n) (Rust regex ^\s*). */
static size_t leading_space_len(const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        int k = la_utf8_decode((const uint8_t *)s + i, &cp);
        if (!la_unicode_is_white_space(cp)) break;
        i += (size_t)k;
    }
    return i;
}

/* Whether cp is a "word" character of Rust's regex \w (Unicode: Alphabetic, M, Nd, Pc,
 * Join_Control), used by single_word added tokens. */
static bool is_word_char(const la_tokenizer *tok, const char *s, size_t n) {
    if (!tok->word_re || n == 0) return false;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return false;
    int rc = pcre2_match(tok->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         md, NULL);
    pcre2_match_data_free(md);
    return rc > 0;
}

/* AddedVocabulary::find_matches on buf[off..off+n): leftmost-longest matches in order,
 * filtered and widened by single_word, lstrip and rstrip, with the text between them.
 * The match iterator always resumes at the end of the raw match, as aho-corasick's does.
 * Example (lstrip and rstrip on "<m>"): "a  <m>\tb" -> "a", "  <m>\t" (the token), "b". */
static bool find_added(enc *e, const la_tok_trie *t, const piece *src, piece_list *out) {
    const la_tokenizer *tok = e->tok;
    const char *s = e->buf.data + src->off;
    size_t n = src->len, start_offset = 0, pos = 0;
    while (!t->empty && pos < n) {
        size_t mlen = 0, mstart = pos;
        int32_t which = -1;
        for (; mstart < n; mstart++) {
            if (!t->first_byte[(uint8_t)s[mstart]]) continue;
            which = trie_longest(t, (const uint8_t *)s + mstart, n - mstart, &mlen);
            if (which >= 0) break;
        }
        if (which < 0) break;
        size_t start = mstart, stop = mstart + mlen;
        pos = stop;
        const la_tok_added *a = &tok->added[which];
        if (a->single_word) {
            bool start_space =
                start == 0 || !is_word_char(tok, s + char_start_before(s, start),
                                            start - char_start_before(s, start));
            bool stop_space = stop == n || !is_word_char(tok, s + stop, n - stop);
            if (!start_space || !stop_space) continue;
        }
        if (a->lstrip) {
            size_t newstart = trailing_space_start(s, start);
            start = newstart > start_offset ? newstart : start_offset;
        }
        if (a->rstrip) stop += leading_space_len(s + stop, n - stop);
        if (start_offset < start &&
            !push_text(out, src->off + start_offset, start - start_offset,
                       src->at_start && start_offset == 0))
            return false;
        if (!pieces_push(out, (piece){src->off + start, stop - start, a->id, false})) return false;
        start_offset = stop;
    }
    return push_text(out, src->off + start_offset, n - start_offset,
                     src->at_start && start_offset == 0);
}

/* ---- pre-tokenizer --------------------------------------------------------------------- */

static bool char_in_class(uint32_t cp, const void *ctx) {
    const la_tok_pre *p = ctx;
    switch (p->chars) {
    case LA_TOK_CHARS_NUMERIC: return la_unicode_is_numeric(cp);
    case LA_TOK_CHARS_PUNCT: return la_unicode_is_punctuation(cp);
    case LA_TOK_CHARS_SPACE: return la_unicode_is_white_space(cp);
    case LA_TOK_CHARS_DELIMITER: return cp == p->delimiter;
    }
    return false;
}

/* NormalizedString::split: which ranges become pieces under each behavior. Ranges come
 * back with match = false for pieces to keep and true for pieces to remove. */
static void apply_behavior(la_tok_ranges *l, la_tok_split_behavior b) {
    size_t out = 0;
    bool previous_match = false;
    switch (b) {
    case LA_TOK_SPLIT_ISOLATED:
        for (size_t i = 0; i < l->n; i++) l->v[i].match = false;
        return;
    case LA_TOK_SPLIT_REMOVED:
        return;
    case LA_TOK_SPLIT_CONTIGUOUS:
        for (size_t i = 0; i < l->n; i++) {
            la_tok_range r = l->v[i];
            if (r.match == previous_match && out > 0) {
                l->v[out - 1].end = r.end;
            } else {
                l->v[out++] = (la_tok_range){r.start, r.end, false};
            }
            previous_match = r.match;
        }
        break;
    case LA_TOK_SPLIT_MERGED_WITH_PREVIOUS:
        for (size_t i = 0; i < l->n; i++) {
            la_tok_range r = l->v[i];
            if (r.match && !previous_match && out > 0) {
                l->v[out - 1].end = r.end;
            } else {
                l->v[out++] = (la_tok_range){r.start, r.end, false};
            }
            previous_match = r.match;
        }
        break;
    case LA_TOK_SPLIT_MERGED_WITH_NEXT:
        /* walk backwards, then restore the order: compact toward the end */
        out = l->n;
        for (size_t i = l->n; i-- > 0;) {
            la_tok_range r = l->v[i];
            if (r.match && !previous_match && out < l->n) {
                l->v[out].start = r.start;
            } else {
                l->v[--out] = (la_tok_range){r.start, r.end, false};
            }
            previous_match = r.match;
        }
        memmove(l->v, l->v + out, (l->n - out) * sizeof *l->v);
        out = l->n - out;
        break;
    }
    l->n = out;
}

/* Split one piece with a pattern and a behavior, appending the kept parts to out. */
static bool split_piece(enc *e, const la_tok_pre *p, const piece *pc, piece_list *out) {
    const char *s = e->buf.data + pc->off;
    e->ranges.n = 0;
    bool ok;
    if (p->kind == LA_TOK_PRE_CHARS) {
        ok = la_tok_char_ranges(char_in_class, p, s, pc->len, &e->ranges);
    } else if (p->re) {
        int rc = la_tok_regex_ranges(p->re, e->md, s, pc->len, &e->ranges);
        if (rc < 0) {
            e->status = LA_ERR_INTERNAL;
            e->regex_rc = rc;
        }
        ok = rc == 0;
    } else {
        ok = la_tok_literal_ranges(p->literal, p->literal_len, s, pc->len, &e->ranges);
    }
    if (!ok) return false;
    if (p->invert)
        for (size_t i = 0; i < e->ranges.n; i++) e->ranges.v[i].match = !e->ranges.v[i].match;
    apply_behavior(&e->ranges, p->behavior);
    for (size_t i = 0; i < e->ranges.n; i++) {
        const la_tok_range *r = &e->ranges.v[i];
        if (r->match) continue;
        if (!push_text(out, pc->off + r->start, r->end - r->start, pc->at_start && r->start == 0))
            return false;
    }
    return true;
}

/* Metaspace::pre_tokenize: ' ' -> replacement, prepend it per the scheme, and split
 * before each replacement character (MergedWithNext) when split is true. */
static bool metaspace_piece(enc *e, const la_tok_pre *p, const piece *pc, piece_list *out) {
    if (!la_tok_buf_reserve(&e->buf, (pc->len + 1) * p->repl_len + 1)) return false;
    const char *s = e->buf.data + pc->off; /* stable: the appends below fit */
    size_t off = e->buf.len;
    bool starts = pc->len >= 1 && s[0] == ' ';
    starts = starts || (pc->len >= p->repl_len && memcmp(s, p->repl, p->repl_len) == 0);
    if (!starts && (p->prepend == LA_TOK_PREPEND_ALWAYS ||
                    (p->prepend == LA_TOK_PREPEND_FIRST && pc->at_start)))
        la_tok_buf_append(&e->buf, p->repl, p->repl_len);
    la_tok_replace_all(s, pc->len, " ", 1, p->repl, p->repl_len, &e->buf);
    piece np = {off, e->buf.len - off, -1, pc->at_start};
    if (!p->split) return push_text(out, np.off, np.len, np.at_start);
    la_tok_pre by_char = {.kind = LA_TOK_PRE_SPLIT,
                          .literal = (char *)p->repl,
                          .literal_len = p->repl_len,
                          .behavior = LA_TOK_SPLIT_MERGED_WITH_NEXT};
    return split_piece(e, &by_char, &np, out);
}

/* ByteLevel::pre_tokenize without the byte->character mapping (the BPE model reads raw
 * bytes in byte-level mode): a space before pieces that lack one when add_prefix_space,
 * then the GPT-2 split when use_regex. */
static bool byte_level_piece(enc *e, const la_tok_pre *p, const piece *pc, piece_list *out) {
    piece np = *pc;
    if (p->add_prefix_space && e->buf.data[pc->off] != ' ') {
        if (!la_tok_buf_reserve(&e->buf, pc->len + 1)) return false;
        np.off = e->buf.len;
        la_tok_buf_append(&e->buf, " ", 1);
        la_tok_buf_append(&e->buf, e->buf.data + pc->off, pc->len);
        np.len = pc->len + 1;
    }
    if (!p->re) return pieces_push(out, np);
    return split_piece(e, p, &np, out);
}

/* FixedLength: pieces of p->length characters (pre_tokenizers/fixed_length.rs). */
static bool fixed_length_piece(const enc *e, const la_tok_pre *p, const piece *pc, piece_list *out) {
    const char *s = e->buf.data + pc->off;
    size_t start = 0, chars = 0;
    for (size_t i = 0; i < pc->len;) {
        uint32_t cp;
        i += (size_t)la_utf8_decode((const uint8_t *)s + i, &cp);
        if (++chars == p->length || i == pc->len) {
            if (!push_text(out, pc->off + start, i - start, pc->at_start && start == 0)) return false;
            start = i;
            chars = 0;
        }
    }
    return true;
}

/* ---- the pipeline -------------------------------------------------------------------- */

static void swap_lists(enc *e) {
    piece_list t = e->cur;
    e->cur = e->next;
    e->next = t;
    e->next.n = 0;
}

static bool run_pipeline(enc *e, const char *text, size_t len) {
    const la_tokenizer *tok = e->tok;
    if (!la_tok_buf_append(&e->buf, text, len)) return false;
    piece all = {0, len, -1, true};

    /* 1. non-normalized added tokens on the raw text */
    if (len && !find_added(e, &tok->trie_raw, &all, &e->cur)) return false;

    /* 2. normalize each text span, then the normalized added tokens */
    e->next.n = 0;
    for (size_t i = 0; i < e->cur.n; i++) {
        piece pc = e->cur.v[i];
        if (pc.id >= 0) {
            if (!pieces_push(&e->next, pc)) return false;
            continue;
        }
        if (tok->n_norms) {
            size_t off = e->buf.len;
            la_tok_buf norm = {0};
            bool ok = la_tok_normalize(tok, e->buf.data + pc.off, pc.len, &norm) &&
                      la_tok_buf_append(&e->buf, norm.data, norm.len);
            size_t nlen = norm.len;
            la_tok_buf_free(&norm);
            if (!ok) return false;
            pc.off = off;
            pc.len = nlen;
            if (pc.len == 0) continue;
        }
        if (!find_added(e, &tok->trie_norm, &pc, &e->next)) return false;
    }
    swap_lists(e);

    /* 3. pre-tokenizers, each on every text piece of the one before */
    for (int k = 0; k < tok->n_pres; k++) {
        const la_tok_pre *p = &tok->pres[k];
        for (size_t i = 0; i < e->cur.n; i++) {
            piece pc = e->cur.v[i];
            bool ok;
            if (pc.id >= 0)
                ok = pieces_push(&e->next, pc);
            else if (p->kind == LA_TOK_PRE_SPLIT || p->kind == LA_TOK_PRE_CHARS)
                ok = split_piece(e, p, &pc, &e->next);
            else if (p->kind == LA_TOK_PRE_FIXED_LENGTH)
                ok = fixed_length_piece(e, p, &pc, &e->next);
            else if (p->kind == LA_TOK_PRE_METASPACE)
                ok = metaspace_piece(e, p, &pc, &e->next);
            else
                ok = byte_level_piece(e, p, &pc, &e->next);
            if (!ok) return false;
        }
        swap_lists(e);
    }

    /* 4. the model */
    for (size_t i = 0; i < e->cur.n; i++) {
        const piece *pc = &e->cur.v[i];
        bool ok = pc->id >= 0 ? la_tok_ids_push(&e->ids, pc->id)
                              : la_tok_bpe_word(&tok->bpe, e->buf.data + pc->off, pc->len,
                                                &e->bpe, &e->ids);
        if (!ok) return false;
    }
    return true;
}

la_status la_tokenizer_encode(const la_tokenizer *tok, const char *text, size_t len,
                              bool add_special, int32_t **out_ids, int32_t *out_n, la_err *err) {
    if (!tok || (!text && len) || !out_ids || !out_n)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_tokenizer_encode: NULL argument");
    size_t bad = la_utf8_invalid_at((const uint8_t *)text, len);
    if (bad < len)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "text to encode is not valid UTF-8: bad byte 0x%02X at byte offset %zu",
                          (unsigned)(uint8_t)text[bad], bad);
    enc e = {.tok = tok, .status = LA_ERR_NO_MEMORY};
    e.md = pcre2_match_data_create(16, NULL);
    bool ok = e.md != NULL;
    if (ok && add_special) ok = la_tok_ids_append(&e.ids, tok->tpl_prefix, (size_t)tok->n_prefix);
    ok = ok && run_pipeline(&e, text, len);
    if (ok && add_special) ok = la_tok_ids_append(&e.ids, tok->tpl_suffix, (size_t)tok->n_suffix);
    if (ok && e.ids.len > INT32_MAX) {
        ok = false;
        e.status = LA_ERR_TOO_LONG;
    }
    pcre2_match_data_free(e.md);
    la_tok_buf_free(&e.buf);
    free(e.cur.v);
    free(e.next.v);
    free(e.ranges.v);
    la_tok_bpe_scratch_fini(&e.bpe);
    if (!ok) {
        free(e.ids.data);
        if (e.status == LA_ERR_INTERNAL)
            return la_err_set(err, LA_ERR_INTERNAL, "%s: regex match failed (PCRE2 error %d)",
                              tok->path, e.regex_rc);
        if (e.status == LA_ERR_TOO_LONG)
            return la_err_set(err, LA_ERR_TOO_LONG, "text of %zu bytes gives over 2^31 tokens", len);
        return la_err_set(err, LA_ERR_NO_MEMORY, "encoding %zu bytes: out of memory", len);
    }
    if (!e.ids.data) e.ids.data = malloc(sizeof(int32_t)); /* a freeable pointer for 0 ids */
    if (!e.ids.data) return la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
    *out_ids = e.ids.data;
    *out_n = (int32_t)e.ids.len;
    return LA_OK;
}
