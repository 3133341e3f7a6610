/* The shared tier on Redis or Valkey through hiredis (DESIGN.md §9, T3).
 *
 * A record of key K (32 hex digits H) whose payload checksum is C (16 hex digits) is
 *
 *   lazyattn:kv:H           the 128-byte record header, then the chunk size (u32 LE)
 *   lazyattn:kv:H:C:<i>     chunk i of header + payload, i = 0, 1, ... (chunk_bytes each,
 *                           the last one shorter)
 *
 * A write SETs every chunk (pipelined), then the header key last; a reader GETs the
 * header, then the chunks it names. Chunks carry the checksum in their names, so two
 * replicas writing one document at once never mix their chunks under one header, and a
 * reader that finds a chunk gone (evicted by maxmemory-policy allkeys-lru, FLUSHALL) or
 * damaged reads a short or failing record: the store's checks reject it and the document
 * is computed. Expiry and memory policy are Redis's (README "Several replicas").
 *
 * Connections: one per concurrent caller (the store's I/O threads), made on demand and
 * kept; every command has a timeout. A failure closes the connection and starts a
 * back-off (100 ms doubling to 5 s) during which calls fail at once, so a dead store
 * costs a request nothing but the fallback to computing.
 */
#include "kv/store/redis_tier.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/err.h"
#include "base/timer.h"
#include "kv/store/record.h"

#define CHUNK_BYTES ((size_t)4 << 20)
#define MAX_CONNS 16
#define BACKOFF_MIN_MS 100.0
#define BACKOFF_MAX_MS 5000.0
#define KEY_PREFIX "lazyattn:kv:"

typedef struct redis_tier {
    la_kv_tier base;
    char host[256];
    int port, db;
    char *user, *password;
    int timeout_ms;
    pthread_mutex_t mu;
    redisContext *idle[MAX_CONNS];
    int n_idle;
    double retry_at_ms, backoff_ms; /* no connection attempt before retry_at_ms */
} redis_tier;

static redis_tier *rt(la_kv_tier *t) { return (redis_tier *)t; }

/* ---- URL ---------------------------------------------------------------------------------- */

la_status la_redis_url_parse(const char *url, la_redis_url *out, la_err *err) {
    memset(out, 0, sizeof *out);
    out->port = 6379;
    const char *p;
    if (!strncmp(url, "rediss://", 9))
        return la_err_set(err, LA_ERR_UNSUPPORTED,
                          "KV store %s: TLS (rediss://) needs hiredis >= 1.0 with SSL; this build has hiredis "
                          "%d.%d.%d without it (use redis:// on a trusted network, or a TLS tunnel)",
                          url, HIREDIS_MAJOR, HIREDIS_MINOR, HIREDIS_PATCH);
    if (strncmp(url, "redis://", 8))
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: expected redis://[[USER]:PASSWORD@]HOST:PORT[/DB]",
                          url);
    p = url + 8;
    const char *at = strrchr(p, '@');
    if (at) { /* [user]:password@ */
        const char *colon = memchr(p, ':', (size_t)(at - p));
        if (!colon)
            return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: credentials must be [USER]:PASSWORD@", url);
        snprintf(out->user, sizeof out->user, "%.*s", (int)(colon - p), p);
        snprintf(out->password, sizeof out->password, "%.*s", (int)(at - colon - 1), colon + 1);
        p = at + 1;
    }
    const char *end = p + strcspn(p, "/");
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *host_end = colon ? colon : end;
    if (host_end == p || (size_t)(host_end - p) >= sizeof out->host)
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: no host", url);
    snprintf(out->host, sizeof out->host, "%.*s", (int)(host_end - p), p);
    if (colon) {
        char *stop;
        long port = strtol(colon + 1, &stop, 10);
        if (stop != end || port < 1 || port > 65535)
            return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: port must be in [1, 65535]", url);
        out->port = (int)port;
    }
    if (*end == '/' && end[1]) {
        char *stop;
        long db = strtol(end + 1, &stop, 10);
        if (*stop || db < 0 || db > 1 << 20)
            return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: database must be a number >= 0", url);
        out->db = (int)db;
    }
    return LA_OK;
}

/* ---- connections ---------------------------------------------------------------------------- */

static redisReply *command(redisContext *c, int argc, const char **argv, const size_t *lens) {
    return redisCommandArgv(c, argc, argv, lens);
}

/* Connect, authenticate, select the database. NULL with err set on failure; *auth_refused
 * tells a wrong password from a store that is down. */
