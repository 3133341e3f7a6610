/* Tests for src/model/config.c: config.json / generation_config.json parsing and RoPE
 * inverse frequencies against transformers (tests/fixtures/rope/inv_freq.json, made by
 * python3 tools/oracle/rope_fixture.py > tests/fixtures/rope/inv_freq.json). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/file.h"
#include "base/json.h"
#include "common/test_util.h"
#include "model/config.h"

/* transformers' float32 inv_freq and ours run the same float32 ops with correctly
 * rounded pow, so they must agree bit for bit. */
#define ROPE_MAX_ULP 0

/* A fresh directory holding config.json = config (and generation_config.json = gen when
 * non-NULL). Caller frees with la_test_rm_tree. */
static char *model_dir(const char *config, const char *gen) {
    char *dir = la_test_tmpdir();
    if (config) la_test_write_text(dir, "config.json", config);
    if (gen) la_test_write_text(dir, "generation_config.json", gen);
    return dir;
}

#define LLAMA32_1B_CONFIG                                                                  \
    "{\"architectures\": [\"LlamaForCausalLM\"], \"attention_bias\": false,"             \
    " \"bos_token_id\": 128000, \"eos_token_id\": [128001, 128008, 128009],"             \
    " \"head_dim\": 64, \"hidden_act\": \"silu\", \"hidden_size\": 2048,"                \
    " \"intermediate_size\": 8192, \"max_position_embeddings\": 131072,"                 \
    " \"mlp_bias\": false, \"model_type\": \"llama\", \"num_attention_heads\": 32,"      \
    " \"num_hidden_layers\": 16, \"num_key_value_heads\": 8, \"rms_norm_eps\": 1e-05,"   \
    " \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"                   \
    " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192,"             \
    " \"rope_type\": \"llama3\"}, \"rope_theta\": 500000.0, \"tie_word_embeddings\": true,"\
    " \"torch_dtype\": \"bfloat16\", \"vocab_size\": 128256}"

/* A minimal config with `extra` spliced in (must start with ", " when non-empty). */
static char *minimal_config(const char *extra) {
    static const char *base = "{\"model_type\": \"llama\", \"vocab_size\": 100, \"hidden_size\": 64,"
                              " \"intermediate_size\": 128, \"num_hidden_layers\": 2,"
                              " \"num_attention_heads\": 4";
    size_t n = strlen(base) + strlen(extra) + 4;
    char *s = malloc(n);
    snprintf(s, n, "%s%s}", base, extra);
    return s;
}

/* Load a minimal config with `extra` and expect failure `want` whose message contains
 * each of the NULL-terminated needles; checks *cfg is untouched. */
static void expect_fail(const char *extra, la_status want, const char *needle1,
                        const char *needle2) {
    char *text = minimal_config(extra);
    char *dir = model_dir(text, NULL);
    la_model_config cfg;
    memset(&cfg, 0xAB, sizeof cfg);
    la_model_config before = cfg;
    la_err err = {0};
    la_status s = la_model_config_load(dir, &cfg, &err);
    cr_assert_eq(s, want, "extra %s: got %s (%s), want %s", extra, la_status_name(s), err.msg,
                 la_status_name(want));
    cr_assert(strstr(err.msg, "config.json"), "message does not name the file: %s", err.msg);
    cr_assert(strstr(err.msg, needle1), "message lacks \"%s\": %s", needle1, err.msg);
    if (needle2) cr_assert(strstr(err.msg, needle2), "message lacks \"%s\": %s", needle2, err.msg);
    cr_assert(memcmp(&cfg, &before, sizeof cfg) == 0, "cfg written on error");
    free(text);
    la_test_rm_tree(dir);
}

/* ---- parsing ------------------------------------------------------------------------ */

