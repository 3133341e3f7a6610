/* write_random_checkpoint: a Hugging Face Llama model directory with random weights of
 * an exact published shape, for timing and for loader/forward tests (DESIGN.md §8:
 * random weights give real TTFT/TPOT, never answers).
 *
 *   write_random_checkpoint --shape llama3.2-1b|llama3-8b|tiny --out DIR
 *       [--dtype bf16|f32] [--seed N] [--layers N] [--vocab N] [--shard-mb N]
 *       [--tokenizer DIR] [--config-only]
 *
 * Writes DIR/config.json (loadable by transformers' AutoModelForCausalLM), DIR/
 * generation_config.json, and the weights: model.safetensors, or when they exceed the
 * shard size (default 4096 MiB) model-0000i-of-0000n.safetensors shards plus
 * model.safetensors.index.json. Each tensor is streamed to disk in chunks, so memory
 * stays small whatever the shape.
 *
 * Weights: uniform on [-a, a] with a = 0.02 * sqrt(3) (std 0.02, transformers'
 * initializer_range), norm weights exactly 1. Element i of tensor t is a pure function
 * of (seed, t, i) through splitmix64, so output is identical for any thread count.
 * --tokenizer copies tokenizer.json and tokenizer_config.json from DIR. --layers and
 * --vocab override the shape's layer count and vocabulary size; --config-only writes
 * only the two JSON files (tests use it to check the full-size configs cheaply).
 *
 * Shapes (vocab 128256, bos 128000, eos [128001, 128009], rms_norm_eps 1e-5, theta 5e5):
 *   llama3.2-1b  hidden 2048, inter 8192, 16 layers, 32 heads, 8 kv heads, head_dim 64,
 *                llama3 rope scaling (factor 32, low 1, high 4, original 8192),
 *                max positions 131072, tied embeddings
 *   llama3-8b    hidden 4096, inter 14336, 32 layers, 32 heads, 8 kv heads, head_dim 128,
 *                no scaling, max positions 8192, untied
 *   tiny         hidden 64, inter 192, 2 layers, 4 heads, 2 kv heads, head_dim 16,
 *                llama3 scaling as 3.2-1B, tied (the Llama 3 vocabulary, so the real
 *                tokenizer works; 16 MiB in bf16)
 *
 * Exit status: 0 success, 2 usage error, 1 any other error (message on stderr). */
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/dtype.h"
#include "base/err.h"
#include "base/file.h"
#include "base/json.h"
#include "base/threadpool.h"
#include "model/config.h"
#include "model/safetensors.h"

#define DEFAULT_SHARD_MB 4096
#define INIT_STD 0.02

/* ---- shapes --------------------------------------------------------------------- */

static bool shape_preset(const char *name, la_model_config *c) {
    return la_model_config_preset(name, c, NULL) == LA_OK;
}

/* ---- config.json and generation_config.json --------------------------------------- */

static la_status write_json(const char *dir, const char *name, cJSON *root, la_err *err) {
    char *text = cJSON_Print(root);
    char *path = la_path_join(dir, name);
    la_status s = LA_OK;
    FILE *f = text && path ? fopen(path, "w") : NULL;
    if (!text || !path) s = la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
    else if (!f) s = la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));
    else if ((fprintf(f, "%s\n", text) < 0) | (fclose(f) != 0))
        s = la_err_set(err, LA_ERR_IO, "%s: write failed", path);
    free(text);
    free(path);
    return s;
}

static cJSON *eos_list(const la_model_config *c) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < c->n_eos_ids; i++)
        cJSON_AddItemToArray(a, cJSON_CreateNumber(c->eos_ids[i]));
    return a;
}

