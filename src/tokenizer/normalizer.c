/* The normalizer of tokenizer.json (normalizer.h), step for step as HF tokenizers'
 * normalizers (normalizers/{mod,utils,replace,prepend,strip,unicode,bert,byte_level}.rs).
 * Each step maps one whole string to the next; offsets are not tracked (ids do not need
 * them). Unicode data (normalization forms, categories, case) comes from utf8proc.
 */
#include "tokenizer/normalizer.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/fields.h"

/* ---- reading --------------------------------------------------------------------------- */

void la_tok_norm_fini(la_tok_norm *step) {
    free(step->a);
    free(step->b);
    pcre2_code_free(step->re);
    step->a = step->b = NULL;
    step->re = NULL;
}

static la_status read_replace(la_tokenizer *tok, const cJSON *n, la_tok_norm *step, la_err *err) {
    bool is_regex;
    const char *pat = pattern_field(n, &is_regex);
    const char *content = str_field(n, "content");
    if (!pat || !content)
        return fail(tok, err, LA_ERR_FORMAT, "normalizer Replace needs pattern and content");
    step->kind = is_regex ? LA_TOK_NORM_REPLACE_REGEX : LA_TOK_NORM_REPLACE;
    if (is_regex) LA_TRY(compile_regex(tok, "normalizer Replace", pat, &step->re, err));
    step->a_len = strlen(pat);
    step->b_len = strlen(content);
    step->a = dup_n(pat, step->a_len);
    step->b = dup_n(content, step->b_len);
    return step->a && step->b ? LA_OK : oom(tok, err);
}

static la_status read_step(la_tokenizer *tok, const cJSON *n, const char *type, la_tok_norm *step,
                           la_err *err) {
    static const struct {
        const char *name;
        la_unicode_form form;
    } k_forms[] = {{"NFC", LA_UNICODE_NFC}, {"NFD", LA_UNICODE_NFD}, {"NFKC", LA_UNICODE_NFKC},
                   {"NFKD", LA_UNICODE_NFKD}};
    for (size_t i = 0; i < sizeof k_forms / sizeof k_forms[0]; i++) {
        if (!strcmp(type, k_forms[i].name)) {
            step->kind = LA_TOK_NORM_UNICODE;
            step->form = k_forms[i].form;
            return LA_OK;
        }
    }
    if (!strcmp(type, "Prepend")) {
        const char *p = str_field(n, "prepend");
        if (!p) return fail(tok, err, LA_ERR_FORMAT, "normalizer Prepend without prepend");
        step->kind = LA_TOK_NORM_PREPEND;
        step->a_len = strlen(p);
        step->a = dup_n(p, step->a_len);
        return step->a ? LA_OK : oom(tok, err);
    }
    if (!strcmp(type, "Replace")) return read_replace(tok, n, step, err);
    if (!strcmp(type, "Lowercase")) {
        step->kind = LA_TOK_NORM_LOWERCASE;
    } else if (!strcmp(type, "Strip")) {
        step->kind = LA_TOK_NORM_STRIP;
        step->left = bool_field(n, "strip_left", true);
        step->right = bool_field(n, "strip_right", true);
    } else if (!strcmp(type, "StripAccents")) {
        step->kind = LA_TOK_NORM_STRIP_ACCENTS;
    } else if (!strcmp(type, "Nmt")) {
        step->kind = LA_TOK_NORM_NMT;
    } else if (!strcmp(type, "ByteLevel")) {
        step->kind = LA_TOK_NORM_BYTE_LEVEL;
    } else if (!strcmp(type, "BertNormalizer")) {
        step->kind = LA_TOK_NORM_BERT;
        step->clean_text = bool_field(n, "clean_text", true);
        step->chinese_chars = bool_field(n, "handle_chinese_chars", true);
        step->lowercase = bool_field(n, "lowercase", true);
        /* strip_accents: null means "as lowercase" (BertNormalizer::normalize) */
        step->strip_accents = bool_field(n, "strip_accents", step->lowercase);
    } else {
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "normalizer \"%s\" is not supported (NFC, NFD, NFKC, NFKD, Lowercase, Strip, "
                    "StripAccents, Replace, Prepend, Nmt, ByteLevel, BertNormalizer, Sequence)",
                    type);
    }
    return LA_OK;
}

