/* src/tokenizer/: every documented error (and that it leaves outputs as they
 * were), input edge cases, the streaming detokenizer's holding rules, the
 * tokenizer_config.json rules, and encoding from several threads at once.
 * Expected ids come from the Rust `tokenizers` library (values noted beside each). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/file.h"
#include "base/json.h"
#include "common/test_util.h"
#include "tokenizer/tokenizer.h"

static char *llama3_dir(void) {
    char *p = NULL;
    cr_assert(asprintf(&p, "%s/data/tokenizers/llama3", la_test_shared_dir()) > 0);
    return p;
}

static la_tokenizer *load(const char *dir) {
    la_tokenizer *tok = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_load(dir, &tok, &err), err);
    return tok;
}

static la_tokenizer *load_fixture(const char *name) {
    char rel[128];
    snprintf(rel, sizeof rel, "tests/fixtures/tokenizer/%s", name);
    char *dir = la_test_path(rel);
    la_tokenizer *tok = load(dir);
    free(dir);
    return tok;
}

static void write_file(const char *dir, const char *name, const char *data, size_t len) {
    char *path = la_path_join(dir, name);
    FILE *f = fopen(path, "wb");
    cr_assert(f, "cannot write %s", path);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
    free(path);
}

static void write_str(const char *dir, const char *name, const char *text) {
    write_file(dir, name, text, strlen(text));
}

static void copy_file(const char *from_dir, const char *to_dir, const char *name) {
    char *src = la_path_join(from_dir, name);
    char *data = NULL;
    size_t len = 0;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(src, &data, &len, &err), err);
    write_file(to_dir, name, data, len);
    free(data);
    free(src);
}

/* A minimal tokenizer.json with `part` spliced in front of the model (which must end with
 * a comma, or be ""). */
static char *mini_json(const char *part, const char *model) {
    char *s = NULL;
    cr_assert(asprintf(&s,
                       "{\"version\":\"1.0\",\"added_tokens\":[{\"id\":3,\"content\":\"<s>\","
                       "\"single_word\":false,\"lstrip\":false,\"rstrip\":false,"
                       "\"normalized\":false,\"special\":true}],%s\"model\":%s}",
                       part, model ? model
                                   : "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1,\"ab\":2},"
                                     "\"merges\":[\"a b\"]}") > 0);
    return s;
}

/* Load dir/tokenizer.json holding `json`; the load must fail with `code` and a message
 * containing every needle, and leave *out as it was. */
static void expect_load_error(const char *json, const char *config, la_status code,
                              const char *needle1, const char *needle2) {
    char *dir = la_test_tmpdir();
    if (json) write_str(dir, "tokenizer.json", json);
    if (config) write_str(dir, "tokenizer_config.json", config);
    la_tokenizer *sentinel = (la_tokenizer *)(uintptr_t)0x1234, *tok = sentinel;
    la_err err = {0};
    la_status s = la_tokenizer_load(dir, &tok, &err);
    cr_assert_eq(s, code, "want %s, got %s: %s", la_status_name(code), la_status_name(s), err.msg);
    cr_assert_eq(tok, sentinel, "out-parameter written on error");
    cr_assert(strstr(err.msg, needle1), "message \"%s\" lacks \"%s\"", err.msg, needle1);
    if (needle2) cr_assert(strstr(err.msg, needle2), "message \"%s\" lacks \"%s\"", err.msg, needle2);
    la_test_rm_tree(dir);
}

static void expect_ids(const la_tokenizer *tok, const char *text, const int32_t *want, int32_t n_want) {
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), err);
    cr_assert_eq(n, n_want, "\"%s\": %d ids, want %d", text, n, n_want);
    for (int32_t i = 0; i < n; i++) cr_assert_eq(ids[i], want[i], "\"%s\": id %d", text, i);
    free(ids);
}

/* ---- load errors ----------------------------------------------------------------------- */

Test(tokenizer_load, missing_tokenizer_json_is_an_io_error_naming_the_file) {
    expect_load_error(NULL, NULL, LA_ERR_IO, "tokenizer.json", "No such file");
}

Test(tokenizer_load, malformed_json_is_a_format_error_naming_the_file) {
    expect_load_error("{\"model\": {\"type\": \"BPE\",", NULL, LA_ERR_FORMAT, "tokenizer.json",
                      "invalid JSON");
}

