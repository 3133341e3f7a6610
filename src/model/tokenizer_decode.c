/* la_tokenizer_decode and the streaming detokenizer (la_detok_*).
 *
 * HF decodes a whole id list at once: id -> token string (skipping special tokens when
 * asked), then the decoder chain over the list of strings (tokenizer/mod.rs decode,
 * the decoders). Streaming needs the same text cut into pieces as ids arrive, each piece
 * valid UTF-8, their concatenation equal to the whole decode. Both are one state machine
 * here, so they cannot disagree: la_tokenizer_decode pushes every id and flushes.
 *
 * What must be held back, per decoder:
 *   ByteLevel   the tokens' bytes are concatenated and converted lossily (Rust's
 *               String::from_utf8_lossy). Only a trailing proper prefix of a character
 *               (at most 3 bytes) is undecided; everything before it is final.
 *               Example: ids for "é" split as bytes C3 | A9: push C3 -> "" (held),
 *               push A9 -> "é". A held C3 followed by 'a' -> "\uFFFD" then "a".
 *   ByteFallback a run of <0xNN> tokens becomes its UTF-8 text if the whole run is
 *               valid, else one U+FFFD per byte (decoders/byte_fallback.rs), so a run is
 *               held until a non-byte token (or the end) closes it.
 *   Strip       (after Fuse) drops up to `start` leading and `stop` trailing content
 *               characters of the whole text: leading ones are dropped as they come,
 *               trailing ones are held until a different character follows.
 *   Metaspace   the replacement becomes ' ', except in the first token where it is
 *               dropped (prepend_scheme != never); nothing is held.
 */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "model/tokenizer.h"
#include "model/tokenizer_internal.h"

struct la_detok {
    const la_tokenizer *tok;
    bool skip_special;
    int64_t n_fed;      /* tokens handed to the decoder (skipped specials excluded) */
    la_tok_buf pending; /* ByteLevel: undecided bytes; ByteFallback: the open byte run */
    int32_t strip_left; /* Strip: leading content characters still to drop */
    bool strip_done;    /* Strip: a non-content character has been seen */
    int64_t held;       /* Strip with stop > 0: trailing content characters held back */
    la_tok_buf out;     /* the piece handed back by push/flush */
};

static void detok_init(la_detok *d, const la_tokenizer *tok, bool skip_special) {
    memset(d, 0, sizeof *d);
    d->tok = tok;
    d->skip_special = skip_special;
    d->strip_left = tok->dec.strip ? tok->dec.strip_start : 0;
    d->strip_done = !tok->dec.strip || tok->dec.strip_start == 0;
}

static bool append_content(la_tok_buf *out, uint32_t cp, int64_t count) {
    for (int64_t i = 0; i < count; i++)
        if (!la_tok_buf_append_cp(out, cp)) return false;
    return true;
}

/* Text after Fuse, through Strip. */
static bool emit_text(la_detok *d, const char *s, size_t n, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    if (!dec->strip || (d->strip_done && dec->strip_stop == 0)) return la_tok_buf_append(out, s, n);
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int k = la_utf8_decode((const uint8_t *)s + i, &cp);
        if (!d->strip_done) {
            if (d->strip_left > 0 && cp == dec->strip_content) {
                if (--d->strip_left == 0) d->strip_done = true;
                i += (size_t)k;
                continue;
            }
            d->strip_done = true;
        }
        if (dec->strip_stop > 0) {
            if (cp == dec->strip_content) {
                d->held++;
                i += (size_t)k;
                continue;
            }
            if (!append_content(out, dec->strip_content, d->held)) return false;
            d->held = 0;
        }
        if (!la_tok_buf_append(out, s + i, (size_t)k)) return false;
        i += (size_t)k;
    }
    return true;
}

/* Close a ByteFallback run: its text if valid UTF-8, else U+FFFD per byte. */
static bool close_byte_run(la_detok *d, la_tok_buf *out) {
    if (d->pending.len == 0) return true;
    bool ok;
    if (la_utf8_invalid_at((const uint8_t *)d->pending.data, d->pending.len) == d->pending.len) {
        ok = emit_text(d, d->pending.data, d->pending.len, out);
    } else {
        ok = true;
        for (size_t i = 0; i < d->pending.len && ok; i++) ok = emit_text(d, "\xEF\xBF\xBD", 3, out);
    }
    d->pending.len = 0;
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
    case LA_TOK_DEC_METASPACE:
        for (size_t i = 0; i < n && ok;) {
            uint32_t cp;
            int k = la_utf8_decode((const uint8_t *)s + i, &cp);
            if (cp != dec->replacement)
                ok = la_tok_buf_append(out, s + i, (size_t)k);
            else if (!(d->n_fed == 0 && dec->drop_first_repl))
                ok = la_tok_buf_append(out, " ", 1);
            i += (size_t)k;
        }
        break;
    case LA_TOK_DEC_PIECES:
        if (dec->byte_of && dec->byte_of[id] >= 0) {
            uint8_t b = (uint8_t)dec->byte_of[id];
            ok = la_tok_buf_append(&d->pending, &b, 1);
        } else {
            ok = close_byte_run(d, out) && emit_text(d, s, n, out);
        }
        break;
    }
    d->n_fed++;
    return ok;
}

static bool finish(la_detok *d, la_tok_buf *out) {
    const la_tok_decoder *dec = &d->tok->dec;
    if (dec->kind == LA_TOK_DEC_BYTE_LEVEL) return convert_pending(d, true, out);
    if (dec->kind != LA_TOK_DEC_PIECES) return true;
    if (!close_byte_run(d, out)) return false;
    if (dec->strip && d->held > dec->strip_stop &&
        !append_content(out, dec->strip_content, d->held - dec->strip_stop))
        return false;
    d->held = 0;
    return true;
}

static la_status check_id(const la_tokenizer *tok, int32_t id, la_err *err) {
    if (id < 0 || id >= tok->n_ids || !la_tok_strtab_has(&tok->dec.text, id))
        return la_err_set(err, LA_ERR_INVALID_ARG, "token id %d is out of range [0, %d)", id,
                          tok->n_ids);
    return LA_OK;
}

/* ---- whole sequences ----------------------------------------------------------------- */

la_status la_tokenizer_decode(const la_tokenizer *tok, const int32_t *ids, int32_t n,
                              bool skip_special, char **out_text, size_t *out_len, la_err *err) {
    if (!tok || (!ids && n > 0) || n < 0 || !out_text)
        return la_err_set(err, LA_ERR_INVALID_ARG, "la_tokenizer_decode: bad argument");
    for (int32_t i = 0; i < n; i++) LA_TRY(check_id(tok, ids[i], err));
    la_detok d;
    detok_init(&d, tok, skip_special);
    la_tok_buf text = {0};
    bool ok = la_tok_buf_reserve(&text, 0);
    for (int32_t i = 0; i < n && ok; i++) ok = feed(&d, ids[i], &text);
    ok = ok && finish(&d, &text);
    la_tok_buf_free(&d.pending);
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
    detok_init(d, tok, skip_special);
    if (!la_tok_buf_reserve(&d->out, 64)) {
        free(d);
        return la_err_set(err, LA_ERR_NO_MEMORY, "detokenizer: out of memory");
    }
    *out = d;
    return LA_OK;
}

void la_detok_destroy(la_detok *d) {
    if (!d) return;
    la_tok_buf_free(&d->pending);
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
