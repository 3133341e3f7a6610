/* CUDA backend, CUDA graphs for decode steps (cuda_internal.h).
 *
 * CUDA graphs for decode steps (on by default; LA_CUDA_GRAPHS=0 or la_cuda_graphs_enable
 * turn them off): a decode step queues about 11 operations per layer, ~450 launches for Llama-3-8B, and the
 * gaps between them cost milliseconds. A step is a graph candidate when every sequence has
 * exactly one new row, logits are wanted and profiling is off: a decode step, or the tail of
 * a long prefill (forward.c runs the last layer's attention and MLP for the logit rows as a
 * batch of one-row sequences), which is recorded, captured and replayed the same way. For a candidate,
 * batch_begin uploads the metadata as usual, except that the one array whose length
 * changes from step to step, the block list, goes last (every other array keeps its
 * device address); then every operation validates its arguments as always but only
 * records itself (op_rec: which operation, layer, weight, activations). to_host (logits)
 * or argmax_to_host (greedy token ids) completes the record and looks it up, together with a step signature (every device address and
 * count the launches read from the backend: metadata arrays, work-list lengths, RoPE
 * table, partial buffers, pool, readback buffers), in a small LRU cache:
 *
 *   - a graph whose record and signature are bit-equal: one cudaGraphLaunch. Its kernels
 *     read the metadata this step uploaded at the same addresses, so it does exactly what
 *     queuing the same operations one by one would do;
 *   - a key seen once before: capture (cudaStreamBeginCapture, thread-local mode; the
 *     recorded operations queued through the eager code; EndCapture; instantiate) and
 *     launch. Any failure ends the capture, discards it, marks the key as not capturable
 *     and runs the step eagerly;
 *   - a new key: remember it and run the operations eagerly (this first sight also warms
 *     up cuBLAS heuristics and kernel attributes outside any capture).
 *
 * Keys repeat from step to step because (1) the attention work lists of a split graph
 * step have a fixed length per batch size: decode items are padded to the decode split
 * target (split_ctas_decode x n_sm) / groups with empty items (no tokens: they return at
 * once), and combine items and in-kernel merge sets to one per sequence with empty ones
 * (never read); (2) with graphs on,
 * the activation cache breaks ties between equal sizes by address, so the forward pass's
 * sixteen allocations get the same buffers every step. A call that needs the queue in
 * order mid-step (kv_read_slot, kv_copy_rotate, la_cuda_synchronize, a new batch_begin,
 * ...) first runs the recorded operations eagerly (la_cu_flush_recorded), and the rest of that
 * step runs eagerly. Nothing between capture begin and end waits or allocates: the
 * recorded operations only launch kernels and cuBLAS GEMMs (on the fixed cuBLAS
 * workspace) and copy into the pinned readback buffer; whatever may allocate (metadata,
 * partial and readback buffers, RoPE table) happens in batch_begin or in to_host /
 * argmax_to_host before the capture. The eager path (graphs off) queues exactly what it queued before graphs
 * existed.
 */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"

/* Graph steps: append an operation, already validated, to the step's record instead of
 * queuing it (run_recorded queues it later through the same function). */
la_status la_cu_record_op(cuda_backend *c, op_kind kind, int32_t layer, int32_t weight, const la_act *a,
                          const la_act *b, la_err *err) {
    if (c->n_recs == c->cap_recs) {
        int32_t nc = c->cap_recs ? 2 * c->cap_recs : 1024;
        op_rec *p = realloc(c->recs, sizeof *p * (size_t)nc);
        if (!p) return la_err_set(err, LA_ERR_NO_MEMORY, "cuda backend: recording a decode step: out of memory");
        c->recs = p;
        c->cap_recs = nc;
    }
    op_rec *r = &c->recs[c->n_recs++];
    memset(r, 0, sizeof *r);
    r->kind = (int32_t)kind;
    r->layer = layer;
    r->weight = weight;
    r->a = *a;
    if (b) r->b = *b;
    return LA_OK;
}

/* Queue the recorded operations in order; stops at the first error. */
static la_status run_recorded(cuda_backend *c, la_err *err) {
    for (int32_t i = 0; i < c->n_recs; i++) LA_TRY(la_cu_run_op(c, &c->recs[i], err));
    return LA_OK;
}

