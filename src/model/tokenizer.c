/* Loading tokenizer.json and tokenizer_config.json into la_tokenizer; the id getters.
 * Encoding is in tokenizer_encode.c, decoding and streaming in tokenizer_decode.c.
 *
 * Each part of tokenizer.json is read the way HF tokenizers deserialises it (the serde
 * shapes of tokenizer/serialization.rs, models/bpe/serialization.rs, ...). Parts this
 * engine does not implement are refused with LA_ERR_UNSUPPORTED naming the part, never
 * silently ignored, so a tokenizer that loads encodes as HF does.
 */
#include "model/tokenizer.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "model/tokenizer_internal.h"

/* Ids above this are refused: tables are sized by the largest id. */
#define LA_TOK_MAX_ID (1 << 24)

/* The GPT-2 pre-tokenizer regex of HF's ByteLevel (pre_tokenizers/byte_level.rs). */
static const char k_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

/* Rust regex \w in Unicode mode (regex-syntax: Alphabetic, M, Nd, Pc, Join_Control). */
static const char k_word_char_regex[] =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

/* ---- errors ------------------------------------------------------------------------- */

static la_status fail(const la_tokenizer *tok, la_err *err, la_status code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static la_status fail(const la_tokenizer *tok, la_err *err, la_status code, const char *fmt, ...) {
    char msg[LA_ERR_MSG_LEN];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return la_err_set(err, code, "%s: %s", tok->path, msg);
}

static la_status oom(const la_tokenizer *tok, la_err *err) {
    return fail(tok, err, LA_ERR_NO_MEMORY, "out of memory");
}

/* ---- JSON helpers -------------------------------------------------------------------- */

/* Read and parse a JSON file whose bytes must be UTF-8. *out NULL when optional and
 * absent. */
static la_status load_json(const char *path, bool required, cJSON **out, la_err *err) {
    *out = NULL;
    if (!required && !la_file_exists(path)) return LA_OK;
    char *text = NULL;
    size_t len = 0;
    LA_TRY(la_file_read(path, &text, &len, err));
    size_t bad = la_utf8_invalid_at((const uint8_t *)text, len);
    if (bad < len) {
        free(text);
        return la_err_set(err, LA_ERR_FORMAT, "%s: invalid UTF-8 at byte %zu", path, bad);
    }
    la_status s = la_json_parse(text, len, path, out, err);
    free(text);
    return s;
}

static const cJSON *field(const cJSON *obj, const char *key) {
    const cJSON *v = cJSON_IsObject(obj) ? cJSON_GetObjectItemCaseSensitive(obj, key) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

static const char *str_field(const cJSON *obj, const char *key) {
    const cJSON *v = field(obj, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static bool bool_field(const cJSON *obj, const char *key, bool dflt) {
    const cJSON *v = field(obj, key);
    return cJSON_IsBool(v) ? cJSON_IsTrue(v) : dflt;
}

/* A whole number in [0, LA_TOK_MAX_ID], or -1. */
static int32_t id_value(const cJSON *v) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (d < 0 || d > LA_TOK_MAX_ID || d != (double)(int32_t)d) return -1;
    return (int32_t)d;
}

/* {"String": s} -> s; {"Regex": r} -> *is_regex. NULL if neither. */
static const char *pattern_field(const cJSON *obj, bool *is_regex) {
    const cJSON *p = field(obj, "pattern");
    const char *s = str_field(p, "String");
    *is_regex = false;
    if (s) return s;
    s = str_field(p, "Regex");
    if (s) *is_regex = true;
    return s;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static bool valid_utf8(const char *s) {
    size_t n = strlen(s);
    return la_utf8_invalid_at((const uint8_t *)s, n) == n;
}

/* ---- regex ------------------------------------------------------------------------------ */

/* Rewrite an Oniguruma pattern (what HF's SysRegex runs) into PCRE2 syntax with the same
 * meaning, because two constructs differ:
 *
 *   \s, \S   PCRE2 with UCP counts U+180E MONGOLIAN VOWEL SEPARATOR as white space;
 *            Oniguruma (and Unicode since 6.3) does not. Both become \p{White_Space} /
 *            \P{White_Space}, which PCRE2 also accepts inside classes: [^\s\p{L}] ->
 *            [^\p{White_Space}\p{L}].
 *   (?i:...) PCRE2 folds 's' with U+017F LATIN SMALL LETTER LONG S and 'k' with U+212A
 *            KELVIN SIGN; HF's engine does not ("x'ſ" is not the contraction 's). ASCII
 *            letters in such a group become explicit classes: (?i:'s|'t) ->
 *            (?:'[sS]|'[tT]); other characters keep (?i:c).
 *
 * When a caseless group holds something this rewrite does not handle (a character class,
 * inline flags), the group is left caseless: only \s and \S are rewritten.
 */
static bool rewrite_regex(const char *pat, bool fold_case, la_tok_buf *out, bool *gave_up) {
    size_t n = strlen(pat);
    bool stack[256];
    int depth = 0;
    bool ci = false, in_class = false;
    *gave_up = false;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char e = pat[i + 1];
            i++;
            if (e == 's' || e == 'S') {
                if (!la_tok_buf_append(out, e == 's' ? "\\p{White_Space}" : "\\P{White_Space}", 15))
                    return false;
                continue;
            }
            if (!la_tok_buf_append(out, pat + i - 1, 2)) return false;
            if (strchr("pPxoNgk", e) && i + 1 < n && pat[i + 1] == '{') {
                size_t j = i + 1;
                while (j < n && pat[j] != '}') j++;
                if (!la_tok_buf_append(out, pat + i + 1, j + 1 - (i + 1) - (j == n))) return false;
                i = j < n ? j : n - 1;
            }
            continue;
        }
        if (in_class) {
            if (c == ']') in_class = false;
            if (ci && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) *gave_up = true;
            if (!la_tok_buf_append(out, &c, 1)) return false;
            continue;
        }
        if (c == '[') {
            in_class = true;
            size_t j = i + 1;
            if (j < n && pat[j] == '^') j++;
            if (j < n && pat[j] == ']') j++; /* a leading ] is a literal */
            if (!la_tok_buf_append(out, pat + i, j - i)) return false;
            i = j - 1;
            continue;
        }
        if (c == '(') {
            if (depth == (int)(sizeof stack / sizeof stack[0])) {
                *gave_up = true;
                return true;
            }
            stack[depth++] = ci;
            if (fold_case && strncmp(pat + i, "(?i:", 4) == 0) {
                ci = true;
                if (!la_tok_buf_append(out, "(?:", 3)) return false;
                i += 3;
                continue;
            }
            if (i + 1 < n && pat[i + 1] == '?') {
                /* copy the group opener: (?: (?= (?! (?> (?<= (?<! (?<name> (?P<name> */
                size_t j = i + 2;
                if (j < n && strchr(":=!>", pat[j])) {
                    j++;
                } else if (j < n && (pat[j] == '<' || pat[j] == 'P')) {
                    if (pat[j] == '<' && j + 1 < n && (pat[j + 1] == '=' || pat[j + 1] == '!')) {
                        j += 2;
                    } else {
                        while (j < n && pat[j] != '>') j++;
                        j = j < n ? j + 1 : n;
                    }
                } else {
                    if (ci || fold_case) *gave_up = true; /* inline flags */
                    j = i + 1;
                }
                if (!la_tok_buf_append(out, pat + i, j - i)) return false;
                i = j - 1;
                continue;
            }
            if (!la_tok_buf_append(out, "(", 1)) return false;
            continue;
        }
        if (c == ')') {
            if (depth > 0) ci = stack[--depth];
            if (!la_tok_buf_append(out, ")", 1)) return false;
            continue;
        }
        if (ci && ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))) {
            char cls[4] = {'[', (char)(c | 0x20), (char)(c & ~0x20), ']'};
            if (!la_tok_buf_append(out, cls, 4)) return false;
            continue;
        }
        if (ci && (unsigned char)c >= 0x80) {
            size_t k = 1;
            while (i + k < n && ((unsigned char)pat[i + k] & 0xC0) == 0x80) k++;
            if (!la_tok_buf_append(out, "(?i:", 4) || !la_tok_buf_append(out, pat + i, k) ||
                !la_tok_buf_append(out, ")", 1))
                return false;
            i += k - 1;
            continue;
        }
        if (!la_tok_buf_append(out, &c, 1)) return false;
    }
    return true;
}

