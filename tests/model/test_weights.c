/* Tests for src/model/weights.c, and whole model directories (config.json + safetensors)
 * as la_model_config_load then la_weights_load see them: good ones bind every tensor
 * with exact shapes, each kind of bad directory fails with the right status and a
 * message naming the file and tensor. Also loads the output of
 * build/write_random_checkpoint (tools/write_random_checkpoint.c). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "common/test_util.h"
#include "model/config.h"
#include "model/weights.h"

/* ---- helpers ------------------------------------------------------------------------ */

/* Tiny Llama: vocab 10, hidden 8, inter 12, 2 layers, 4 heads, 2 kv heads, head_dim 4
 * (explicit, != hidden / heads, so q_proj is [16, 8] and o_proj [8, 16]). */
#define TINY_CONFIG_FMT                                                                      \
    "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\","                \
    " \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 12,"                   \
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"    \
    " \"head_dim\": 4, \"rms_norm_eps\": 1e-5, \"rope_theta\": 10000.0,"                    \
    " \"tie_word_embeddings\": %s%s}"

typedef struct tiny_opts {
    bool tied;
    bool store_lm_head;      /* write lm_head.weight even when tied */
    const char *skip;        /* tensor to leave out */
    const char *misshape;    /* tensor whose first dim is doubled */
    const char *rope_extra;  /* spliced into config.json (", ...") */
    int n_shards;            /* 0/1: single file; 2: sharded with an index */
} tiny_opts;

typedef struct tiny_tensor {
    char name[96];
    int32_t n_dims;
    int64_t shape[2];
} tiny_tensor;

static int tiny_list(const tiny_opts *o, tiny_tensor *out) {
    int n = 0;
#define ADD(d0, d1, ...)                                                                   \
    do {                                                                                \
        snprintf(out[n].name, sizeof out[n].name, __VA_ARGS__);                         \
        out[n].shape[0] = (d0), out[n].shape[1] = (d1), out[n].n_dims = (d1) ? 2 : 1;   \
        n++;                                                                            \
    } while (0)
    ADD(10, 8, "model.embed_tokens.weight");
    for (int l = 0; l < 2; l++) {
        ADD(8, 0, "model.layers.%d.input_layernorm.weight", l);
        ADD(16, 8, "model.layers.%d.self_attn.q_proj.weight", l);
        ADD(8, 8, "model.layers.%d.self_attn.k_proj.weight", l);
        ADD(8, 8, "model.layers.%d.self_attn.v_proj.weight", l);
        ADD(8, 16, "model.layers.%d.self_attn.o_proj.weight", l);
        ADD(8, 0, "model.layers.%d.post_attention_layernorm.weight", l);
        ADD(12, 8, "model.layers.%d.mlp.gate_proj.weight", l);
        ADD(12, 8, "model.layers.%d.mlp.up_proj.weight", l);
        ADD(8, 12, "model.layers.%d.mlp.down_proj.weight", l);
    }
    ADD(8, 0, "model.norm.weight");
    if (!o->tied || o->store_lm_head) ADD(10, 8, "lm_head.weight");
    ADD(4, 0, "model.layers.0.self_attn.rotary_emb.inv_freq"); /* extra, ignored */
#undef ADD
    return n;
}

/* Value of element i of tensor t: distinct per tensor so bindings can be checked. */
static float tiny_value(int t, int64_t i) { return (float)t + (float)i / 1024.0f; }

