#include "model/safetensors.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"

/* ---- types ---------------------------------------------------------------------- */

typedef struct la_st_shard {
    char *path;
    la_mmap map;
} la_st_shard;

struct la_st_file {
    char *source_path;     /* index or model.safetensors */
    int32_t n_shards;
    la_st_shard *shards;
    int64_t n_tensors;
    int64_t cap_tensors;
    la_st_tensor *tensors; /* sorted by name once open */
};

/* safetensors dtype spellings: the three we compute with, then the other valid ones
 * (reported as unsupported rather than malformed). */
static const struct {
    const char *name;
    la_dtype dtype;
} k_supported_dtypes[] = {{"F32", LA_DTYPE_F32}, {"F16", LA_DTYPE_F16}, {"BF16", LA_DTYPE_BF16}};
static const char *const k_other_dtypes[] = {
    "BOOL", "U8",  "I8",  "I16", "U16", "I32", "U32", "I64",     "U64",     "F64",
    "C64",  "F4",  "F6_E2M3", "F6_E3M2", "F8_E5M2", "F8_E4M3", "F8_E8M0"};

/* ---- small helpers ---------------------------------------------------------------- */

static la_status add_tensor(la_st_file *f, la_st_tensor **out, la_err *err) {
    if (f->n_tensors == f->cap_tensors) {
        int64_t cap = f->cap_tensors ? 2 * f->cap_tensors : 64;
        la_st_tensor *t = realloc(f->tensors, (size_t)cap * sizeof *t);
        if (!t) return la_err_set(err, LA_ERR_NO_MEMORY, "safetensors: out of memory");
        f->tensors = t;
        f->cap_tensors = cap;
    }
    *out = &f->tensors[f->n_tensors];
    memset(*out, 0, sizeof **out);
    return LA_OK;
}

/* A JSON number that is a whole number in [0, 2^53]. */
static bool json_uint(const cJSON *v, uint64_t *out) {
    if (!cJSON_IsNumber(v)) return false;
    double d = v->valuedouble;
    if (!(d >= 0) || d != floor(d) || d > 9007199254740992.0) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_by_name(const void *a, const void *b) {
    return strcmp(((const la_st_tensor *)a)->name, ((const la_st_tensor *)b)->name);
}

static int cmp_by_data(const void *a, const void *b) {
    const la_st_tensor *x = *(const la_st_tensor *const *)a, *y = *(const la_st_tensor *const *)b;
    const uint8_t *px = x->data, *py = y->data;
    if (px != py) return px < py ? -1 : 1;
    return x->n_bytes < y->n_bytes ? -1 : x->n_bytes > y->n_bytes;
}

/* ---- one shard's header --------------------------------------------------------- */

/* Validate one header entry and fill t (name excluded). data/data_len: the shard's data
 * region. */
static la_status parse_entry(const cJSON *e, const char *path, const char *name,
                             const uint8_t *data, uint64_t data_len, la_st_tensor *t,
                             la_err *err) {
    if (!cJSON_IsObject(e))
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s: entry is not an object", path,
                          name);
    const cJSON *dt = cJSON_GetObjectItemCaseSensitive(e, "dtype");
    const cJSON *sh = cJSON_GetObjectItemCaseSensitive(e, "shape");
    const cJSON *off = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
    if (!cJSON_IsString(dt))
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s: dtype missing or not a string",
                          path, name);
    if (!cJSON_IsArray(sh))
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s: shape missing or not a list",
                          path, name);
    if (!cJSON_IsArray(off) || cJSON_GetArraySize(off) != 2)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: tensor %s: data_offsets missing or not a list of two integers",
                          path, name);

    bool found = false;
    for (size_t i = 0; i < sizeof k_supported_dtypes / sizeof k_supported_dtypes[0]; i++)
        if (strcmp(dt->valuestring, k_supported_dtypes[i].name) == 0) {
            t->dtype = k_supported_dtypes[i].dtype;
            found = true;
        }
    if (!found) {
        for (size_t i = 0; i < sizeof k_other_dtypes / sizeof k_other_dtypes[0]; i++)
            if (strcmp(dt->valuestring, k_other_dtypes[i]) == 0)
                return la_err_set(err, LA_ERR_UNSUPPORTED,
                                  "%s: tensor %s: dtype %s is not supported (F32, F16 or BF16)",
                                  path, name, dt->valuestring);
        return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s: unknown dtype \"%.32s\"", path,
                          name, dt->valuestring);
    }

    int n_dims = cJSON_GetArraySize(sh);
    if (n_dims > LA_MAX_DIMS)
        return la_err_set(err, LA_ERR_UNSUPPORTED, "%s: tensor %s: %d dims (at most %d)", path,
                          name, n_dims, LA_MAX_DIMS);
    uint64_t n_bytes = la_dtype_size(t->dtype);
    int d = 0;
    for (const cJSON *x = sh->child; x; x = x->next, d++) {
        uint64_t dim;
        if (!json_uint(x, &dim))
            return la_err_set(err, LA_ERR_FORMAT,
                              "%s: tensor %s: shape[%d] is not a non-negative integer", path,
                              name, d);
        t->shape[d] = (int64_t)dim;
        if (__builtin_mul_overflow(n_bytes, dim, &n_bytes))
            return la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s: shape overflows", path, name);
    }
    t->n_dims = n_dims;

    uint64_t begin, end;
    if (!json_uint(off->child, &begin) || !json_uint(off->child->next, &end))
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: tensor %s: data_offsets are not non-negative integers", path,
                          name);
    if (begin > end || end > data_len)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: tensor %s: data_offsets [%llu, %llu] outside the data region "
                          "of %llu bytes (file truncated?)",
                          path, name, (unsigned long long)begin, (unsigned long long)end,
                          (unsigned long long)data_len);
    if (end - begin != n_bytes)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: tensor %s: data_offsets span %llu bytes but shape x %s needs "
                          "%llu",
                          path, name, (unsigned long long)(end - begin),
                          la_dtype_name(t->dtype), (unsigned long long)n_bytes);
    t->data = data + begin;
    t->n_bytes = (size_t)n_bytes;
    return LA_OK;
}