static la_status compile_regex(la_tokenizer *tok, const char *where, const char *pat,
                               pcre2_code **out, la_err *err) {
    la_tok_buf rw = {0};
    bool gave_up = false;
    if (!rewrite_regex(pat, true, &rw, &gave_up)) {
        la_tok_buf_free(&rw);
        return oom(tok, err);
    }
    if (gave_up) {
        rw.len = 0;
        if (!rewrite_regex(pat, false, &rw, &gave_up)) {
            la_tok_buf_free(&rw);
            return oom(tok, err);
        }
    }
    int code;
    PCRE2_SIZE at;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)(rw.data ? rw.data : ""), rw.len,
                                   PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
    la_tok_buf_free(&rw);
    if (!re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(code, msg, sizeof msg);
        return fail(tok, err, LA_ERR_FORMAT, "%s regex \"%s\" does not compile: %s", where, pat,
                    (const char *)msg);
    }
    pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* falls back to the interpreter if absent */
    *out = re;
    return LA_OK;
}

bool la_tok_is_word_char(const la_tokenizer *tok, const char *s, size_t n) {
    if (!tok->word_re || n == 0) return false;
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return false;
    int rc = pcre2_match(tok->word_re, (PCRE2_SPTR)s, n, 0, PCRE2_ANCHORED | PCRE2_NO_UTF_CHECK,
                         md, NULL);
    pcre2_match_data_free(md);
    return rc > 0;
}

/* ---- model: BPE ----------------------------------------------------------------------- */

static la_status check_bpe_options(la_tokenizer *tok, const cJSON *model, la_err *err) {
    const char *type = str_field(model, "type");
    if (type && strcmp(type, "BPE") != 0)
        return fail(tok, err, LA_ERR_UNSUPPORTED, "model type \"%s\" is not supported (only BPE)",
                    type);
    if (!cJSON_IsObject(field(model, "vocab")))
        return fail(tok, err, LA_ERR_FORMAT, "model.vocab is missing or not an object");
    if (!cJSON_IsArray(field(model, "merges")))
        return fail(tok, err, LA_ERR_FORMAT, "model.merges is missing or not an array");
    const cJSON *dropout = field(model, "dropout");
    if (dropout && (!cJSON_IsNumber(dropout) || dropout->valuedouble != 0))
        return fail(tok, err, LA_ERR_UNSUPPORTED, "model.dropout is not supported at inference");
    const char *prefix = str_field(model, "continuing_subword_prefix");
    const char *suffix = str_field(model, "end_of_word_suffix");
    if ((prefix && *prefix) || (suffix && *suffix))
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "model.continuing_subword_prefix / end_of_word_suffix are not supported");
    return LA_OK;
}

static la_status vocab_max_id(la_tokenizer *tok, const cJSON *vocab, int32_t *max_id, la_err *err) {
    const cJSON *e;
    cJSON_ArrayForEach(e, vocab) {
        int32_t id = id_value(e);
        if (id < 0)
            return fail(tok, err, LA_ERR_FORMAT, "model.vocab[\"%s\"] is not an id in [0, %d]",
                        e->string, LA_TOK_MAX_ID);
        if (!valid_utf8(e->string))
            return fail(tok, err, LA_ERR_FORMAT, "model.vocab holds a token that is not UTF-8");
        if (id > *max_id) *max_id = id;
    }
    return LA_OK;
}