/* A model directory for o. Tensors are F32 except the embedding (BF16). Caller frees. */
static char *tiny_dir(const tiny_opts *o) {
    char *dir = la_test_tmpdir();
    char config[2048];
    snprintf(config, sizeof config, TINY_CONFIG_FMT, o->tied ? "true" : "false",
             o->rope_extra ? o->rope_extra : "");
    la_test_write_text(dir, "config.json", config);

    tiny_tensor specs[32];
    int n = tiny_list(o, specs);
    la_st_write_tensor wt[32];
    void *bufs[32] = {0};
    int nw = 0;
    for (int t = 0; t < n; t++) {
        if (o->skip && strcmp(o->skip, specs[t].name) == 0) continue;
        la_st_write_tensor *w = &wt[nw];
        *w = (la_st_write_tensor){.name = specs[t].name, .n_dims = specs[t].n_dims,
                                  .dtype = t == 0 ? LA_DTYPE_BF16 : LA_DTYPE_F32};
        w->shape[0] = specs[t].shape[0];
        w->shape[1] = specs[t].shape[1];
        if (o->misshape && strcmp(o->misshape, specs[t].name) == 0) w->shape[0] *= 2;
        int64_t ne = w->shape[0] * (w->n_dims == 2 ? w->shape[1] : 1);
        bufs[nw] = malloc((size_t)ne * 4);
        for (int64_t i = 0; i < ne; i++) {
            float v = tiny_value(t, i);
            if (w->dtype == LA_DTYPE_BF16) ((uint16_t *)bufs[nw])[i] = la_f32_to_bf16(v);
            else ((float *)bufs[nw])[i] = v;
        }
        w->data = bufs[nw];
        nw++;
    }
    la_err err = {0};
    if (o->n_shards < 2) {
        char *p = la_path_join(dir, "model.safetensors");
        LA_CHECK_OK(la_st_write(p, wt, nw, &err), err);
        free(p);
    } else {
        /* first half in shard 1, rest in shard 2 */
        int half = nw / 2;
        char *p1 = la_path_join(dir, "model-00001-of-00002.safetensors");
        char *p2 = la_path_join(dir, "model-00002-of-00002.safetensors");
        LA_CHECK_OK(la_st_write(p1, wt, half, &err), err);
        LA_CHECK_OK(la_st_write(p2, wt + half, nw - half, &err), err);
        size_t cap = 16384, len = 0;
        char *index = malloc(cap);
        len += (size_t)snprintf(index + len, cap - len, "{\"metadata\": {}, \"weight_map\": {");
        for (int i = 0; i < nw; i++)
            len += (size_t)snprintf(index + len, cap - len, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"",
                                    i ? ", " : "", wt[i].name, i < half ? 1 : 2);
        snprintf(index + len, cap - len, "}}");
        la_test_write_text(dir, "model.safetensors.index.json", index);
        free(index);
        free(p1);
        free(p2);
    }
    for (int i = 0; i < nw; i++) free(bufs[i]);
    return dir;
}

/* Config then weights, as the engine loads a model directory. */
static la_status load_model(const char *dir, la_model_config *cfg, la_weights **w,
                            la_err *err) {
    LA_TRY(la_model_config_load(dir, cfg, err));
    return la_weights_load(dir, cfg, w, err);
}

static void expect_load_fails(const char *dir, la_status want, const char *needle1,
                              const char *needle2) {
    la_model_config cfg;
    la_weights *w = (la_weights *)0x1;
    la_err err = {0};
    la_status s = load_model(dir, &cfg, &w, &err);
    cr_assert_eq(s, want, "got %s (%s), want %s", la_status_name(s), err.msg,
                 la_status_name(want));
    cr_assert_eq(w, (la_weights *)0x1, "out-parameter written on error");
    cr_assert(strstr(err.msg, needle1), "message lacks \"%s\": %s", needle1, err.msg);
    if (needle2) cr_assert(strstr(err.msg, needle2), "message lacks \"%s\": %s", needle2, err.msg);
}

/* Check tensor t holds tiny_value(t_index, i) for its first n elements. */
static void check_values(const la_st_tensor *t, int t_index, int64_t n) {
    float *v = malloc((size_t)n * 4);
    la_convert_to_f32(v, t->data, t->dtype, (size_t)n);
    for (int64_t i = 0; i < n; i++) {
        float want = tiny_value(t_index, i);
        if (t->dtype == LA_DTYPE_BF16) want = la_bf16_to_f32(la_f32_to_bf16(want));
        cr_assert_eq(v[i], want, "%s[%lld] = %g, want %g", t->name, (long long)i, v[i], want);
    }
    free(v);
}

/* ---- good directories --------------------------------------------------------------- */

