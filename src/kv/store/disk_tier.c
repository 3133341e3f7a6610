/* The disk tier (DESIGN.md §9, T2): one file per record, DIR/kv/<2 hex>/<32 hex>.kv, written
 * to a temporary name and renamed into place, so a reader finds a whole record or none. The
 * index (key -> size, LRU order) lives in memory, rebuilt at start from the files (oldest
 * modification time first: a read touches its file, so the order survives a restart).
 * Over the size cap, the least recently used records are unlinked before a write.
 *
 * A directory that cannot be created or read leaves the tier empty; every write then
 * tries again and fails with its reason (the store counts and logs it), so the engine
 * keeps serving by computing.
 *
 * LA_KV_DISK_READ_DELAY_MS=N (a test hook and a benchmark switch, read at create): every
 * read waits N ms first, as a slow network file system would.
 */
#include "kv/store/disk_tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/array.h"
#include "base/err.h"
#include "base/hash_map.h"
#include "base/log.h"
#include "kv/store/record.h"

typedef struct entry {
    la_hash128 key;
    int64_t bytes;
    int64_t prev, next; /* LRU links (-1 = none); head = least recently used */
} entry;

typedef struct disk_tier {
    la_kv_tier base;
    char *dir;       /* DIR/kv */
    int64_t cap_bytes; /* 0: no cap */
    pthread_mutex_t mu;
    la_hmap index;   /* key -> entry index */
    entry *entries;
    int64_t n_entries, cap_entries, free_head; /* free entries chain through next */
    int64_t lru_head, lru_tail;
    int64_t total_bytes;
    uint64_t tmp_seq;
    double read_delay_ms; /* LA_KV_DISK_READ_DELAY_MS */
    la_hash128 *evicted;  /* keys make_room removed, not yet taken */
    int32_t n_evicted;
    int64_t cap_evicted;
} disk_tier;

static disk_tier *dt(la_kv_tier *t) { return (disk_tier *)t; }

/* ---- index (mu held) ------------------------------------------------------------------- */

static void lru_unlink(disk_tier *d, int64_t i) {
    entry *e = &d->entries[i];
    if (e->prev >= 0) d->entries[e->prev].next = e->next;
    else d->lru_head = e->next;
    if (e->next >= 0) d->entries[e->next].prev = e->prev;
    else d->lru_tail = e->prev;
    e->prev = e->next = -1;
}

static void lru_push_back(disk_tier *d, int64_t i) {
    entry *e = &d->entries[i];
    e->prev = d->lru_tail;
    e->next = -1;
    if (d->lru_tail >= 0) d->entries[d->lru_tail].next = i;
    else d->lru_head = i;
    d->lru_tail = i;
}

static void index_remove(disk_tier *d, la_hash128 key) {
    int64_t i;
    if (!la_hmap_get(&d->index, key, &i)) return;
    lru_unlink(d, i);
    d->total_bytes -= d->entries[i].bytes;
    la_hmap_remove(&d->index, key);
    d->entries[i].next = d->free_head;
    d->free_head = i;
}

/* Insert or refresh key as most recently used. False on out of memory. */
static bool index_put(disk_tier *d, la_hash128 key, int64_t bytes) {
    int64_t i;
    if (la_hmap_get(&d->index, key, &i)) {
        d->total_bytes += bytes - d->entries[i].bytes;
        d->entries[i].bytes = bytes;
        lru_unlink(d, i);
        lru_push_back(d, i);
        return true;
    }
    if (d->free_head >= 0) {
        i = d->free_head;
        d->free_head = d->entries[i].next;
    } else {
        if (!la_array_reserve((void **)&d->entries, &d->cap_entries, d->n_entries + 1, sizeof *d->entries, 256))
            return false;
        i = d->n_entries++;
    }
    if (!la_hmap_put(&d->index, key, i)) {
        d->entries[i].next = d->free_head;
        d->free_head = i;
        return false;
    }
    d->entries[i] = (entry){key, bytes, -1, -1};
    lru_push_back(d, i);
    d->total_bytes += bytes;
    return true;
}

/* ---- paths ------------------------------------------------------------------------------ */

static void record_path(const disk_tier *d, la_hash128 key, char *out, size_t cap) {
    char hex[33];
    la_kv_key_hex(key, hex);
    snprintf(out, cap, "%s/%.2s/%s.kv", d->dir, hex, hex);
}