static la_status load_vocab(la_tokenizer *tok, const cJSON *model, la_err *err) {
    la_tok_bpe *m = &tok->bpe;
    if (!la_tok_strtab_init(&m->tokens, tok->n_ids)) return oom(tok, err);
    const cJSON *e;
    cJSON_ArrayForEach(e, field(model, "vocab")) {
        if (!la_tok_strtab_set(&m->tokens, id_value(e), e->string, strlen(e->string)))
            return oom(tok, err);
    }
    if (!la_tok_strmap_build(&m->vocab, &m->tokens)) return oom(tok, err);
    m->ignore_merges = bool_field(model, "ignore_merges", false);
    m->byte_fallback = bool_field(model, "byte_fallback", false);
    m->fuse_unk = bool_field(model, "fuse_unk", false);
    m->unk_id = -1;
    const char *unk = str_field(model, "unk_token");
    if (unk) {
        m->unk_id = la_tok_strmap_get(&m->vocab, unk, strlen(unk));
        if (m->unk_id < 0)
            return fail(tok, err, LA_ERR_FORMAT, "model.unk_token \"%s\" is not in the vocab", unk);
    }
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        m->byte_ids[b] = la_tok_strmap_get(&m->vocab, name, 6);
    }
    return LA_OK;
}

/* Merges are "a b" strings (one space) or ["a", "b"] pairs; rank = position. The merged
 * token a+b must be in the vocab (HF models/bpe/model.rs, MergeTokenOutOfVocabulary). */
static la_status load_merges(la_tokenizer *tok, const cJSON *model, la_err *err) {
    la_tok_bpe *m = &tok->bpe;
    const cJSON *merges = field(model, "merges");
    if (!la_tok_pairmap_init(&m->merges, (size_t)cJSON_GetArraySize(merges)))
        return oom(tok, err);
    la_tok_buf joined = {0};
    uint32_t rank = 0;
    la_status s = LA_OK;
    const cJSON *e;
    cJSON_ArrayForEach(e, merges) {
        const char *a = NULL, *b = NULL;
        size_t a_len = 0, b_len = 0;
        if (cJSON_IsString(e)) {
            const char *sp = strchr(e->valuestring, ' ');
            if (sp && !strchr(sp + 1, ' ')) {
                a = e->valuestring;
                a_len = (size_t)(sp - a);
                b = sp + 1;
                b_len = strlen(b);
            }
        } else if (cJSON_IsArray(e) && cJSON_GetArraySize(e) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(e, 1))) {
            a = cJSON_GetArrayItem(e, 0)->valuestring;
            b = cJSON_GetArrayItem(e, 1)->valuestring;
            a_len = strlen(a);
            b_len = strlen(b);
        }
        if (!a) {
            s = fail(tok, err, LA_ERR_FORMAT, "model.merges[%u] is not \"a b\" or [\"a\", \"b\"]",
                     rank);
            break;
        }
        int32_t ia = la_tok_strmap_get(&m->vocab, a, a_len);
        int32_t ib = la_tok_strmap_get(&m->vocab, b, b_len);
        joined.len = 0;
        if (!la_tok_buf_append(&joined, a, a_len) || !la_tok_buf_append(&joined, b, b_len)) {
            s = oom(tok, err);
            break;
        }
        int32_t inew = la_tok_strmap_get(&m->vocab, joined.data, joined.len);
        if (ia < 0 || ib < 0 || inew < 0) {
            s = fail(tok, err, LA_ERR_FORMAT, "model.merges[%u]: \"%s\" is not in the vocab", rank,
                     ia < 0 ? a : ib < 0 ? b : joined.data);
            break;
        }
        if (!la_tok_pairmap_put(&m->merges, ia, ib, rank, inew)) {
            s = oom(tok, err);
            break;
        }
        rank++;
    }
    la_tok_buf_free(&joined);
    return s;
}

/* ---- added tokens -------------------------------------------------------------------- */

static la_status parse_added(la_tokenizer *tok, const cJSON *list, int32_t *max_id, la_err *err) {
    if (!list) return LA_OK;
    if (!cJSON_IsArray(list))
        return fail(tok, err, LA_ERR_FORMAT, "added_tokens is not an array");
    tok->added = calloc((size_t)cJSON_GetArraySize(list) + 1, sizeof *tok->added);
    if (!tok->added) return oom(tok, err);
    const cJSON *e;
    cJSON_ArrayForEach(e, list) {
        const char *content = str_field(e, "content");
        int32_t id = id_value(field(e, "id"));
        if (!content || id < 0)
            return fail(tok, err, LA_ERR_FORMAT,
                        "added_tokens[%d] needs a string content and an id in [0, %d]",
                        tok->n_added, LA_TOK_MAX_ID);
        if (!valid_utf8(content))
            return fail(tok, err, LA_ERR_FORMAT, "added_tokens[%d].content is not UTF-8",
                        tok->n_added);
        if (!*content) continue; /* HF ignores empty added tokens */
        la_tok_added *a = &tok->added[tok->n_added];
        a->len = strlen(content);
        a->content = dup_n(content, a->len);
        if (!a->content) return oom(tok, err);
        a->special = bool_field(e, "special", false);
        a->lstrip = bool_field(e, "lstrip", false);
        a->rstrip = bool_field(e, "rstrip", false);
        a->single_word = bool_field(e, "single_word", false);
        a->normalized = bool_field(e, "normalized", !a->special);
        a->id = id;
        if (id > *max_id) *max_id = id;
        tok->n_added++;
    }
    return LA_OK;
}

/* A token whose content is in the model vocab keeps the vocab's id (HF AddedVocabulary::
 * add_tokens: token_to_id first). */
static la_status index_added(la_tokenizer *tok, la_err *err) {
    tok->added_of_id = malloc((size_t)tok->n_ids * sizeof *tok->added_of_id);
    if (!tok->added_of_id || !la_tok_strtab_init(&tok->added_text, tok->n_ids)) return oom(tok, err);
    for (int32_t i = 0; i < tok->n_ids; i++) tok->added_of_id[i] = -1;
    for (int i = 0; i < tok->n_added; i++) {
        la_tok_added *a = &tok->added[i];
        int32_t vid = la_tok_strmap_get(&tok->bpe.vocab, a->content, a->len);
        if (vid >= 0) a->id = vid;
        tok->added_of_id[a->id] = i;
        if (!la_tok_strtab_set(&tok->added_text, a->id, a->content, a->len)) return oom(tok, err);
    }
    if (!la_tok_strmap_build(&tok->added_map, &tok->added_text)) return oom(tok, err);
    return LA_OK;
}