static void check_tiny_bindings(const la_weights *w, bool tied) {
    cr_assert_eq(w->n_layers, 2);
    cr_assert_str_eq(w->embed->name, "model.embed_tokens.weight");
    cr_assert_eq(w->embed->dtype, LA_DTYPE_BF16);
    check_values(w->embed, 0, 80);
    /* list order: embed 0, layer l tensors 1 + 9l .. 9 + 9l, norm 19, lm_head 20 */
    for (int l = 0; l < 2; l++) {
        const la_layer_weights *lw = &w->layers[l];
        const la_st_tensor *ts[9] = {lw->attn_norm, lw->wq,       lw->wk,   lw->wv,    lw->wo,
                                     lw->mlp_norm,  lw->w_gate,   lw->w_up, lw->w_down};
        for (int k = 0; k < 9; k++) {
            int64_t ne = ts[k]->shape[0] * (ts[k]->n_dims == 2 ? ts[k]->shape[1] : 1);
            check_values(ts[k], 1 + 9 * l + k, ne);
        }
        cr_assert(lw->wq->shape[0] == 16 && lw->wq->shape[1] == 8);
        cr_assert(lw->wk->shape[0] == 8 && lw->wv->shape[0] == 8);
        cr_assert(lw->wo->shape[0] == 8 && lw->wo->shape[1] == 16);
        cr_assert(lw->w_gate->shape[0] == 12 && lw->w_down->shape[1] == 12);
    }
    check_values(w->final_norm, 19, 8);
    if (tied) {
        cr_assert_eq(w->lm_head, w->embed);
    } else {
        cr_assert_str_eq(w->lm_head->name, "lm_head.weight");
        check_values(w->lm_head, 20, 80);
    }
}

Test(weights, untied_model_binds_every_tensor_with_its_values) {
    tiny_opts o = {.tied = false};
    char *dir = tiny_dir(&o);
    la_model_config cfg;
    la_weights *w = NULL;
    la_err err = {0};
    LA_CHECK_OK(load_model(dir, &cfg, &w, &err), err);
    check_tiny_bindings(w, false);
    la_weights_destroy(w);
    la_weights_destroy(NULL);
    la_test_rm_tree(dir);
}

Test(weights, tied_model_uses_the_embedding_as_lm_head) {
    tiny_opts o = {.tied = true, .store_lm_head = true};
    char *dir = tiny_dir(&o);
    la_model_config cfg;
    la_weights *w = NULL;
    la_err err = {0};
    LA_CHECK_OK(load_model(dir, &cfg, &w, &err), err);
    check_tiny_bindings(w, true);
    la_weights_destroy(w);
    la_test_rm_tree(dir);
}

Test(weights, sharded_model_binds_across_shards) {
    tiny_opts o = {.tied = false, .n_shards = 2};
    char *dir = tiny_dir(&o);
    la_model_config cfg;
    la_weights *w = NULL;
    la_err err = {0};
    LA_CHECK_OK(load_model(dir, &cfg, &w, &err), err);
    check_tiny_bindings(w, false);
    cr_assert_neq(w->embed->file_id, w->lm_head->file_id);
    la_weights_destroy(w);
    la_test_rm_tree(dir);
}

/* ---- bad directories ---------------------------------------------------------------- */

Test(weights, missing_config_json_fails_with_io_naming_it) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    char *p = la_path_join(dir, "config.json");
    unlink(p);
    free(p);
    expect_load_fails(dir, LA_ERR_IO, "config.json", NULL);
    la_test_rm_tree(dir);
}

Test(weights, bad_config_json_fails_with_format_naming_it) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    la_test_write_text(dir, "config.json", "{\"vocab_size\": 10, \"hidden_size\": }");
    expect_load_fails(dir, LA_ERR_FORMAT, "config.json", NULL);
    la_test_rm_tree(dir);
}

Test(weights, unknown_rope_type_fails_unsupported_naming_it) {
    tiny_opts o = {.rope_extra = ", \"rope_scaling\": {\"rope_type\": \"longrope\", \"factor\": 2}"};
    char *dir = tiny_dir(&o);
    expect_load_fails(dir, LA_ERR_UNSUPPORTED, "config.json", "\"longrope\"");
    la_test_rm_tree(dir);
}

Test(weights, missing_safetensors_fails_with_io_naming_it) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    char *p = la_path_join(dir, "model.safetensors");
    unlink(p);
    free(p);
    expect_load_fails(dir, LA_ERR_IO, "model.safetensors", NULL);
    la_test_rm_tree(dir);
}

Test(weights, truncated_safetensors_fails_with_format_naming_file_and_tensor) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    char *p = la_path_join(dir, "model.safetensors");
    struct stat st;
    cr_assert_eq(stat(p, &st), 0);
    cr_assert_eq(truncate(p, st.st_size - 1), 0);
    /* the last tensor in data order is the extra rotary_emb.inv_freq */
    expect_load_fails(dir, LA_ERR_FORMAT, "model.safetensors",
                      "tensor model.layers.0.self_attn.rotary_emb.inv_freq");
    free(p);
    la_test_rm_tree(dir);
}

/* Rewrite dir/model.safetensors's header: replace the first `from` after `anchor` by
 * `to` (any length; the header length prefix is rewritten, the data kept). */