Test(config, llama32_1b_config_parses_every_field) {
    char *dir = model_dir(LLAMA32_1B_CONFIG, "{\"bos_token_id\": 128000, \"eos_token_id\": [128001, 128009, 7]}");
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.vocab_size, 128256);
    cr_assert_eq(c.hidden_size, 2048);
    cr_assert_eq(c.intermediate_size, 8192);
    cr_assert_eq(c.n_layers, 16);
    cr_assert_eq(c.n_heads, 32);
    cr_assert_eq(c.n_kv_heads, 8);
    cr_assert_eq(c.head_dim, 64);
    cr_assert_eq(c.rms_norm_eps, 1e-5);
    cr_assert_eq(c.rope_theta, 500000.0);
    cr_assert_eq(c.rope_scaling.type, LA_ROPE_LLAMA3);
    cr_assert_eq(c.rope_scaling.factor, 32.0);
    cr_assert_eq(c.rope_scaling.low_freq_factor, 1.0);
    cr_assert_eq(c.rope_scaling.high_freq_factor, 4.0);
    cr_assert_eq(c.rope_scaling.original_max_position, 8192);
    cr_assert_eq(c.max_position_embeddings, 131072);
    cr_assert(c.tie_word_embeddings);
    cr_assert(!c.attention_bias && !c.mlp_bias);
    cr_assert_eq(c.bos_id, 128000);
    /* config.json's ids first, then generation_config.json's new ones, no duplicates */
    cr_assert_eq(c.n_eos_ids, 4);
    cr_assert_eq(c.eos_ids[0], 128001);
    cr_assert_eq(c.eos_ids[1], 128008);
    cr_assert_eq(c.eos_ids[2], 128009);
    cr_assert_eq(c.eos_ids[3], 7);
    cr_assert(la_model_config_is_eos(&c, 128009));
    cr_assert(la_model_config_is_eos(&c, 7));
    cr_assert(!la_model_config_is_eos(&c, 128000));
    la_test_rm_tree(dir);
}

Test(config, absent_fields_take_llama_defaults) {
    char *text = minimal_config("");
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.n_kv_heads, 4);
    cr_assert_eq(c.head_dim, 16);
    cr_assert_eq(c.rms_norm_eps, 1e-6);
    cr_assert_eq(c.rope_theta, 10000.0);
    cr_assert_eq(c.rope_scaling.type, LA_ROPE_DEFAULT);
    cr_assert_eq(c.max_position_embeddings, 2048);
    cr_assert(!c.tie_word_embeddings);
    cr_assert_eq(c.bos_id, -1);
    cr_assert_eq(c.n_eos_ids, 0);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, single_eos_number_in_generation_config_is_merged) {
    char *text = minimal_config(", \"eos_token_id\": 2, \"bos_token_id\": null");
    char *dir = model_dir(text, "{\"eos_token_id\": 3}");
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.n_eos_ids, 2);
    cr_assert_eq(c.eos_ids[0], 2);
    cr_assert_eq(c.eos_ids[1], 3);
    cr_assert_eq(c.bos_id, -1);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, transformers5_rope_parameters_spelling_is_read) {
    char *text = minimal_config(
        ", \"max_position_embeddings\": 65536, \"rope_parameters\": {\"rope_type\": \"llama3\","
        " \"rope_theta\": 100000.0, \"factor\": 16.0, \"low_freq_factor\": 2.0,"
        " \"high_freq_factor\": 8.0}");
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.rope_theta, 100000.0);
    cr_assert_eq(c.rope_scaling.type, LA_ROPE_LLAMA3);
    cr_assert_eq(c.rope_scaling.factor, 16.0);
    /* absent original_max_position_embeddings falls back to max_position_embeddings */
    cr_assert_eq(c.rope_scaling.original_max_position, 65536);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, rope_scaling_wins_over_rope_parameters_and_legacy_type_key_works) {
    char *text = minimal_config(
        ", \"rope_theta\": 5000.0, \"rope_scaling\": {\"type\": \"linear\", \"factor\": 2.0},"
        " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 7.0}");
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.rope_scaling.type, LA_ROPE_LINEAR);
    cr_assert_eq(c.rope_scaling.factor, 2.0);
    cr_assert_eq(c.rope_theta, 5000.0);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, top_level_original_max_position_overrides_the_dict) {
    char *text = minimal_config(
        ", \"original_max_position_embeddings\": 1024, \"rope_scaling\": {\"rope_type\":"
        " \"llama3\", \"factor\": 8.0, \"low_freq_factor\": 1.0, \"high_freq_factor\": 4.0,"
        " \"original_max_position_embeddings\": 8192}");
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert_eq(c.rope_scaling.original_max_position, 1024);
    free(text);
    la_test_rm_tree(dir);
}