static bool trie_add_node(la_tok_trie *t) {
    if (t->n_nodes == t->cap_nodes) {
        int32_t cap = t->cap_nodes ? 2 * t->cap_nodes : 64;
        int32_t *v = realloc(t->terminal, (size_t)cap * sizeof *v);
        if (!v) return false;
        t->terminal = v;
        t->cap_nodes = cap;
    }
    t->terminal[t->n_nodes++] = -1;
    return true;
}

static bool trie_insert(la_tok_trie *t, const char *s, size_t n, int32_t added_index) {
    if (n == 0) return true;
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint8_t b = (uint8_t)s[i];
        const la_tok_merge *e = la_tok_pairmap_get(&t->edges, node, b);
        if (e) {
            node = e->new_id;
            continue;
        }
        if (!trie_add_node(t) || !la_tok_pairmap_put(&t->edges, node, b, 0, t->n_nodes - 1))
            return false;
        node = t->n_nodes - 1;
    }
    if (t->terminal[node] < 0) t->terminal[node] = added_index; /* first pattern wins */
    t->first_byte[(uint8_t)s[0]] = true;
    t->empty = false;
    return true;
}

/* Special tokens first, then the others, in file order (HF refresh_added_tokens). */
static la_status build_tries(la_tokenizer *tok, la_err *err) {
    la_tok_trie *tries[2] = {&tok->trie_raw, &tok->trie_norm};
    for (int k = 0; k < 2; k++) {
        tries[k]->empty = true;
        if (!la_tok_pairmap_init(&tries[k]->edges, 64) || !trie_add_node(tries[k]))
            return oom(tok, err);
    }
    la_tok_buf norm = {0};
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < tok->n_added; i++) {
            const la_tok_added *a = &tok->added[i];
            if (a->special != (pass == 0)) continue;
            bool ok;
            if (!a->normalized) {
                ok = trie_insert(&tok->trie_raw, a->content, a->len, i);
            } else {
                norm.len = 0;
                ok = la_tok_normalize(tok, a->content, a->len, &norm) &&
                     trie_insert(&tok->trie_norm, norm.data, norm.len, i);
                if (ok && tok->n_norms) {
                    tok->added[i].shown_len = norm.len;
                    tok->added[i].shown = dup_n(norm.data ? norm.data : "", norm.len);
                    ok = tok->added[i].shown != NULL;
                }
            }
            if (!ok) {
                la_tok_buf_free(&norm);
                return oom(tok, err);
            }
        }
    }
    la_tok_buf_free(&norm);
    for (int i = 0; i < tok->n_added; i++) {
        if (tok->added[i].single_word && !tok->word_re) {
            int code;
            PCRE2_SIZE at;
            tok->word_re = pcre2_compile((PCRE2_SPTR)k_word_char_regex, PCRE2_ZERO_TERMINATED,
                                         PCRE2_UTF | PCRE2_UCP, &code, &at, NULL);
            if (!tok->word_re) return oom(tok, err);
        }
    }
    return LA_OK;
}

/* ---- normalizer ------------------------------------------------------------------------ */

static la_status add_normalizer(la_tokenizer *tok, const cJSON *n, int depth, la_err *err) {
    if (!n) return LA_OK;
    const char *type = str_field(n, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "normalizer without a type");
    if (!strcmp(type, "Sequence") && depth < 8) {
        const cJSON *e;
        cJSON_ArrayForEach(e, field(n, "normalizers")) LA_TRY(add_normalizer(tok, e, depth + 1, err));
        return LA_OK;
    }
    la_tok_norm step = {0};
    if (!strcmp(type, "Prepend")) {
        const char *p = str_field(n, "prepend");
        if (!p) return fail(tok, err, LA_ERR_FORMAT, "normalizer Prepend without prepend");
        step.kind = LA_TOK_NORM_PREPEND;
        step.a_len = strlen(p);
        step.a = dup_n(p, step.a_len);
        if (!step.a) return oom(tok, err);
    } else if (!strcmp(type, "Replace")) {
        bool is_regex;
        const char *pat = pattern_field(n, &is_regex);
        const char *content = str_field(n, "content");
        if (!pat || !content)
            return fail(tok, err, LA_ERR_FORMAT, "normalizer Replace needs pattern and content");
        if (is_regex)
            return fail(tok, err, LA_ERR_UNSUPPORTED,
                        "normalizer Replace with a Regex pattern is not supported");
        step.kind = LA_TOK_NORM_REPLACE;
        step.a_len = strlen(pat);
        step.b_len = strlen(content);
        step.a = dup_n(pat, step.a_len);
        step.b = dup_n(content, step.b_len);
        if (!step.a || !step.b) {
            free(step.a);
            free(step.b);
            return oom(tok, err);
        }
    } else {
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "normalizer \"%s\" is not supported (Prepend, Replace, Sequence)", type);
    }
    la_tok_norm *v = realloc(tok->norms, (size_t)(tok->n_norms + 1) * sizeof *v);
    if (!v) {
        free(step.a);
        free(step.b);
        return oom(tok, err);
    }
    tok->norms = v;
    tok->norms[tok->n_norms++] = step;
    return LA_OK;
}

/* ---- pre-tokenizer --------------------------------------------------------------------- */

static la_status parse_behavior(la_tokenizer *tok, const char *b, la_tok_split_behavior *out,
                                la_err *err) {
    static const struct {
        const char *name;
        la_tok_split_behavior b;
    } k_names[] = {
        {"Removed", LA_TOK_SPLIT_REMOVED},
        {"Isolated", LA_TOK_SPLIT_ISOLATED},
        {"MergedWithPrevious", LA_TOK_SPLIT_MERGED_WITH_PREVIOUS},
        {"MergedWithNext", LA_TOK_SPLIT_MERGED_WITH_NEXT},
        {"Contiguous", LA_TOK_SPLIT_CONTIGUOUS},
    };
    for (size_t i = 0; b && i < sizeof k_names / sizeof k_names[0]; i++) {
        if (!strcmp(b, k_names[i].name)) {
            *out = k_names[i].b;
            return LA_OK;
        }
    }
    return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer Split: unknown behavior \"%s\"",
                b ? b : "(missing)");
}

