/* src/tokenizer/ against the Rust `tokenizers` library: fixtures written by
 * tools/oracle/tokenizer_fixtures.py (the command is in each fixture's "command" field)
 * for the real Llama-3 tokenizer (shared data, used in place), the tiny byte-level and
 * SentencePiece-style tokenizers in tests/fixtures/tokenizer/, their variants, and the
 * tokenizers of the model fixtures.
 *
 * Every check is exact: ids, bytes of decoded text, bytes of streamed pieces. A failure
 * prints the fixture, the case index, the text and the first differing position.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "common/test_util.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/text.h"

/* At most this many mismatches are described in detail per test. */
#define MAX_REPORTS 5

typedef struct fixture {
    cJSON *root;
    la_tokenizer *tok;
    char name[64];
} fixture;

/* "shared:<rel>" is a path in the shared data directory; anything else is relative to
 * the source tree. */
static char *resolve(const char *ref) {
    if (strncmp(ref, "shared:", 7) == 0) {
        char *p = NULL;
        cr_assert(asprintf(&p, "%s/%s", la_test_shared_dir(), ref + 7) > 0);
        return p;
    }
    return la_test_path(ref);
}

static void fixture_open(fixture *f, const char *name) {
    snprintf(f->name, sizeof f->name, "%s", name);
    char rel[256];
    snprintf(rel, sizeof rel, "tests/fixtures/tokenizer/%s.json", name);
    char *path = la_test_path(rel);
    la_err err = {0};
    la_status s = la_json_load_file(path, &f->root, &err);
    free(path);
    LA_CHECK_OK(s, err);
    const cJSON *cmd = cJSON_GetObjectItem(f->root, "command");
    cr_assert(cJSON_IsString(cmd), "%s: fixture without a command field", name);
    char *dir = resolve(cJSON_GetObjectItem(f->root, "tokenizer")->valuestring);
    s = la_tokenizer_load(dir, &f->tok, &err);
    free(dir);
    LA_CHECK_OK(s, err);
}

static void fixture_close(fixture *f) {
    la_tokenizer_destroy(f->tok);
    cJSON_Delete(f->root);
}

static char *unhex(const char *hex, size_t *len) {
    size_t n = strlen(hex) / 2;
    char *out = malloc(n + 1);
    cr_assert(out);
    for (size_t i = 0; i < n; i++) {
        unsigned v;
        cr_assert(sscanf(hex + 2 * i, "%2x", &v) == 1);
        out[i] = (char)v;
    }
    out[n] = '\0';
    *len = n;
    return out;
}

static int32_t *json_ids(const cJSON *arr, int32_t *n) {
    *n = cJSON_GetArraySize(arr);
    int32_t *ids = malloc(((size_t)*n + 1) * sizeof *ids);
    cr_assert(ids);
    for (int32_t i = 0; i < *n; i++) ids[i] = (int32_t)cJSON_GetArrayItem(arr, i)->valuedouble;
    return ids;
}

/* Index of the first difference, or -1 when equal. */
static int32_t first_diff(const int32_t *a, int32_t na, const int32_t *b, int32_t nb) {
    for (int32_t i = 0; i < na && i < nb; i++)
        if (a[i] != b[i]) return i;
    return na == nb ? -1 : (na < nb ? na : nb);
}