/* Tensors [first, f->n_tensors) all come from one shard: no two may share a byte. */
static la_status check_overlap(la_st_file *f, int64_t first, const char *path, la_err *err) {
    int64_t n = f->n_tensors - first;
    if (n < 2) return LA_OK;
    const la_st_tensor **order = malloc((size_t)n * sizeof *order);
    if (!order) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    for (int64_t i = 0; i < n; i++) order[i] = &f->tensors[first + i];
    qsort(order, (size_t)n, sizeof *order, cmp_by_data);
    la_status s = LA_OK;
    const la_st_tensor *prev = NULL;
    for (int64_t i = 0; i < n; i++) {
        const la_st_tensor *t = order[i];
        if (t->n_bytes == 0) continue;
        if (prev && (const uint8_t *)prev->data + prev->n_bytes > (const uint8_t *)t->data) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: tensors %s and %s overlap in the data region",
                           path, prev->name, t->name);
            break;
        }
        prev = t;
    }
    free(order);
    return s;
}

static la_status parse_shard(la_st_file *f, int32_t file_id, la_err *err) {
    const char *path = f->shards[file_id].path;
    const la_mmap *m = &f->shards[file_id].map;
    if (m->size < 8)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: %zu bytes, too short for the 8-byte header length (truncated?)",
                          path, m->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | m->data[i];
    if (hlen < 2 || hlen > LA_ST_MAX_HEADER_BYTES || hlen > m->size - 8)
        return la_err_set(err, LA_ERR_FORMAT,
                          "%s: header length %llu is not within 2..min(%u, %zu) (file has %zu "
                          "bytes; truncated or not safetensors?)",
                          path, (unsigned long long)hlen, LA_ST_MAX_HEADER_BYTES, m->size - 8,
                          m->size);
    /* Parse a NUL-terminated heap copy: cJSON never sees the mapping, and sanitizers
     * see any read past the header. */
    char *text = malloc(hlen + 1);
    if (!text) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    memcpy(text, m->data + 8, hlen);
    text[hlen] = '\0';
    la_status s = LA_OK;
    cJSON *root = NULL;
    if (text[0] != '{') {
        s = la_err_set(err, LA_ERR_FORMAT, "%s: header does not start with '{'", path);
        goto done;
    }
    const char *end = NULL;
    root = cJSON_ParseWithLengthOpts(text, hlen, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        s = la_err_set(err, LA_ERR_FORMAT, "%s: header is not valid JSON (near byte %ld)", path,
                       at);
        goto done;
    }
    for (const char *p = end; p < text + hlen; p++)
        if (*p != ' ' && *p != '\n' && *p != '\r' && *p != '\t') {
            s = la_err_set(err, LA_ERR_FORMAT,
                           "%s: header has bytes after its JSON object (at byte %ld)", path,
                           (long)(p - text));
            goto done;
        }
    if (!cJSON_IsObject(root)) {
        s = la_err_set(err, LA_ERR_FORMAT, "%s: header is not a JSON object", path);
        goto done;
    }
    const uint8_t *data = m->data + 8 + hlen;
    uint64_t data_len = m->size - 8 - hlen;
    int64_t first = f->n_tensors;
    for (const cJSON *e = root->child; e; e = e->next) {
        const char *name = e->string ? e->string : "";
        if (strcmp(name, "__metadata__") == 0) continue;
        la_st_tensor *t = NULL;
        s = add_tensor(f, &t, err);
        if (s != LA_OK) goto done;
        s = parse_entry(e, path, name, data, data_len, t, err);
        if (s != LA_OK) goto done;
        t->file_id = file_id;
        t->name = strdup(name);
        if (!t->name) {
            s = la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
            goto done;
        }
        f->n_tensors++;
    }
    s = check_overlap(f, first, path, err);
done:
    cJSON_Delete(root);
    free(text);
    return s;
}