static void edit_header(const char *dir, const char *anchor, const char *from, const char *to) {
    char *p = la_path_join(dir, "model.safetensors");
    char *bytes = NULL;
    size_t len = 0;
    la_err err = {0};
    LA_CHECK_OK(la_file_read(p, &bytes, &len, &err), err);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | (uint8_t)bytes[i];
    char *a = strstr(bytes + 8, anchor);
    cr_assert(a && a < bytes + 8 + hlen, "anchor %s not in header", anchor);
    char *f = strstr(a, from);
    cr_assert(f && f < bytes + 8 + hlen, "%s not after %s", from, anchor);
    size_t lf = strlen(from), lt = strlen(to), out_len = len - lf + lt;
    uint64_t new_hlen = hlen - lf + lt;
    char *out = malloc(out_len);
    for (int i = 0; i < 8; i++) out[i] = (char)(uint8_t)(new_hlen >> (8 * i));
    size_t head = (size_t)(f - bytes) - 8;
    memcpy(out + 8, bytes + 8, head);
    memcpy(out + 8 + head, to, lt);
    memcpy(out + 8 + head + lt, f + lf, len - (size_t)(f - bytes) - lf);
    la_test_write_bytes(p, out, out_len);
    free(out);
    free(bytes);
    free(p);
}

/* data_offsets of tensor name in dir's single-file checkpoint. */
static void offsets_of(const char *dir, const char *name, long *begin, long *end) {
    la_st_file *f = NULL;
    la_err err = {0};
    LA_CHECK_OK(la_st_open(dir, &f, &err), err);
    const uint8_t *lo = NULL;
    for (int64_t i = 0; i < la_st_count(f); i++) {
        const uint8_t *d = la_st_get(f, i)->data;
        if (!lo || d < lo) lo = d;
    }
    const la_st_tensor *t = la_st_find(f, name);
    *begin = (long)((const uint8_t *)t->data - lo);
    *end = *begin + (long)t->n_bytes;
    la_st_close(f);
}

Test(weights, header_offsets_past_the_end_fail_naming_the_tensor) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    long b, e;
    offsets_of(dir, "model.norm.weight", &b, &e);
    char from[64], to[64];
    snprintf(from, sizeof from, "[%ld,%ld]", b, e);
    snprintf(to, sizeof to, "[%ld,%ld]", b + 1000000, e + 1000000);
    edit_header(dir, "\"model.norm.weight\"", from, to);
    expect_load_fails(dir, LA_ERR_FORMAT, "model.safetensors", "tensor model.norm.weight");
    la_test_rm_tree(dir);
}

Test(weights, overlapping_tensors_fail_naming_both) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    /* point the final norm at layer 1's post_attention_layernorm bytes (both [8] F32) */
    long a0, a1, b0, b1;
    offsets_of(dir, "model.norm.weight", &a0, &a1);
    offsets_of(dir, "model.layers.1.post_attention_layernorm.weight", &b0, &b1);
    char from[64], to[64];
    snprintf(from, sizeof from, "[%ld,%ld]", a0, a1);
    snprintf(to, sizeof to, "[%ld,%ld]", b0 + 4, b1 + 4);
    edit_header(dir, "\"model.norm.weight\"", from, to);
    expect_load_fails(dir, LA_ERR_FORMAT, "model.norm.weight", "overlap");
    la_test_rm_tree(dir);
}

Test(weights, wrong_dtype_fails_unsupported_naming_tensor) {
    tiny_opts o = {0};
    char *dir = tiny_dir(&o);
    edit_header(dir, "\"model.layers.1.mlp.up_proj.weight\"", "\"F32\"", "\"I64\"");
    expect_load_fails(dir, LA_ERR_UNSUPPORTED, "model.layers.1.mlp.up_proj.weight", "I64");
    la_test_rm_tree(dir);
}

Test(weights, wrong_shape_fails_with_both_shapes_in_the_message) {
    tiny_opts o = {.misshape = "model.layers.1.mlp.up_proj.weight"};
    char *dir = tiny_dir(&o);
    expect_load_fails(dir, LA_ERR_FORMAT, "model.safetensors: tensor model.layers.1.mlp.up_proj.weight "
                      "has shape [24, 8], expected [12, 8]", NULL);
    la_test_rm_tree(dir);
}