static la_status parse_prepend(la_tokenizer *tok, const cJSON *n, la_tok_prepend *out, la_err *err) {
    const char *scheme = str_field(n, "prepend_scheme");
    if (!scheme) {
        *out = bool_field(n, "add_prefix_space", true) ? LA_TOK_PREPEND_ALWAYS : LA_TOK_PREPEND_NEVER;
    } else if (!strcmp(scheme, "always")) {
        *out = LA_TOK_PREPEND_ALWAYS;
    } else if (!strcmp(scheme, "first")) {
        *out = LA_TOK_PREPEND_FIRST;
    } else if (!strcmp(scheme, "never")) {
        *out = LA_TOK_PREPEND_NEVER;
    } else {
        return fail(tok, err, LA_ERR_FORMAT, "Metaspace: unknown prepend_scheme \"%s\"", scheme);
    }
    return LA_OK;
}

/* One code point from a JSON string field (Metaspace replacement, Strip content). */
static la_status char_field(la_tokenizer *tok, const cJSON *n, const char *key, const char *what,
                            uint32_t *cp, la_err *err) {
    const char *s = str_field(n, key);
    if (!s || !*s) return fail(tok, err, LA_ERR_FORMAT, "%s needs a one-character %s", what, key);
    int k = la_utf8_decode((const uint8_t *)s, cp);
    if (s[k] != '\0') return fail(tok, err, LA_ERR_FORMAT, "%s: %s must be one character", what, key);
    return LA_OK;
}

static la_status add_pre_step(la_tokenizer *tok, la_tok_pre step, la_err *err) {
    la_tok_pre *v = realloc(tok->pres, (size_t)(tok->n_pres + 1) * sizeof *v);
    if (!v) {
        pcre2_code_free(step.re);
        free(step.literal);
        return oom(tok, err);
    }
    tok->pres = v;
    tok->pres[tok->n_pres++] = step;
    return LA_OK;
}

static la_status add_pre_tokenizer(la_tokenizer *tok, const cJSON *n, int depth, la_err *err) {
    if (!n) return LA_OK;
    const char *type = str_field(n, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer without a type");
    if (!strcmp(type, "Sequence") && depth < 8) {
        const cJSON *e;
        cJSON_ArrayForEach(e, field(n, "pretokenizers")) LA_TRY(add_pre_tokenizer(tok, e, depth + 1, err));
        return LA_OK;
    }
    la_tok_pre step = {0};
    if (!strcmp(type, "Split")) {
        bool is_regex;
        const char *pat = pattern_field(n, &is_regex);
        if (!pat) return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer Split without a pattern");
        step.kind = LA_TOK_PRE_SPLIT;
        step.invert = bool_field(n, "invert", false);
        LA_TRY(parse_behavior(tok, str_field(n, "behavior"), &step.behavior, err));
        if (is_regex) {
            LA_TRY(compile_regex(tok, "pre_tokenizer Split", pat, &step.re, err));
        } else {
            step.literal_len = strlen(pat);
            step.literal = dup_n(pat, step.literal_len);
            if (!step.literal) return oom(tok, err);
        }
    } else if (!strcmp(type, "ByteLevel")) {
        step.kind = LA_TOK_PRE_BYTE_LEVEL;
        step.add_prefix_space = bool_field(n, "add_prefix_space", true);
        step.behavior = LA_TOK_SPLIT_ISOLATED;
        if (bool_field(n, "use_regex", true))
            LA_TRY(compile_regex(tok, "ByteLevel", k_gpt2_regex, &step.re, err));
    } else if (!strcmp(type, "Metaspace")) {
        step.kind = LA_TOK_PRE_METASPACE;
        uint32_t cp;
        LA_TRY(char_field(tok, n, "replacement", "pre_tokenizer Metaspace", &cp, err));
        la_tok_buf b = {0};
        if (!la_tok_buf_append_cp(&b, cp)) return oom(tok, err);
        memcpy(step.repl, b.data, b.len);
        step.repl_len = b.len;
        la_tok_buf_free(&b);
        step.split = bool_field(n, "split", true);
        LA_TRY(parse_prepend(tok, n, &step.prepend, err));
    } else {
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "pre_tokenizer \"%s\" is not supported (Split, ByteLevel, Metaspace, Sequence)",
                    type);
    }
    return add_pre_step(tok, step, err);
}

/* ---- decoder ---------------------------------------------------------------------------- */

/* Decoders: ByteLevel; Metaspace; or a Sequence read as Replace* then ByteFallback? then
 * Fuse? then Strip? (Llama 2 / Mistral: Replace("▁", " "), ByteFallback, Fuse,
 * Strip(" ", 1, 0)). Replace rules are applied to every token string at load time. */