static la_status add_normalizer(la_tokenizer *tok, const cJSON *n, int depth, la_err *err) {
    if (!n) return LA_OK;
    const char *type = str_field(n, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "normalizer without a type");
    if (!strcmp(type, "Sequence")) {
        if (depth >= 8) return fail(tok, err, LA_ERR_UNSUPPORTED, "normalizer Sequence nested too deep");
        const cJSON *e;
        cJSON_ArrayForEach(e, field(n, "normalizers")) LA_TRY(add_normalizer(tok, e, depth + 1, err));
        return LA_OK;
    }
    la_tok_norm step = {0};
    la_status s = read_step(tok, n, type, &step, err);
    la_tok_norm *v = s == LA_OK ? realloc(tok->norms, (size_t)(tok->n_norms + 1) * sizeof *v) : NULL;
    if (!v) {
        la_tok_norm_fini(&step);
        return s == LA_OK ? oom(tok, err) : s;
    }
    tok->norms = v;
    tok->norms[tok->n_norms++] = step;
    return LA_OK;
}

la_status la_tok_add_normalizer(la_tokenizer *tok, const cJSON *n, la_err *err) {
    return add_normalizer(tok, n, 0, err);
}

/* ---- running ---------------------------------------------------------------------------- */

/* Nmt (normalizers/unicode.rs, do_nmt): these controls are removed ... */
static bool nmt_removed(uint32_t c) {
    return (c >= 0x01 && c <= 0x08) || c == 0x0B || (c >= 0x0E && c <= 0x1F) || c == 0x7F ||
           c == 0x8F || c == 0x9F;
}

/* ... and these become ' '. */
static bool nmt_space(uint32_t c) {
    return c == 0x09 || c == 0x0A || c == 0x0C || c == 0x0D || c == 0x1680 ||
           (c >= 0x200B && c <= 0x200F) || c == 0x2028 || c == 0x2029 || c == 0x2581 ||
           c == 0xFEFF || c == 0xFFFD;
}