Test(tokenizer_load, non_utf8_tokenizer_json_is_a_format_error_naming_file_and_byte) {
    /* valid JSON whose vocab holds a string with a raw 0xFF byte at offset 63 */
    char *json = mini_json("", "{\"type\":\"BPE\",\"vocab\":{\"a\xff\":0},\"merges\":[]}");
    const char *bad = strchr(json, '\xff');
    char needle[64];
    snprintf(needle, sizeof needle, "invalid UTF-8 at byte %td", bad - json);
    expect_load_error(json, NULL, LA_ERR_FORMAT, "tokenizer.json", needle);
    free(json);
}

Test(tokenizer_load, unsupported_model_type_is_named) {
    char *json = mini_json("", "{\"type\":\"WordPiece\",\"vocab\":{\"a\":0},\"unk_token\":\"a\"}");
    expect_load_error(json, NULL, LA_ERR_UNSUPPORTED, "tokenizer.json", "\"WordPiece\"");
    free(json);
    json = mini_json("", "{\"type\":\"Unigram\",\"vocab\":[[\"a\",0.0]]}");
    expect_load_error(json, NULL, LA_ERR_UNSUPPORTED, "model type \"Unigram\"", NULL);
    free(json);
}

Test(tokenizer_load, unsupported_pipeline_parts_are_named) {
    static const struct {
        const char *part, *name;
    } k_parts[] = {
        {"\"normalizer\":{\"type\":\"Precompiled\",\"precompiled_charsmap\":\"\"},",
         "normalizer \"Precompiled\""},
        {"\"normalizer\":{\"type\":\"Sequence\",\"normalizers\":[{\"type\":\"NFC\"},"
         "{\"type\":\"Unknown\"}]},",
         "normalizer \"Unknown\""},
        {"\"pre_tokenizer\":{\"type\":\"UnicodeScripts\"},", "pre_tokenizer \"UnicodeScripts\""},
        {"\"pre_tokenizer\":{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"ByteLevel\"},"
         "{\"type\":\"Digits\"}]},",
         "ByteLevel must be the last"},
        {"\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"\\\\bx\"},"
         "\"behavior\":\"Isolated\",\"invert\":false},",
         "\\b is not supported"},
        {"\"decoder\":{\"type\":\"WordPiece\"},", "decoder \"WordPiece\""},
        {"\"decoder\":{\"type\":\"CTC\"},", "decoder \"CTC\""},
        {"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"ByteLevel\"},"
         "{\"type\":\"Fuse\"}]},",
         "inside a Sequence with others"},
        {"\"decoder\":{\"type\":\"Sequence\",\"decoders\":[{\"type\":\"Fuse\"},"
         "{\"type\":\"ByteFallback\"}]},",
         "decoder \"ByteFallback\" after Fuse"},
        {"\"decoder\":{\"type\":\"Replace\",\"pattern\":{\"Regex\":\"x\"},\"content\":\"y\"},",
         "Regex pattern"},
        {"\"post_processor\":{\"type\":\"BertProcessing\"},", "post_processor \"BertProcessing\""},
    };
    for (size_t i = 0; i < sizeof k_parts / sizeof k_parts[0]; i++) {
        char *json = mini_json(k_parts[i].part, NULL);
        expect_load_error(json, NULL, LA_ERR_UNSUPPORTED, "tokenizer.json", k_parts[i].name);
        free(json);
    }
}

Test(tokenizer_load, bad_model_fields_are_format_errors) {
    char *json = mini_json("", "{\"type\":\"BPE\",\"vocab\":{\"a\":0,\"b\":1},\"merges\":[\"a b\"]}");
    expect_load_error(json, NULL, LA_ERR_FORMAT, "model.merges[0]", "\"ab\" is not in the vocab");
    free(json);
    json = mini_json("", "{\"type\":\"BPE\",\"vocab\":{\"a\":-1},\"merges\":[]}");
    expect_load_error(json, NULL, LA_ERR_FORMAT, "model.vocab[\"a\"]", NULL);
    free(json);
    json = mini_json("", "{\"type\":\"BPE\",\"vocab\":[],\"merges\":[]}");
    expect_load_error(json, NULL, LA_ERR_FORMAT, "model.vocab", NULL);
    free(json);
    json = mini_json("", "{\"type\":\"BPE\",\"vocab\":{\"a\":0},\"merges\":[\"a\"]}");
    expect_load_error(json, NULL, LA_ERR_FORMAT, "model.merges[0] is not", NULL);
    free(json);
    expect_load_error("{\"version\":\"1.0\"}", NULL, LA_ERR_FORMAT, "missing field model", NULL);
    expect_load_error("[]", NULL, LA_ERR_FORMAT, "not a JSON object", NULL);
}