static la_status parse_decoder(la_tokenizer *tok, const cJSON *d, la_tok_norm **replaces,
                               int *n_replaces, la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    dec->kind = LA_TOK_DEC_JOIN;
    if (!d) return LA_OK;
    const char *type = str_field(d, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "decoder without a type");
    if (!strcmp(type, "ByteLevel")) {
        dec->kind = LA_TOK_DEC_BYTE_LEVEL;
        return LA_OK;
    }
    if (!strcmp(type, "Metaspace")) {
        dec->kind = LA_TOK_DEC_METASPACE;
        LA_TRY(char_field(tok, d, "replacement", "decoder Metaspace", &dec->replacement, err));
        la_tok_prepend p;
        LA_TRY(parse_prepend(tok, d, &p, err));
        dec->drop_first_repl = p != LA_TOK_PREPEND_NEVER;
        return LA_OK;
    }
    bool is_seq = !strcmp(type, "Sequence");
    const cJSON *list = field(d, "decoders");
    int n = is_seq ? cJSON_GetArraySize(list) : 1;
    const char *first = is_seq ? str_field(cJSON_GetArrayItem(list, 0), "type") : NULL;
    if (n == 1 && first && !strcmp(first, "ByteLevel")) {
        dec->kind = LA_TOK_DEC_BYTE_LEVEL;
        return LA_OK;
    }
    dec->kind = LA_TOK_DEC_PIECES;
    int stage = 0; /* 0 Replace*, 1 after ByteFallback, 2 after Fuse, 3 after Strip */
    bool fused = false;
    for (int i = 0; i < n; i++) {
        const cJSON *e = is_seq ? cJSON_GetArrayItem(list, i) : d;
        const char *t = str_field(e, "type");
        if (!t) return fail(tok, err, LA_ERR_FORMAT, "decoder without a type");
        if (!strcmp(t, "Replace") && stage == 0) {
            bool is_regex;
            const char *pat = pattern_field(e, &is_regex);
            const char *content = str_field(e, "content");
            if (!pat || !content || is_regex || !*pat)
                return fail(tok, err, LA_ERR_UNSUPPORTED,
                            "decoder Replace needs a non-empty String pattern and a content");
            la_tok_norm *v = realloc(*replaces, (size_t)(*n_replaces + 1) * sizeof *v);
            if (!v) return oom(tok, err);
            *replaces = v;
            la_tok_norm *r = &v[(*n_replaces)++];
            r->kind = LA_TOK_NORM_REPLACE;
            r->a_len = strlen(pat);
            r->b_len = strlen(content);
            r->a = dup_n(pat, r->a_len);
            r->b = dup_n(content, r->b_len);
            if (!r->a || !r->b) return oom(tok, err);
        } else if (!strcmp(t, "ByteFallback") && stage < 1) {
            dec->byte_fallback = true;
            stage = 1;
        } else if (!strcmp(t, "Fuse") && stage < 2) {
            fused = true;
            stage = 2;
        } else if (!strcmp(t, "Strip") && stage < 3 && fused) {
            int64_t start = 0, stop = 0;
            LA_TRY(char_field(tok, e, "content", "decoder Strip", &dec->strip_content, err));
            LA_TRY(la_json_get_int64(e, "start", false, &start, tok->path, err));
            LA_TRY(la_json_get_int64(e, "stop", false, &stop, tok->path, err));
            if (start < 0 || stop < 0 || start > 1 << 20 || stop > 1 << 20)
                return fail(tok, err, LA_ERR_FORMAT, "decoder Strip: bad start/stop");
            dec->strip = true;
            dec->strip_start = (int32_t)start;
            dec->strip_stop = (int32_t)stop;
            stage = 3;
        } else {
            return fail(tok, err, LA_ERR_UNSUPPORTED,
                        "decoder \"%s\" in this position is not supported (ByteLevel, Metaspace, "
                        "or Sequence[Replace..., ByteFallback, Fuse, Strip])",
                        t);
        }
    }
    return LA_OK;
}

/* "<0xNN>" as HF's ByteFallback reads it: 6 bytes, u8::from_str_radix(NN, 16) (which
 * also takes a leading '+'). */
static int byte_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) != 0 || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9' ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                : -1;
        if (d < 0 && !(i == 3 && c == '+')) return -1;
        v = d < 0 ? 0 : v * 16 + d;
    }
    return v;
}

/* The string of an id as HF's id_to_token: added tokens first (a normalized one as
 * normalized), then the model. */
static const char *id_string(const la_tokenizer *tok, int32_t id, size_t *n) {
    int32_t k = tok->added_of_id[id];
    if (k >= 0 && tok->added[k].shown) {
        *n = tok->added[k].shown_len;
        return tok->added[k].shown;
    }
    if (la_tok_strtab_has(&tok->added_text, id)) return la_tok_strtab_get(&tok->added_text, id, n);
    if (la_tok_strtab_has(&tok->bpe.tokens, id)) return la_tok_strtab_get(&tok->bpe.tokens, id, n);
    return NULL;
}

static la_status build_decoder_tables(la_tokenizer *tok, la_tok_norm *replaces, int n_replaces,
                                      la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    if (!la_tok_strtab_init(&dec->text, tok->n_ids)) return oom(tok, err);
    if (dec->byte_fallback) {
        dec->byte_of = malloc((size_t)tok->n_ids * sizeof *dec->byte_of);
        if (!dec->byte_of) return oom(tok, err);
    }
    la_tok_buf a = {0}, b = {0};
    la_status s = LA_OK;
    for (int32_t id = 0; id < tok->n_ids && s == LA_OK; id++) {
        if (dec->byte_of) dec->byte_of[id] = -1;
        size_t n;
        const char *str = id_string(tok, id, &n);
        if (!str) continue;
        a.len = 0;
        bool ok = true;
        if (dec->kind == LA_TOK_DEC_BYTE_LEVEL) {
            /* every character through the alphabet, or the token's own bytes if one is
             * not in it (HF decoders/byte_level.rs) */
            for (size_t i = 0; i < n && ok;) {
                uint32_t cp;
                i += (size_t)la_utf8_decode((const uint8_t *)str + i, &cp);
                int byte = la_byte_level_byte(cp);
                if (byte < 0) {
                    a.len = 0;
                    ok = la_tok_buf_append(&a, str, n);
                    break;
                }
                uint8_t c = (uint8_t)byte;
                ok = la_tok_buf_append(&a, &c, 1);
            }
        } else {
            ok = la_tok_buf_append(&a, str, n);
            for (int r = 0; r < n_replaces && ok; r++) {
                b.len = 0;
                ok = la_tok_replace_all(a.data, a.len, replaces[r].a, replaces[r].a_len, replaces[r].b,
                                        replaces[r].b_len, &b);
                la_tok_buf t = a;
                a = b;
                b = t;
            }
            if (ok && dec->byte_of) dec->byte_of[id] = (int16_t)byte_token(a.data, a.len);
        }
        if (!ok || !la_tok_strtab_set(&dec->text, id, a.data ? a.data : "", a.len)) s = oom(tok, err);
    }
    la_tok_buf_free(&a);
    la_tok_buf_free(&b);
    return s;
}

/* ---- post-processor -------------------------------------------------------------------- */