/* Queue the operations recorded so far and stop recording: the rest of the step is
 * queued as it comes, as with graphs off. Nothing to do when not recording. On error the
 * operations after the failing one are dropped (the eager path would not have got past
 * it either). */
la_status la_cu_flush_recorded(cuda_backend *c, la_err *err) {
    if (!c->recording) return LA_OK;
    c->recording = false;
    c->gstats.interrupted++;
    c->gstats.steps_eager++;
    la_status s = run_recorded(c, err);
    c->n_recs = 0;
    return s;
}

static void graph_entry_free(graph_entry *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    free(g->ops);
    memset(g, 0, sizeof *g);
}

/* Destroy every cached graph (none is in flight: to_host waits for each launch). */
void la_cu_graph_cache_clear(cuda_backend *c) {
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) graph_entry_free(&c->cache[i]);
}

static void step_signature(const cuda_backend *c, step_sig *s) {
    memset(s, 0, sizeof *s);
    s->n_tokens = c->n_tokens;
    s->n_logit_rows = c->n_logit_rows;
    s->n_items_prefill = c->n_items_prefill;
    s->n_items_decode = c->n_items_decode;
    s->n_combine = c->n_combine;
    s->n_merge = c->n_merge;
    /* the packed switch can change between two steps of one size (la_cuda_attn_decode_packed_set) */
    s->decode_instance = c->step_decode;
    s->rope_len = c->rope_len;
    s->n_pool_blocks = c->n_blocks;
    s->block_size = c->block_size;
    s->n_items_grouped = c->n_items_grouped;
    s->grouped_kernel = c->n_items_grouped ? (int64_t)c->sh.kernel : -1;
    s->combine_rows = c->combine_rows;
    s->items_grouped = c->n_items_grouped ? c->d_items_grouped : NULL;
    s->grows = c->n_items_grouped ? c->d_grows : NULL;
    s->tokens = c->d_tokens;
    s->pos = c->d_pos;
    s->kpos = c->d_kpos;
    s->slots = c->d_slots;
    s->written = c->copies_in_step ? NULL : c->d_written; /* what cuda_attention passes */
    s->blocks = c->d_blocks;
    s->logit_rows = c->d_logit_rows;
    s->items_prefill = c->d_items_prefill;
    s->items_decode = c->d_items_decode;
    s->combine = c->d_combine;
    s->merge = c->d_merge;
    s->merge_count = c->merge_count;
    s->rope = c->rope;
    s->part_o = c->part_o;
    s->part_ml = c->part_ml;
    s->k_pool = c->k_pool;
    s->v_pool = c->v_pool;
    s->f32_dev = c->f32_dev;
    s->host_pinned = c->host_pinned;
}

/* The cache entry whose key (signature and operations) equals this step's, counting this
 * sighting. A new key takes a free entry or the least recently used one (destroying its
 * graph). NULL if a new entry cannot be allocated (the step then runs eagerly). */
static graph_entry *graph_lookup(cuda_backend *c, const step_sig *sig) {
    const size_t ops_bytes = sizeof(op_rec) * (size_t)c->n_recs;
    graph_entry *victim = NULL;
    c->graph_clock++;
    for (int i = 0; i < LA_CUDA_GRAPH_CACHE; i++) {
        graph_entry *g = &c->cache[i];
        if (g->used && g->n_ops == c->n_recs && memcmp(&g->sig, sig, sizeof *sig) == 0 &&
            memcmp(g->ops, c->recs, ops_bytes) == 0) {
            g->n_seen++;
            g->last_used = c->graph_clock;
            return g;
        }
        if (!victim || (victim->used && (!g->used || g->last_used < victim->last_used))) victim = g;
    }
    op_rec *ops = malloc(ops_bytes ? ops_bytes : 1);
    if (!ops) return NULL;
    memcpy(ops, c->recs, ops_bytes);
    graph_entry_free(victim);
    victim->used = true;
    victim->sig = *sig;
    victim->ops = ops;
    victim->n_ops = c->n_recs;
    victim->n_seen = 1;
    victim->last_used = c->graph_clock;
    return victim;
}