static redisContext *connect_to(redis_tier *r, bool *auth_refused, la_err *err) {
    struct timeval tv = {r->timeout_ms / 1000, (r->timeout_ms % 1000) * 1000};
    *auth_refused = false;
    redisContext *c = redisConnectWithTimeout(r->host, r->port, tv);
    if (!c || c->err) {
        la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: %s", r->host, r->port, c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    if (r->password) {
        const char *argv[3] = {"AUTH", r->user ? r->user : r->password, r->password};
        size_t lens[3] = {4, strlen(argv[1]), strlen(r->password)};
        redisReply *rep = command(c, r->user ? 3 : 2, argv, lens);
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (!ok) {
            *auth_refused = rep && rep->type == REDIS_REPLY_ERROR;
            la_err_set(err, *auth_refused ? LA_ERR_INVALID_ARG : LA_ERR_BACKEND, "redis %s:%d: AUTH: %s", r->host,
                       r->port, rep && rep->str ? rep->str : c->errstr);
        }
        if (rep) freeReplyObject(rep);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    if (r->db) {
        char db[16];
        snprintf(db, sizeof db, "%d", r->db);
        const char *argv[2] = {"SELECT", db};
        size_t lens[2] = {6, strlen(db)};
        redisReply *rep = command(c, 2, argv, lens);
        bool ok = rep && rep->type == REDIS_REPLY_STATUS;
        if (!ok) la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: SELECT %d: %s", r->host, r->port, r->db,
                            rep && rep->str ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* A connection for one call, or NULL (err set) while backing off or when connecting fails. */
static redisContext *acquire(redis_tier *r, la_err *err) {
    pthread_mutex_lock(&r->mu);
    if (r->n_idle > 0) {
        redisContext *c = r->idle[--r->n_idle];
        pthread_mutex_unlock(&r->mu);
        return c;
    }
    double now = la_now_ms();
    if (now < r->retry_at_ms) {
        pthread_mutex_unlock(&r->mu);
        la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: down (next attempt in %.0f ms)", r->host, r->port,
                   r->retry_at_ms - now);
        return NULL;
    }
    pthread_mutex_unlock(&r->mu);
    bool refused;
    redisContext *c = connect_to(r, &refused, err);
    pthread_mutex_lock(&r->mu);
    if (c) r->backoff_ms = 0;
    else {
        r->backoff_ms = r->backoff_ms ? r->backoff_ms * 2 : BACKOFF_MIN_MS;
        if (r->backoff_ms > BACKOFF_MAX_MS) r->backoff_ms = BACKOFF_MAX_MS;
        r->retry_at_ms = la_now_ms() + r->backoff_ms;
    }
    pthread_mutex_unlock(&r->mu);
    return c;
}

/* Give the connection back (ok) or close it after an error (the next call reconnects). */
static void release(redis_tier *r, redisContext *c, bool ok) {
    if (!c) return;
    pthread_mutex_lock(&r->mu);
    if (ok && !c->err && r->n_idle < MAX_CONNS) {
        r->idle[r->n_idle++] = c;
        c = NULL;
    }
    if (!ok) { /* a connection that failed: start the back-off for new ones */
        r->backoff_ms = r->backoff_ms ? r->backoff_ms : BACKOFF_MIN_MS;
        r->retry_at_ms = la_now_ms() + r->backoff_ms;
        for (int i = 0; i < r->n_idle; i++) redisFree(r->idle[i]);
        r->n_idle = 0;
    }
    pthread_mutex_unlock(&r->mu);
    if (c) redisFree(c);
}

/* ---- record keys ------------------------------------------------------------------------------- */

static void header_key(la_hash128 key, char *out, size_t cap) {
    char hex[33];
    la_kv_key_hex(key, hex);
    snprintf(out, cap, KEY_PREFIX "%s", hex);
}

static void chunk_key(la_hash128 key, uint64_t checksum, size_t i, char *out, size_t cap) {
    char hex[33];
    la_kv_key_hex(key, hex);
    snprintf(out, cap, KEY_PREFIX "%s:%016llx:%zu", hex, (unsigned long long)checksum, i);
}

static uint64_t le64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

/* ---- tier operations ------------------------------------------------------------------------------ */

static la_kv_probe redis_probe(la_kv_tier *t, la_hash128 key) {
    (void)t, (void)key;
    return LA_KV_PROBE_MAYBE; /* only the store knows; asking costs a round trip, done on read */
}

/* Copy src[0:n] to the iov stream at byte offset off. */
static void scatter(const struct iovec *iov, int n_iov, size_t off, const char *src, size_t n) {
    for (int i = 0; i < n_iov && n > 0; i++) {
        if (off >= iov[i].iov_len) {
            off -= iov[i].iov_len;
            continue;
        }
        size_t k = iov[i].iov_len - off < n ? iov[i].iov_len - off : n;
        memcpy((char *)iov[i].iov_base + off, src, k);
        src += k;
        n -= k;
        off = 0;
    }
}

static la_status redis_read(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, size_t *n_read,
                            la_err *err) {
    redis_tier *r = rt(t);
    *n_read = 0;
    redisContext *c = acquire(r, err);
    if (!c) return LA_ERR_BACKEND;
    char hk[64];
    header_key(key, hk, sizeof hk);
    const char *argv[2] = {"GET", hk};
    size_t lens[2] = {3, strlen(hk)};
    redisReply *rep = command(c, 2, argv, lens);
    if (!rep || rep->type == REDIS_REPLY_ERROR) {
        la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: GET: %s", r->host, r->port, rep ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
        release(r, c, false);
        return LA_ERR_BACKEND;
    }
    if (rep->type == REDIS_REPLY_NIL) {
        freeReplyObject(rep);
        release(r, c, true);
        return la_err_set(err, LA_ERR_NOT_FOUND, "redis: no record");
    }
    size_t total = 0;
    for (int i = 0; i < n_iov; i++) total += iov[i].iov_len;
    /* a value that is not a header + chunk size: hand back the bytes, the store rejects it */
    if (rep->type != REDIS_REPLY_STRING || rep->len != LA_KV_RECORD_HEADER_BYTES + 4) {
        if (rep->type == REDIS_REPLY_STRING) {
            size_t n = rep->len < total ? rep->len : total;
            scatter(iov, n_iov, 0, rep->str, n);
            *n_read = n;
        }
        freeReplyObject(rep);
        release(r, c, true);
        return LA_OK;
    }
    const uint8_t *h = (const uint8_t *)rep->str;
    uint64_t checksum = le64(h + 88), payload = le64(h + 80);
    uint32_t chunk = (uint32_t)h[128] | (uint32_t)h[129] << 8 | (uint32_t)h[130] << 16 | (uint32_t)h[131] << 24;
    size_t want = LA_KV_RECORD_HEADER_BYTES + payload;
    if (want > total) want = total;
    freeReplyObject(rep);
    if (chunk == 0) {
        release(r, c, true);
        return LA_OK; /* nothing read: short */
    }
    size_t n_chunks = (want + chunk - 1) / chunk;
    for (size_t i = 0; i < n_chunks; i++) { /* pipelined */
        char ck[96];
        chunk_key(key, checksum, i, ck, sizeof ck);
        const char *a[2] = {"GET", ck};
        size_t l[2] = {3, strlen(ck)};
        redisAppendCommandArgv(c, 2, a, l);
    }
    la_status s = LA_OK;
    size_t got = 0;
    bool whole = true;
    for (size_t i = 0; i < n_chunks; i++) {
        redisReply *cr = NULL;
        if (redisGetReply(c, (void **)&cr) != REDIS_OK || !cr) {
            s = la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: GET chunk: %s", r->host, r->port, c->errstr);
            break;
        }
        if (cr->type == REDIS_REPLY_STRING && whole) {
            size_t n = cr->len;
            if (got + n > want) n = want - got;
            scatter(iov, n_iov, got, cr->str, n);
            got += n;
            if (cr->len != chunk && i + 1 < n_chunks) whole = false;
        } else {
            whole = false; /* a chunk gone: what was read so far is a truncated record */
        }
        freeReplyObject(cr);
    }
    release(r, c, s == LA_OK);
    *n_read = got;
    return s;
}

static la_status redis_write(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, la_err *err) {
    redis_tier *r = rt(t);
    if (n_iov < 1 || iov[0].iov_len != LA_KV_RECORD_HEADER_BYTES)
        return la_err_set(err, LA_ERR_INTERNAL, "redis tier: a record starts with its header");
    redisContext *c = acquire(r, err);
    if (!c) return LA_ERR_BACKEND;
    const uint8_t *hdr = iov[0].iov_base;
    uint64_t checksum = le64(hdr + 88);
    size_t total = 0;
    for (int i = 0; i < n_iov; i++) total += iov[i].iov_len;
    char *buf = malloc(CHUNK_BYTES);
    if (!buf) {
        release(r, c, true);
        return la_err_set(err, LA_ERR_NO_MEMORY, "redis tier: out of memory");
    }
    /* chunks, pipelined: SET key value, gathering each chunk from the iov stream */
    size_t n_chunks = (total + CHUNK_BYTES - 1) / CHUNK_BYTES, at = 0;
    int vi = 0;
    size_t voff = 0;
    la_status s = LA_OK;
    for (size_t i = 0; i < n_chunks; i++) {
        size_t n = total - at < CHUNK_BYTES ? total - at : CHUNK_BYTES, k = 0;
        while (k < n) {
            size_t take = iov[vi].iov_len - voff < n - k ? iov[vi].iov_len - voff : n - k;
            memcpy(buf + k, (const char *)iov[vi].iov_base + voff, take);
            k += take;
            voff += take;
            if (voff == iov[vi].iov_len) vi++, voff = 0;
        }
        char ck[96];
        chunk_key(key, checksum, i, ck, sizeof ck);
        const char *a[3] = {"SET", ck, buf};
        size_t l[3] = {3, strlen(ck), n};
        redisAppendCommandArgv(c, 3, a, l); /* copies the arguments into the output buffer */
        at += n;
    }
    free(buf);
    for (size_t i = 0; i < n_chunks; i++) {
        redisReply *rep = NULL;
        if (redisGetReply(c, (void **)&rep) != REDIS_OK || !rep) {
            if (s == LA_OK) s = la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: SET: %s", r->host, r->port, c->errstr);
            break;
        }
        if (rep->type == REDIS_REPLY_ERROR && s == LA_OK) /* e.g. OOM: maxmemory reached */
            s = la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: SET: %s", r->host, r->port, rep->str);
        freeReplyObject(rep);
    }
    if (s == LA_OK) { /* the header last: a reader finds the record only once it is whole */
        char hk[64], value[LA_KV_RECORD_HEADER_BYTES + 4];
        header_key(key, hk, sizeof hk);
        memcpy(value, hdr, LA_KV_RECORD_HEADER_BYTES);
        for (int i = 0; i < 4; i++) value[LA_KV_RECORD_HEADER_BYTES + i] = (char)(CHUNK_BYTES >> (8 * i));
        const char *a[3] = {"SET", hk, value};
        size_t l[3] = {3, strlen(hk), sizeof value};
        redisReply *rep = command(c, 3, a, l);
        if (!rep || rep->type == REDIS_REPLY_ERROR)
            s = la_err_set(err, LA_ERR_BACKEND, "redis %s:%d: SET: %s", r->host, r->port, rep ? rep->str : c->errstr);
        if (rep) freeReplyObject(rep);
    }
    /* an error reply (OOM) leaves the connection good; a broken one does not */
    release(r, c, !c->err);
    return s;
}

static void redis_drop(la_kv_tier *t, la_hash128 key) {
    redis_tier *r = rt(t);
    la_err err;
    redisContext *c = acquire(r, &err);
    if (!c) return;
    char hk[64];
    header_key(key, hk, sizeof hk);
    const char *argv[2] = {"DEL", hk};
    size_t lens[2] = {3, strlen(hk)};
    redisReply *rep = command(c, 2, argv, lens);
    bool ok = rep != NULL;
    if (rep) freeReplyObject(rep);
    release(r, c, ok);
}

static void redis_destroy(la_kv_tier *t) {
    redis_tier *r = rt(t);
    if (!r) return;
    for (int i = 0; i < r->n_idle; i++) redisFree(r->idle[i]);
    free(r->user);
    free(r->password);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

static const la_kv_tier_ops k_redis_ops = {redis_probe, redis_read, redis_write, redis_drop, NULL, redis_destroy, NULL};

la_status la_redis_tier_create(const char *url, int timeout_ms, la_kv_tier **out, char *warning,
                               size_t warning_cap, la_err *err) {
    la_redis_url u;
    LA_TRY(la_redis_url_parse(url, &u, err));
    redis_tier *r = calloc(1, sizeof *r);
    if (!r) return la_err_set(err, LA_ERR_NO_MEMORY, "redis tier: out of memory");
    r->base = (la_kv_tier){&k_redis_ops, "shared"};
    snprintf(r->host, sizeof r->host, "%s", u.host);
    r->port = u.port;
    r->db = u.db;
    r->timeout_ms = timeout_ms > 0 ? timeout_ms : 2000;
    if (u.user[0]) r->user = strdup(u.user);
    if (u.password[0] || u.user[0]) r->password = strdup(u.password);
    pthread_mutex_init(&r->mu, NULL);
    if (warning && warning_cap) warning[0] = '\0';
    /* one connection now: a refused password is the operator's to fix; a store that is
     * down is not an error (the tier retries) */
    bool refused;
    la_err cerr = {0};
    redisContext *c = connect_to(r, &refused, &cerr);
    if (!c && refused) {
        redis_destroy(&r->base);
        return la_err_set(err, LA_ERR_INVALID_ARG, "KV store %s: %s", url, cerr.msg);
    }
    if (c) release(r, c, true);
    else if (warning) snprintf(warning, warning_cap, "%s (serving by computing; retrying)", cerr.msg);
    *out = &r->base;
    return LA_OK;
}
