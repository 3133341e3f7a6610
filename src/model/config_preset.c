#include <stdbool.h>
#include <string.h>

#include "base/err.h"
#include "model/config.h"

/* Exact published shapes of Llama-3.2-1B, Llama-3.2-3B, Llama-3-8B, Llama-3.1-8B and
 * Llama-3.1-70B (their config.json files on the Hugging Face hub, under meta-llama; the 3.1 and
 * 3.2 ones with generation_config.json's eos ids; tests/fixtures/configs/ holds copies that
 * tests/model/test_config.c parses and compares), and a tiny shape with the same vocabulary,
 * for --random-weights runs and tools/write_random_checkpoint. */
la_status la_model_config_preset(const char *name, la_model_config *c, la_err *err) {
    la_model_config cfg = (la_model_config){
        .vocab_size = 128256,
        .rms_norm_eps = 1e-5,
        .rope_theta = 500000.0,
        .bos_id = 128000,
        .n_eos_ids = 2,
        .eos_ids = {128001, 128009},
    };
    const la_rope_scaling llama3 = {.type = LA_ROPE_LLAMA3,
                                    .factor = 32.0,
                                    .low_freq_factor = 1.0,
                                    .high_freq_factor = 4.0,
                                    .original_max_position = 8192};
    la_rope_scaling llama31 = llama3; /* Llama 3.1: factor 8 */
    llama31.factor = 8.0;
    if (strcmp(name, "llama3.2-1b") == 0) {
        cfg.hidden_size = 2048, cfg.intermediate_size = 8192, cfg.n_layers = 16;
        cfg.n_heads = 32, cfg.n_kv_heads = 8, cfg.head_dim = 64;
        cfg.rope_scaling = llama3;
        cfg.max_position_embeddings = 131072;
        cfg.tie_word_embeddings = true;
    } else if (strcmp(name, "llama3.2-3b") == 0) {
        cfg.hidden_size = 3072, cfg.intermediate_size = 8192, cfg.n_layers = 28;
        cfg.n_heads = 24, cfg.n_kv_heads = 8, cfg.head_dim = 128;
        cfg.rope_scaling = llama3;
        cfg.max_position_embeddings = 131072;
        cfg.tie_word_embeddings = true;
        cfg.n_eos_ids = 3;
        cfg.eos_ids[0] = 128001, cfg.eos_ids[1] = 128008, cfg.eos_ids[2] = 128009;
    } else if (strcmp(name, "llama3.1-8b") == 0 || strcmp(name, "llama3.1-70b") == 0) {
        bool big = strcmp(name, "llama3.1-70b") == 0;
        cfg.hidden_size = big ? 8192 : 4096, cfg.intermediate_size = big ? 28672 : 14336;
        cfg.n_layers = big ? 80 : 32;
        cfg.n_heads = big ? 64 : 32, cfg.n_kv_heads = 8, cfg.head_dim = 128;
        cfg.rope_scaling = llama31;
        cfg.max_position_embeddings = 131072;
        cfg.tie_word_embeddings = false;
        cfg.n_eos_ids = 3;
        cfg.eos_ids[0] = 128001, cfg.eos_ids[1] = 128008, cfg.eos_ids[2] = 128009;
    } else if (strcmp(name, "llama3-8b") == 0) {
        cfg.hidden_size = 4096, cfg.intermediate_size = 14336, cfg.n_layers = 32;
        cfg.n_heads = 32, cfg.n_kv_heads = 8, cfg.head_dim = 128;
        cfg.rope_scaling = (la_rope_scaling){.type = LA_ROPE_DEFAULT, .factor = 1.0};
        cfg.max_position_embeddings = 8192;
        cfg.tie_word_embeddings = false;
    } else if (strcmp(name, "tiny") == 0) {
        cfg.hidden_size = 64, cfg.intermediate_size = 192, cfg.n_layers = 2;
        cfg.n_heads = 4, cfg.n_kv_heads = 2, cfg.head_dim = 16;
        cfg.rope_scaling = llama3;
        cfg.max_position_embeddings = 131072;
        cfg.tie_word_embeddings = true;
    } else {
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "unknown shape '%s' (choose llama3.2-1b, llama3.2-3b, llama3-8b, llama3.1-8b, "
                          "llama3.1-70b, tiny)", name);
    }
    *c = cfg;
    return LA_OK;
}