/* ---- errors ------------------------------------------------------------------------- */

Test(config, missing_config_json_is_io_error_naming_it) {
    char *dir = model_dir(NULL, NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_IO);
    cr_assert(strstr(err.msg, "config.json"), "%s", err.msg);
    la_test_rm_tree(dir);
}

Test(config, bad_json_is_format_error_naming_file) {
    char *dir = model_dir("{\"vocab_size\": 100,,}", NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_FORMAT);
    cr_assert(strstr(err.msg, "config.json"), "%s", err.msg);
    la_test_rm_tree(dir);
}

Test(config, bad_generation_config_json_is_format_error_naming_it) {
    char *text = minimal_config("");
    char *dir = model_dir(text, "{\"eos_token_id\": [1, }");
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_FORMAT);
    cr_assert(strstr(err.msg, "generation_config.json"), "%s", err.msg);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, unknown_rope_type_is_unsupported_naming_it) {
    expect_fail(", \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}",
                LA_ERR_UNSUPPORTED, "\"yarn\"", NULL);
    expect_fail(", \"rope_parameters\": {\"rope_type\": \"dynamic\", \"factor\": 4.0}",
                LA_ERR_UNSUPPORTED, "\"dynamic\"", NULL);
}

Test(config, biases_are_unsupported) {
    expect_fail(", \"attention_bias\": true", LA_ERR_UNSUPPORTED, "attention_bias", NULL);
    expect_fail(", \"mlp_bias\": true", LA_ERR_UNSUPPORTED, "mlp_bias", NULL);
}

Test(config, kv_heads_must_divide_heads) {
    char *text = strdup(LLAMA32_1B_CONFIG);
    char *p = strstr(text, "\"num_key_value_heads\": 8");
    p[strlen("\"num_key_value_heads\": ")] = '6';
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_FORMAT);
    cr_assert(strstr(err.msg, "config.json: num_key_value_heads=6 does not divide "
                              "num_attention_heads=32"),
              "%s", err.msg);
    free(text);
    la_test_rm_tree(dir);
}

Test(config, head_dim_must_be_even) {
    expect_fail(", \"head_dim\": 15", LA_ERR_FORMAT, "head_dim=15", NULL);
}

/* fuzz/config found a head_dim of 1178706044 passing the load (2.3 GB of RoPE frequencies) */
Test(config, head_dim_above_the_limit_is_refused) {
    expect_fail(", \"head_dim\": 1178706044", LA_ERR_UNSUPPORTED, "head_dim=1178706044 is above 1024", NULL);
    expect_fail(", \"head_dim\": 1026", LA_ERR_UNSUPPORTED, "is above 1024", NULL);
}

Test(config, sizes_must_be_positive_integers) {
    expect_fail(", \"num_key_value_heads\": 0", LA_ERR_FORMAT, "num_key_value_heads=0", NULL);
    expect_fail(", \"head_dim\": -2", LA_ERR_FORMAT, "head_dim=-2", NULL);
    expect_fail(", \"num_key_value_heads\": 2.5", LA_ERR_FORMAT, "num_key_value_heads", NULL);
    expect_fail(", \"head_dim\": \"16\"", LA_ERR_FORMAT, "head_dim", NULL);
    expect_fail(", \"rms_norm_eps\": 0", LA_ERR_FORMAT, "rms_norm_eps", NULL);
    expect_fail(", \"rope_theta\": -1", LA_ERR_FORMAT, "rope_theta", NULL);
    expect_fail(", \"max_position_embeddings\": 0", LA_ERR_FORMAT, "max_position_embeddings",
                NULL);
}

