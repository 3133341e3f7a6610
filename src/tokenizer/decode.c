/* la_tokenizer_decode and the streaming detokenizer (la_detok_*).
 *
 * HF decodes a whole id list at once: id -> token string (skipping special tokens when
 * asked), then the decoder chain over the list of strings, each decoder's decode_chain
 * mapping the list to a new list, joined at the end (tokenizer/mod.rs decode, decoders/).
 * Streaming needs the same text cut into pieces as ids arrive, each piece valid UTF-8,
 * their concatenation equal to the whole decode. Both are one state machine here, so they
 * cannot disagree: la_tokenizer_decode pushes every id and flushes.
 *
 * What must be held back, per decoder:
 *   ByteLevel   the tokens' bytes are concatenated and converted lossily (Rust's
 *               String::from_utf8_lossy). Only a trailing proper prefix of a character
 *               (at most 3 bytes) is undecided; everything before it is final.
 *               Example: ids for "é" split as bytes C3 | A9: push C3 -> "" (held),
 *               push A9 -> "é". A held C3 followed by 'a' -> "\uFFFD" then "a".
 *   ByteFallback a run of <0xNN> tokens becomes its UTF-8 text if the whole run is
 *               valid, else one U+FFFD token per byte (decoders/byte_fallback.rs), so a
 *               run is held until a non-byte token (or the end) closes it.
 *   per-token steps (Replace, Strip, Metaspace before Fuse) act on each token alone; the
 *               only state is the token's index (Metaspace drops its replacement in the
 *               first token), so nothing is held.
 *   after Fuse  the steps see one token, the whole text, which arrives in pieces:
 *               Strip drops up to `start` leading content characters as they come and
 *               holds trailing ones until a different character follows (`stop` of them
 *               are dropped at the end); Replace holds a tail that may still begin the
 *               pattern; Metaspace (the whole text is the first token) is a per-character
 *               map.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_internal.h"

/* The state of one step after Fuse. */
typedef struct fused_state {
    la_tok_buf hold;    /* Replace: the held tail */
    int32_t strip_left; /* Strip: leading content characters still to drop */
    bool strip_done;    /* Strip: a non-content character has been seen */
    int64_t held;       /* Strip: trailing content characters held back */
    la_tok_buf tmp;     /* this step's output before the next step */
} fused_state;

struct la_detok {
    const la_tokenizer *tok;
    bool skip_special;
    int64_t n_fed;      /* tokens handed to the decoder (skipped specials excluded) */
    int64_t n_stage1;   /* tokens ByteFallback handed on */
    la_tok_buf pending; /* ByteLevel: undecided bytes; ByteFallback: the open byte run */
    la_tok_buf tok_a, tok_b; /* per-token step scratch */
    fused_state *fused; /* [n_steps - n_fuse] */
    la_tok_buf out;     /* the piece handed back by push/flush */
};

static bool detok_init(la_detok *d, const la_tokenizer *tok, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
    const la_tok_decoder *dec = &tok->dec;
    int n = dec->kind == LA_TOK_DEC_PIECES ? dec->n_steps - dec->n_fuse : 0;
    if (n > 0) {
        d->fused = calloc((size_t)n, sizeof *d->fused);
        if (!d->fused) return false;
        for (int k = 0; k < n; k++) {
            const la_tok_dstep *st = &dec->steps[dec->n_fuse + k];
            d->fused[k].strip_left = st->kind == LA_TOK_DSTEP_STRIP ? st->start : 0;
            d->fused[k].strip_done = st->kind != LA_TOK_DSTEP_STRIP || st->start == 0;
        }
    }
    return true;
}

static void detok_fini(la_detok *d) {
    const la_tok_decoder *dec = &d->tok->dec;
    int n = dec->kind == LA_TOK_DEC_PIECES ? dec->n_steps - dec->n_fuse : 0;
    for (int k = 0; d->fused && k < n; k++) {
        la_tok_buf_free(&d->fused[k].hold);
        la_tok_buf_free(&d->fused[k].tmp);
    }
    free(d->fused);
    la_tok_buf_free(&d->pending);
    la_tok_buf_free(&d->tok_a);
    la_tok_buf_free(&d->tok_b);
    d->fused = NULL;
}