static void print_ids(const char *label, const int32_t *ids, int32_t n, int32_t around) {
    fprintf(stderr, "    %s (%d ids) from %d:", label, n, around);
    for (int32_t i = around; i < n && i < around + 8; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

static int check_ids(const fixture *f, int idx, const char *text, const cJSON *want_json,
                     const int32_t *got, int32_t n_got, const char *what, int *reports) {
    int32_t n_want;
    int32_t *want = json_ids(want_json, &n_want);
    int32_t at = first_diff(want, n_want, got, n_got);
    if (at >= 0 && (*reports)++ < MAX_REPORTS) {
        fprintf(stderr, "%s: encode case %d (%s) differs at id %d: text \"%.80s\"\n", f->name, idx,
                what, at, text);
        int32_t from = at > 2 ? at - 2 : 0;
        print_ids("want", want, n_want, from);
        print_ids("got ", got, n_got, from);
    }
    free(want);
    return at >= 0;
}

/* ---- encode ------------------------------------------------------------------------- */

static void check_encode(const char *name) {
    fixture f;
    fixture_open(&f, name);
    cr_assert_eq(la_tokenizer_vocab_size(f.tok),
                 (int32_t)cJSON_GetObjectItem(f.root, "vocab_size")->valuedouble);
    cr_assert_eq(la_tokenizer_bos_id(f.tok), (int32_t)cJSON_GetObjectItem(f.root, "bos_id")->valuedouble);
    cr_assert_eq(la_tokenizer_eos_id(f.tok), (int32_t)cJSON_GetObjectItem(f.root, "eos_id")->valuedouble);
    const cJSON *tok_entry;
    cJSON_ArrayForEach(tok_entry, cJSON_GetObjectItem(f.root, "tokens")) {
        int32_t id = atoi(tok_entry->string);
        const char *s = la_tokenizer_id_to_token(f.tok, id);
        cr_assert(s && !strcmp(s, tok_entry->valuestring), "%s: id_to_token(%d)", name, id);
        cr_assert_eq(la_tokenizer_token_to_id(f.tok, tok_entry->valuestring), id);
    }

    int bad = 0, reports = 0, idx = 0, n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(f.root, "encode")) {
        size_t len;
        char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        for (int special = 0; special < 2; special++) {
            int32_t *ids = NULL, n = 0;
            la_err err = {0};
            la_status s = la_tokenizer_encode(f.tok, text, len, special, &ids, &n, &err);
            LA_CHECK_OK(s, err);
            bad += check_ids(&f, idx, text, cJSON_GetObjectItem(c, special ? "ids_special" : "ids"),
                             ids, n, special ? "add_special" : "no special", &reports);
            free(ids);
        }
        free(text);
        idx++;
        n_cases++;
    }
    cr_assert(n_cases >= 300 || strcmp(name, "llama3") != 0, "%s: only %d cases", name, n_cases);
    cr_assert_eq(bad, 0, "%s: %d of %d encodings differ from HF tokenizers", name, bad, 2 * n_cases);
    fixture_close(&f);
}

/* ---- decode ------------------------------------------------------------------------- */

static int check_text(const fixture *f, const char *what, int idx, const char *got, size_t n_got,
                      const char *want, size_t n_want, int *reports) {
    if (n_got == n_want && memcmp(got, want, n_got) == 0) return 0;
    if ((*reports)++ < MAX_REPORTS) {
        size_t at = 0;
        while (at < n_got && at < n_want && got[at] == want[at]) at++;
        fprintf(stderr, "%s: %s case %d differs at byte %zu:\n    want \"%.*s\"\n    got  \"%.*s\"\n",
                f->name, what, idx, at, (int)(n_want > 120 ? 120 : n_want), want,
                (int)(n_got > 120 ? 120 : n_got), got);
    }
    return 1;
}

static void check_decode(const char *name) {
    fixture f;
    fixture_open(&f, name);
    int bad = 0, reports = 0, idx = 0, n_roundtrip = 0, n_cases = 0;
    const cJSON *c;
    /* decode(ids) for chosen and random id lists, skip_special both ways */
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(f.root, "decode")) {
        int32_t n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
        size_t n_want;
        char *want = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &n_want);
        char *got = NULL;
        size_t n_got = 0;
        la_err err = {0};
        la_status s = la_tokenizer_decode(f.tok, ids, n,
                                          cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special")),
                                          &got, &n_got, &err);
        LA_CHECK_OK(s, err);
        cr_assert_eq(got[n_got], '\0');
        bad += check_text(&f, "decode", idx++, got, n_got, want, n_want, &reports);
        free(got);
        free(want);
        free(ids);
    }
    /* decode(encode(s)): as HF's, and equal to s wherever HF round-trips */
    idx = 0;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(f.root, "encode")) {
        size_t len, n_want;
        char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
        char *want = unhex(cJSON_GetObjectItem(c, "decoded_hex")->valuestring, &n_want);
        int32_t *ids = NULL, n = 0;
        char *got = NULL;
        size_t n_got = 0;
        la_err err = {0};
        LA_CHECK_OK(la_tokenizer_encode(f.tok, text, len, true, &ids, &n, &err), err);
        LA_CHECK_OK(la_tokenizer_decode(f.tok, ids, n, false, &got, &n_got, &err), err);
        bad += check_text(&f, "decode(encode)", idx, got, n_got, want, n_want, &reports);
        free(got);
        free(ids);
        if (cJSON_IsTrue(cJSON_GetObjectItem(c, "roundtrip"))) {
            LA_CHECK_OK(la_tokenizer_encode(f.tok, text, len, false, &ids, &n, &err), err);
            LA_CHECK_OK(la_tokenizer_decode(f.tok, ids, n, false, &got, &n_got, &err), err);
            bad += check_text(&f, "round trip", idx, got, n_got, text, len, &reports);
            free(got);
            free(ids);
            n_roundtrip++;
        }
        free(want);
        free(text);
        idx++;
        n_cases++;
    }
    /* byte-level BPE without lstrip/rstrip tokens loses nothing: every string round-trips */
    if (!strcmp(name, "llama3"))
        cr_assert_eq(n_roundtrip, n_cases, "llama3: %d of %d strings round-trip in HF", n_roundtrip,
                     n_cases);
    cr_assert_eq(bad, 0, "%s: %d decodes differ", name, bad);
    fixture_close(&f);
}