/* Keys as a transformers 4.x LlamaConfig writes them (transformers 5 reads them too). */
static la_status write_configs(const char *dir, const la_model_config *c, la_dtype dtype,
                               la_err *err) {
    cJSON *r = cJSON_CreateObject();
    cJSON *arch = cJSON_AddArrayToObject(r, "architectures");
    cJSON_AddItemToArray(arch, cJSON_CreateString("LlamaForCausalLM"));
    cJSON_AddBoolToObject(r, "attention_bias", false);
    cJSON_AddNumberToObject(r, "attention_dropout", 0.0);
    cJSON_AddNumberToObject(r, "bos_token_id", c->bos_id);
    cJSON_AddItemToObject(r, "eos_token_id", eos_list(c));
    cJSON_AddNumberToObject(r, "head_dim", c->head_dim);
    cJSON_AddStringToObject(r, "hidden_act", "silu");
    cJSON_AddNumberToObject(r, "hidden_size", c->hidden_size);
    cJSON_AddNumberToObject(r, "initializer_range", INIT_STD);
    cJSON_AddNumberToObject(r, "intermediate_size", c->intermediate_size);
    cJSON_AddNumberToObject(r, "max_position_embeddings", (double)c->max_position_embeddings);
    cJSON_AddBoolToObject(r, "mlp_bias", false);
    cJSON_AddStringToObject(r, "model_type", "llama");
    cJSON_AddNumberToObject(r, "num_attention_heads", c->n_heads);
    cJSON_AddNumberToObject(r, "num_hidden_layers", c->n_layers);
    cJSON_AddNumberToObject(r, "num_key_value_heads", c->n_kv_heads);
    cJSON_AddNumberToObject(r, "rms_norm_eps", c->rms_norm_eps);
    if (c->rope_scaling.type == LA_ROPE_LLAMA3) {
        cJSON *rs = cJSON_AddObjectToObject(r, "rope_scaling");
        cJSON_AddNumberToObject(rs, "factor", c->rope_scaling.factor);
        cJSON_AddNumberToObject(rs, "high_freq_factor", c->rope_scaling.high_freq_factor);
        cJSON_AddNumberToObject(rs, "low_freq_factor", c->rope_scaling.low_freq_factor);
        cJSON_AddNumberToObject(rs, "original_max_position_embeddings",
                                (double)c->rope_scaling.original_max_position);
        cJSON_AddStringToObject(rs, "rope_type", "llama3");
    } else {
        cJSON_AddNullToObject(r, "rope_scaling");
    }
    cJSON_AddNumberToObject(r, "rope_theta", c->rope_theta);
    cJSON_AddBoolToObject(r, "tie_word_embeddings", c->tie_word_embeddings);
    cJSON_AddStringToObject(r, "torch_dtype", dtype == LA_DTYPE_BF16 ? "bfloat16" : "float32");
    cJSON_AddBoolToObject(r, "use_cache", true);
    cJSON_AddNumberToObject(r, "vocab_size", c->vocab_size);
    la_status s = write_json(dir, "config.json", r, err);
    cJSON_Delete(r);
    if (s != LA_OK) return s;

    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "bos_token_id", c->bos_id);
    cJSON_AddItemToObject(g, "eos_token_id", eos_list(c));
    s = write_json(dir, "generation_config.json", g, err);
    cJSON_Delete(g);
    return s;
}

/* ---- tensors ---------------------------------------------------------------------- */

typedef struct tensor_spec {
    char name[96];
    int64_t shape[2];
    int32_t n_dims;
    bool is_norm; /* filled with 1.0 */
} tensor_spec;

static void add_spec(tensor_spec *out, int64_t *n, const char *name, int64_t d0, int64_t d1,
                     bool is_norm) {
    if (out) {
        tensor_spec *t = &out[*n];
        snprintf(t->name, sizeof t->name, "%s", name);
        t->shape[0] = d0, t->shape[1] = d1;
        t->n_dims = d1 < 0 ? 1 : 2;
        t->is_norm = is_norm;
    }
    (*n)++;
}