/* ---- opening a checkpoint ----------------------------------------------------------- */

/* Register shard `name` (relative to dir) unless already known; *id is its index. */
static la_status add_shard(la_st_file *f, const char *dir, const char *name, int32_t *id,
                           la_err *err) {
    char *path = la_path_join(dir, name);
    if (!path) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    for (int32_t i = 0; i < f->n_shards; i++)
        if (strcmp(f->shards[i].path, path) == 0) {
            free(path);
            *id = i;
            return LA_OK;
        }
    la_st_shard *sh = realloc(f->shards, (size_t)(f->n_shards + 1) * sizeof *sh);
    if (!sh) {
        free(path);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    }
    f->shards = sh;
    f->shards[f->n_shards] = (la_st_shard){.path = path};
    *id = f->n_shards++;
    return LA_OK;
}

static bool shard_name_ok(const char *name) {
    if (!name[0] || name[0] == '/') return false;
    for (const char *p = name; *p;) {
        const char *slash = strchr(p, '/');
        size_t len = slash ? (size_t)(slash - p) : strlen(p);
        if (len == 0 || (len == 2 && p[0] == '.' && p[1] == '.')) return false;
        if (!slash) break;
        p = slash + 1;
    }
    return true;
}

/* Read the index: register its shards in order of first mention and return the
 * weight_map (inside *root, which the caller deletes). */
static la_status open_index(la_st_file *f, const char *dir, cJSON **root, const cJSON **map,
                            la_err *err) {
    const char *ipath = f->source_path;
    LA_TRY(la_json_load_file(ipath, root, err));
    const cJSON *wm = cJSON_GetObjectItemCaseSensitive(*root, "weight_map");
    if (!cJSON_IsObject(*root) || !cJSON_IsObject(wm))
        return la_err_set(err, LA_ERR_FORMAT, "%s: missing weight_map object", ipath);
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !shard_name_ok(e->valuestring))
            return la_err_set(err, LA_ERR_FORMAT,
                              "%s: weight_map[%s] is not a relative shard file name", ipath,
                              e->string ? e->string : "");
        int32_t id;
        LA_TRY(add_shard(f, dir, e->valuestring, &id, err));
    }
    if (f->n_shards == 0)
        return la_err_set(err, LA_ERR_FORMAT, "%s: weight_map is empty", ipath);
    *map = wm;
    return LA_OK;
}

static la_status open_all(la_st_file *f, const char *dir, la_err *err) {
    char *ipath = la_path_join(dir, "model.safetensors.index.json");
    if (!ipath) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    cJSON *index = NULL;
    const cJSON *map = NULL;
    la_status s = LA_OK;
    if (la_file_exists(ipath)) {
        f->source_path = ipath;
        s = open_index(f, dir, &index, &map, err);
        if (s != LA_OK) goto done;
    } else {
        free(ipath);
        int32_t id;
        f->source_path = la_path_join(dir, "model.safetensors");
        if (!f->source_path) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
        LA_TRY(add_shard(f, dir, "model.safetensors", &id, err));
    }

    for (int32_t i = 0; i < f->n_shards; i++) {
        s = la_mmap_open(&f->shards[i].map, f->shards[i].path, err);
        if (s != LA_OK) {
            if (index) la_err_prefix(err, "%s names a shard that cannot be opened", f->source_path);
            goto done;
        }
        s = parse_shard(f, i, err);
        if (s != LA_OK) goto done;
    }

    if (f->n_tensors > 1) qsort(f->tensors, (size_t)f->n_tensors, sizeof *f->tensors, cmp_by_name);
    for (int64_t i = 1; i < f->n_tensors; i++)
        if (strcmp(f->tensors[i - 1].name, f->tensors[i].name) == 0) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s appears twice (in %s and %s)",
                           f->source_path, f->tensors[i].name,
                           f->shards[f->tensors[i - 1].file_id].path,
                           f->shards[f->tensors[i].file_id].path);
            goto done;
        }

    for (const cJSON *e = map ? map->child : NULL; e; e = e->next) {
        const la_st_tensor *t = la_st_find(f, e->string);
        int32_t id;
        s = add_shard(f, dir, e->valuestring, &id, err); /* finds, never adds */
        if (s != LA_OK) goto done;
        if (!t || t->file_id != id) {
            s = la_err_set(err, LA_ERR_FORMAT, "%s: tensor %s is mapped to %s, which does not hold it",
                           f->source_path, e->string, e->valuestring);
            goto done;
        }
    }