static bool append_content(la_tok_buf *out, uint32_t cp, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        if (!la_tok_buf_append_cp(out, cp)) return false;
    return true;
}

/* "<0xNN>" as HF's ByteFallback reads it: 6 bytes, u8::from_str_radix(NN, 16) (which
 * also takes a leading '+'). -1 if it is not one. */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int dg = c >= '0' && c <= '9' ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                 : -1;
        if (dg < 0 && !(i == 3 && c == '+')) return -1;
        v = dg < 0 ? 0 : v * 16 + dg;
    }
    return v;
}

/* ---- per-token steps --------------------------------------------------------------------- */

/* One step on one token string s[0..n) with its index, into out (emptied first). */
static bool token_step(const la_tok_dstep *st, const char *s, size_t n, int64_t index, la_tok_buf *out) {
    out->len = 0;
    switch (st->kind) {
    case LA_TOK_DSTEP_REPLACE: return la_tok_replace_all(s, n, st->a, st->a_len, st->b, st->b_len, out);
    case LA_TOK_DSTEP_METASPACE:
        if (!la_tok_buf_reserve(out, n)) return false;
        for (size_t i = 0; i < n;) {
            uint32_t cp;
            int k = la_utf8_decode((const uint8_t *)s + i, &cp);
            bool ok = cp != st->replacement ? la_tok_buf_append(out, s + i, (size_t)k)
                      : index == 0 && st->drop_first ? true
                                                     : la_tok_buf_append(out, " ", 1);
            if (!ok) return false;
            i += (size_t)k;
        }
        return la_tok_buf_append(out, "", 0);
    case LA_TOK_DSTEP_STRIP: { /* decoders/strip.rs: at most start / stop characters */
        size_t a = 0, b = n;
        for (int32_t i = 0; i < st->start && a < b; i++) {
            uint32_t cp;
            int k = la_utf8_decode((const uint8_t *)s + a, &cp);
            if (cp != st->content) break;
            a += (size_t)k;
        }
        for (int32_t i = 0; i < st->stop && b > a; i++) {
            size_t j = b - 1;
            while (j > a && ((uint8_t)s[j] & 0xC0) == 0x80) j--;
            uint32_t cp;
            la_utf8_decode((const uint8_t *)s + j, &cp);
            if (cp != st->content) break;
            b = j;
        }
        return la_tok_buf_append(out, s + a, b - a);
    }
    }
    return false;
}

/* Steps [from, to) on a token; *res points at the result (s itself when no step ran). */
static bool token_steps(la_detok *d, int from, int to, const char *s, size_t n, int64_t index,
                        const char **res, size_t *res_n) {
    const la_tok_decoder *dec = &d->tok->dec;
    la_tok_buf *bufs[2] = {&d->tok_a, &d->tok_b};
    int k = 0;
    for (int i = from; i < to; i++, k ^= 1) {
        if (!token_step(&dec->steps[i], s, n, index, bufs[k])) return false;
        s = bufs[k]->data;
        n = bufs[k]->len;
    }
    *res = s;
    *res_n = n;
    return true;
}

/* ---- after Fuse: the whole text, streamed --------------------------------------------------- */

static bool fused_push(la_detok *d, int k, const char *s, size_t n, la_tok_buf *out);

/* Replace on a streamed text: replace every whole occurrence left to right and hold the
 * longest tail that is a proper prefix of the pattern (a later piece may complete it). */
