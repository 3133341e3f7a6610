/* Load a model, ask one question with documents beside it, stream the answer.
 *
 *   cc stream.c $(pkg-config --cflags --libs lazyattn) -o stream
 *   ./stream MODEL_DIR ["question"]        (MODEL_DIR: e.g. models/rag-tiny of the checkout)
 *
 * The documents are cached on their own (LazyAttention): asking again with them in another
 * order reuses their KV cache, which the second request's stats line shows.
 */
#include <lazyattn/lazyattn.h>
#include <stdio.h>

static void on_event(void *user, const la_event *ev) {
    static const char *finish[] = {"none", "stop", "length", "cancelled", "error"};
    if (ev->kind == LA_EVENT_TOKEN) fwrite(ev->text, 1, ev->text_len, stdout), fflush(stdout);
    if (ev->kind == LA_EVENT_DONE)
        printf("\n[%s%s%s; cached document tokens %lld of %d; TTFT %.1f ms]\n", finish[ev->finish],
               ev->status ? ": " : "", ev->status ? ev->error : "", (long long)ev->stats->doc_tokens_reused,
               ev->stats->n_doc_tokens, ev->stats->ttft_ms);
}

int main(int argc, char **argv) {
    if (argc < 2) return fprintf(stderr, "usage: %s MODEL_DIR [QUESTION]\n", argv[0]), 2;
    la_err err;
    la_engine_options o;
    la_engine_options_init(&o);
    o.model_dir = argv[1];
    la_engine *e;
    if (la_engine_create(&o, &e, &err) != LA_OK) return fprintf(stderr, "%s\n", err.msg), 1;
    la_segment docs[2] = {
        {.title = "Elkrak Avoltrax", .text = "Elkrak Avoltrax (born 3 September 1972 in Chas, Wirnor) is a cinematographer."},
        {.title = "Famtond Cuxirnca", .text = "Famtond Cuxirnca was born in Kramker, Gailevea, on 19 December 1946."}};
    la_chat_message question = {"user", argc > 2 ? argv[2] : "Where was Elkrak Avoltrax born?"};
    for (int round = 0; round < 2; round++) {  /* round 1: the documents in reverse order */
        la_segment order[2] = {docs[round], docs[1 - round]};
        la_request_params p;
        la_request_params_init(&p);
        p.messages = &question, p.n_messages = 1;
        p.docs = order, p.n_docs = 2;
        p.sampling.max_tokens = 32;
        p.on_event = on_event;
        if (la_engine_submit(e, &p, NULL, &err) != LA_OK || la_engine_run(e, &err) != LA_OK) {
            fprintf(stderr, "%s\n", err.msg);
            la_engine_destroy(e);
            return 1;
        }
    }
    printf("liblazyattn %s\n", la_version(NULL, NULL, NULL));
    la_engine_destroy(e);
    return 0;
}
