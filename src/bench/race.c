/* Two methods answer the same question side by side (race.h). */
#include "bench/race.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/timer.h"
#include "bench/driver.h"

static void on_event(void *user, const la_event *ev) {
    la_race_side *s = user;
    pthread_mutex_lock(&s->mu);
    if (ev->text_len && s->len + ev->text_len < sizeof s->text) {
        memcpy(s->text + s->len, ev->text, ev->text_len);
        s->len += ev->text_len;
        s->text[s->len] = '\0';
    }
    if (ev->kind == LA_EVENT_TOKEN && s->ttft_ms == 0) s->ttft_ms = la_now_ms() - s->t_start;
    if (ev->kind == LA_EVENT_DONE) {
        s->done = 1;
        s->failed = ev->finish == LA_FINISH_ERROR;
        s->stats = *ev->stats;
        s->e2e_ms = la_now_ms() - s->t_start;
        snprintf(s->error, sizeof s->error, "%s", ev->error ? ev->error : "");
    }
    pthread_mutex_unlock(&s->mu);
}

typedef struct worker_arg {
    la_race *r;
    int which;
} worker_arg;

/* Submit the question with the round's document order and step until it finishes. */
static void *worker(void *p) {
    worker_arg *a = p;
    la_race *r = a->r;
    la_race_side *s = &r->s[a->which];
    const la_rag_question *q = r->q;
    la_segment *docs = calloc((size_t)q->n_docs + 1, sizeof(la_segment));
    la_chat_message msg;
    la_request_params rp;
    la_bench_rag_request(q->question, q->docs, r->order, q->n_docs, false, &msg, docs, &rp);
    rp.method = s->method;
    rp.sampling.max_tokens = r->max_tokens;
    rp.on_event = on_event;
    rp.user = s;
    while (!atomic_load(&r->go)) { /* spin until both threads are ready */
    }
    s->t_start = la_now_ms();
    la_err err = {0};
    if (la_engine_submit(s->engine, &rp, NULL, &err) != LA_OK) {
        pthread_mutex_lock(&s->mu);
        s->done = s->failed = 1;
        snprintf(s->error, sizeof s->error, "%s", err.msg);
        pthread_mutex_unlock(&s->mu);
    } else {
        while (la_engine_has_work(s->engine)) la_engine_step(s->engine, &err);
    }
    free(docs);
    return NULL;
}

la_status la_race_init(la_race *r, const la_engine_options *eo, const la_rag_question *q, la_method left,
                       la_method right, int32_t max_tokens, la_err *err) {
    memset(r, 0, sizeof *r);
    r->q = q;
    r->max_tokens = max_tokens;
    r->s[0].method = left;
    r->s[1].method = right;
    for (int k = 0; k < 2; k++) pthread_mutex_init(&r->s[k].mu, NULL);
    r->order = malloc(sizeof(int32_t) * (size_t)(q->n_docs + 1));
    if (!r->order) return la_err_set(err, LA_ERR_NO_MEMORY, "race: out of memory");
    for (int32_t d = 0; d < q->n_docs; d++) r->order[d] = d;
    for (int k = 0; k < 2; k++) LA_TRY(la_engine_create(eo, &r->s[k].engine, err));
    return LA_OK;
}

void la_race_fini(la_race *r) {
    for (int k = 0; k < 2; k++) {
        la_engine_destroy(r->s[k].engine);
        pthread_mutex_destroy(&r->s[k].mu);
    }
    free(r->order);
    r->order = NULL;
}

void la_race_shuffle(la_race *r, uint64_t seed) {
    uint64_t x = seed;
    for (int32_t d = r->q->n_docs - 1; d > 0; d--) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        int32_t j = (int32_t)((x >> 33) % (uint64_t)(d + 1)), t = r->order[d];
        r->order[d] = r->order[j], r->order[j] = t;
    }
}

void la_race_round(la_race *r, void (*on_tick)(void *user), void *user, int fps) {
    for (int k = 0; k < 2; k++) {
        la_race_side *s = &r->s[k];
        s->len = 0;
        s->text[0] = '\0';
        s->t_start = s->ttft_ms = s->e2e_ms = 0;
        s->done = s->failed = 0;
    }
    atomic_store(&r->go, 0);
    pthread_t th[2];
    worker_arg args[2] = {{r, 0}, {r, 1}};
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, worker, &args[k]);
    atomic_store(&r->go, 1);
    struct timespec ts = {0, 1000000000L / fps};
    while (!(r->s[0].done && r->s[1].done)) {
        if (on_tick) on_tick(user);
        nanosleep(&ts, NULL);
    }
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
}