/* The tensors of c in HF order; out may be NULL to count them. */
static int64_t list_tensors(const la_model_config *c, tensor_spec *out) {
    int64_t n = 0;
    const int64_t h = c->hidden_size, inter = c->intermediate_size;
    const int64_t q = (int64_t)c->n_heads * c->head_dim, kv = (int64_t)c->n_kv_heads * c->head_dim;
    const struct {
        const char *suffix;
        int64_t d0, d1;
        bool is_norm;
    } per_layer[] = {
        {"input_layernorm.weight", h, -1, true},   {"self_attn.q_proj.weight", q, h, false},
        {"self_attn.k_proj.weight", kv, h, false}, {"self_attn.v_proj.weight", kv, h, false},
        {"self_attn.o_proj.weight", h, q, false},  {"post_attention_layernorm.weight", h, -1, true},
        {"mlp.gate_proj.weight", inter, h, false}, {"mlp.up_proj.weight", inter, h, false},
        {"mlp.down_proj.weight", h, inter, false},
    };
    add_spec(out, &n, "model.embed_tokens.weight", c->vocab_size, h, false);
    char name[96];
    for (int l = 0; l < c->n_layers; l++)
        for (size_t k = 0; k < sizeof per_layer / sizeof per_layer[0]; k++) {
            snprintf(name, sizeof name, "model.layers.%d.%s", l, per_layer[k].suffix);
            add_spec(out, &n, name, per_layer[k].d0, per_layer[k].d1, per_layer[k].is_norm);
        }
    add_spec(out, &n, "model.norm.weight", h, -1, true);
    if (!c->tie_word_embeddings) add_spec(out, &n, "lm_head.weight", c->vocab_size, h, false);
    return n;
}

static uint64_t splitmix64(uint64_t x) {
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

typedef struct fill_ctx {
    const tensor_spec *specs;
    int64_t first_spec; /* specs index of the shard's first tensor */
    uint64_t seed;
    la_dtype dtype;
    la_threadpool *pool;
    /* the chunk being filled */
    void *buf;
    int64_t spec_id;
    int64_t first_elem;
} fill_ctx;

#define FILL_BLOCK_ELEMS 65536

static void fill_range(void *vctx, int64_t begin, int64_t end, int worker_id) {
    (void)worker_id;
    const fill_ctx *x = vctx;
    const tensor_spec *sp = &x->specs[x->spec_id];
    const uint64_t tseed = splitmix64(x->seed ^ splitmix64((uint64_t)x->spec_id));
    const float a = (float)(INIT_STD * sqrt(3.0));
    for (int64_t i = begin; i < end; i++) {
        float v = 1.0f;
        if (!sp->is_norm) {
            uint64_t r = splitmix64(tseed + (uint64_t)(x->first_elem + i) * 0x9e3779b97f4a7c15ull);
            v = a * ((float)(r >> 40) * (2.0f / 16777216.0f) - 1.0f); /* 24 bits -> [-1, 1) */
        }
        if (x->dtype == LA_DTYPE_BF16) ((uint16_t *)x->buf)[i] = la_f32_to_bf16(v);
        else ((float *)x->buf)[i] = v;
    }
}

typedef struct block_job {
    fill_ctx *ctx;
    int64_t n_elems;
} block_job;

static void run_block(void *vjob, int64_t begin, int64_t end, int worker_id) {
    const block_job *j = vjob;
    int64_t lo = begin * FILL_BLOCK_ELEMS, hi = end * FILL_BLOCK_ELEMS;
    if (hi > j->n_elems) hi = j->n_elems;
    fill_range(j->ctx, lo, hi, worker_id);
}

static la_status fill(void *user, int64_t tensor_id, void *buf, size_t offset_bytes,
                      size_t n_bytes, la_err *err) {
    (void)err;
    fill_ctx *x = user;
    size_t es = la_dtype_size(x->dtype);
    x->buf = buf;
    x->spec_id = x->first_spec + tensor_id;
    x->first_elem = (int64_t)(offset_bytes / es);
    block_job job = {.ctx = x, .n_elems = (int64_t)(n_bytes / es)};
    la_parallel_for(x->pool, (job.n_elems + FILL_BLOCK_ELEMS - 1) / FILL_BLOCK_ELEMS, run_block,
                    &job);
    return LA_OK;
}

/* ---- main --------------------------------------------------------------------------- */

static la_status copy_file(const char *from_dir, const char *to_dir, const char *name,
                           la_err *err) {
    char *src = la_path_join(from_dir, name), *dst = la_path_join(to_dir, name);
    char *data = NULL;
    size_t len = 0;
    la_status s = src && dst ? la_file_read(src, &data, &len, err)
                             : la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
    if (s == LA_OK) {
        FILE *f = fopen(dst, "wb");
        if (!f) s = la_err_set(err, LA_ERR_IO, "%s: %s", dst, strerror(errno));
        else if ((fwrite(data, 1, len, f) != len) | (fclose(f) != 0))
            s = la_err_set(err, LA_ERR_IO, "%s: write failed", dst);
    }
    free(data);
    free(src);
    free(dst);
    return s;
}

static int usage(const char *msg) {
    fprintf(stderr,
            "write_random_checkpoint: %s\n"
            "usage: write_random_checkpoint --shape llama3.2-1b|llama3-8b|tiny --out DIR\n"
            "         [--dtype bf16|f32] [--seed N] [--layers N] [--vocab N] [--shard-mb N]\n"
            "         [--tokenizer DIR] [--config-only]\n",
            msg);
    return 2;
}

static bool parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out) {
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (errno || end == s || *end || v < lo || v > hi) return false;
    *out = v;
    return true;
}

