/* kv_read AUTO's choice (read_choice.h). */
#include "engine/read_choice.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"

#define READ_PROBE_EVERY 64
#define LEARN_EVERY 8
#define READ_DECAY 0.8

bool la_read_pays(double bytes, double bytes_in_flight, double read_bytes_per_s, int32_t n_io_threads, double tokens,
                  double tokens_pending, double prefill_tokens_per_s) {
    if (read_bytes_per_s <= 0 || prefill_tokens_per_s <= 0) return true; /* nothing measured yet: read */
    double t_read = (bytes_in_flight / (n_io_threads > 0 ? n_io_threads : 1) + bytes) / read_bytes_per_s;
    double t_compute = (tokens_pending + tokens) / prefill_tokens_per_s;
    return t_read <= LA_READ_CHOICE_MARGIN * t_compute;
}

void la_step_fit_add(la_step_fit *f, double rows, double ms) {
    if (rows < 1 || !(ms > 0)) return;
    f->sw = LA_STEP_FIT_DECAY * f->sw + 1;
    f->sx = LA_STEP_FIT_DECAY * f->sx + rows;
    f->sy = LA_STEP_FIT_DECAY * f->sy + ms;
    f->sxx = LA_STEP_FIT_DECAY * f->sxx + rows * rows;
    f->sxy = LA_STEP_FIT_DECAY * f->sxy + rows * ms;
}

double la_step_fit_tokens_per_s(const la_step_fit *f) {
    double var = f->sw * f->sxx - f->sx * f->sx; /* sw^2 x the variance of the step sizes */
    if (f->sw < 2 || var <= f->sw * f->sw * 64.0) return 0; /* sizes within ~8 rows of each other */
    double b = (f->sw * f->sxy - f->sx * f->sy) / var;
    return b > 0 ? 1000.0 / b : 0;
}

void la_read_choice_init(la_read_choice *c) {
    memset(c, 0, sizeof *c);
    const char *pin = getenv("LA_KV_PREFILL_TOKENS_PER_S");
    if (pin && *pin) {
        char *end = NULL;
        double v = strtod(pin, &end);
        if (*end == '\0' && v > 0 && v < 1e12) c->prefill_pinned = v;
        else la_log("LA_KV_PREFILL_TOKENS_PER_S='%s' is not tokens per second in (0, 1e12): the rate is measured", pin);
    }
}

double la_read_choice_prefill_rate(const la_read_choice *c) {
    return c->prefill_pinned > 0 ? c->prefill_pinned : la_step_fit_tokens_per_s(&c->fit);
}

double la_read_choice_tier_rate(la_read_choice *c, const la_kv_tier_stats *a, la_kv_tier_id t) {
    double db = (double)(a->bytes_read - c->seen_bytes[t]), ds = a->read_s - c->seen_s[t];
    if (ds > 0) {
        c->recent_bytes[t] = READ_DECAY * c->recent_bytes[t] + db;
        c->recent_s[t] = READ_DECAY * c->recent_s[t] + ds;
        c->seen_bytes[t] = a->bytes_read;
        c->seen_s[t] = a->read_s;
    }
    return c->recent_bytes[t] > 0 && c->recent_s[t] > 0 ? c->recent_bytes[t] / c->recent_s[t] : 0;
}

bool la_read_choice_decide(la_read_choice *c, la_kv_tier_id t, double tier_rate, double bytes, double bytes_in_flight,
                           int32_t n_io_threads, double tokens, double tokens_pending) {
    const double compute_rate = la_read_choice_prefill_rate(c);
    bool read = la_read_pays(bytes, bytes_in_flight, tier_rate, n_io_threads, tokens, tokens_pending, compute_rate);
    if (!read && ++c->skips_since_read[t] >= READ_PROBE_EVERY) read = true; /* measure the tier again */
    /* a process that only reads never times a document's compute (its steps are questions and
     * decode rows of about one size): compute one now and then to learn the prefill rate */
    if (read && tier_rate > 0 && compute_rate <= 0 && ++c->reads_unmeasured >= LEARN_EVERY) {
        read = false;
        c->reads_unmeasured = 0;
    }
    if (read) c->skips_since_read[t] = 0;
    else c->reads_skipped[t]++;
    return read;
}