static bool parse_hex_key(const char *name, la_hash128 *key) {
    /* 32 hex digits then ".kv" */
    if (strlen(name) != 35 || strcmp(name + 32, ".kv") != 0) return false;
    uint64_t part[2] = {0, 0};
    for (int i = 0; i < 32; i++) {
        char c = name[i];
        int v = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1;
        if (v < 0) return false;
        part[i / 16] = part[i / 16] << 4 | (uint64_t)v;
    }
    *key = (la_hash128){part[1], part[0]};
    return true;
}

static int mkdir_p(const char *path) {
    char buf[PATH_MAX];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf) return ENAMETOOLONG;
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = '\0';
            if (mkdir(buf, 0700) != 0 && errno != EEXIST) return errno;
            *p = '/';
        }
    if (mkdir(buf, 0700) != 0 && errno != EEXIST) return errno;
    struct stat st;
    if (stat(buf, &st) != 0) return errno;
    return S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
}

/* ---- start-up scan ----------------------------------------------------------------------- */

typedef struct found {
    la_hash128 key;
    int64_t bytes;
    struct timespec mtime;
} found;

static int cmp_mtime(const void *a, const void *b) {
    const found *x = a, *y = b;
    if (x->mtime.tv_sec != y->mtime.tv_sec) return x->mtime.tv_sec < y->mtime.tv_sec ? -1 : 1;
    if (x->mtime.tv_nsec != y->mtime.tv_nsec) return x->mtime.tv_nsec < y->mtime.tv_nsec ? -1 : 1;
    return 0;
}

/* Index every record file under d->dir (removing leftover temporary files). */
static void scan(disk_tier *d) {
    DIR *top = opendir(d->dir);
    if (!top) return;
    found *all = NULL;
    int64_t n = 0, cap = 0;
    struct dirent *sub;
    char path[PATH_MAX];
    while ((sub = readdir(top))) {
        if (strlen(sub->d_name) != 2) continue;
        snprintf(path, sizeof path, "%s/%s", d->dir, sub->d_name);
        DIR *dd = opendir(path);
        if (!dd) continue;
        struct dirent *f;
        while ((f = readdir(dd))) {
            char fpath[PATH_MAX];
            if (snprintf(fpath, sizeof fpath, "%s/%s", path, f->d_name) >= (int)sizeof fpath) continue;
            if (strstr(f->d_name, ".tmp.")) {
                unlink(fpath); /* a write that did not finish */
                continue;
            }
            la_hash128 key;
            struct stat st;
            if (!parse_hex_key(f->d_name, &key) || stat(fpath, &st) != 0 || !S_ISREG(st.st_mode)) continue;
            if (!la_array_reserve((void **)&all, &cap, n + 1, sizeof *all, 256)) break;
            all[n++] = (found){key, (int64_t)st.st_size, st.st_mtim};
        }
        closedir(dd);
    }
    closedir(top);
    if (n > 0) qsort(all, (size_t)n, sizeof(found), cmp_mtime);
    for (int64_t i = 0; i < n; i++) index_put(d, all[i].key, all[i].bytes);
    free(all);
}

/* ---- tier operations --------------------------------------------------------------------- */

static la_kv_probe disk_probe(la_kv_tier *t, la_hash128 key) {
    disk_tier *d = dt(t);
    pthread_mutex_lock(&d->mu);
    bool have = la_hmap_get(&d->index, key, NULL);
    pthread_mutex_unlock(&d->mu);
    return have ? LA_KV_PROBE_YES : LA_KV_PROBE_NO;
}