Test(tokenizer_load, bad_regex_is_a_format_error) {
    char *json = mini_json("\"pre_tokenizer\":{\"type\":\"Split\",\"pattern\":{\"Regex\":\"(a\"},"
                           "\"behavior\":\"Isolated\",\"invert\":false},",
                           NULL);
    expect_load_error(json, NULL, LA_ERR_FORMAT, "regex \"(a\" does not compile", NULL);
    free(json);
}

Test(tokenizer_load, bad_tokenizer_config_is_a_format_error_naming_it) {
    char *json = mini_json("", NULL);
    expect_load_error(json, "{\"bos_token\": ", LA_ERR_FORMAT, "tokenizer_config.json",
                      "invalid JSON");
    expect_load_error(json, "{\"bos_token\": \"<nope>\"}", LA_ERR_FORMAT,
                      "tokenizer_config.json", "bos_token \"<nope>\" is not a token");
    expect_load_error(json, "{\"eos_token\": \"\xc3\"}", LA_ERR_FORMAT, "tokenizer_config.json",
                      "invalid UTF-8");
    free(json);
}

Test(tokenizer_load, directory_with_only_tokenizer_json_loads) {
    char *dir = la_test_tmpdir();
    char *json = mini_json("\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false},"
                           "\"decoder\":{\"type\":\"ByteLevel\"},",
                           NULL);
    write_str(dir, "tokenizer.json", json);
    la_tokenizer *tok = load(dir);
    cr_assert_eq(la_tokenizer_vocab_size(tok), 4);
    cr_assert_eq(la_tokenizer_bos_id(tok), -1);
    cr_assert_eq(la_tokenizer_eos_id(tok), -1);
    cr_assert(!la_tokenizer_adds_bos(tok));
    cr_assert_null(la_tokenizer_chat_template(tok));
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, "abab<s>a", 8, true, &ids, &n, &err), err);
    /* "abab" is one word: a b a b -> ab ab; "<s>" is the added token; no template */
    cr_assert_eq(n, 4);
    cr_assert(ids[0] == 2 && ids[1] == 2 && ids[2] == 3 && ids[3] == 0);
    free(ids);
    la_tokenizer_destroy(tok);
    free(json);
    la_test_rm_tree(dir);
}

Test(tokenizer_load, null_decoder_joins_tokens_with_spaces_and_unknown_chars_are_dropped) {
    char *dir = la_test_tmpdir();
    char *json = mini_json("\"normalizer\":null,\"pre_tokenizer\":null,\"decoder\":null,", NULL);
    write_str(dir, "tokenizer.json", json);
    la_tokenizer *tok = load(dir);
    /* tokenizers 0.23: encode("abab<s>a c") -> [2, 2, 3, 0] (" " and "c" have no token
     * and there is no unk_token); decode([2, 3, 0]) -> "ab <s> a", skipping specials
     * "ab a" */
    expect_ids(tok, "abab<s>a c", (const int32_t[]){2, 2, 3, 0}, 4);
    char *text = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_decode(tok, (const int32_t[]){2, 3, 0}, 3, false, &text, NULL, &err), err);
    cr_assert_str_eq(text, "ab <s> a");
    free(text);
    LA_CHECK_OK(la_tokenizer_decode(tok, (const int32_t[]){2, 3, 0}, 3, true, &text, NULL, &err), err);
    cr_assert_str_eq(text, "ab a");
    free(text);
    la_tokenizer_destroy(tok);
    free(json);
    la_test_rm_tree(dir);
}

Test(tokenizer_load, destroy_null_does_nothing) {
    la_tokenizer_destroy(NULL);
    la_detok_destroy(NULL);
}

/* ---- tokenizer_config.json --------------------------------------------------------------- */