Test(config, missing_required_field_is_named) {
    char *dir = model_dir("{\"model_type\": \"llama\", \"hidden_size\": 64, \"intermediate_size\": 1,"
                          " \"num_hidden_layers\": 1, \"num_attention_heads\": 4}",
                          NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_FORMAT);
    cr_assert(strstr(err.msg, "vocab_size") && strstr(err.msg, "config.json"), "%s", err.msg);
    la_test_rm_tree(dir);
}

Test(config, bad_scaling_parameters_are_format_errors) {
    expect_fail(", \"rope_scaling\": {\"type\": \"linear\"}", LA_ERR_FORMAT, "factor", NULL);
    expect_fail(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
                " \"high_freq_factor\": 4.0}",
                LA_ERR_FORMAT, "low_freq_factor", NULL);
    expect_fail(", \"rope_scaling\": {\"rope_type\": \"llama3\", \"factor\": 8.0,"
                " \"low_freq_factor\": 4.0, \"high_freq_factor\": 4.0}",
                LA_ERR_FORMAT, "low_freq_factor=4", NULL);
    expect_fail(", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 0}", LA_ERR_FORMAT,
                "factor=0", NULL);
    expect_fail(", \"rope_scaling\": 3", LA_ERR_FORMAT, "rope_scaling", NULL);
    expect_fail(", \"rope_scaling\": {\"rope_type\": \"linear\", \"factor\": 2,"
                " \"partial_rotary_factor\": 0.5}",
                LA_ERR_UNSUPPORTED, "partial_rotary_factor", NULL);
}

Test(config, other_architectures_and_activations_are_unsupported) {
    char *dir = model_dir("{\"model_type\": \"gemma\", \"vocab_size\": 100, \"hidden_size\": 64,"
                          " \"intermediate_size\": 1, \"num_hidden_layers\": 1,"
                          " \"num_attention_heads\": 4}",
                          NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "\"gemma\"") && strstr(err.msg, "config.json"), "%s", err.msg);
    la_test_rm_tree(dir);
    expect_fail(", \"hidden_act\": \"gelu\"", LA_ERR_UNSUPPORTED, "gelu", NULL);
}

static la_model_config load_ok(const char *text) {
    char *dir = model_dir(text, NULL);
    la_model_config c;
    la_err err = {0};
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    la_test_rm_tree(dir);
    return c;
}

#define FAMILY_CONFIG(type, extra)                                                           \
    "{\"model_type\": \"" type "\", \"vocab_size\": 100, \"hidden_size\": 64,"             \
    " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4,"      \
    " \"max_position_embeddings\": 32768" extra "}"

