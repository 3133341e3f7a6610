/* Reading the pipeline parts of tokenizer.json into la_tokenizer: pre-tokenizer (with its
 * regexes rewritten from Oniguruma to PCRE2, regex.c), decoder and post-processor, each the
 * way HF tokenizers deserialises it (pre_tokenizers/mod.rs, decoders/mod.rs,
 * processors/template.rs). The normalizer is read in normalizer.c; the BPE model, the
 * added tokens and the per-id tables in tokenizer.c.
 */
#include "tokenizer/pipeline.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "tokenizer/fields.h"

/* The GPT-2 pre-tokenizer regex of HF's ByteLevel (pre_tokenizers/byte_level.rs). */
static const char k_gpt2_regex[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

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

/* Whitespace: tokens of word characters or of other non-space characters, the spaces
 * removed (pre_tokenizers/whitespace.rs: the regex below, Split inverted, Removed). */
static const char k_whitespace_regex[] = "\\w+|[^\\w\\s]+";

static la_status add_chars_step(la_tokenizer *tok, la_tok_char_class chars, uint32_t delimiter,
                                la_tok_split_behavior b, la_err *err) {
    la_tok_pre step = {.kind = LA_TOK_PRE_CHARS, .chars = chars, .delimiter = delimiter, .behavior = b};
    return add_pre_step(tok, step, err);
}

static la_status add_pre_tokenizer(la_tokenizer *tok, const cJSON *n, int depth, la_err *err) {
    if (!n) return LA_OK;
    const char *type = str_field(n, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer without a type");
    if (!strcmp(type, "Sequence")) {
        if (depth >= 8) return fail(tok, err, LA_ERR_UNSUPPORTED, "pre_tokenizer Sequence nested too deep");
        const cJSON *e;
        cJSON_ArrayForEach(e, field(n, "pretokenizers")) LA_TRY(add_pre_tokenizer(tok, e, depth + 1, err));
        return LA_OK;
    }
    /* the ones made of character splits */
    if (!strcmp(type, "Digits"))
        return add_chars_step(tok, LA_TOK_CHARS_NUMERIC, 0,
                              bool_field(n, "individual_digits", false) ? LA_TOK_SPLIT_ISOLATED
                                                                        : LA_TOK_SPLIT_CONTIGUOUS,
                              err);
    if (!strcmp(type, "Punctuation")) {
        la_tok_split_behavior b = LA_TOK_SPLIT_ISOLATED;
        if (str_field(n, "behavior")) LA_TRY(parse_behavior(tok, str_field(n, "behavior"), &b, err));
        return add_chars_step(tok, LA_TOK_CHARS_PUNCT, 0, b, err);
    }
    if (!strcmp(type, "WhitespaceSplit"))
        return add_chars_step(tok, LA_TOK_CHARS_SPACE, 0, LA_TOK_SPLIT_REMOVED, err);
    if (!strcmp(type, "BertPreTokenizer")) { /* bert.rs: whitespace removed, punctuation isolated */
        LA_TRY(add_chars_step(tok, LA_TOK_CHARS_SPACE, 0, LA_TOK_SPLIT_REMOVED, err));
        return add_chars_step(tok, LA_TOK_CHARS_PUNCT, 0, LA_TOK_SPLIT_ISOLATED, err);
    }
    if (!strcmp(type, "CharDelimiterSplit")) {
        uint32_t cp;
        LA_TRY(char_field(tok, n, "delimiter", "pre_tokenizer CharDelimiterSplit", &cp, err));
        return add_chars_step(tok, LA_TOK_CHARS_DELIMITER, cp, LA_TOK_SPLIT_REMOVED, err);
    }
    la_tok_pre step = {0};
    if (!strcmp(type, "Split") || !strcmp(type, "Whitespace")) {
        bool is_regex = true;
        const char *pat = k_whitespace_regex;
        step.kind = LA_TOK_PRE_SPLIT;
        step.invert = true;
        step.behavior = LA_TOK_SPLIT_REMOVED;
        if (!strcmp(type, "Split")) {
            pat = pattern_field(n, &is_regex);
            if (!pat) return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer Split without a pattern");
            step.invert = bool_field(n, "invert", false);
            LA_TRY(parse_behavior(tok, str_field(n, "behavior"), &step.behavior, err));
        }
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
    } else if (!strcmp(type, "FixedLength")) {
        int64_t length = 5;
        LA_TRY(la_json_get_int64(n, "length", false, &length, tok->path, err));
        if (length < 1 || length > 1 << 20)
            return fail(tok, err, LA_ERR_FORMAT, "pre_tokenizer FixedLength: length %lld is not in [1, 2^20]",
                        (long long)length);
        step.kind = LA_TOK_PRE_FIXED_LENGTH;
        step.length = (size_t)length;
    } else {
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "pre_tokenizer \"%s\" is not supported (Split, ByteLevel, Metaspace, Digits, "
                    "Punctuation, Whitespace, WhitespaceSplit, BertPreTokenizer, CharDelimiterSplit, "
                    "FixedLength, Sequence)",
                    type);
    }
    return add_pre_step(tok, step, err);
}

la_status la_tok_add_pre_tokenizer(la_tokenizer *tok, const cJSON *n, la_err *err) {
    return add_pre_tokenizer(tok, n, 0, err);
}

/* ---- decoder ---------------------------------------------------------------------------- */

static la_status add_dstep(la_tokenizer *tok, la_tok_dstep step, la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    la_tok_dstep *v = realloc(dec->steps, (size_t)(dec->n_steps + 1) * sizeof *v);
    if (!v) {
        free(step.a);
        free(step.b);
        return oom(tok, err);
    }
    dec->steps = v;
    dec->steps[dec->n_steps++] = step;
    return LA_OK;
}

/* One element of the chain (d is the decoder itself or an element of its Sequence). */
static la_status add_decoder_step(la_tokenizer *tok, const cJSON *e, bool in_sequence, la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    const char *t = str_field(e, "type");
    if (!t) return fail(tok, err, LA_ERR_FORMAT, "decoder without a type");
    la_tok_dstep step = {0};
    if (!strcmp(t, "ByteFallback") || !strcmp(t, "Fuse")) {
        bool bf = t[0] == 'B';
        if (bf ? dec->byte_fallback || dec->fused : dec->fused)
            return fail(tok, err, LA_ERR_UNSUPPORTED,
                        "decoder \"%s\" after %s is not supported", t, dec->fused ? "Fuse" : "ByteFallback");
        if (bf) {
            dec->byte_fallback = true;
            dec->n_before = dec->n_steps;
        } else {
            dec->fused = true;
            dec->n_fuse = dec->n_steps;
        }
        return LA_OK;
    }
    if (!strcmp(t, "Replace")) {
        bool is_regex;
        const char *pat = pattern_field(e, &is_regex);
        const char *content = str_field(e, "content");
        if (!pat || !content) return fail(tok, err, LA_ERR_FORMAT, "decoder Replace needs pattern and content");
        if (is_regex || !*pat)
            return fail(tok, err, LA_ERR_UNSUPPORTED, "decoder Replace with a %s pattern is not supported",
                        is_regex ? "Regex" : "empty String");
        step.kind = LA_TOK_DSTEP_REPLACE;
        step.a_len = strlen(pat);
        step.b_len = strlen(content);
        step.a = dup_n(pat, step.a_len);
        step.b = dup_n(content, step.b_len);
        if (!step.a || !step.b) {
            free(step.a);
            free(step.b);
            return oom(tok, err);
        }
    } else if (!strcmp(t, "Strip")) {
        int64_t start = 0, stop = 0;
        LA_TRY(char_field(tok, e, "content", "decoder Strip", &step.content, err));
        LA_TRY(la_json_get_int64(e, "start", false, &start, tok->path, err));
        LA_TRY(la_json_get_int64(e, "stop", false, &stop, tok->path, err));
        if (start < 0 || stop < 0 || start > 1 << 20 || stop > 1 << 20)
            return fail(tok, err, LA_ERR_FORMAT, "decoder Strip: bad start/stop");
        step.kind = LA_TOK_DSTEP_STRIP;
        step.start = (int32_t)start;
        step.stop = (int32_t)stop;
    } else if (!strcmp(t, "Metaspace")) {
        la_tok_prepend p;
        LA_TRY(char_field(tok, e, "replacement", "decoder Metaspace", &step.replacement, err));
        LA_TRY(parse_prepend(tok, e, &p, err));
        step.kind = LA_TOK_DSTEP_METASPACE;
        step.drop_first = p != LA_TOK_PREPEND_NEVER;
    } else {
        return fail(tok, err, LA_ERR_UNSUPPORTED,
                    "decoder \"%s\"%s is not supported (ByteLevel alone, or a chain of Replace, "
                    "ByteFallback, Fuse, Strip, Metaspace)",
                    t, in_sequence && !strcmp(t, "ByteLevel") ? " inside a Sequence with others" : "");
    }
    return add_dstep(tok, step, err);
}

/* Decoders: ByteLevel (alone, or the only element of a Sequence); a null decoder (tokens
 * joined with " "); or a chain of Replace (String), ByteFallback, Fuse, Strip and Metaspace,
 * read into tok->dec (see la_tok_decoder for how the chain is cut). Llama 2 / Mistral:
 * Replace("▁", " "), ByteFallback, Fuse, Strip(" ", 1, 0). */
la_status la_tok_parse_decoder(la_tokenizer *tok, const cJSON *d, la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    dec->kind = LA_TOK_DEC_JOIN;
    if (!d) return LA_OK;
    const char *type = str_field(d, "type");
    if (!type) return fail(tok, err, LA_ERR_FORMAT, "decoder without a type");
    bool is_seq = !strcmp(type, "Sequence");
    const cJSON *list = field(d, "decoders");
    if (is_seq && !cJSON_IsArray(list)) return fail(tok, err, LA_ERR_FORMAT, "decoder Sequence without decoders");
    int n = is_seq ? cJSON_GetArraySize(list) : 1;
    const char *first = is_seq ? str_field(cJSON_GetArrayItem(list, 0), "type") : type;
    if (n == 1 && first && !strcmp(first, "ByteLevel")) {
        dec->kind = LA_TOK_DEC_BYTE_LEVEL;
        return LA_OK;
    }
    dec->kind = LA_TOK_DEC_PIECES;
    for (int i = 0; i < n; i++) {
        const cJSON *e = is_seq ? cJSON_GetArrayItem(list, i) : d;
        if (is_seq && !strcmp(str_field(e, "type") ? str_field(e, "type") : "", "Sequence"))
            return fail(tok, err, LA_ERR_UNSUPPORTED, "decoder Sequence inside a Sequence is not supported");
        LA_TRY(add_decoder_step(tok, e, is_seq, err));
    }
    if (!dec->byte_fallback) dec->n_before = dec->fused ? dec->n_fuse : dec->n_steps;
    if (!dec->fused) dec->n_fuse = dec->n_steps;
    /* the Replace steps at the head: applied once per token at load */
    while (dec->n_table < dec->n_before && dec->steps[dec->n_table].kind == LA_TOK_DSTEP_REPLACE)
        dec->n_table++;
    return LA_OK;
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

la_status la_tok_parse_post_processor(la_tokenizer *tok, const cJSON *p, la_err *err) {
    return parse_post_processor(tok, p, 0, err);
}