Test(tokenizer_config, llama_tokenizer_class_rebuilds_the_template_from_add_bos_and_add_eos) {
    char *src = la_test_path("tests/fixtures/tokenizer/sp-tiny");
    char *dir = la_test_tmpdir();
    copy_file(src, dir, "tokenizer.json");
    write_str(dir, "tokenizer_config.json",
              "{\"tokenizer_class\":\"LlamaTokenizerFast\",\"bos_token\":\"<s>\","
              "\"eos_token\":\"</s>\",\"add_bos_token\":false,\"add_eos_token\":true}");
    la_tokenizer *tok = load(dir);
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, "hi", 2, true, &ids, &n, &err), err);
    /* tokenizers: "hi" -> [459, 331]; </s> = 2 */
    cr_assert_eq(n, 3);
    cr_assert(ids[0] == 459 && ids[1] == 331 && ids[2] == 2);
    cr_assert(!la_tokenizer_adds_bos(tok));
    free(ids);
    la_tokenizer_destroy(tok);
    la_test_rm_tree(dir);
    free(src);
}

Test(tokenizer_config, chat_template_comes_from_config_or_chat_template_jinja) {
    la_tokenizer *tok = load_fixture("bpe-tiny");
    const char *t = la_tokenizer_chat_template(tok);
    cr_assert(t && strncmp(t, "{% for message in messages %}", 29) == 0);
    la_tokenizer_destroy(tok);

    char *src = la_test_path("tests/fixtures/tokenizer/bpe-tiny");
    char *dir = la_test_tmpdir();
    copy_file(src, dir, "tokenizer.json");
    write_str(dir, "chat_template.jinja", "{{ messages }}");
    tok = load(dir);
    cr_assert_str_eq(la_tokenizer_chat_template(tok), "{{ messages }}");
    cr_assert_eq(la_tokenizer_bos_id(tok), 0); /* no config: the template's BOS */
    cr_assert(la_tokenizer_adds_bos(tok));
    la_tokenizer_destroy(tok);
    la_test_rm_tree(dir);
    free(src);
}

/* ---- encode ------------------------------------------------------------------------------ */

static void expect_encode_rejects(const la_tokenizer *tok, const char *text, size_t len,
                                  size_t offset) {
    int32_t sentinel_ids[1] = {7}, *ids = sentinel_ids, n = -5;
    la_err err = {0};
    la_status s = la_tokenizer_encode(tok, text, len, true, &ids, &n, &err);
    cr_assert_eq(s, LA_ERR_INVALID_ARG, "status %s", la_status_name(s));
    cr_assert(ids == sentinel_ids && n == -5, "outputs written on error");
    char needle[64];
    snprintf(needle, sizeof needle, "at byte offset %zu", offset);
    cr_assert(strstr(err.msg, needle), "message \"%s\" lacks \"%s\"", err.msg, needle);
}

Test(tokenizer_encode, invalid_utf8_input_is_rejected_naming_the_byte_offset) {
    la_tokenizer *tok = load_fixture("bpe-tiny");
    expect_encode_rejects(tok, "\xff", 1, 0);
    expect_encode_rejects(tok, "abc\x80", 4, 3);            /* lone continuation byte */
    expect_encode_rejects(tok, "ab\xc3", 3, 2);             /* truncated at the end */
    expect_encode_rejects(tok, "ab\xc3(", 4, 2);            /* truncated in the middle */
    expect_encode_rejects(tok, "x\xc0\x80", 3, 1);          /* overlong NUL */
    expect_encode_rejects(tok, "\xe2\x82\xac\xed\xa0\x80", 6, 3); /* surrogate D800 */
    expect_encode_rejects(tok, "\xf4\x90\x80\x80", 4, 0);   /* above U+10FFFF */
    expect_encode_rejects(tok, "ok <|eot_id|>\xfe", 14, 13);
    la_tokenizer_destroy(tok);
}

Test(tokenizer_encode, empty_text_gives_only_the_template) {
    la_tokenizer *tok = load_fixture("bpe-tiny");
    int32_t *ids = NULL, n = -1;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, NULL, 0, false, &ids, &n, &err), err);
    cr_assert(ids != NULL && n == 0);
    free(ids);
    LA_CHECK_OK(la_tokenizer_encode(tok, "", 0, true, &ids, &n, &err), err);
    cr_assert(n == 1 && ids[0] == la_tokenizer_bos_id(tok));
    free(ids);
    la_tokenizer_destroy(tok);
}

