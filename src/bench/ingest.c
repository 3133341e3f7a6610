/* Precomputing a corpus into the disk tier (ingest.h). */
#include "bench/ingest.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/timer.h"

void la_ingest_opts_init(la_ingest_opts *o) {
    memset(o, 0, sizeof *o);
    o->method = LA_METHOD_LAZY;
    o->batch = 16;
}

/* ---- the corpus ------------------------------------------------------------------------- */

static bool blank(const char *line) {
    for (; *line; line++)
        if (*line != ' ' && *line != '\t' && *line != '\r' && *line != '\n') return false;
    return true;
}

/* One line as a document: *json owns the strings seg points to (the caller deletes it,
 * also on failure). False with why set when the line is not a document. */
static bool parse_line(const char *line, cJSON **json, la_segment *seg, char *why, size_t cap) {
    *json = cJSON_ParseWithOpts(line, NULL, false);
    *seg = (la_segment){0};
    const cJSON *j = *json;
    if (!j) {
        snprintf(why, cap, "not JSON");
        return false;
    }
    if (cJSON_IsString(j)) {
        if (!j->valuestring[0]) {
            snprintf(why, cap, "an empty document");
            return false;
        }
        seg->text = j->valuestring;
        return true;
    }
    const cJSON *text = cJSON_GetObjectItemCaseSensitive(j, "text");
    const cJSON *title = cJSON_GetObjectItemCaseSensitive(j, "title");
    if (!cJSON_IsObject(j) || !cJSON_IsString(text) || (title && !cJSON_IsString(title))) {
        snprintf(why, cap, "expected a JSON string or {\"title\": string, \"text\": string}");
        return false;
    }
    if (!text->valuestring[0]) {
        snprintf(why, cap, "\"text\" is empty");
        return false;
    }
    seg->text = text->valuestring;
    if (title && title->valuestring[0]) seg->title = title->valuestring; /* "": untitled, as the server */
    return true;
}