static bool fused_replace(la_detok *d, int k, const la_tok_dstep *st, const char *s, size_t n,
                          la_tok_buf *out) {
    fused_state *f = &d->fused[k - d->tok->dec.n_fuse];
    if (!la_tok_buf_append(&f->hold, s, n)) return false;
    const char *h = f->hold.data;
    size_t len = f->hold.len, i = 0, run = 0;
    f->tmp.len = 0;
    bool ok = true;
    while (ok && i + st->a_len <= len) {
        if (memcmp(h + i, st->a, st->a_len) == 0) {
            ok = la_tok_buf_append(&f->tmp, h + run, i - run) && la_tok_buf_append(&f->tmp, st->b, st->b_len);
            i += st->a_len;
            run = i;
        } else {
            i++;
        }
    }
    /* hold from the first position whose tail is a proper prefix of the pattern */
    size_t keep = len;
    for (size_t p = run; p < len; p++) {
        if (len - p < st->a_len && memcmp(h + p, st->a, len - p) == 0) {
            keep = p;
            break;
        }
    }
    ok = ok && la_tok_buf_append(&f->tmp, h + run, keep - run);
    memmove(f->hold.data, h + keep, len - keep);
    f->hold.len = len - keep;
    /* f->tmp is this step's output; the next step may be called recursively on it, which
     * uses only its own buffers */
    return ok && fused_push(d, k + 1, f->tmp.data, f->tmp.len, out);
}

/* Strip on a streamed text (the one token after Fuse). */
static bool fused_strip(la_detok *d, int k, const la_tok_dstep *st, const char *s, size_t n,
                        la_tok_buf *out) {
    fused_state *f = &d->fused[k - d->tok->dec.n_fuse];
    f->tmp.len = 0;
    bool ok = la_tok_buf_reserve(&f->tmp, n);
    for (size_t i = 0; i < n && ok;) {
        uint32_t cp;
        int c = la_utf8_decode((const uint8_t *)s + i, &cp);
        if (!f->strip_done) {
            if (f->strip_left > 0 && cp == st->content) {
                if (--f->strip_left == 0) f->strip_done = true;
                i += (size_t)c;
                continue;
            }
            f->strip_done = true;
        }
        if (st->stop > 0) {
            if (cp == st->content) {
                f->held++;
                i += (size_t)c;
                continue;
            }
            ok = append_content(&f->tmp, st->content, f->held);
            f->held = 0;
        }
        ok = ok && la_tok_buf_append(&f->tmp, s + i, (size_t)c);
        i += (size_t)c;
    }
    return ok && fused_push(d, k + 1, f->tmp.data, f->tmp.len, out);
}

/* Text through the steps after Fuse from step k on, into out. */
static bool fused_push(la_detok *d, int k, const char *s, size_t n, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    if (n == 0) return true;
    if (k >= dec->n_steps) return la_tok_buf_append(out, s, n);
    const la_tok_dstep *st = &dec->steps[k];
    switch (st->kind) {
    case LA_TOK_DSTEP_REPLACE: return fused_replace(d, k, st, s, n, out);
    case LA_TOK_DSTEP_STRIP: return fused_strip(d, k, st, s, n, out);
    case LA_TOK_DSTEP_METASPACE: {
        fused_state *f = &d->fused[k - dec->n_fuse];
        return token_step(st, s, n, 0, &f->tmp) && fused_push(d, k + 1, f->tmp.data, f->tmp.len, out);
    }
    }
    return false;
}

/* End of text: what steps k.. still hold. */
static bool fused_flush(la_detok *d, int k, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    if (k >= dec->n_steps) return true;
    fused_state *f = &d->fused[k - dec->n_fuse];
    const la_tok_dstep *st = &dec->steps[k];
    bool ok = true;
    if (st->kind == LA_TOK_DSTEP_REPLACE && f->hold.len) {
        la_tok_buf t = f->hold;
        f->hold = (la_tok_buf){0};
        ok = fused_push(d, k + 1, t.data, t.len, out);
        la_tok_buf_free(&t);
    } else if (st->kind == LA_TOK_DSTEP_STRIP && f->held > st->stop) {
        f->tmp.len = 0;
        ok = append_content(&f->tmp, st->content, f->held - st->stop) &&
             fused_push(d, k + 1, f->tmp.data, f->tmp.len, out);
    }
    f->held = 0;
    return ok && fused_flush(d, k + 1, out);
}