Test(tokenizer_encode, llama3_u180e_is_not_whitespace_and_long_s_is_no_contraction) {
    char *dir = llama3_dir();
    la_tokenizer *tok = load(dir);
    /* tokenizers 0.23: "a\u180eb" -> [64, 157, 254, 236, 65] ("a", U+180E's bytes, "b");
     * PCRE2's own \s would have made U+180E a space. "x'\u017f" -> [87, 6, 129, 123]: not
     * the contraction 's that PCRE2's caseless match would give. "x'S" -> [87, 13575]. */
    expect_ids(tok, "a\xe1\xa0\x8e" "b", (const int32_t[]){64, 157, 254, 236, 65}, 5);
    expect_ids(tok, "x'\xc5\xbf", (const int32_t[]){87, 6, 129, 123}, 4);
    expect_ids(tok, "x'S", (const int32_t[]){87, 13575}, 2);
    expect_ids(tok, "<|begin_of_text|>Hello world<|eot_id|>",
               (const int32_t[]){128000, 9906, 1917, 128009}, 4);
    cr_assert_eq(la_tokenizer_vocab_size(tok), 128256);
    cr_assert_eq(la_tokenizer_bos_id(tok), 128000);
    cr_assert_eq(la_tokenizer_eos_id(tok), 128009);
    cr_assert(la_tokenizer_adds_bos(tok));
    cr_assert(la_tokenizer_is_special(tok, 128009));
    cr_assert(!la_tokenizer_is_special(tok, 9906));
    cr_assert(!la_tokenizer_is_special(tok, -1) && !la_tokenizer_is_special(tok, 128256));
    cr_assert_eq(la_tokenizer_token_to_id(tok, "<|eot_id|>"), 128009);
    cr_assert_eq(la_tokenizer_token_to_id(tok, "Hello"), 9906);
    cr_assert_eq(la_tokenizer_token_to_id(tok, "no such token"), -1);
    cr_assert_str_eq(la_tokenizer_id_to_token(tok, 1917), "\xc4\xa0world"); /* "Ġworld" */
    cr_assert_null(la_tokenizer_id_to_token(tok, 128256));
    la_tokenizer_destroy(tok);
    free(dir);
}

static void expect_round_trip(const la_tokenizer *tok, const char *text, size_t len,
                              int32_t min_ids, int32_t max_ids) {
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    LA_CHECK_OK(la_tokenizer_encode(tok, text, len, false, &ids, &n, &err), err);
    cr_assert(n >= min_ids && n <= max_ids, "%d ids, want [%d, %d]", n, min_ids, max_ids);
    char *back = NULL;
    size_t n_back = 0;
    LA_CHECK_OK(la_tokenizer_decode(tok, ids, n, false, &back, &n_back, &err), err);
    cr_assert(n_back == len && memcmp(back, text, len) == 0, "round trip of %zu bytes differs", len);
    free(back);
    free(ids);
}

Test(tokenizer_encode, long_inputs_round_trip) {
    size_t len = 1 << 20;
    char *text = malloc(len);
    cr_assert(text);
    la_tokenizer *sp = load_fixture("sp-tiny");
    memset(text, 'a', len); /* one SentencePiece "word" of 1 MiB: heap-ordered merges */
    expect_round_trip(sp, text, len, 1, (int32_t)len);
    la_tokenizer_destroy(sp);

    char *dir = llama3_dir();
    la_tokenizer *tok = load(dir);
    memset(text, ' ', len); /* one regex match of 1 MiB of white space */
    expect_round_trip(tok, text, len, 1, (int32_t)len);
    for (size_t i = 0; i < len; i++) text[i] = "a \n\t1."[i % 6];
    expect_round_trip(tok, text, len, 1, (int32_t)len);
    la_tokenizer_destroy(tok);
    free(dir);
    free(text);
}

/* ---- decode and streaming -------------------------------------------------------------- */