/* Each family's differences from Llama, as transformers' modeling files define them. */
Test(config, mistral_qwen2_qwen3_load_with_their_differences) {
    la_model_config m = load_ok(FAMILY_CONFIG("mistral", ", \"sliding_window\": null"));
    cr_assert_eq(m.arch, LA_ARCH_MISTRAL);
    cr_assert(!m.qkv_bias && !m.qk_norm && m.sliding_window == 0 && m.max_position_embeddings == 32768);
    /* Mistral v0.1's 4096-token window: the context is capped at it (full attention there) */
    m = load_ok(FAMILY_CONFIG("mistral", ", \"sliding_window\": 4096"));
    cr_assert_eq(m.sliding_window, 4096);
    cr_assert_eq(m.max_position_embeddings, 4096);
    la_model_config q2 = load_ok(FAMILY_CONFIG("qwen2", ", \"sliding_window\": 4096, \"use_sliding_window\": false"));
    cr_assert_eq(q2.arch, LA_ARCH_QWEN2);
    cr_assert(q2.qkv_bias && !q2.qk_norm, "Qwen2: q/k/v biases, no q/k norm");
    cr_assert_eq(q2.max_position_embeddings, 32768, "use_sliding_window false: no window");
    q2 = load_ok(FAMILY_CONFIG("qwen2", ", \"sliding_window\": 4096, \"use_sliding_window\": true"));
    cr_assert_eq(q2.max_position_embeddings, 4096);
    la_model_config q3 = load_ok(FAMILY_CONFIG("qwen3", ", \"head_dim\": 32, \"attention_bias\": false"));
    cr_assert_eq(q3.arch, LA_ARCH_QWEN3);
    cr_assert(q3.qk_norm && !q3.qkv_bias && q3.head_dim == 32);
    /* the family from architectures alone */
    q3 = load_ok("{\"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 100, \"hidden_size\": 64,"
                 " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4}");
    cr_assert_eq(q3.arch, LA_ARCH_QWEN3);
    cr_assert_str_eq(la_model_arch_name(LA_ARCH_QWEN2), "qwen2");
    /* model_type and architectures must agree, and an unknown family is refused even when
     * the other field names a known one (never guessed) */
    static const struct {
        const char *cfg;
        la_status want;
        const char *needle;
    } bad[] = {
        {"{\"model_type\": \"gemma\", \"architectures\": [\"Qwen2ForCausalLM\"], \"vocab_size\": 100, \"hidden_size\": 64,"
         " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4}",
         LA_ERR_UNSUPPORTED, "\"gemma\""},
        {"{\"model_type\": \"qwen2\", \"architectures\": [\"GemmaForCausalLM\"], \"vocab_size\": 100, \"hidden_size\": 64,"
         " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4}",
         LA_ERR_UNSUPPORTED, "GemmaForCausalLM"},
        {"{\"model_type\": \"qwen2\", \"architectures\": [\"Qwen3ForCausalLM\"], \"vocab_size\": 100, \"hidden_size\": 64,"
         " \"intermediate_size\": 8, \"num_hidden_layers\": 1, \"num_attention_heads\": 4}",
         LA_ERR_FORMAT, "another family"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char *d = model_dir(bad[i].cfg, NULL);
        la_model_config cc;
        la_err e = {0};
        cr_assert_eq(la_model_config_load(d, &cc, &e), bad[i].want, "case %zu: %s", i, e.msg);
        cr_assert(strstr(e.msg, bad[i].needle), "case %zu: %s", i, e.msg);
        la_test_rm_tree(d);
    }
    /* a bias on o_proj (attention_bias true) is not implemented */
    char *dir = model_dir(FAMILY_CONFIG("qwen3", ", \"attention_bias\": true"), NULL);
    la_model_config c;
    la_err err = {0};
    cr_assert_eq(la_model_config_load(dir, &c, &err), LA_ERR_UNSUPPORTED);
    cr_assert(strstr(err.msg, "attention_bias"), "%s", err.msg);
    la_test_rm_tree(dir);
}

Test(config, eos_ids_must_be_token_ids_and_few) {
    expect_fail(", \"eos_token_id\": [1, \"x\"]", LA_ERR_FORMAT, "eos_token_id", NULL);
    expect_fail(", \"eos_token_id\": [-3]", LA_ERR_FORMAT, "eos_token_id", NULL);
    expect_fail(", \"eos_token_id\": [1,2,3,4,5,6,7,8,9]", LA_ERR_UNSUPPORTED, "eos", NULL);
}

/* ---- RoPE --------------------------------------------------------------------------- */

static int64_t ulp_diff(float a, float b) {
    int32_t ia, ib;
    memcpy(&ia, &a, 4);
    memcpy(&ib, &b, 4);
    return llabs((int64_t)ia - (int64_t)ib);
}

Test(config, rope_inv_freq_matches_transformers_bit_for_bit) {
    char *fixture = la_test_path("tests/fixtures/rope/inv_freq.json");
    cJSON *root = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_json_load_file(fixture, &root, &err), err);
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    cr_assert(cJSON_GetArraySize(cases) >= 8);
    int seen_types[3] = {0};
    for (const cJSON *cs = cases->child; cs; cs = cs->next) {
        const char *name = cJSON_GetObjectItemCaseSensitive(cs, "name")->valuestring;
        char *text = cJSON_PrintUnformatted(cJSON_GetObjectItemCaseSensitive(cs, "config"));
        char *dir = model_dir(text, NULL);
        la_model_config c;
        LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
        seen_types[c.rope_scaling.type]++;
        const cJSON *bits = cJSON_GetObjectItemCaseSensitive(cs, "inv_freq_bits");
        cr_assert_eq(cJSON_GetArraySize(bits), c.head_dim / 2, "%s: length", name);
        float *inv = malloc(sizeof(float) * (size_t)(c.head_dim / 2));
        la_rope_inv_freq(&c, inv);
        int64_t worst = 0;
        int at = 0, i = 0;
        for (const cJSON *b = bits->child; b; b = b->next, i++) {
            uint32_t u = (uint32_t)b->valuedouble;
            float want;
            memcpy(&want, &u, 4);
            int64_t d = ulp_diff(inv[i], want);
            if (d > worst) worst = d, at = i;
        }
        cr_assert_leq(worst, ROPE_MAX_ULP, "%s: max %lld ulp at index %d", name,
                      (long long)worst, at);
        free(inv);
        free(text);
        la_test_rm_tree(dir);
    }
    cr_assert(seen_types[LA_ROPE_DEFAULT] && seen_types[LA_ROPE_LINEAR] &&
              seen_types[LA_ROPE_LLAMA3]);
    cJSON_Delete(root);
    free(fixture);
}