/* ---- streaming detokenizer ----------------------------------------------------------- */

/* Push ids one at a time; every piece must be valid UTF-8 and their concatenation
 * (with the flush) must equal la_tokenizer_decode. Returns 1 on a mismatch. */
static int stream_matches(const fixture *f, const int32_t *ids, int32_t n, bool skip,
                          const char *want, size_t n_want, int idx, int *reports) {
    la_detok *d = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_detok_create(f->tok, skip, &d, &err), err);
    char *all = malloc(1);
    size_t n_all = 0;
    cr_assert(all);
    for (int32_t i = 0; i <= n; i++) {
        const char *piece = NULL;
        size_t len = 0;
        la_status s = i < n ? la_detok_push(d, ids[i], &piece, &len, &err)
                            : la_detok_flush(d, &piece, &len, &err);
        LA_CHECK_OK(s, err);
        cr_assert_eq(strlen(piece) <= len, true);
        size_t bad_at = la_utf8_invalid_at((const uint8_t *)piece, len);
        cr_assert_eq(bad_at, len, "%s: piece %d of case %d is not UTF-8 (byte %zu)", f->name, i,
                     idx, bad_at);
        all = realloc(all, n_all + len + 1);
        cr_assert(all);
        memcpy(all + n_all, piece, len);
        n_all += len;
    }
    la_detok_destroy(d);
    int r = check_text(f, skip ? "detok (skip_special)" : "detok", idx, all, n_all, want, n_want,
                       reports);
    free(all);
    return r;
}

static void check_detok(const char *name) {
    fixture f;
    fixture_open(&f, name);
    int bad = 0, reports = 0, idx = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(f.root, "decode")) {
        int32_t n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids"), &n);
        size_t n_want;
        char *want = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &n_want);
        bad += stream_matches(&f, ids, n, cJSON_IsTrue(cJSON_GetObjectItem(c, "skip_special")), want,
                              n_want, idx++, &reports);
        free(want);
        free(ids);
    }
    cJSON_ArrayForEach(c, cJSON_GetObjectItem(f.root, "encode")) {
        int32_t n;
        int32_t *ids = json_ids(cJSON_GetObjectItem(c, "ids_special"), &n);
        for (int skip = 0; skip < 2; skip++) {
            char *want = NULL;
            size_t n_want = 0;
            la_err err = {0};
            LA_CHECK_OK(la_tokenizer_decode(f.tok, ids, n, skip, &want, &n_want, &err), err);
            bad += stream_matches(&f, ids, n, skip, want, n_want, idx, &reports);
            free(want);
        }
        free(ids);
        idx++;
    }
    cr_assert_eq(bad, 0, "%s: %d streams differ from decode", name, bad);
    fixture_close(&f);
}