Test(tokenizer_decode, id_out_of_range_is_rejected_and_outputs_untouched) {
    la_tokenizer *tok = load_fixture("bpe-tiny");
    int32_t n_ids = la_tokenizer_vocab_size(tok);
    const int32_t bad[][2] = {{5, -1}, {5, n_ids}, {INT32_MAX, 5}};
    for (size_t i = 0; i < 3; i++) {
        char sentinel[1], *text = sentinel;
        size_t len = 99;
        la_err err = {0};
        la_status s = la_tokenizer_decode(tok, bad[i], 2, false, &text, &len, &err);
        cr_assert_eq(s, LA_ERR_INVALID_ARG);
        cr_assert(text == sentinel && len == 99);
        cr_assert(strstr(err.msg, "out of range"), "%s", err.msg);
    }
    la_tokenizer_destroy(tok);
}

/* Push ids, collecting the pieces; want[i] is the expected piece after ids[i], and
 * want[n] the flush. */
static void expect_pieces(la_detok *d, const int32_t *ids, int n, const char *const *want) {
    la_err err = {0};
    for (int i = 0; i <= n; i++) {
        const char *piece = NULL;
        size_t len = 0;
        la_status s = i < n ? la_detok_push(d, ids[i], &piece, &len, &err)
                            : la_detok_flush(d, &piece, &len, &err);
        LA_CHECK_OK(s, err);
        cr_assert_str_eq(piece, want[i], "piece %d: \"%s\", want \"%s\"", i, piece, want[i]);
        cr_assert_eq(len, strlen(want[i]));
    }
}

Test(tokenizer_detok, byte_level_holds_an_unfinished_character) {
    char *dir = llama3_dir();
    la_tokenizer *tok = load(dir);
    la_detok *d = NULL;
    la_err err = {0};
    /* "Ã" = byte C3 (127), "©" = byte A9 (102): "é" arrives in two tokens; a C3 that
     * does not complete becomes U+FFFD once the next byte shows it cannot */
    LA_CHECK_OK(la_detok_create(tok, false, &d, &err), err);
    expect_pieces(d, (const int32_t[]){9906, 127, 102, 127, 9906, 127}, 6,
                  (const char *const[]){"Hello", "", "\xc3\xa9", "", "\xef\xbf\xbdHello", "",
                                         "\xef\xbf\xbd"});
    la_detok_destroy(d);
    la_tokenizer_destroy(tok);
    free(dir);
}

Test(tokenizer_detok, byte_fallback_run_is_held_until_it_closes) {
    la_tokenizer *tok = load_fixture("sp-tiny");
    la_detok *d = NULL;
    la_err err = {0};
    /* <0xE6> <0x97> <0xA5> "▁a": tokenizers decode -> "日 a" */
    int32_t e6 = la_tokenizer_token_to_id(tok, "<0xE6>"), x97 = la_tokenizer_token_to_id(tok, "<0x97>");
    int32_t xa5 = la_tokenizer_token_to_id(tok, "<0xA5>"), a = la_tokenizer_token_to_id(tok, "\xe2\x96\x81" "a");
    cr_assert(e6 >= 0 && x97 >= 0 && xa5 >= 0 && a >= 0);
    LA_CHECK_OK(la_detok_create(tok, false, &d, &err), err);
    expect_pieces(d, (const int32_t[]){e6, x97, xa5, a}, 4,
                  (const char *const[]){"", "", "", "\xe6\x97\xa5 a", ""});
    la_detok_destroy(d);
    /* a run that is not UTF-8 as a whole: one U+FFFD per byte, even for the valid head */
    LA_CHECK_OK(la_detok_create(tok, false, &d, &err), err);
    expect_pieces(d, (const int32_t[]){e6, x97, xa5, e6}, 4,
                  (const char *const[]){"", "", "", "",
                                        "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"});
    la_detok_destroy(d);
    la_tokenizer_destroy(tok);
}

