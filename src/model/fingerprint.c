#include "model/fingerprint.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"

#define TAG "lazyattn-model-fingerprint-1"

static void add(la_hasher *h, const void *data, size_t len) {
    uint64_t n = len;
    la_hasher_update(h, &n, sizeof n);
    la_hasher_update(h, data, len);
}

static void add_hash(la_hasher *h, la_hash128 v) {
    uint64_t p[2] = {v.lo, v.hi};
    add(h, p, sizeof p);
}

/* The key's own id in the cache: a hash of nothing under it. */
static la_hash128 key_id(const la_hash_key *key) {
    la_hasher h;
    la_hasher_init_key(&h, key);
    return la_hasher_digest(&h);
}

typedef struct cached {
    char *path;
    long long size, sec, nsec;
    la_hash128 id, hash;
} cached;

static int parse_hex128(const char *s, la_hash128 *out) {
    unsigned long long hi, lo;
    if (strlen(s) != 32 || sscanf(s, "%16llx%16llx", &hi, &lo) != 2) return 0;
    *out = (la_hash128){lo, hi};
    return 1;
}

/* Read the cache's lines (a missing or malformed file: none). */
static cached *cache_read(const char *path, int32_t *n_out) {
    *n_out = 0;
    FILE *f = path ? fopen(path, "r") : NULL;
    if (!f) return NULL;
    cached *all = NULL;
    int32_t n = 0, cap = 0;
    char line[4352];
    while (fgets(line, sizeof line, f)) {
        char id[40], hash[40], *p = NULL;
        long long size, sec, nsec;
        int consumed = 0;
        if (sscanf(line, "1 %39s %lld %lld.%lld %39s %n", id, &size, &sec, &nsec, hash, &consumed) != 5 ||
            consumed == 0)
            continue;
        p = line + consumed;
        p[strcspn(p, "\n")] = '\0';
        cached c = {.size = size, .sec = sec, .nsec = nsec};
        if (!parse_hex128(id, &c.id) || !parse_hex128(hash, &c.hash) || !*p) continue;
        if (n == cap) {
            cap = cap ? 2 * cap : 8;
            cached *q = realloc(all, sizeof *q * (size_t)cap);
            if (!q) break;
            all = q;
        }
        if (!(c.path = strdup(p))) break;
        all[n++] = c;
    }
    fclose(f);
    *n_out = n;
    return all;
}

static void hex128(la_hash128 v, char out[33]) {
    snprintf(out, 33, "%016llx%016llx", (unsigned long long)v.hi, (unsigned long long)v.lo);
}

/* Rewrite the cache with the current files' lines (best effort: write a temporary file,
 * rename it into place). */
static void cache_write(const char *path, const cached *lines, int32_t n) {
    if (!path) return;
    size_t len = strlen(path) + 16;
    char *tmp = malloc(len);
    if (!tmp) return;
    snprintf(tmp, len, "%s.tmp.%d", path, (int)getpid());
    FILE *f = fopen(tmp, "w");
    if (f) {
        for (int32_t i = 0; i < n; i++) {
            char id[33], h[33];
            hex128(lines[i].id, id);
            hex128(lines[i].hash, h);
            fprintf(f, "1 %s %lld %lld.%09lld %s %s\n", id, lines[i].size, lines[i].sec, lines[i].nsec, h,
                    lines[i].path);
        }
        if (fclose(f) == 0) rename(tmp, path);
        else unlink(tmp);
    }
    free(tmp);
}

static la_status hash_file(const char *path, const la_hash_key *key, la_hash128 *out, la_err *err) {
    la_mmap m = {0};
    LA_TRY(la_mmap_open(&m, path, err));
    la_hasher h;
    la_hasher_init_key(&h, key);
    la_hasher_update(&h, TAG, sizeof TAG - 1);
    if (m.size) la_hasher_update(&h, m.data, m.size);
    *out = la_hasher_digest(&h);
    la_mmap_close(&m);
    return LA_OK;
}

la_status la_model_fingerprint(const char *model_dir, const char *const *weight_paths, int32_t n_weights,
                               const la_hash_key *key, const char *cache_path, la_hash128 *out, la_err *err) {
    char *cfg_path = la_path_join(model_dir, "config.json");
    if (!cfg_path) return la_err_set(err, LA_ERR_NO_MEMORY, "fingerprint: out of memory");
    char *cfg = NULL;
    size_t cfg_len = 0;
    la_status s = la_file_read(cfg_path, &cfg, &cfg_len, err);
    free(cfg_path);
    LA_TRY(s);
    la_hasher h;
    la_hasher_init_key(&h, key);
    add(&h, TAG, sizeof TAG - 1);
    add(&h, cfg, cfg_len);
    free(cfg);

    int32_t n_cached = 0;
    cached *old = cache_read(cache_path, &n_cached);
    cached *now = calloc((size_t)(n_weights ? n_weights : 1), sizeof *now);
    if (!now) s = la_err_set(err, LA_ERR_NO_MEMORY, "fingerprint: out of memory");
    la_hash128 id = key_id(key);
    bool changed = false;
    for (int32_t i = 0; s == LA_OK && i < n_weights; i++) {
        struct stat st;
        char *abs = realpath(weight_paths[i], NULL);
        if (!abs || stat(abs, &st) != 0) {
            s = la_err_set(err, LA_ERR_IO, "%s: %s", weight_paths[i], strerror(errno));
            free(abs);
            break;
        }
        cached c = {.path = abs, .size = (long long)st.st_size, .sec = (long long)st.st_mtim.tv_sec,
                    .nsec = (long long)st.st_mtim.tv_nsec, .id = id};
        bool hit = false;
        for (int32_t k = 0; k < n_cached && !hit; k++)
            if (!strcmp(old[k].path, abs) && old[k].size == c.size && old[k].sec == c.sec && old[k].nsec == c.nsec &&
                la_hash128_eq(old[k].id, id)) {
                c.hash = old[k].hash;
                hit = true;
            }
        if (!hit) {
            s = hash_file(abs, key, &c.hash, err);
            changed = true;
        }
        now[i] = c;
        if (s == LA_OK) add_hash(&h, c.hash);
    }
    if (s == LA_OK) {
        *out = la_hasher_digest(&h);
        if (changed) cache_write(cache_path, now, n_weights);
    }
    for (int32_t i = 0; now && i < n_weights; i++) free(now[i].path);
    free(now);
    for (int32_t k = 0; k < n_cached; k++) free(old[k].path);
    free(old);
    return s;
}

la_hash128 la_model_fingerprint_random(const char *shape_name, const la_hash_key *key) {
    la_hasher h;
    la_hasher_init_key(&h, key);
    add(&h, TAG, sizeof TAG - 1);
    add(&h, "random-weights", 14);
    add(&h, shape_name, strlen(shape_name));
    return la_hasher_digest(&h);
}