Test(weights, missing_tensor_fails_naming_it_and_the_file) {
    tiny_opts o = {.skip = "model.layers.1.self_attn.k_proj.weight"};
    char *dir = tiny_dir(&o);
    expect_load_fails(dir, LA_ERR_FORMAT, "model.safetensors: tensor "
                      "model.layers.1.self_attn.k_proj.weight is missing", NULL);
    la_test_rm_tree(dir);
}

Test(weights, untied_model_without_lm_head_fails_naming_it) {
    tiny_opts o = {.skip = "lm_head.weight"};
    char *dir = tiny_dir(&o);
    expect_load_fails(dir, LA_ERR_FORMAT, "tensor lm_head.weight is missing", NULL);
    la_test_rm_tree(dir);
}

Test(weights, sharded_index_naming_a_missing_shard_fails_naming_it) {
    tiny_opts o = {.n_shards = 2};
    char *dir = tiny_dir(&o);
    char *p = la_path_join(dir, "model-00002-of-00002.safetensors");
    unlink(p);
    free(p);
    expect_load_fails(dir, LA_ERR_IO, "model-00002-of-00002.safetensors",
                      "model.safetensors.index.json");
    la_test_rm_tree(dir);
}

/* ---- tools/write_random_checkpoint ---------------------------------------------------- */

static char *tool_path(void) {
    char *p = la_path_join(LA_BUILD_DIR, "write_random_checkpoint");
    if (access(p, X_OK) != 0) {
        free(p);
        return NULL;
    }
    return p;
}

static void run_tool(const char *args) {
    char *tool = tool_path();
    cr_assert(tool, "%s/write_random_checkpoint is not built (tools/write_random_checkpoint.c, built by make)",
              LA_BUILD_DIR);
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s 2>/dev/null", tool, args);
    cr_assert_eq(system(cmd), 0, "failed: %s", cmd);
    free(tool);
}

Test(weights, random_checkpoint_configs_have_the_published_shapes) {
    char *dir = la_test_tmpdir();
    char args[1024];
    la_model_config c;
    la_err err = {0};

    snprintf(args, sizeof args, "--shape llama3.2-1b --config-only --out %s", dir);
    run_tool(args);
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert(c.vocab_size == 128256 && c.hidden_size == 2048 && c.intermediate_size == 8192);
    cr_assert(c.n_layers == 16 && c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 64);
    cr_assert(c.rope_theta == 500000.0 && c.rope_scaling.type == LA_ROPE_LLAMA3);
    cr_assert(c.rope_scaling.factor == 32.0 && c.rope_scaling.low_freq_factor == 1.0 &&
              c.rope_scaling.high_freq_factor == 4.0 &&
              c.rope_scaling.original_max_position == 8192);
    cr_assert(c.tie_word_embeddings && c.bos_id == 128000 && c.n_eos_ids == 2 &&
              c.eos_ids[0] == 128001 && c.eos_ids[1] == 128009);

    snprintf(args, sizeof args, "--shape llama3-8b --config-only --out %s", dir);
    run_tool(args);
    LA_CHECK_OK(la_model_config_load(dir, &c, &err), err);
    cr_assert(c.vocab_size == 128256 && c.hidden_size == 4096 && c.intermediate_size == 14336);
    cr_assert(c.n_layers == 32 && c.n_heads == 32 && c.n_kv_heads == 8 && c.head_dim == 128);
    cr_assert(c.rope_theta == 500000.0 && c.rope_scaling.type == LA_ROPE_DEFAULT);
    cr_assert(!c.tie_word_embeddings && c.bos_id == 128000 && c.n_eos_ids == 2);
    la_test_rm_tree(dir);
}

/* Uniform on [-a, a] with std 0.02: 8.2M embedding samples give a sample std within
 * 1e-4 of 0.02 and a mean within 1e-4 of 0 (bf16 rounding is ~0.4% per value but
 * unbiased). */
#define RANDOM_STD_TOL 1e-4