done:
    cJSON_Delete(index);
    return s;
}

la_status la_st_open(const char *dir, la_st_file **out, la_err *err) {
    la_st_file *f = calloc(1, sizeof *f);
    if (!f) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", dir);
    la_status s = open_all(f, dir, err);
    if (s != LA_OK) {
        la_st_close(f);
        return s;
    }
    *out = f;
    return LA_OK;
}

void la_st_close(la_st_file *f) {
    if (!f) return;
    for (int32_t i = 0; i < f->n_shards; i++) {
        la_mmap_close(&f->shards[i].map);
        free(f->shards[i].path);
    }
    /* Tensors past n_tensors were never completed; their names are NULL or freed here. */
    for (int64_t i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    free(f->shards);
    free(f->source_path);
    free(f);
}

/* ---- lookup ------------------------------------------------------------------------- */

const la_st_tensor *la_st_find(const la_st_file *f, const char *name) {
    int64_t lo = 0, hi = f->n_tensors;
    while (lo < hi) {
        int64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(f->tensors[mid].name, name);
        if (c == 0) return &f->tensors[mid];
        if (c < 0) lo = mid + 1;
        else hi = mid;
    }
    return NULL;
}

int64_t la_st_count(const la_st_file *f) { return f->n_tensors; }

const la_st_tensor *la_st_get(const la_st_file *f, int64_t i) {
    if (i < 0 || i >= f->n_tensors) return NULL;
    return &f->tensors[i];
}

int32_t la_st_file_count(const la_st_file *f) { return f->n_shards; }

const char *la_st_file_path(const la_st_file *f, int32_t file_id) {
    if (file_id < 0 || file_id >= f->n_shards) return "(no such shard)";
    return f->shards[file_id].path;
}

const char *la_st_source_path(const la_st_file *f) { return f->source_path; }

/* ---- writing ------------------------------------------------------------------------ */

#define LA_ST_WRITE_CHUNK_BYTES ((size_t)16 << 20)

static la_status tensor_bytes(const la_st_write_tensor *t, uint64_t *out, const char *path,
                              la_err *err) {
    if (!t->name || strcmp(t->name, "__metadata__") == 0)
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s: a tensor has no usable name", path);
    if ((unsigned)t->dtype >= LA_DTYPE_COUNT)
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s: bad dtype %d", path, t->name,
                          (int)t->dtype);
    if (t->n_dims < 0 || t->n_dims > LA_MAX_DIMS)
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s: n_dims=%d not in 0..%d", path,
                          t->name, t->n_dims, LA_MAX_DIMS);
    uint64_t n = la_dtype_size(t->dtype);
    for (int d = 0; d < t->n_dims; d++) {
        if (t->shape[d] < 0)
            return la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s: shape[%d]=%lld < 0", path,
                              t->name, d, (long long)t->shape[d]);
        if (__builtin_mul_overflow(n, (uint64_t)t->shape[d], &n) || n > (1ull << 52))
            return la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s: byte size overflows",
                              path, t->name);
    }
    *out = n;
    return LA_OK;
}

/* Header JSON, padded with spaces to a multiple of 8 bytes. */
static la_status build_header(const char *path, const la_st_write_tensor *ts, int64_t n,
                              const uint64_t *sizes, char **out, size_t *out_len, la_err *err) {
    cJSON *root = cJSON_CreateObject();
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    bool ok = root && meta && cJSON_AddStringToObject(meta, "format", "pt");
    uint64_t off = 0;
    for (int64_t i = 0; ok && i < n; i++) {
        cJSON *e = cJSON_AddObjectToObject(root, ts[i].name);
        cJSON *shape = e ? cJSON_AddArrayToObject(e, "shape") : NULL;
        cJSON *offs = NULL;
        ok = e && cJSON_AddStringToObject(e, "dtype", la_dtype_name(ts[i].dtype)) && shape;
        for (int d = 0; ok && d < ts[i].n_dims; d++)
            ok = cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)ts[i].shape[d]));
        if (ok) offs = cJSON_AddArrayToObject(e, "data_offsets");
        ok = ok && offs && cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off)) &&
             cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + sizes[i])));
        off += sizes[i];
    }
    char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    if (!text) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    size_t len = strlen(text), padded = (len + 7) / 8 * 8;
    char *buf = malloc(padded);
    if (!buf) {
        free(text);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    memcpy(buf, text, len);
    memset(buf + len, ' ', padded - len);
    free(text);
    *out = buf;
    *out_len = padded;
    return LA_OK;
}