static la_status disk_read(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, size_t *n_read,
                           la_err *err) {
    disk_tier *d = dt(t);
    if (d->read_delay_ms > 0) {
        struct timespec ts = {(time_t)(d->read_delay_ms / 1000),
                              (long)(fmod(d->read_delay_ms, 1000.0) * 1e6)};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    char path[PATH_MAX];
    record_path(d, key, path, sizeof path);
    *n_read = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        pthread_mutex_lock(&d->mu);
        index_remove(d, key);
        pthread_mutex_unlock(&d->mu);
        if (e == ENOENT) return la_err_set(err, LA_ERR_NOT_FOUND, "%s: no such record", path);
        return la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(e));
    }
    /* preadv over the pieces, resuming after short reads */
    size_t total = 0;
    struct iovec cur[64];
    int i = 0;
    size_t skip = 0; /* bytes of iov[i] already read */
    la_status s = LA_OK;
    while (i < n_iov) {
        int k = 0;
        for (int j = i; j < n_iov && k < 64; j++, k++) {
            cur[k].iov_base = (char *)iov[j].iov_base + (j == i ? skip : 0);
            cur[k].iov_len = iov[j].iov_len - (j == i ? skip : 0);
        }
        ssize_t got = preadv(fd, cur, k, (off_t)total);
        if (got < 0) {
            if (errno == EINTR) continue;
            s = la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));
            break;
        }
        if (got == 0) break; /* end of file: truncated */
        total += (size_t)got;
        size_t left = (size_t)got;
        while (i < n_iov && left >= iov[i].iov_len - skip) {
            left -= iov[i].iov_len - skip;
            skip = 0;
            i++;
        }
        skip += left;
    }
    close(fd);
    *n_read = total;
    if (s == LA_OK) { /* most recently used: in the index and in the file's mtime (restarts) */
        utimensat(AT_FDCWD, path, NULL, 0);
        pthread_mutex_lock(&d->mu);
        int64_t e;
        if (la_hmap_get(&d->index, key, &e)) index_put(d, key, d->entries[e].bytes);
        pthread_mutex_unlock(&d->mu);
    }
    return s;
}

/* Unlink least recently used records until `need` more bytes fit under the cap (mu held). */
static void make_room(disk_tier *d, int64_t need) {
    char path[PATH_MAX];
    while (d->cap_bytes > 0 && d->total_bytes + need > d->cap_bytes && d->lru_head >= 0) {
        la_hash128 key = d->entries[d->lru_head].key;
        record_path(d, key, path, sizeof path);
        unlink(path);
        index_remove(d, key);
        if (la_array_reserve((void **)&d->evicted, &d->cap_evicted, d->n_evicted + 1, sizeof *d->evicted, 64))
            d->evicted[d->n_evicted++] = key;
    }
}

static la_status disk_write(la_kv_tier *t, la_hash128 key, const struct iovec *iov, int n_iov, la_err *err) {
    disk_tier *d = dt(t);
    int64_t bytes = 0;
    for (int i = 0; i < n_iov; i++) bytes += (int64_t)iov[i].iov_len;
    if (d->cap_bytes > 0 && bytes > d->cap_bytes)
        return la_err_set(err, LA_ERR_NO_SPACE, "%s: a %lld-byte record exceeds the tier's cap of %lld bytes",
                          d->dir, (long long)bytes, (long long)d->cap_bytes);
    char path[PATH_MAX], tmp[PATH_MAX + 32], sub[PATH_MAX];
    record_path(d, key, path, sizeof path);
    snprintf(sub, sizeof sub, "%s", path);
    *strrchr(sub, '/') = '\0';
    int e = mkdir_p(sub);
    if (e) return la_err_set(err, LA_ERR_IO, "%s: %s", sub, strerror(e));
    pthread_mutex_lock(&d->mu);
    make_room(d, bytes);
    uint64_t seq = ++d->tmp_seq;
    pthread_mutex_unlock(&d->mu);
    snprintf(tmp, sizeof tmp, "%s.tmp.%d.%llu", path, (int)getpid(), (unsigned long long)seq);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) return la_err_set(err, LA_ERR_IO, "%s: %s", tmp, strerror(errno));
    la_status s = LA_OK;
    for (int i = 0; i < n_iov && s == LA_OK; i++) {
        const char *p = iov[i].iov_base;
        size_t left = iov[i].iov_len;
        while (left > 0) {
            ssize_t w = write(fd, p, left);
            if (w < 0 && errno == EINTR) continue;
            if (w <= 0) {
                s = la_err_set(err, LA_ERR_IO, "%s: %s", tmp, w < 0 ? strerror(errno) : "short write");
                break;
            }
            p += w;
            left -= (size_t)w;
        }
    }
    if (close(fd) != 0 && s == LA_OK) s = la_err_set(err, LA_ERR_IO, "%s: %s", tmp, strerror(errno));
    if (s == LA_OK && rename(tmp, path) != 0) s = la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));
    if (s != LA_OK) {
        unlink(tmp);
        return s;
    }
    pthread_mutex_lock(&d->mu);
    bool ok = index_put(d, key, bytes);
    pthread_mutex_unlock(&d->mu);
    return ok ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "disk tier index: out of memory");
}