static la_status write_weights(const char *out, const la_model_config *c, la_dtype dtype,
                               uint64_t seed, int64_t shard_bytes, la_err *err) {
    int64_t n = list_tensors(c, NULL);
    tensor_spec *specs = calloc((size_t)n, sizeof *specs);
    la_st_write_tensor *wt = calloc((size_t)n, sizeof *wt);
    int64_t *shard_of = calloc((size_t)n, sizeof *shard_of);
    la_threadpool *pool = NULL;
    cJSON *index = NULL;
    la_status s = LA_OK;
    if (!specs || !wt || !shard_of) {
        s = la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
        goto done;
    }
    list_tensors(c, specs);
    int64_t total = 0, n_shards = 1, in_shard = 0;
    for (int64_t i = 0; i < n; i++) {
        wt[i] = (la_st_write_tensor){.name = specs[i].name, .dtype = dtype,
                                     .n_dims = specs[i].n_dims};
        int64_t bytes = (int64_t)la_dtype_size(dtype);
        for (int d = 0; d < specs[i].n_dims; d++) {
            wt[i].shape[d] = specs[i].shape[d];
            bytes *= specs[i].shape[d];
        }
        if (in_shard > 0 && in_shard + bytes > shard_bytes) n_shards++, in_shard = 0;
        shard_of[i] = n_shards - 1;
        in_shard += bytes;
        total += bytes;
    }
    s = la_threadpool_create(0, &pool, err);
    if (s != LA_OK) goto done;

    /* A stale index would shadow a new single file (and the reverse): remove both. */
    char *old_single = la_path_join(out, "model.safetensors");
    char *old_index = la_path_join(out, "model.safetensors.index.json");
    if (old_single) unlink(old_single);
    if (old_index) unlink(old_index);
    free(old_single);

    cJSON *map = NULL;
    if (n_shards > 1) {
        index = cJSON_CreateObject();
        cJSON *meta = cJSON_AddObjectToObject(index, "metadata");
        cJSON_AddNumberToObject(meta, "total_size", (double)total);
        map = cJSON_AddObjectToObject(index, "weight_map");
    }
    for (int64_t sh = 0, first = 0; sh < n_shards; sh++) {
        int64_t end = first;
        while (end < n && shard_of[end] == sh) end++;
        char name[64];
        if (n_shards == 1) snprintf(name, sizeof name, "model.safetensors");
        else snprintf(name, sizeof name, "model-%05lld-of-%05lld.safetensors",
                      (long long)sh + 1, (long long)n_shards);
        for (int64_t i = first; map && i < end; i++)
            cJSON_AddStringToObject(map, specs[i].name, name);
        char *path = la_path_join(out, name);
        fill_ctx ctx = {.specs = specs, .first_spec = first, .seed = seed,
                        .dtype = dtype, .pool = pool};
        fprintf(stderr, "write_random_checkpoint: writing %s (%lld tensors)\n", path,
                (long long)(end - first));
        s = path ? la_st_write_stream(path, wt + first, end - first, fill, &ctx, err)
                 : la_err_set(err, LA_ERR_NO_MEMORY, "out of memory");
        free(path);
        if (s != LA_OK) goto done_index;
        first = end;
    }
    if (index) s = write_json(out, "model.safetensors.index.json", index, err);
done_index:
    free(old_index);
done:
    cJSON_Delete(index);
    la_threadpool_destroy(pool);
    free(shard_of);
    free(wt);
    free(specs);
    return s;
}