Test(weights, random_tiny_checkpoint_loads_sharded_with_expected_statistics) {
    char *dir = la_test_tmpdir();
    char args[1024];
    snprintf(args, sizeof args, "--shape tiny --seed 3 --shard-mb 8 --out %s", dir);
    run_tool(args);
    char *index = la_path_join(dir, "model.safetensors.index.json");
    cr_assert(la_file_exists(index), "16 MiB with 8 MiB shards must be sharded");
    free(index);
    la_model_config cfg;
    la_weights *w = NULL;
    la_err err = {0};
    LA_CHECK_OK(load_model(dir, &cfg, &w, &err), err);
    cr_assert(cfg.hidden_size == 64 && cfg.n_layers == 2 && cfg.tie_word_embeddings);
    cr_assert_eq(w->lm_head, w->embed);
    cr_assert_eq(w->embed->dtype, LA_DTYPE_BF16);
    size_t n = (size_t)w->embed->shape[0] * (size_t)w->embed->shape[1];
    float *v = malloc(n * sizeof *v);
    la_convert_to_f32(v, w->embed->data, w->embed->dtype, n);
    double sum = 0, sq = 0, amax = 0;
    for (size_t i = 0; i < n; i++) {
        sum += v[i];
        sq += (double)v[i] * v[i];
        if (fabs(v[i]) > amax) amax = fabs(v[i]);
    }
    double mean = sum / (double)n, std = sqrt(sq / (double)n - mean * mean);
    cr_assert(fabs(mean) < RANDOM_STD_TOL, "mean %g", mean);
    cr_assert(fabs(std - 0.02) < RANDOM_STD_TOL, "std %g", std);
    cr_assert(amax <= 0.02 * sqrt(3.0) * 1.004, "max |x| %g", amax);
    float one[64];
    la_convert_to_f32(one, w->layers[1].mlp_norm->data, w->layers[1].mlp_norm->dtype, 64);
    for (int i = 0; i < 64; i++) cr_assert_eq(one[i], 1.0f);
    free(v);
    la_weights_destroy(w);
    la_test_rm_tree(dir);
}

Test(weights, random_checkpoint_is_a_function_of_the_seed) {
    char *d1 = la_test_tmpdir(), *d2 = la_test_tmpdir(), *d3 = la_test_tmpdir();
    char args[1024];
    snprintf(args, sizeof args, "--shape tiny --vocab 300 --dtype f32 --seed 5 --out %s", d1);
    run_tool(args);
    snprintf(args, sizeof args, "--shape tiny --vocab 300 --dtype f32 --seed 5 --out %s", d2);
    run_tool(args);
    snprintf(args, sizeof args, "--shape tiny --vocab 300 --dtype f32 --seed 6 --out %s", d3);
    run_tool(args);
    char *p[3] = {la_path_join(d1, "model.safetensors"), la_path_join(d2, "model.safetensors"),
                  la_path_join(d3, "model.safetensors")};
    char *b[3];
    size_t len[3];
    la_err err = {0};
    for (int i = 0; i < 3; i++) LA_CHECK_OK(la_file_read(p[i], &b[i], &len[i], &err), err);
    cr_assert(len[0] == len[1] && memcmp(b[0], b[1], len[0]) == 0, "same seed, different bytes");
    cr_assert(len[0] == len[2] && memcmp(b[0], b[2], len[0]) != 0, "different seed, same bytes");
    la_model_config cfg;
    la_weights *w = NULL;
    LA_CHECK_OK(load_model(d1, &cfg, &w, &err), err);
    cr_assert_eq(cfg.vocab_size, 300);
    cr_assert_eq(w->embed->dtype, LA_DTYPE_F32);
    la_weights_destroy(w);
    for (int i = 0; i < 3; i++) free(b[i]), free(p[i]);
    la_test_rm_tree(d1);
    la_test_rm_tree(d2);
    la_test_rm_tree(d3);
}

Test(weights, random_checkpoint_copies_the_tokenizer) {
    char tok[1024];
    snprintf(tok, sizeof tok, "%s/data/tokenizers/llama3", la_test_shared_dir());
    char *tj = la_path_join(tok, "tokenizer.json");
    cr_assert(la_file_exists(tj), "%s is missing: the shared data (../shared or $LA_SHARED_DIR) that the llama3 "
              "tokenizer fixtures use too", tj);
    char *dir = la_test_tmpdir();
    char args[2048];
    snprintf(args, sizeof args, "--shape tiny --vocab 64 --config-only --tokenizer %s --out %s",
             tok, dir);
    run_tool(args);
    char *a = NULL, *b = NULL;
    size_t la = 0, lb = 0;
    la_err err = {0};
    char *copy = la_path_join(dir, "tokenizer.json");
    LA_CHECK_OK(la_file_read(tj, &a, &la, &err), err);
    LA_CHECK_OK(la_file_read(copy, &b, &lb, &err), err);
    cr_assert(la == lb && memcmp(a, b, la) == 0);
    char *cfg = la_path_join(dir, "tokenizer_config.json");
    cr_assert(la_file_exists(cfg));
    free(a), free(b), free(copy), free(cfg), free(tj);
    la_test_rm_tree(dir);
}