/* ---- presets ----------------------------------------------------------------------------- */

/* Each preset equals the published config.json it names (tests/fixtures/configs/), field by
 * field, RoPE inverse frequencies included. */
Test(config, presets_equal_their_published_configs) {
    static const char *const names[] = {"llama3.1-8b", "llama3.1-70b", "llama3.2-3b"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char rel[256];
        snprintf(rel, sizeof rel, "tests/fixtures/configs/%s", names[i]);
        char *dir = la_test_path(rel);
        la_model_config want, got;
        la_err err = {0};
        LA_CHECK_OK(la_model_config_load(dir, &want, &err), err);
        LA_CHECK_OK(la_model_config_preset(names[i], &got, &err), err);
        cr_assert_eq(got.vocab_size, want.vocab_size, "%s", names[i]);
        cr_assert_eq(got.hidden_size, want.hidden_size, "%s", names[i]);
        cr_assert_eq(got.intermediate_size, want.intermediate_size, "%s", names[i]);
        cr_assert_eq(got.n_layers, want.n_layers, "%s", names[i]);
        cr_assert_eq(got.n_heads, want.n_heads, "%s", names[i]);
        cr_assert_eq(got.n_kv_heads, want.n_kv_heads, "%s", names[i]);
        cr_assert_eq(got.head_dim, want.head_dim, "%s", names[i]);
        cr_assert_eq(got.rms_norm_eps, want.rms_norm_eps, "%s", names[i]);
        cr_assert_eq(got.rope_theta, want.rope_theta, "%s", names[i]);
        cr_assert_eq(got.rope_scaling.type, want.rope_scaling.type, "%s", names[i]);
        cr_assert_eq(got.rope_scaling.factor, want.rope_scaling.factor, "%s", names[i]);
        cr_assert_eq(got.rope_scaling.low_freq_factor, want.rope_scaling.low_freq_factor, "%s", names[i]);
        cr_assert_eq(got.rope_scaling.high_freq_factor, want.rope_scaling.high_freq_factor, "%s", names[i]);
        cr_assert_eq(got.rope_scaling.original_max_position, want.rope_scaling.original_max_position, "%s",
                     names[i]);
        cr_assert_eq(got.max_position_embeddings, want.max_position_embeddings, "%s", names[i]);
        cr_assert_eq(got.tie_word_embeddings, want.tie_word_embeddings, "%s", names[i]);
        cr_assert_eq(got.bos_id, want.bos_id, "%s", names[i]);
        cr_assert_eq(got.n_eos_ids, want.n_eos_ids, "%s", names[i]);
        for (int32_t k = 0; k < want.n_eos_ids; k++) cr_assert_eq(got.eos_ids[k], want.eos_ids[k], "%s", names[i]);
        float a[64], b[64];
        la_rope_inv_freq(&want, a);
        la_rope_inv_freq(&got, b);
        cr_assert(!memcmp(a, b, sizeof(float) * (size_t)(want.head_dim / 2)), "%s: inv_freq", names[i]);
        free(dir);
    }
}