static la_status count_lines(const char *path, int64_t *n, la_err *err) {
    FILE *f = fopen(path, "r");
    if (!f) return la_err_set(err, LA_ERR_IO, "--corpus %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    *n = 0;
    while (getline(&line, &cap, f) >= 0) *n += !blank(line);
    free(line);
    fclose(f);
    return LA_OK;
}

/* ---- the run ---------------------------------------------------------------------------- */

typedef struct job {
    struct run *run;
    int64_t line;
    bool done;
} job;

typedef struct run {
    const la_ingest_opts *o;
    la_ingest_summary *out;
    int32_t in_flight;
    la_ingest_progress_fn progress;
    void *user;
    double t0_ms;
} run;

static void note_failure(run *r, int64_t line, const char *msg) {
    r->out->n.failed++;
    if (!r->out->first_error[0])
        snprintf(r->out->first_error, sizeof r->out->first_error, "%.200s:%lld: %.280s", r->o->corpus, (long long)line, msg);
}

static void tick(run *r) {
    r->out->n.done++;
    r->out->n.elapsed_s = (la_now_ms() - r->t0_ms) / 1e3;
    if (r->progress) r->progress(r->user, &r->out->n);
}

static void on_event(void *user, const la_event *ev) {
    job *j = user;
    if (ev->kind != LA_EVENT_DONE) return;
    run *r = j->run;
    la_ingest_counts *n = &r->out->n;
    const la_request_stats *st = ev->stats;
    if (ev->finish == LA_FINISH_ERROR || ev->finish == LA_FINISH_CANCELLED) {
        note_failure(r, j->line, ev->error && *ev->error ? ev->error : "request cancelled");
    } else if (st && st->doc_tokens_computed > 0) {
        n->computed++;
        n->tokens += st->doc_tokens_computed;
    } else if (st && st->doc_tokens_host + st->doc_tokens_disk + st->doc_tokens_shared > 0) {
        n->loaded++;
    } else {
        n->skipped++; /* the same document, computed by an earlier request of this run */
    }
    j->done = true;
    r->in_flight--;
    tick(r);
}

static la_status submit(la_engine *e, run *r, const la_segment *seg, job *j, la_err *err) {
    la_request_params p;
    la_request_params_init(&p);
    p.docs = seg;
    p.n_docs = 1;
    p.prompt.text = "\n";
    p.add_special = false;
    p.method = r->o->method;
    p.cache_salt = r->o->cache_salt;
    p.sampling.max_tokens = 1;
    p.on_event = on_event;
    p.user = j;
    return la_engine_submit(e, &p, NULL, err);
}

/* Step the engine until at most `keep` requests are in flight. */
static void drain(la_engine *e, run *r, int32_t keep) {
    while (r->in_flight > keep) {
        la_err err = {0};
        la_engine_step(e, &err); /* a failed step fails its requests: their DONE events say why */
    }
}

la_status la_ingest_run(la_engine *e, const la_ingest_opts *o, la_ingest_progress_fn progress, void *user,
                        la_ingest_summary *out, la_err *err) {
    memset(out, 0, sizeof *out);
    if (o->method != LA_METHOD_LAZY && o->method != LA_METHOD_BLOCK && o->method != LA_METHOD_MEPIC)
        return la_err_set(err, LA_ERR_INVALID_ARG,
                          "ingest: method '%s' does not cache documents on their own (use lazy, block or mepic)",
                          la_method_name(o->method));
    if (o->batch < 1) return la_err_set(err, LA_ERR_INVALID_ARG, "ingest: batch=%d must be >= 1", o->batch);
    la_engine_store_stats before;
    la_engine_get_store_stats(e, &before);
    if (!before.tier[LA_KV_TIER_KIND_DISK].enabled)
        return la_err_set(err, LA_ERR_IO,
                          "ingest: the engine has no usable disk tier (kv_dir missing, or not writable: the "
                          "log says why); nothing would be stored");
    LA_TRY(count_lines(o->corpus, &out->n.total, err));
    FILE *f = fopen(o->corpus, "r");
    if (!f) return la_err_set(err, LA_ERR_IO, "--corpus %s: %s", o->corpus, strerror(errno));
    /* a ring of batch jobs (the requests' event sinks): a slot is reused once its request
     * is done; the document itself is copied by the submit */
    job *jobs = calloc((size_t)o->batch, sizeof *jobs);
    if (!jobs) {
        fclose(f);
        return la_err_set(err, LA_ERR_NO_MEMORY, "ingest: out of memory");
    }
    run r = {o, out, 0, progress, user, la_now_ms()};
    char *line = NULL;
    size_t cap = 0;
    int64_t line_no = 0;
    int32_t slot = 0;
    for (int32_t k = 0; k < o->batch; k++) jobs[k].done = true;
    while (getline(&line, &cap, f) >= 0) {
        line_no++;
        if (blank(line)) continue;
        /* a free slot: its earlier document's request is done */
        while (!jobs[slot].done) drain(e, &r, r.in_flight - 1);
        la_segment seg;
        char why[160];
        cJSON *doc = NULL;
        if (!parse_line(line, &doc, &seg, why, sizeof why)) {
            cJSON_Delete(doc);
            note_failure(&r, line_no, why);
            tick(&r);
            continue;
        }
        int32_t where = 0;
        la_err werr = {0};
        if (la_engine_document_where(e, &seg, o->method, o->cache_salt, &where, &werr) != LA_OK) {
            cJSON_Delete(doc);
            note_failure(&r, line_no, werr.msg);
            tick(&r);
            continue;
        }
        if (where >= 1 && where <= 3) { /* pool, host or disk: stored already */
            cJSON_Delete(doc);
            out->n.skipped++;
            tick(&r);
            continue;
        }
        jobs[slot] = (job){&r, line_no, false};
        la_err serr = {0};
        la_status st = submit(e, &r, &seg, &jobs[slot], &serr);
        cJSON_Delete(doc);
        if (st != LA_OK) {
            jobs[slot].done = true;
            note_failure(&r, line_no, serr.msg);
            tick(&r);
            continue;
        }
        r.in_flight++;
        slot = (slot + 1) % o->batch;
    }
    free(line);
    fclose(f);
    drain(e, &r, 0);
    la_engine_store_flush(e);
    out->seconds = (la_now_ms() - r.t0_ms) / 1e3;
    free(jobs);

    la_engine_store_stats after;
    la_engine_get_store_stats(e, &after);
    const la_engine_tier_stats *a = &after.tier[LA_KV_TIER_KIND_DISK], *b = &before.tier[LA_KV_TIER_KIND_DISK];
    out->bytes_written = a->bytes_written - b->bytes_written;
    out->writes = a->writes - b->writes;
    out->write_failures = a->write_failures - b->write_failures;
    out->write_s = a->write_s - b->write_s;
    double secs = out->seconds > 0 ? out->seconds : 1e-9;
    out->documents_per_s = (double)out->n.computed / secs;
    out->tokens_per_s = (double)out->n.tokens / secs;
    out->gb_per_s = (double)out->bytes_written / secs / 1e9;
    out->disk_write_gb_per_s = out->write_s > 0 ? (double)out->bytes_written / out->write_s / 1e9 : 0;
    out->n.elapsed_s = out->seconds;
    return LA_OK;
}

cJSON *la_ingest_summary_json(const la_ingest_summary *s) {
    cJSON *o = cJSON_CreateObject();
    cJSON *d = cJSON_AddObjectToObject(o, "documents");
    cJSON_AddNumberToObject(d, "total", (double)s->n.total);
    cJSON_AddNumberToObject(d, "computed", (double)s->n.computed);
    cJSON_AddNumberToObject(d, "loaded", (double)s->n.loaded);
    cJSON_AddNumberToObject(d, "skipped", (double)s->n.skipped);
    cJSON_AddNumberToObject(d, "failed", (double)s->n.failed);
    cJSON_AddNumberToObject(o, "tokens", (double)s->n.tokens);
    cJSON_AddNumberToObject(o, "seconds", s->seconds);
    cJSON_AddNumberToObject(o, "documents_per_s", s->documents_per_s);
    cJSON_AddNumberToObject(o, "tokens_per_s", s->tokens_per_s);
    cJSON_AddNumberToObject(o, "bytes_written", (double)s->bytes_written);
    cJSON_AddNumberToObject(o, "gb_written", (double)s->bytes_written / 1e9);
    cJSON_AddNumberToObject(o, "gb_per_s", s->gb_per_s);
    cJSON_AddNumberToObject(o, "disk_write_gb_per_s", s->disk_write_gb_per_s);
    cJSON_AddNumberToObject(o, "writes", (double)s->writes);
    cJSON_AddNumberToObject(o, "write_failures", (double)s->write_failures);
    if (s->first_error[0]) cJSON_AddStringToObject(o, "first_error", s->first_error);
    return o;
}