Test(tokenizer_detok, bad_id_is_rejected_and_the_stream_goes_on_unchanged) {
    la_tokenizer *tok = load_fixture("bpe-tiny");
    int32_t *ids = NULL, n = 0;
    la_err err = {0};
    const char *text = "caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac";
    LA_CHECK_OK(la_tokenizer_encode(tok, text, strlen(text), false, &ids, &n, &err), err);
    la_detok *d = NULL;
    LA_CHECK_OK(la_detok_create(tok, false, &d, &err), err);
    char all[256] = "";
    for (int32_t i = 0; i < n; i++) {
        const char *piece = NULL;
        la_status s = la_detok_push(d, la_tokenizer_vocab_size(tok), &piece, NULL, &err);
        cr_assert_eq(s, LA_ERR_INVALID_ARG);
        LA_CHECK_OK(la_detok_push(d, ids[i], &piece, NULL, &err), err);
        strcat(all, piece);
    }
    const char *piece = NULL;
    LA_CHECK_OK(la_detok_flush(d, &piece, NULL, &err), err);
    strcat(all, piece);
    cr_assert_str_eq(all, text);
    la_detok_destroy(d);
    free(ids);
    la_tokenizer_destroy(tok);
}

/* ---- threads ---------------------------------------------------------------------------- */

#define N_THREADS 4

typedef struct job {
    const la_tokenizer *tok;
    char **texts;
    int n_texts;
    int32_t **want;
    int32_t *n_want;
    int offset; /* each thread starts elsewhere in the list */
    int mismatches;
} job;

static void *encode_all(void *arg) {
    job *j = arg;
    for (int k = 0; k < j->n_texts; k++) {
        int i = (k + j->offset) % j->n_texts;
        int32_t *ids = NULL, n = 0;
        la_err err = {0};
        if (la_tokenizer_encode(j->tok, j->texts[i], strlen(j->texts[i]), true, &ids, &n, &err) != LA_OK ||
            n != j->n_want[i] || memcmp(ids, j->want[i], (size_t)n * sizeof *ids) != 0)
            j->mismatches++;
        char *back = NULL;
        if (la_tokenizer_decode(j->tok, ids, n, true, &back, NULL, &err) != LA_OK ||
            strcmp(back, j->texts[i]) != 0)
            j->mismatches++;
        free(back);
        free(ids);
    }
    return NULL;
}

Test(tokenizer_threads, concurrent_encodes_agree_with_one_thread) {
    char *dir = llama3_dir();
    la_tokenizer *tok = load(dir);
    free(dir);
    char *path = NULL;
    cr_assert(asprintf(&path, "%s/data/hotpotqa/hotpotqa_dev_distractor_ircot_500.jsonl",
                       la_test_shared_dir()) > 0);
    FILE *f = fopen(path, "r");
    cr_assert(f, "%s", path);
    enum { N_TEXTS = 400 };
    char *texts[N_TEXTS];
    int n_texts = 0;
    char *line = NULL;
    size_t cap = 0;
    while (n_texts < N_TEXTS && getline(&line, &cap, f) > 0) {
        cJSON *q = cJSON_Parse(line);
        const cJSON *c;
        cJSON_ArrayForEach(c, cJSON_GetObjectItem(q, "contexts")) {
            if (n_texts < N_TEXTS)
                texts[n_texts++] = strdup(cJSON_GetObjectItem(c, "paragraph_text")->valuestring);
        }
        cJSON_Delete(q);
    }
    free(line);
    fclose(f);
    free(path);
    /* a fresh tokenizer (empty word cache) so threads race on filling it */
    int32_t *want[N_TEXTS], n_want[N_TEXTS];
    la_tokenizer *ref = NULL;
    {
        char *d2 = llama3_dir();
        ref = load(d2);
        free(d2);
    }
    for (int i = 0; i < n_texts; i++) {
        la_err err = {0};
        LA_CHECK_OK(la_tokenizer_encode(ref, texts[i], strlen(texts[i]), true, &want[i], &n_want[i], &err), err);
    }
    la_tokenizer_destroy(ref);
    pthread_t th[N_THREADS];
    job jobs[N_THREADS];
    for (int t = 0; t < N_THREADS; t++) {
        jobs[t] = (job){tok, texts, n_texts, want, n_want, t * n_texts / N_THREADS, 0};
        cr_assert_eq(pthread_create(&th[t], NULL, encode_all, &jobs[t]), 0);
    }
    for (int t = 0; t < N_THREADS; t++) {
        pthread_join(th[t], NULL);
        cr_assert_eq(jobs[t].mismatches, 0, "thread %d: %d mismatches", t, jobs[t].mismatches);
    }
    for (int i = 0; i < n_texts; i++) {
        free(texts[i]);
        free(want[i]);
    }
    la_tokenizer_destroy(tok);
}