#define FIXTURE_TESTS(sym, name)                                                          \
    Test(tokenizer_fixtures, sym##_encode_matches_hf_tokenizers) { check_encode(name); } \
    Test(tokenizer_fixtures, sym##_decode_matches_hf_tokenizers) { check_decode(name); } \
    Test(tokenizer_fixtures, sym##_detok_pieces_are_utf8_and_add_up_to_decode) { check_detok(name); }

FIXTURE_TESTS(llama3, "llama3")
FIXTURE_TESTS(bpe_tiny, "bpe-tiny")
FIXTURE_TESTS(sp_tiny, "sp-tiny")
FIXTURE_TESTS(bpe_gpt2_byte_level_regex, "bpe-gpt2")
FIXTURE_TESTS(bpe_split_behaviors, "bpe-split")
FIXTURE_TESTS(sp_metaspace, "sp-meta")
/* the layouts of real checkpoints: SmolLM2, Qwen2 / Qwen2.5 / Qwen3, Mistral v0.3 */
FIXTURE_TESTS(smollm2_digits_individual_then_byte_level, "smollm2-tiny")
FIXTURE_TESTS(qwen2_nfc_qwen_regex_byte_level, "qwen2-tiny")
FIXTURE_TESTS(mistral_v03_metaspace_no_split_byte_fallback, "mistral-tiny")
/* one per normalizer, pre-tokenizer and decoder type */
FIXTURE_TESTS(norm_nfd_strip_accents_lowercase, "norm-nfd-accents-lower")
FIXTURE_TESTS(norm_nfkc, "norm-nfkc")
FIXTURE_TESTS(norm_nfkd_strip_left, "norm-nfkd-strip")
FIXTURE_TESTS(norm_nmt_strip_right_regex_replace, "norm-nmt-regex")
FIXTURE_TESTS(norm_bert_uncased_bert_pre_tokenizer, "norm-bert")
FIXTURE_TESTS(norm_bert_cased_whitespace_split, "norm-bert-cased")
FIXTURE_TESTS(norm_byte_level, "norm-byte-level")
FIXTURE_TESTS(norm_lowercase_nfc_on_sentencepiece, "sp-norm-lower-nfc")
FIXTURE_TESTS(pre_digits_contiguous, "pre-digits")
FIXTURE_TESTS(pre_punctuation_behaviors, "pre-punct")
FIXTURE_TESTS(pre_whitespace, "pre-whitespace")
FIXTURE_TESTS(pre_char_delimiter_fixed_length, "pre-delimiter-fixed")
FIXTURE_TESTS(pre_split_word_class_regexes, "pre-split-word")
FIXTURE_TESTS(pre_punctuation_removed_metaspace, "sp-pre-punct-metaspace")
FIXTURE_TESTS(dec_byte_fallback_then_metaspace, "dec-bytefallback-metaspace")
FIXTURE_TESTS(dec_strip_and_replace_per_token, "dec-strip-per-token")
FIXTURE_TESTS(dec_replace_metaspace_strip_after_fuse, "dec-fused-steps")
FIXTURE_TESTS(dec_metaspace_before_byte_fallback, "dec-metaspace-first")

/* ---- tokenizers of the model fixtures ---------------------------------------------- */

/* FNV-1a 64 of a file, as the oracle records it ("" if unreadable). */
static void file_fnv1a64(const char *path, char out[17]) {
    char *data = NULL;
    size_t len = 0;
    la_err err = {0};
    out[0] = '\0';
    if (la_file_read(path, &data, &len, &err) != LA_OK) return;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ (uint8_t)data[i]) * 0x100000001b3ull;
    snprintf(out, 17, "%016llx", (unsigned long long)h);
    free(data);
}

/* The model directories of this repository whose tokenizers models.json covers (tiny-bf16-
 * untied, tiny-f32-linear, tiny-f32-tied, rag-tiny). One whose tokenizer.json changed since
 * the fixture is named and passed over, and the test fails when fewer than these were
 * checked: skipping them all must not pass. */
#define MIN_MODEL_TOKENIZERS 4

Test(tokenizer_fixtures, model_dir_tokenizers_match_hf_tokenizers) {
    char *path = la_test_path("tests/fixtures/tokenizer/models.json");
    cJSON *root = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(path, &root, &err), err);
    free(path);
    int n_models = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, cJSON_GetObjectItem(root, "models")) {
        char *dir = la_test_path(cJSON_GetObjectItem(m, "dir")->valuestring);
        char *file = la_path_join(dir, "tokenizer.json"), hash[17];
        file_fnv1a64(file, hash);
        free(file);
        /* these tokenizers belong to other fixtures: when one is retrained, say so
         * rather than fail on stale expectations */
        if (strcmp(hash, cJSON_GetObjectItem(m, "fnv1a64")->valuestring) != 0) {
            fprintf(stderr, "skipped %s: tokenizer.json %s since the fixture; regenerate with %s\n",
                    dir, hash[0] ? "changed" : "is gone",
                    cJSON_GetObjectItem(root, "command")->valuestring);
            free(dir);
            continue;
        }
        la_tokenizer *tok = NULL;
        LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(m, "encode")) {
            size_t len;
            char *text = unhex(cJSON_GetObjectItem(c, "hex")->valuestring, &len);
            int32_t *ids = NULL, n = 0, n_want;
            LA_CHECK_OK(la_tokenizer_encode(tok, text, len, true, &ids, &n, &err), err);
            int32_t *want = json_ids(cJSON_GetObjectItem(c, "ids_special"), &n_want);
            cr_assert_eq(first_diff(want, n_want, ids, n), -1, "%s: \"%s\"", dir, text);
            free(want);
            free(ids);
            free(text);
        }
        la_tokenizer_destroy(tok);
        free(dir);
        n_models++;
    }
    cr_log_info("%d model tokenizers checked", n_models);
    cr_assert_geq(n_models, MIN_MODEL_TOKENIZERS, "%d of at least %d model tokenizers checked (the rest skipped "
                  "above): regenerate with %s", n_models, MIN_MODEL_TOKENIZERS,
                  cJSON_GetObjectItem(root, "command")->valuestring);
    cJSON_Delete(root);
}