int main(int argc, char **argv) {
    const char *shape = NULL, *out = NULL, *tok_dir = NULL;
    la_dtype dtype = LA_DTYPE_BF16;
    int64_t seed = 0, layers = -1, vocab = -1, shard_mb = DEFAULT_SHARD_MB;
    bool config_only = false;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--config-only") == 0) {
            config_only = true;
            continue;
        }
        if (i + 1 >= argc) return usage(strcmp(a, "--help") == 0 ? "help" : "missing value");
        const char *v = argv[++i];
        if (strcmp(a, "--shape") == 0) shape = v;
        else if (strcmp(a, "--out") == 0) out = v;
        else if (strcmp(a, "--tokenizer") == 0) tok_dir = v;
        else if (strcmp(a, "--dtype") == 0) {
            if (strcmp(v, "bf16") == 0) dtype = LA_DTYPE_BF16;
            else if (strcmp(v, "f32") == 0) dtype = LA_DTYPE_F32;
            else return usage("--dtype must be bf16 or f32");
        } else if (strcmp(a, "--seed") == 0) {
            if (!parse_i64(v, 0, INT64_MAX, &seed)) return usage("bad --seed");
        } else if (strcmp(a, "--layers") == 0) {
            if (!parse_i64(v, 1, 4096, &layers)) return usage("bad --layers");
        } else if (strcmp(a, "--vocab") == 0) {
            if (!parse_i64(v, 1, INT32_MAX, &vocab)) return usage("bad --vocab");
        } else if (strcmp(a, "--shard-mb") == 0) {
            if (!parse_i64(v, 1, INT64_MAX >> 20, &shard_mb)) return usage("bad --shard-mb");
        } else {
            return usage("unknown option");
        }
    }
    if (!shape || !out) return usage("--shape and --out are required");
    la_model_config c;
    if (!shape_preset(shape, &c)) return usage("--shape must be llama3.2-1b, llama3-8b or tiny");
    if (layers > 0) c.n_layers = (int32_t)layers;
    if (vocab > 0) c.vocab_size = (int32_t)vocab;

    la_err err = {0};
    la_status s = LA_OK;
    if (mkdir(out, 0777) != 0 && errno != EEXIST)
        s = la_err_set(&err, LA_ERR_IO, "%s: %s", out, strerror(errno));
    if (s == LA_OK) s = write_configs(out, &c, dtype, &err);
    if (s == LA_OK && !config_only) s = write_weights(out, &c, dtype, (uint64_t)seed, shard_mb << 20, &err);
    if (s == LA_OK && tok_dir) s = copy_file(tok_dir, out, "tokenizer.json", &err);
    if (s == LA_OK && tok_dir) s = copy_file(tok_dir, out, "tokenizer_config.json", &err);
    if (s != LA_OK) {
        fprintf(stderr, "write_random_checkpoint: %s\n", err.msg);
        return 1;
    }
    return 0;
}