static la_status parse_template(la_tokenizer *tok, const cJSON *p, la_err *err) {
    const cJSON *single = field(p, "single");
    const cJSON *specials = field(p, "special_tokens");
    if (!cJSON_IsArray(single))
        return fail(tok, err, LA_ERR_FORMAT, "post_processor TemplateProcessing without single");
    int n_seq = 0;
    la_tok_ids pre = {0}, post = {0};
    const cJSON *e;
    cJSON_ArrayForEach(e, single) {
        const cJSON *sp = field(e, "SpecialToken");
        const cJSON *seq = field(e, "Sequence");
        if (seq) {
            const char *which = str_field(seq, "id");
            if (!which || strcmp(which, "A") != 0 || n_seq++) {
                free(pre.data);
                free(post.data);
                return fail(tok, err, LA_ERR_UNSUPPORTED,
                            "post_processor: a single template must hold sequence A once");
            }
            continue;
        }
        const char *name = str_field(sp, "id");
        const cJSON *ids = field(field(specials, name ? name : ""), "ids");
        if (!name || !cJSON_IsArray(ids)) {
            free(pre.data);
            free(post.data);
            return fail(tok, err, LA_ERR_FORMAT,
                        "post_processor: special token \"%s\" has no ids in special_tokens",
                        name ? name : "(missing)");
        }
        const cJSON *v;
        cJSON_ArrayForEach(v, ids) {
            int32_t id = id_value(v);
            if (id < 0 || id >= tok->n_ids) {
                free(pre.data);
                free(post.data);
                return fail(tok, err, LA_ERR_FORMAT, "post_processor: special token \"%s\": bad id",
                            name);
            }
            if (!la_tok_ids_push(n_seq ? &post : &pre, id)) {
                free(pre.data);
                free(post.data);
                return oom(tok, err);
            }
        }
    }
    if (n_seq != 1) {
        free(pre.data);
        free(post.data);
        return fail(tok, err, LA_ERR_UNSUPPORTED, "post_processor: template without sequence A");
    }
    free(tok->tpl_prefix);
    free(tok->tpl_suffix);
    tok->tpl_prefix = pre.data;
    tok->n_prefix = (int)pre.len;
    tok->tpl_suffix = post.data;
    tok->n_suffix = (int)post.len;
    return LA_OK;
}

static la_status parse_post_processor(la_tokenizer *tok, const cJSON *p, int depth, la_err *err) {
    if (!p) return LA_OK;
    const char *type = str_field(p, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "post_processor without a type");
    if (!strcmp(type, "Sequence") && depth < 8) {
        const cJSON *e;
        cJSON_ArrayForEach(e, field(p, "processors")) LA_TRY(parse_post_processor(tok, e, depth + 1, err));
        return LA_OK;
    }
    if (!strcmp(type, "ByteLevel")) return LA_OK; /* offsets only */
    if (!strcmp(type, "TemplateProcessing")) return parse_template(tok, p, err);
    return fail(tok, err, LA_ERR_UNSUPPORTED,
                "post_processor \"%s\" is not supported (TemplateProcessing, ByteLevel, Sequence)",
                type);
}

/* ---- tokenizer_config.json ------------------------------------------------------------ */

/* bos_token / eos_token: a string or an AddedToken object {"content": ...}. */
static const char *special_name(const cJSON *cfg, const char *key) {
    const cJSON *v = field(cfg, key);
    if (cJSON_IsString(v)) return v->valuestring;
    return str_field(v, "content");
}

static la_status load_config(la_tokenizer *tok, const char *dir, la_err *err) {
    char *path = la_path_join(dir, "tokenizer_config.json");
    if (!path) return oom(tok, err);
    cJSON *cfg = NULL;
    la_status s = load_json(path, false, &cfg, err);
    if (s == LA_OK && cfg && !cJSON_IsObject(cfg))
        s = la_err_set(err, LA_ERR_FORMAT, "%s: not a JSON object", path);
    if (s != LA_OK) {
        free(path);
        cJSON_Delete(cfg);
        return s;
    }
    tok->bos_id = tok->n_prefix > 0 ? tok->tpl_prefix[0] : -1;
    tok->eos_id = -1;
    if (cfg) {
        const char *bos = special_name(cfg, "bos_token");
        const char *eos = special_name(cfg, "eos_token");
        if (bos) tok->bos_id = la_tokenizer_token_to_id(tok, bos);
        if (eos) tok->eos_id = la_tokenizer_token_to_id(tok, eos);
        if ((bos && tok->bos_id < 0) || (eos && tok->eos_id < 0))
            s = la_err_set(err, LA_ERR_FORMAT, "%s: %s \"%s\" is not a token", path,
                           bos && tok->bos_id < 0 ? "bos_token" : "eos_token",
                           bos && tok->bos_id < 0 ? bos : eos);
        /* transformers' LlamaTokenizerFast rebuilds the template from add_bos_token
         * (default true) and add_eos_token (default false): update_post_processor() */
        const char *cls = str_field(cfg, "tokenizer_class");
        if (s == LA_OK && cls &&
            (!strcmp(cls, "LlamaTokenizer") || !strcmp(cls, "LlamaTokenizerFast"))) {
            bool add_bos = bool_field(cfg, "add_bos_token", true);
            bool add_eos = bool_field(cfg, "add_eos_token", false);
            int32_t *pre = malloc(sizeof *pre), *post = malloc(sizeof *post);
            if (!pre || !post) {
                free(pre);
                free(post);
                s = oom(tok, err);
            } else {
                free(tok->tpl_prefix);
                free(tok->tpl_suffix);
                *pre = tok->bos_id;
                *post = tok->eos_id;
                tok->tpl_prefix = pre;
                tok->tpl_suffix = post;
                tok->n_prefix = add_bos && tok->bos_id >= 0;
                tok->n_suffix = add_eos && tok->eos_id >= 0;
            }
        }
        const cJSON *tpl = field(cfg, "chat_template");
        const char *text = cJSON_IsString(tpl) ? tpl->valuestring : NULL;
        if (cJSON_IsArray(tpl)) { /* [{"name": ..., "template": ...}]: "default", else first */
            const cJSON *e;
            cJSON_ArrayForEach(e, tpl) {
                const char *name = str_field(e, "name");
                if (!text || (name && !strcmp(name, "default"))) text = str_field(e, "template");
            }
        }
        if (s == LA_OK && text && !(tok->chat_template = dup_n(text, strlen(text)))) s = oom(tok, err);
    }
    cJSON_Delete(cfg);
    free(path);
    if (s == LA_OK && !tok->chat_template) { /* transformers >= 4.43 may save it apart */
        char *jinja = la_path_join(dir, "chat_template.jinja");
        if (!jinja) return oom(tok, err);
        if (la_file_exists(jinja)) {
            size_t len;
            s = la_file_read(jinja, &tok->chat_template, &len, err);
            if (s == LA_OK && la_utf8_invalid_at((const uint8_t *)tok->chat_template, len) < len)
                s = la_err_set(err, LA_ERR_FORMAT, "%s: invalid UTF-8", jinja);
        }
        free(jinja);
    }
    return s;
}