/* la_tokenizer_max_token_bytes bounds tokens by bytes only where nothing deletes text: the
 * byte-level and byte-fallback tokenizers have a bound; Strip, BERT cleaning, Nmt and a
 * whitespace split that removes its delimiters have none (0). Where there is one, a text's
 * token count is at least its bytes over 3 x the bound, checked on every fixture string. */
Test(tokenizer_fixtures, max_token_bytes_bounds_tokens_only_where_nothing_is_deleted) {
    static const struct {
        const char *name;
        bool bound;
    } cases[] = {{"qwen2-tiny", true},     {"smollm2-tiny", true},   {"dec-bytefallback-metaspace", true},
                 {"norm-byte-level", true}, {"norm-nfkc", true},      {"norm-nfkd-strip", false},
                 {"norm-bert", false},      {"norm-nmt-regex", false}, {"pre-whitespace", false}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char dir[512];
        snprintf(dir, sizeof dir, "%s/tests/fixtures/tokenizer/%s", LA_SOURCE_DIR, cases[i].name);
        la_tokenizer *tok = NULL;
        la_err err = {0};
        LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
        int32_t m = la_tokenizer_max_token_bytes(tok);
        cr_assert_eq(m > 0, cases[i].bound, "%s: max_token_bytes %d", cases[i].name, m);
        static const char *texts[] = {"Hello   world,  123 ÅÄÖ ﬁ ｆｕｌｌ  ", "x", "\t\n  spaces  \n"};
        for (size_t k = 0; m && k < 3; k++) {
            int32_t *ids = NULL, n = 0;
            LA_CHECK_OK(la_tokenizer_encode(tok, texts[k], strlen(texts[k]), false, &ids, &n, &err), err);
            cr_assert(n >= (int32_t)(strlen(texts[k]) / (3 * (size_t)m)), "%s: %d tokens", cases[i].name, n);
            free(ids);
        }
        la_tokenizer_destroy(tok);
    }
}