/* ---- the chain --------------------------------------------------------------------------- */

/* A token after ByteFallback: the per-token steps after it, then Fuse's text or the join. */
static bool stage1_token(la_detok *d, const char *s, size_t n, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    const char *r;
    size_t rn;
    if (!token_steps(d, dec->n_before, dec->n_fuse, s, n, d->n_stage1++, &r, &rn)) return false;
    return dec->fused ? fused_push(d, dec->n_fuse, r, rn, out) : la_tok_buf_append(out, r, rn);
}

/* Close a ByteFallback run: its text if valid UTF-8, else one U+FFFD token per byte. */
static bool close_byte_run(la_detok *d, la_tok_buf *out) {
    if (d->pending.len == 0) return true;
    la_tok_buf run = d->pending;
    d->pending = (la_tok_buf){0};
    bool ok;
    if (la_utf8_invalid_at((const uint8_t *)run.data, run.len) == run.len) {
        ok = stage1_token(d, run.data, run.len, out);
    } else {
        ok = true;
        for (size_t i = 0; i < run.len && ok; i++) ok = stage1_token(d, "\xEF\xBF\xBD", 3, out);
    }
    run.len = 0;
    d->pending = run; /* keep the allocation */
    return ok;
}

/* Convert as much of the pending ByteLevel bytes as is final. */
static bool convert_pending(la_detok *d, bool at_end, la_tok_buf *out) {
    if (d->pending.len == 0) return true;
    size_t used = la_utf8_lossy_append(out, (const uint8_t *)d->pending.data, d->pending.len, at_end);
    if (used == SIZE_MAX) return false;
    memmove(d->pending.data, d->pending.data + used, d->pending.len - used);
    d->pending.len -= used;
    return true;
}

static bool feed(la_detok *d, int32_t id, la_tok_buf *out) {
    const la_tokenizer *tok = d->tok;
    const la_tok_decoder *dec = &tok->dec;
    if (d->skip_special && la_tokenizer_is_special(tok, id)) return true;
    size_t n;
    const char *s = la_tok_strtab_get(&dec->text, id, &n);
    bool ok = true;
    switch (dec->kind) {
    case LA_TOK_DEC_JOIN:
        ok = (d->n_fed == 0 || la_tok_buf_append(out, " ", 1)) && la_tok_buf_append(out, s, n);
        break;
    case LA_TOK_DEC_BYTE_LEVEL:
        ok = la_tok_buf_append(&d->pending, s, n) && convert_pending(d, false, out);
        break;
    case LA_TOK_DEC_PIECES: {
        const char *r;
        size_t rn;
        ok = token_steps(d, dec->n_table, dec->n_before, s, n, d->n_fed, &r, &rn);
        int byte = ok && dec->byte_fallback ? byte_token(r, rn) : -1;
        if (byte >= 0) {
            uint8_t b = (uint8_t)byte;
            ok = la_tok_buf_append(&d->pending, &b, 1);
        } else if (ok) {
            /* r may live in tok_a / tok_b, which the steps after ByteFallback reuse */
            la_tok_buf copy = {0};
            ok = la_tok_buf_append(&copy, r, rn) && close_byte_run(d, out) &&
                 stage1_token(d, copy.data ? copy.data : "", copy.len, out);
            la_tok_buf_free(&copy);
        }
        break;
    }
    }
    d->n_fed++;
    return ok;
}

static bool finish(la_detok *d, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    if (dec->kind == LA_TOK_DEC_BYTE_LEVEL) return convert_pending(d, true, out);
    if (dec->kind != LA_TOK_DEC_PIECES) return true;
    return close_byte_run(d, out) && (!dec->fused || fused_flush(d, dec->n_fuse, out));
}

static la_status check_id(const la_tokenizer *tok, int32_t id, la_err *err) {
    if (id < 0 || id >= tok->n_ids || !la_tok_strtab_has(&tok->dec.text, id))
        return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d is out of range [0, %d)", id,
                          tok->n_ids);
    return LA_OK;
}