/* BertNormalizer's CJK blocks (normalizers/bert.rs, is_chinese_char). */
static bool is_chinese_char(uint32_t c) {
    return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
           (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
           (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
           (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

/* Per-character maps, a la NormalizedString::filter / map / transform. */
typedef enum char_map { MAP_LOWER, MAP_STRIP_MARKS, MAP_STRIP_NONSPACING, MAP_NMT, MAP_BERT_CLEAN,
                        MAP_BERT_CHINESE } char_map;

static bool map_chars(const char *s, size_t n, char_map m, la_tok_buf *out) {
    bool ok = la_tok_buf_reserve(out, n);
    for (size_t i = 0; i < n && ok;) {
        uint32_t c;
        int k = la_utf8_decode((const uint8_t *)s + i, &c);
        switch (m) {
        case MAP_LOWER: ok = la_tok_buf_append_lower(out, c); break;
        case MAP_STRIP_MARKS:
            if (!la_unicode_is_mark(c)) ok = la_tok_buf_append(out, s + i, (size_t)k);
            break;
        case MAP_STRIP_NONSPACING:
            if (!la_unicode_is_mark_nonspacing(c)) ok = la_tok_buf_append(out, s + i, (size_t)k);
            break;
        case MAP_NMT:
            if (nmt_space(c)) ok = la_tok_buf_append(out, " ", 1);
            else if (!nmt_removed(c)) ok = la_tok_buf_append(out, s + i, (size_t)k);
            break;
        case MAP_BERT_CLEAN: /* controls (other than \t \n \r), NUL and U+FFFD go; spaces -> ' ' */
            if (c == 0 || c == 0xFFFD || (c != '\t' && c != '\n' && c != '\r' && la_unicode_is_other(c)))
                break;
            if (c == '\t' || c == '\n' || c == '\r' || la_unicode_is_white_space(c))
                ok = la_tok_buf_append(out, " ", 1);
            else
                ok = la_tok_buf_append(out, s + i, (size_t)k);
            break;
        case MAP_BERT_CHINESE:
            if (is_chinese_char(c))
                ok = la_tok_buf_append(out, " ", 1) && la_tok_buf_append(out, s + i, (size_t)k) &&
                     la_tok_buf_append(out, " ", 1);
            else
                ok = la_tok_buf_append(out, s + i, (size_t)k);
            break;
        }
        i += (size_t)k;
    }
    return ok;
}

static bool strip_spaces(const char *s, size_t n, bool left, bool right, la_tok_buf *out) {
    size_t a = 0, b = n;
    while (left && a < b) {
        uint32_t c;
        int k = la_utf8_decode((const uint8_t *)s + a, &c);
        if (!la_unicode_is_white_space(c)) break;
        a += (size_t)k;
    }
    while (right && b > a) {
        size_t i = b - 1;
        while (i > a && ((uint8_t)s[i] & 0xC0) == 0x80) i--;
        uint32_t c;
        la_utf8_decode((const uint8_t *)s + i, &c);
        if (!la_unicode_is_white_space(c)) break;
        b = i;
    }
    return la_tok_buf_append(out, s + a, b - a);
}

static bool regex_replace(const la_tok_norm *r, const char *s, size_t n, la_tok_buf *out) {
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(r->re, NULL);
    la_tok_ranges ranges = {0};
    bool ok = md && la_tok_regex_ranges(r->re, md, s, n, &ranges) == 0;
    for (size_t i = 0; ok && i < ranges.n; i++) {
        const la_tok_range *g = &ranges.v[i];
        ok = g->match ? la_tok_buf_append(out, r->b, r->b_len)
                      : la_tok_buf_append(out, s + g->start, g->end - g->start);
    }
    if (ok && n == 0) ok = la_tok_buf_append(out, "", 0);
    free(ranges.v);
    pcre2_match_data_free(md);
    return ok;
}

static bool byte_level_chars(const char *s, size_t n, la_tok_buf *out) {
    bool ok = la_tok_buf_reserve(out, 2 * n);
    for (size_t i = 0; i < n && ok; i++) ok = la_tok_buf_append_cp(out, la_byte_level_char((uint8_t)s[i]));
    return ok;
}

static void swap_bufs(la_tok_buf *x, la_tok_buf *y) {
    la_tok_buf t = *x;
    *x = *y;
    *y = t;
    y->len = 0;
}

/* One step: a[0..) -> b (emptied first). */
static bool run_step(const la_tok_norm *r, const la_tok_buf *a, la_tok_buf *b) {
    const char *s = a->data ? a->data : "";
    size_t n = a->len;
    b->len = 0;
    switch (r->kind) {
    case LA_TOK_NORM_PREPEND:
        return n == 0 ? la_tok_buf_append(b, "", 0)
                      : la_tok_buf_append(b, r->a, r->a_len) && la_tok_buf_append(b, s, n);
    case LA_TOK_NORM_REPLACE: return la_tok_replace_all(s, n, r->a, r->a_len, r->b, r->b_len, b);
    case LA_TOK_NORM_REPLACE_REGEX: return regex_replace(r, s, n, b);
    case LA_TOK_NORM_UNICODE: return la_unicode_normalize(s, n, r->form, b);
    case LA_TOK_NORM_LOWERCASE: return map_chars(s, n, MAP_LOWER, b);
    case LA_TOK_NORM_STRIP: return strip_spaces(s, n, r->left, r->right, b);
    case LA_TOK_NORM_STRIP_ACCENTS: return map_chars(s, n, MAP_STRIP_MARKS, b);
    case LA_TOK_NORM_NMT: return map_chars(s, n, MAP_NMT, b);
    case LA_TOK_NORM_BYTE_LEVEL: return byte_level_chars(s, n, b);
    case LA_TOK_NORM_BERT: {
        /* clean_text, handle_chinese_chars, then strip_accents (NFD, drop Mn), lowercase */
        la_tok_buf t = {0}, u = {0};
        bool ok = la_tok_buf_append(&t, s, n);
        if (ok && r->clean_text) {
            ok = map_chars(t.data, t.len, MAP_BERT_CLEAN, &u);
            swap_bufs(&t, &u);
        }
        if (ok && r->chinese_chars) {
            ok = map_chars(t.data, t.len, MAP_BERT_CHINESE, &u);
            swap_bufs(&t, &u);
        }
        if (ok && r->strip_accents) {
            ok = la_unicode_normalize(t.data, t.len, LA_UNICODE_NFD, &u);
            swap_bufs(&t, &u);
            ok = ok && map_chars(t.data, t.len, MAP_STRIP_NONSPACING, &u);
            swap_bufs(&t, &u);
        }
        if (ok && r->lowercase) ok = map_chars(t.data, t.len, MAP_LOWER, b);
        else ok = ok && la_tok_buf_append(b, t.data ? t.data : "", t.len);
        la_tok_buf_free(&t);
        la_tok_buf_free(&u);
        return ok;
    }
    }
    return false;
}

bool la_tok_normalize(const la_tokenizer *tok, const char *s, size_t n, la_tok_buf *out) {
    if (tok->n_norms == 0) return la_tok_buf_append(out, s, n);
    la_tok_buf a = {0}, b = {0};
    bool ok = la_tok_buf_append(&a, s, n);
    for (int i = 0; i < tok->n_norms && ok; i++) {
        ok = run_step(&tok->norms[i], &a, &b);
        la_tok_buf t = a;
        a = b;
        b = t;
    }
    ok = ok && la_tok_buf_append(out, a.data ? a.data : "", a.len);
    la_tok_buf_free(&a);
    la_tok_buf_free(&b);
    return ok;
}