/* Capture the recorded operations into g->exec (true on success). On any failure the
 * capture is ended and discarded (the stream never stays capturing), the error cleared,
 * g marked failed, and the caller runs the step eagerly. */
static bool graph_capture(cuda_backend *c, graph_entry *g) {
    la_err ignored = {0};
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    if (e == cudaSuccess) {
        la_status s = run_recorded(c, &ignored);
        if (c->break_next_capture) {
            c->break_next_capture = false;
            (void)cudaStreamSynchronize(c->stream); /* illegal while capturing: invalidates it */
        }
        e = cudaStreamEndCapture(c->stream, &graph);
        if (e == cudaSuccess && (s != LA_OK || !graph)) e = cudaErrorUnknown;
    }
    cudaGraphExec_t exec = NULL;
    if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    enum cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(c->stream, &st) == cudaSuccess && st != cudaStreamCaptureStatusNone) {
        cudaGraph_t rest = NULL;
        (void)cudaStreamEndCapture(c->stream, &rest);
        if (rest) cudaGraphDestroy(rest);
    }
    (void)cudaGetLastError(); /* capture errors are not sticky; keep later launch checks clean */
    if (e != cudaSuccess) {
        g->failed = true;
        c->gstats.capture_failures++;
        return false;
    }
    g->exec = exec;
    c->gstats.captures++;
    return true;
}

/* to_host / argmax_to_host of a recorded step (top of this file): complete the record with
 * the readback (`last`: OP_TO_HOST or OP_ARGMAX), then launch a cached graph, capture one
 * (second sight of a key) or queue the operations eagerly; wait, copy the logits (f32) or
 * token ids (int32) out to host. */
la_status la_cu_graph_step_finish(cuda_backend *c, op_kind last, const la_act *x, void *host, la_err *err) {
    /* the step's result: f32 logits (OP_TO_HOST) or int32 token ids (OP_ARGMAX) */
    size_t n = (size_t)(last == OP_ARGMAX ? x->n_rows : x->n_rows * x->n_cols);
    c->recording = false;
    la_status s = la_cu_reserve_readback(c, n, err); /* may wait and reallocate: before any capture */
    const bool have_readback = s == LA_OK;
    if (s == LA_OK) s = la_cu_record_op(c, last, 0, 0, x, NULL, err);
    if (s != LA_OK) {
        la_err ignored = {0};
        /* what the eager path had queued before failing; without the readback buffer not even
         * that (the embed of LA_TOKEN_PREV tokens reads it): the step fails either way */
        if (have_readback) (void)run_recorded(c, &ignored);
        c->n_recs = 0;
        c->gstats.steps_eager++;
        return s;
    }
    step_sig sig;
    step_signature(c, &sig);
    graph_entry *g = graph_lookup(c, &sig);
    /* n_jobs is 0 (kv_copy_rotate ends recording); a queued copy would wait inside capture */
    if (g && !g->exec && !g->failed && g->n_seen >= 2 && c->n_jobs == 0) graph_capture(c, g);
    bool launched = false;
    if (g && g->exec) {
        if (cudaGraphLaunch(g->exec, c->stream) == cudaSuccess) {
            launched = true;
        } else {
            (void)cudaGetLastError();
            cudaGraphExecDestroy(g->exec);
            g->exec = NULL;
            g->failed = true;
            c->gstats.capture_failures++;
        }
    }
    /* what the recorded readback sets when it runs (argmax_queue, to_host_queue), for a replay */
    c->prev_ids_rows = last == OP_ARGMAX ? (int32_t)x->n_rows : 0;
    if (launched) {
        c->gstats.steps_replayed++;
    } else {
        c->gstats.steps_eager++;
        s = run_recorded(c, err);
    }
    c->n_recs = 0;
    LA_TRY(s);
    if (last == OP_ARGMAX) return la_cu_argmax_readback(c, (int32_t)x->n_rows, host, err); /* outside the graph */
    CUDA_TRY(cudaStreamSynchronize(c->stream), "forward pass");
    memcpy(host, c->host_pinned, n * 4); /* f32 */
    return LA_OK;
}
