/* Loading tokenizer.json and tokenizer_config.json into la_tokenizer: the BPE model, the
 * added tokens, the per-id tables; the id getters. The pipeline parts (normalizer,
 * pre-tokenizer, decoder, post-processor) are read in pipeline.c. Encoding is in encode.c,
 * decoding and streaming in decode.c.
 *
 * Each part of tokenizer.json is read the way HF tokenizers deserialises it (the serde
 * shapes of tokenizer/serialization.rs, models/bpe/serialization.rs, ...). Parts this
 * engine does not implement are refused with LA_ERR_UNSUPPORTED naming the part, never
 * silently ignored, so a tokenizer that loads encodes as HF does.
 */
#include "tokenizer/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/file.h"
#include "tokenizer/fields.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pipeline.h"
#include "tokenizer/tokenizer_internal.h"

/* Rust regex \w in Unicode mode (regex-syntax: Alphabetic, M, Nd, Pc, Join_Control). */
static const char k_word_char_regex[] =
    "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{200C}\\x{200D}]";

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

/* ---- decoder tables ------------------------------------------------------------------ */

/* The decoder reads per id the text it starts from: ByteLevel the token's bytes, otherwise
 * the token after the decoder's Replace rules (la_tok_parse_decoder collects them). */

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

static la_status build_decoder_tables(la_tokenizer *tok, la_err *err) {
    la_tok_decoder *dec = &tok->dec;
    if (!la_tok_strtab_init(&dec->text, tok->n_ids)) return oom(tok, err);
    la_tok_buf a = {0}, b = {0};
    la_status s = LA_OK;
    for (int32_t id = 0; id < tok->n_ids && s == LA_OK; id++) {
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
            for (int r = 0; r < dec->n_table && ok; r++) {
                const la_tok_dstep *st = &dec->steps[r];
                b.len = 0;
                ok = la_tok_replace_all(a.data, a.len, st->a, st->a_len, st->b, st->b_len, &b);
                la_tok_buf t = a;
                a = b;
                b = t;
            }
        }
        if (!ok || !la_tok_strtab_set(&dec->text, id, a.data ? a.data : "", a.len)) s = oom(tok, err);
    }
    la_tok_buf_free(&a);
    la_tok_buf_free(&b);
    return s;
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
        if ((bos && !(tok->bos_token = dup_n(bos, strlen(bos)))) ||
            (eos && !(tok->eos_token = dup_n(eos, strlen(eos)))))
            s = oom(tok, err);
        if (s == LA_OK && ((bos && tok->bos_id < 0) || (eos && tok->eos_id < 0)))
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

    LA_TRY(la_tok_add_normalizer(tok, field(root, "normalizer"), err));
    LA_TRY(la_tok_add_pre_tokenizer(tok, field(root, "pre_tokenizer"), err));
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

    LA_TRY(la_tok_parse_decoder(tok, field(root, "decoder"), err));
    LA_TRY(build_decoder_tables(tok, err));
    LA_TRY(la_tok_parse_post_processor(tok, field(root, "post_processor"), err));
    tok->bpe.cache = la_tok_cache_create();
    if (!tok->bpe.cache) return oom(tok, err);
    return LA_OK;
}

/* Whether every input character ends up in some token: nothing in the pipeline deletes text
 * (a Replace by something shorter, Strip, StripAccents, Nmt, Bert's cleaning; a split that
 * removes its delimiters) and the model never drops a character (byte-level BPE, byte
 * fallback, or one unk per unknown character). Then a text's bytes bound its tokens from
 * below (la_tokenizer_max_token_bytes). */
static bool bounds_tokens(const la_tokenizer *tok) {
    bool byte_level = false;
    for (int i = 0; i < tok->n_norms; i++) {
        const la_tok_norm *n = &tok->norms[i];
        switch (n->kind) {
        case LA_TOK_NORM_PREPEND:
        case LA_TOK_NORM_UNICODE:   /* shrinks at most 3 bytes into 1 (NFKC): the caller's */
        case LA_TOK_NORM_LOWERCASE: /* factor covers it */
            break;
        case LA_TOK_NORM_BYTE_LEVEL: byte_level = true; break;
        case LA_TOK_NORM_REPLACE:
            if (n->b_len < n->a_len) return false;
            break;
        default: return false; /* REPLACE_REGEX, STRIP, STRIP_ACCENTS, NMT, BERT may delete */
        }
    }
    for (int i = 0; i < tok->n_pres; i++) {
        const la_tok_pre *p = &tok->pres[i];
        if ((p->kind == LA_TOK_PRE_SPLIT || p->kind == LA_TOK_PRE_CHARS) && p->behavior == LA_TOK_SPLIT_REMOVED)
            return false;
        byte_level |= p->kind == LA_TOK_PRE_BYTE_LEVEL;
    }
    return byte_level || tok->bpe.byte_fallback || (tok->bpe.unk_id >= 0 && !tok->bpe.fuse_unk);
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
    tok->max_token_bytes = bounds_tokens(tok) ? 4 : 0; /* an unk stands for a whole character */
    for (int32_t id = 0; tok->max_token_bytes && id < tok->n_ids; id++) {
        int64_t n = la_tokenizer_token_bytes(tok, id, NULL, 0);
        if (n > tok->max_token_bytes) tok->max_token_bytes = n > INT32_MAX ? INT32_MAX : (int32_t)n;
    }
    *out = tok;
    return LA_OK;
}

void la_tokenizer_destroy(la_tokenizer *tok) {
    if (!tok) return;
    la_tok_bpe_fini(&tok->bpe);
    for (int i = 0; i < tok->n_norms; i++) la_tok_norm_fini(&tok->norms[i]);
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
    for (int i = 0; i < tok->dec.n_steps; i++) {
        free(tok->dec.steps[i].a);
        free(tok->dec.steps[i].b);
    }
    free(tok->dec.steps);
    free(tok->bos_token);
    free(tok->eos_token);
    free(tok->tpl_prefix);
    free(tok->tpl_suffix);
    free(tok->chat_template);
    free(tok->path);
    free(tok);
}

/* ---- getters -------------------------------------------------------------------------- */

int32_t la_tokenizer_vocab_size(const la_tokenizer *tok) { return tok->n_ids; }
int32_t la_tokenizer_max_token_bytes(const la_tokenizer *tok) { return tok->max_token_bytes; }
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
const char *la_tokenizer_bos_token(const la_tokenizer *tok) { return tok->bos_token; }
const char *la_tokenizer_eos_token(const la_tokenizer *tok) { return tok->eos_token; }