/* ---- the frame ---------------------------------------------------------------------------- */

/* Append up to `width` display columns of s starting at *pos (UTF-8 aware, stops at \n). */
static int take_line(const char *s, size_t len, size_t *pos, int width, char *out, size_t cap) {
    size_t i = *pos, o = 0;
    int cols = 0;
    while (i < len && cols < width && o + 5 < cap) {
        unsigned char c = (unsigned char)s[i];
        if (c == '\n') {
            i++;
            break;
        }
        size_t n = c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4;
        if (i + n > len) break;
        memcpy(out + o, s + i, n);
        o += n;
        i += n;
        cols++;
    }
    out[o] = '\0';
    *pos = i;
    return cols;
}

void la_race_verdict(const la_race *r, char *buf, size_t n) {
    const int f = r->s[0].ttft_ms <= r->s[1].ttft_ms ? 0 : 1;
    const la_race_side *a = &r->s[f], *b = &r->s[1 - f];
    snprintf(buf, n, "%s: first token %.2fx sooner than %s (%.1f ms vs %.1f ms)", la_method_name(a->method),
             b->ttft_ms / a->ttft_ms, la_method_name(b->method), a->ttft_ms, b->ttft_ms);
}

void la_race_frame(la_race *r, const char *title, const char *gold, bool final, int width, char *buf,
                   size_t cap) {
    int W = width, col = (W - 3) / 2;
    size_t n = 0;
#define OUT(...) n += (size_t)snprintf(buf + n, cap - n, __VA_ARGS__)
    OUT("%s\n", title);
    OUT("Q: %.*s\n", W - 4, r->q->question);
    OUT("gold: %s\n", gold);
    for (int i = 0; i < W; i++) OUT("-");
    OUT("\n");
    char head[2][128], body[2][4096];
    size_t blen[2];
    for (int k = 0; k < 2; k++) {
        la_race_side *s = &r->s[k];
        pthread_mutex_lock(&s->mu);
        double now = la_now_ms();
        if (s->ttft_ms > 0)
            snprintf(head[k], sizeof head[k], "%-9s TTFT %8.1f ms%s", la_method_name(s->method), s->ttft_ms,
                     s->done ? "  done" : "");
        else
            snprintf(head[k], sizeof head[k], "%-9s prefill... %6.1f ms", la_method_name(s->method),
                     s->t_start > 0 ? now - s->t_start : 0.0);
        memcpy(body[k], s->text, s->len + 1);
        blen[k] = s->len;
        pthread_mutex_unlock(&s->mu);
    }
    OUT("%-*s | %s\n", col, head[0], head[1]);
    size_t pos[2] = {0, 0};
    for (int line = 0; line < 6; line++) {
        char l0[1024], l1[1024];
        int c0 = take_line(body[0], blen[0], &pos[0], col, l0, sizeof l0);
        take_line(body[1], blen[1], &pos[1], col, l1, sizeof l1);
        OUT("%s%*s | %s\n", l0, col - c0, "", l1);
    }
    if (final) {
        char v[256];
        la_race_verdict(r, v, sizeof v);
        OUT("\n%s; answers identical: %s\n", v, strcmp(r->s[0].text, r->s[1].text) == 0 ? "yes" : "NO");
        for (int k = 0; k < 2; k++) {
            const la_request_stats *st = &r->s[k].stats;
            if (la_method_is_blockwise(r->s[k].method))
                OUT("%-9s document tokens served from the cache: %lld of %lld\n", la_method_name(r->s[k].method),
                    (long long)st->doc_tokens_reused, (long long)(st->doc_tokens_reused + st->doc_tokens_computed));
            else
                OUT("%-9s prompt tokens served from the cache (prefix): %lld of %d\n", la_method_name(r->s[k].method),
                    (long long)st->prefix_tokens_reused, st->n_prompt_tokens);
        }
    }
#undef OUT
}
