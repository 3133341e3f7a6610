/* lazyattn info [-m DIR]: the model's architecture, one "key: value" per line. */
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "lazyattn/lazyattn.h"

int la_cli_info(int argc, char **argv) {
    const char *dir = la_cli_default_model_dir();
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            printf("usage: lazyattn info [-m DIR]\n");
            return LA_EXIT_OK;
        } else {
            fprintf(stderr, "lazyattn info: unexpected argument '%s'\nusage: lazyattn info [-m DIR]\n", argv[i]);
            return LA_EXIT_USAGE;
        }
    }
    la_model_info m;
    la_err err;
    if (la_model_info_load(dir, &m, &err) != LA_OK) {
        fprintf(stderr, "lazyattn info: %s\n", err.msg);
        return LA_EXIT_ERROR;
    }
    printf("model: %s\n", dir);
    printf("family: %s%s%s\n", m.family, m.qkv_bias ? " (q/k/v biases)" : "", m.qk_norm ? " (q/k norms)" : "");
    if (m.sliding_window) printf("sliding_window: %lld (the context is capped at it)\n", (long long)m.sliding_window);
    printf("parameters: %lld (%.2fM)\n", (long long)m.n_params, (double)m.n_params / 1e6);
    printf("vocab_size: %d\nhidden_size: %d\nintermediate_size: %d\nlayers: %d\n", m.vocab_size,
           m.hidden_size, m.intermediate_size, m.n_layers);
    printf("attention_heads: %d\nkv_heads: %d (GQA group %d)\nhead_dim: %d\n", m.n_heads,
           m.n_kv_heads, m.n_heads / m.n_kv_heads, m.head_dim);
    printf("rope: %s theta=%g factor=%g\n", m.rope_type, m.rope_theta, m.rope_factor);
    printf("max_position_embeddings: %lld\nrms_norm_eps: %g\ntied_embeddings: %s\n",
           (long long)m.max_position_embeddings, m.rms_norm_eps, m.tie_word_embeddings ? "yes" : "no");
    printf("bos_id: %d\neos_ids:", m.bos_id);
    for (int i = 0; i < m.n_eos_ids; i++) printf(" %d", m.eos_ids[i]);
    printf("\n");
    return LA_EXIT_OK;
}