la_status la_st_write_stream(const char *path, const la_st_write_tensor *tensors, int64_t n,
                             la_st_fill_fn fill, void *user, la_err *err) {
    if (n < 0 || (n > 0 && !tensors))
        return la_err_set(err, LA_ERR_INVALID_ARG, "%s: bad tensor list", path);
    uint64_t *sizes = calloc((size_t)n + 1, sizeof *sizes);
    if (!sizes) return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    la_status s = LA_OK;
    char *header = NULL, *tmp = NULL, *buf = NULL;
    FILE *fp = NULL;
    size_t chunk = 0;
    for (int64_t i = 0; i < n && s == LA_OK; i++) {
        s = tensor_bytes(&tensors[i], &sizes[i], path, err);
        for (int64_t j = 0; j < i && s == LA_OK; j++)
            if (strcmp(tensors[i].name, tensors[j].name) == 0)
                s = la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s given twice", path,
                               tensors[i].name);
        if (sizes[i] > chunk) chunk = sizes[i];
    }
    if (s != LA_OK) goto done;
    if (chunk > LA_ST_WRITE_CHUNK_BYTES) chunk = LA_ST_WRITE_CHUNK_BYTES;
    size_t hlen = 0;
    s = build_header(path, tensors, n, sizes, &header, &hlen, err);
    if (s != LA_OK) goto done;

    size_t plen = strlen(path);
    tmp = malloc(plen + 32);
    buf = malloc(chunk ? chunk : 1);
    if (!tmp || !buf) {
        s = la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
        goto done;
    }
    snprintf(tmp, plen + 32, "%s.tmp.%ld", path, (long)getpid());
    fp = fopen(tmp, "wb");
    if (!fp) {
        s = la_err_set(err, LA_ERR_IO, "%s: %s", tmp, strerror(errno));
        goto done;
    }
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)hlen >> (8 * i));
    bool ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(header, 1, hlen, fp) == hlen;
    for (int64_t i = 0; ok && i < n; i++) {
        for (uint64_t o = 0; ok && o < sizes[i]; o += chunk) {
            size_t m = sizes[i] - o < chunk ? (size_t)(sizes[i] - o) : chunk;
            s = fill(user, i, buf, (size_t)o, m, err);
            if (s != LA_OK) goto done;
            ok = fwrite(buf, 1, m, fp) == m;
        }
    }
    if (!ok) {
        s = la_err_set(err, LA_ERR_IO, "%s: write failed: %s", tmp, strerror(errno));
        goto done;
    }
    int rc = fclose(fp);
    fp = NULL;
    if (rc != 0) {
        s = la_err_set(err, LA_ERR_IO, "%s: close failed: %s", tmp, strerror(errno));
        goto done;
    }
    if (rename(tmp, path) != 0) {
        s = la_err_set(err, LA_ERR_IO, "%s: rename to %s failed: %s", tmp, path, strerror(errno));
        goto done;
    }
done:
    if (fp) fclose(fp);
    if (s != LA_OK && tmp) unlink(tmp);
    free(buf);
    free(tmp);
    free(header);
    free(sizes);
    return s;
}

static la_status fill_from_data(void *user, int64_t tensor_id, void *buf, size_t offset_bytes,
                                size_t n_bytes, la_err *err) {
    const la_st_write_tensor *t = (const la_st_write_tensor *)user + tensor_id;
    memcpy(buf, (const uint8_t *)t->data + offset_bytes, n_bytes);
    return LA_OK;
}

la_status la_st_write(const char *path, const la_st_write_tensor *tensors, int64_t n,
                      la_err *err) {
    for (int64_t i = 0; i < n && tensors; i++) {
        uint64_t b = 0;
        LA_TRY(tensor_bytes(&tensors[i], &b, path, err));
        if (b > 0 && !tensors[i].data)
            return la_err_set(err, LA_ERR_INVALID_ARG, "%s: tensor %s has no data", path,
                              tensors[i].name);
    }
    return la_st_write_stream(path, tensors, n, fill_from_data, (void *)tensors, err);
}