static void disk_drop(la_kv_tier *t, la_hash128 key) {
    disk_tier *d = dt(t);
    char path[PATH_MAX];
    record_path(d, key, path, sizeof path);
    unlink(path);
    pthread_mutex_lock(&d->mu);
    index_remove(d, key);
    pthread_mutex_unlock(&d->mu);
}

static int32_t disk_take_evicted(la_kv_tier *t, la_hash128 *keys, int32_t max) {
    disk_tier *d = dt(t);
    pthread_mutex_lock(&d->mu);
    int32_t n = d->n_evicted < max ? d->n_evicted : max;
    if (n == 0) {
        pthread_mutex_unlock(&d->mu);
        return 0;
    }
    memcpy(keys, d->evicted, sizeof *keys * (size_t)n);
    memmove(d->evicted, d->evicted + n, sizeof *keys * (size_t)(d->n_evicted - n));
    d->n_evicted -= n;
    pthread_mutex_unlock(&d->mu);
    return n;
}

static void disk_destroy(la_kv_tier *t) {
    disk_tier *d = dt(t);
    if (!d) return;
    free(d->evicted);
    la_hmap_fini(&d->index);
    free(d->entries);
    free(d->dir);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

/* Most recently used without a read: in the index and in the file's mtime (restarts). */
static void disk_touch(la_kv_tier *t, la_hash128 key) {
    disk_tier *d = dt(t);
    char path[PATH_MAX];
    record_path(d, key, path, sizeof path);
    pthread_mutex_lock(&d->mu);
    int64_t e;
    bool have = la_hmap_get(&d->index, key, &e);
    if (have) index_put(d, key, d->entries[e].bytes);
    pthread_mutex_unlock(&d->mu);
    if (have) utimensat(AT_FDCWD, path, NULL, 0);
}

static const la_kv_tier_ops k_disk_ops = {disk_probe, disk_read, disk_write, disk_drop, disk_take_evicted,
                                           disk_destroy, disk_touch};

la_status la_disk_tier_create(const char *dir, int64_t cap_bytes, la_kv_tier **out, char *warning,
                              size_t warning_cap, la_err *err) {
    if (!dir || !*dir) return la_err_set(err, LA_ERR_INVALID_ARG, "disk tier: no directory");
    if (cap_bytes < 0) return la_err_set(err, LA_ERR_INVALID_ARG, "disk tier: negative size cap");
    disk_tier *d = calloc(1, sizeof *d);
    if (!d) return la_err_set(err, LA_ERR_NO_MEMORY, "disk tier: out of memory");
    size_t n = strlen(dir) + 4;
    d->dir = malloc(n);
    if (!d->dir) {
        free(d);
        return la_err_set(err, LA_ERR_NO_MEMORY, "disk tier: out of memory");
    }
    snprintf(d->dir, n, "%s/kv", dir);
    d->base = (la_kv_tier){&k_disk_ops, "disk"};
    d->cap_bytes = cap_bytes;
    d->free_head = d->lru_head = d->lru_tail = -1;
    const char *delay = getenv("LA_KV_DISK_READ_DELAY_MS");
    if (delay && *delay) {
        char *end = NULL;
        double v = strtod(delay, &end);
        if (*end == '\0' && v > 0 && v <= 3600e3) d->read_delay_ms = v;
        else la_log("LA_KV_DISK_READ_DELAY_MS='%s' is not milliseconds in (0, 3600000]: reads are not delayed", delay);
    }
    pthread_mutex_init(&d->mu, NULL);
    if (warning && warning_cap) warning[0] = '\0';
    int e = mkdir_p(d->dir);
    if (e) {
        if (warning) snprintf(warning, warning_cap, "%s: %s (the disk tier stays empty)", d->dir, strerror(e));
    } else {
        scan(d);
        make_room(d, 0);
    }
    *out = &d->base;
    return LA_OK;
}

int64_t la_disk_tier_bytes(la_kv_tier *t) {
    disk_tier *d = dt(t);
    pthread_mutex_lock(&d->mu);
    int64_t b = d->total_bytes;
    pthread_mutex_unlock(&d->mu);
    return b;
}

int64_t la_disk_tier_records(la_kv_tier *t) {
    disk_tier *d = dt(t);
    pthread_mutex_lock(&d->mu);
    int64_t n = d->index.n_used;
    pthread_mutex_unlock(&d->mu);
    return n;
}