/* ---- load ----------------------------------------------------------------------------- */

static la_status load_tokenizer_json(la_tokenizer *tok, const cJSON *root, la_err *err) {
    if (!cJSON_IsObject(root)) return fail(tok, err, LA_ERR_FORMAT, "not a JSON object");
    const cJSON *model = field(root, "model");
    if (!cJSON_IsObject(model)) return fail(tok, err, LA_ERR_FORMAT, "missing field model");
    LA_TRY(check_bpe_options(tok, model, err));

    int32_t max_id = -1;
    LA_TRY(vocab_max_id(tok, field(model, "vocab"), &max_id, err));
    LA_TRY(parse_added(tok, field(root, "added_tokens"), &max_id, err));
    tok->n_ids = max_id + 1;
    LA_TRY(load_vocab(tok, model, err));
    LA_TRY(load_merges(tok, model, err));
    LA_TRY(index_added(tok, err));

    LA_TRY(add_normalizer(tok, field(root, "normalizer"), 0, err));
    LA_TRY(add_pre_tokenizer(tok, field(root, "pre_tokenizer"), 0, err));
    for (int i = 0; i < tok->n_pres; i++) {
        if (tok->pres[i].kind == LA_TOK_PRE_BYTE_LEVEL && i != tok->n_pres - 1)
            return fail(tok, err, LA_ERR_UNSUPPORTED,
                        "pre_tokenizer: ByteLevel must be the last pre-tokenizer");
    }
    if (tok->n_pres > 0 && tok->pres[tok->n_pres - 1].kind == LA_TOK_PRE_BYTE_LEVEL) {
        tok->bpe.byte_level = true;
        if (!la_tok_bpe_build_byte_level(&tok->bpe)) return oom(tok, err);
    }
    LA_TRY(build_tries(tok, err));

    la_tok_norm *replaces = NULL;
    int n_replaces = 0;
    la_status s = parse_decoder(tok, field(root, "decoder"), &replaces, &n_replaces, err);
    if (s == LA_OK) s = build_decoder_tables(tok, replaces, n_replaces, err);
    for (int i = 0; i < n_replaces; i++) {
        free(replaces[i].a);
        free(replaces[i].b);
    }
    free(replaces);
    LA_TRY(s);
    LA_TRY(parse_post_processor(tok, field(root, "post_processor"), 0, err));
    tok->bpe.cache = la_tok_cache_create();
    if (!tok->bpe.cache) return oom(tok, err);
    return LA_OK;
}

la_status la_tokenizer_load(const char *dir, la_tokenizer **out, la_err *err) {
    la_tokenizer *tok = calloc(1, sizeof *tok);
    if (!tok) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    tok->bos_id = tok->eos_id = -1;
    tok->path = la_path_join(dir, "tokenizer.json");
    if (!tok->path) {
        free(tok);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    }
    cJSON *root = NULL;
    la_status s = load_json(tok->path, true, &root, err);
    if (s == LA_OK) s = load_tokenizer_json(tok, root, err);
    cJSON_Delete(root);
    if (s == LA_OK) s = load_config(tok, dir, err);
    if (s != LA_OK) {
        la_tokenizer_destroy(tok);
        return s;
    }
    *out = tok;
    return LA_OK;
}

void la_tokenizer_destroy(la_tokenizer *tok) {
    if (!tok) return;
    la_tok_bpe_fini(&tok->bpe);
    for (int i = 0; i < tok->n_norms; i++) {
        free(tok->norms[i].a);
        free(tok->norms[i].b);
    }
    free(tok->norms);
    for (int i = 0; i < tok->n_pres; i++) {
        pcre2_code_free(tok->pres[i].re);
        free(tok->pres[i].literal);
    }
    free(tok->pres);
    for (int i = 0; i < tok->n_added; i++) {
        free(tok->added[i].content);
        free(tok->added[i].shown);
    }
    free(tok->added);
    free(tok->added_of_id);
    la_tok_strtab_fini(&tok->added_text);
    la_tok_strmap_fini(&tok->added_map);
    la_tok_trie *tries[2] = {&tok->trie_raw, &tok->trie_norm};
    for (int k = 0; k < 2; k++) {
        la_tok_pairmap_fini(&tries[k]->edges);
        free(tries[k]->terminal);
    }
    pcre2_code_free(tok->word_re);
    la_tok_strtab_fini(&tok->dec.text);
    free(tok->dec.byte_of);
    free(tok->tpl_prefix);
    free(tok->tpl_suffix);
    free(tok->chat_template);
    free(tok->path);
    free(tok);
}

/* ---- getters -------------------------------------------------------------------------- */

int32_t la_tokenizer_vocab_size(const la_tokenizer *tok) { return tok->n_ids; }
int32_t la_tokenizer_bos_id(const la_tokenizer *tok) { return tok->bos_id; }
int32_t la_tokenizer_eos_id(const la_tokenizer *tok) { return tok->eos_id; }

bool la_tokenizer_adds_bos(const la_tokenizer *tok) {
    return tok->bos_id >= 0 && tok->n_prefix > 0 && tok->tpl_prefix[0] == tok->bos_id;
}

int32_t la_tokenizer_token_to_id(const la_tokenizer *tok, const char *token) {
    size_t n = strlen(token);
    int32_t id = la_tok_strmap_get(&tok->added_map, token, n);
    return id >= 0 ? id : la_tok_strmap_get(&tok->bpe.vocab, token, n);
}

const char *la_tokenizer_id_to_token(const la_tokenizer *tok, int32_t id) {
    if (id < 0 || id >= tok->n_ids) return NULL;
    size_t n;
    return id_string(tok, id, &n);
}

bool la_tokenizer_is_special(const la_tokenizer *tok, int32_t id) {
    return id >= 0 && id < tok->n_ids && tok->added_of_id[id] >= 0 &&
           tok->added[tok->added_of_id[id]].special;
}

const char *la_tokenizer_chat_template(const la_tokenizer *tok) { return tok->chat_template; }
