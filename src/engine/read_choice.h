/* kv_read AUTO's choice (engine/doc_store.h; README "Read or compute"): whether a document
 * that the disk or the shared tier holds is read or computed, from the tier's measured read
 * rate and the engine's measured prefill rate. Engine thread only. Private to src/engine/.
 */
#ifndef LA_ENGINE_READ_CHOICE_H
#define LA_ENGINE_READ_CHOICE_H

#include <stdbool.h>
#include <stdint.h>

#include "kv/store/store.h"

/* Read a document when the read is estimated to finish no later than LA_READ_CHOICE_MARGIN x
 * the time computing it would take. Estimates: read (bytes_in_flight / n_io_threads + bytes)
 * / read_bytes_per_s, the reads queued before it shared by the I/O threads and the record
 * itself read by one; compute (tokens_pending + tokens) / prefill_tokens_per_s, the document
 * tokens queued before it first. bytes: the record's (blocks x block bytes);
 * read_bytes_per_s: the tier's recent reads', per I/O thread; prefill_tokens_per_s:
 * la_step_fit's. A rate not measured yet (<= 0): read. Pure (the tests call it with chosen
 * numbers). */
#define LA_READ_CHOICE_MARGIN 1.5
bool la_read_pays(double bytes, double bytes_in_flight, double read_bytes_per_s, int32_t n_io_threads, double tokens,
                  double tokens_pending, double prefill_tokens_per_s);

/* What a row adds to a step's time: ms = a + b x rows fitted by least squares over the
 * steps added, each weighted LA_STEP_FIT_DECAY^age (a document's rows ride in steps that
 * run anyway, so b, not one step's rows per ms, is what computing it costs). */
typedef struct la_step_fit {
    double sw, sx, sy, sxx, sxy; /* decayed sums of 1, rows, ms, rows^2, rows x ms */
} la_step_fit;
#define LA_STEP_FIT_DECAY 0.98
/* One step of rows (>= 1) that ran in ms (> 0; others are ignored). */
void la_step_fit_add(la_step_fit *f, double rows, double ms);
/* 1000 / b, tokens per second; 0 while unknown: fewer than 2 steps, step sizes within ~8
 * rows of each other (no slope to see), or b <= 0. */
double la_step_fit_tokens_per_s(const la_step_fit *f);

/* The choice's state: the steps' fit; by tier the reads' recent rate (bytes and I/O seconds
 * since the last look, summed with decay 0.8: the store's counters are totals since start,
 * which one new read hardly moves), the reads skipped and the skips since the tier's last
 * read (every 64th skip reads anyway, so a tier that became faster is measured again); the
 * reads since the prefill rate is unknown with a tier's known (every 8th is computed, so a
 * process that only reads learns what computing costs); a pinned prefill rate (> 0). */
typedef struct la_read_choice {
    la_step_fit fit;
    double prefill_pinned;
    int64_t seen_bytes[LA_KV_TIER_COUNT];
    double seen_s[LA_KV_TIER_COUNT], recent_bytes[LA_KV_TIER_COUNT], recent_s[LA_KV_TIER_COUNT];
    int64_t reads_skipped[LA_KV_TIER_COUNT];
    int32_t skips_since_read[LA_KV_TIER_COUNT];
    int32_t reads_unmeasured;
} la_read_choice;

/* Zeroed state; LA_KV_PREFILL_TOKENS_PER_S=N (a test hook and a benchmark switch) pins the
 * prefill rate, a value that is not tokens per second in (0, 1e12) is logged and not used. */
void la_read_choice_init(la_read_choice *c);
/* The prefill rate the choice uses, tokens per second: the pinned one, else the fit's (0:
 * not known yet). */
double la_read_choice_prefill_rate(const la_read_choice *c);
/* Tier t's recent read rate, bytes per second per I/O thread (0: no read yet), the new bytes
 * and seconds of its counters a (the store's totals) folded in. */
double la_read_choice_tier_rate(la_read_choice *c, const la_kv_tier_stats *a, la_kv_tier_id t);
/* Whether a record of tier t is read (else its document is computed): la_read_pays with
 * tier_rate (la_read_choice_tier_rate) and the prefill rate, then every 64th skip of the tier
 * read anyway and every 8th read while only the tier's rate is known computed; a skip is
 * counted in reads_skipped[t]. The other arguments as la_read_pays's. */
bool la_read_choice_decide(la_read_choice *c, la_kv_tier_id t, double tier_rate, double bytes, double bytes_in_flight,
                           int32_t n_io_threads, double tokens, double tokens_pending);

#endif