int64_t la_tokenizer_token_bytes(const la_tokenizer *tok, int32_t id, char *buf, size_t cap) {
    if (id < 0 || id >= tok->n_ids || !la_tok_strtab_has(&tok->dec.text, id)) return -1;
    const la_tok_decoder *dec = &tok->dec;
    size_t n;
    const char *s = la_tok_strtab_get(&dec->text, id, &n);
    char one = 0;
    /* byte fallback: "<0xNN>" stands for the byte NN */
    if (dec->kind == LA_TOK_DEC_PIECES && dec->byte_fallback && n == 6 && !memcmp(s, "<0x", 3) && s[5] == '>') {
        unsigned v = 0;
        bool hex = true;
        for (int i = 3; i < 5; i++) {
            char c = s[i];
            int d = c >= '0' && c <= '9' ? c - '0' : c >= 'A' && c <= 'F' ? c - 'A' + 10 : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
            if (d < 0) hex = false;
            v = v * 16 + (unsigned)(d < 0 ? 0 : d);
        }
        if (hex) {
            one = (char)v;
            s = &one;
            n = 1;
        }
    }
    if (cap) memcpy(buf, s, n < cap ? n : cap);
    return (int64_t)n;
}

/* ---- whole sequences ----------------------------------------------------------------- */

la_status la_tokenizer_decode(const la_tokenizer *tok, const int32_t *ids, int32_t n,
                              bool skip_special, char **out_text, size_t *out_len, la_err *err) {
    if (!tok || (!ids && n > 0) || n < 0 || !out_text)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_tokenizer_decode: bad argument");
    for (int32_t i = 0; i < n; i++) LA_TRY(check_id(tok, ids[i], err));
    la_detok d;
    la_tok_buf text = {0};
    bool ok = detok_init(&d, tok, skip_special) && la_tok_buf_reserve(&text, 0);
    for (int32_t i = 0; i < n && ok; i++) ok = feed(&d, ids[i], &text);
    ok = ok && finish(&d, &text);
    detok_fini(&d);
    if (!ok) {
        la_tok_buf_free(&text);
        return la_err_set(err, LA_ERR_NO_MEMORY, "decoding %d ids: out of memory", n);
    }
    text.data[text.len] = '\0';
    *out_text = text.data;
    if (out_len) *out_len = text.len;
    return LA_OK;
}

/* ---- streaming ------------------------------------------------------------------------- */

la_status la_detok_create(const la_tokenizer *tok, bool skip_special, la_detok **out, la_err *err) {
    la_detok *d = malloc(sizeof *d);
    if (!d) return la_err_set(err, LA_ERR_NO_MEMORY, "detokenizer: out of memory");
    if (!detok_init(d, tok, skip_special) || !la_tok_buf_reserve(&d->out, 64)) {
        detok_fini(d);
        free(d);
        return la_err_set(err, LA_ERR_NO_MEMORY, "detokenizer: out of memory");
    }
    *out = d;
    return LA_OK;
}

void la_detok_destroy(la_detok *d) {
    if (!d) return;
    detok_fini(d);
    la_tok_buf_free(&d->out);
    free(d);
}

la_status la_detok_push(la_detok *d, int32_t id, const char **piece, size_t *piece_len,
                        la_err *err) {
    LA_TRY(check_id(d->tok, id, err));
    d->out.len = 0;
    d->out.data[0] = '\0';
    if (!feed(d, id, &d->out))
        return la_err_set(err, LA_ERR_NO_MEMORY, "detokenizer: out of memory");
    *piece = d->out.data;
    if (piece_len) *piece_len = d->out.len;
    return LA_OK;
}

la_status la_detok_flush(la_detok *d, const char **piece, size_t *piece_len, la_err *err) {
    d->out.len = 0;
    d->out.data[0] = '\0';
    if (!finish(d, &d->out)) return la_err_set(err, LA_ERR_NO_MEMORY, "detokenizer: out of memory");
    *piece = d->out.data;
    if (piece_len) *piece_len = d->out.len;
    return LA_OK;
}
