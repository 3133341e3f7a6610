/* RAG question sets: loading the known formats, normalising and matching answers (rag_dataset.h). */
#include "bench/rag_dataset.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "base/err.h"
#include "base/file.h"
#include "base/json.h"

static char *dup_s(const char *s) {
    size_t n = strlen(s ? s : "");
    char *d = malloc(n + 1);
    if (d) memcpy(d, s ? s : "", n + 1);
    return d;
}

static const char *str_of(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

static void free_question(la_rag_question *q) {
    free(q->id);
    free(q->question);
    for (int32_t i = 0; i < q->n_docs; i++) {
        free(q->docs[i].title);
        free(q->docs[i].text);
    }
    free(q->docs);
    for (int32_t i = 0; i < q->n_answers; i++) free(q->answers[i]);
    free(q->answers);
    free(q->type);
}

void la_rag_dataset_free(la_rag_dataset *d) {
    for (int32_t i = 0; i < d->n; i++) free_question(&d->q[i]);
    free(d->q);
    memset(d, 0, sizeof *d);
}

static void add_answer(la_rag_question *q, const char *a) {
    if (!a) return;
    char **p = realloc(q->answers, sizeof(char *) * (size_t)(q->n_answers + 1));
    if (!p) return;
    q->answers = p;
    q->answers[q->n_answers++] = dup_s(a);
}

static void add_doc(la_rag_question *q, const char *title, const char *text, int32_t max_docs) {
    if (max_docs > 0 && q->n_docs >= max_docs) return;
    if (!text || !text[0]) {
        q->n_empty_docs++;
        return;
    }
    la_rag_doc *p = realloc(q->docs, sizeof(la_rag_doc) * (size_t)(q->n_docs + 1));
    if (!p) return;
    q->docs = p;
    q->docs[q->n_docs].title = dup_s(title);
    q->docs[q->n_docs].text = dup_s(text);
    q->n_docs++;
}

static void add_string_answers(la_rag_question *q, const cJSON *arr) {
    const cJSON *a;
    cJSON_ArrayForEach(a, arr) {
        if (cJSON_IsString(a)) add_answer(q, a->valuestring);
        else if (cJSON_IsArray(a)) add_string_answers(q, a); /* CacheBlend: list of lists */
    }
}

/* Fill q from one record of the detected format. Returns 0, or -1 when fields are missing. */
static int parse_record(const cJSON *o, const char *format, int32_t max_docs, la_rag_question *q) {
    memset(q, 0, sizeof *q);
    const cJSON *x;
    if (!strcmp(format, "demo")) {
        q->question = dup_s(str_of(o, "question"));
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(o, "documents"))
            add_doc(q, str_of(x, "title"), str_of(x, "text"), max_docs);
        add_string_answers(q, cJSON_GetObjectItem(o, "answers"));
        const cJSON *h = cJSON_GetObjectItem(o, "hops");
        q->hops = cJSON_IsNumber(h) ? h->valueint : 0;
        q->id = dup_s(str_of(o, "id"));
        q->type = dup_s(str_of(o, "type"));
    } else if (!strcmp(format, "hotpotqa")) {
        q->question = dup_s(str_of(o, "question_text"));
        q->id = dup_s(str_of(o, "question_id"));
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(o, "contexts"))
            add_doc(q, str_of(x, "title"), str_of(x, "paragraph_text"), max_docs);
        const cJSON *ao = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "answers_objects"), 0);
        add_string_answers(q, cJSON_GetObjectItem(ao, "spans"));
        q->type = dup_s("");
    } else if (!strcmp(format, "2wiki-flashrag")) {
        q->question = dup_s(str_of(o, "question"));
        q->id = dup_s(str_of(o, "id"));
        add_string_answers(q, cJSON_GetObjectItem(o, "golden_answers"));
        const cJSON *meta = cJSON_GetObjectItem(o, "metadata");
        const cJSON *ctx = cJSON_GetObjectItem(meta, "context");
        const cJSON *titles = cJSON_GetObjectItem(ctx, "title"), *content = cJSON_GetObjectItem(ctx, "content");
        int32_t n = cJSON_GetArraySize(titles);
        for (int32_t i = 0; i < n; i++) {
            const cJSON *sents = cJSON_GetArrayItem(content, i);
            size_t len = 0;
            cJSON_ArrayForEach(x, sents) if (cJSON_IsString(x)) len += strlen(x->valuestring) + 1;
            char *text = calloc(len + 1, 1);
            if (!text) continue;
            cJSON_ArrayForEach(x, sents) if (cJSON_IsString(x)) {
                if (text[0]) strcat(text, " ");
                strcat(text, x->valuestring);
            }
            const cJSON *t = cJSON_GetArrayItem(titles, i);
            add_doc(q, cJSON_IsString(t) ? t->valuestring : "", text, max_docs);
            free(text);
        }
        q->type = dup_s(str_of(meta, "type"));
    } else if (!strcmp(format, "cacheblend") || !strcmp(format, "nq")) {
        q->question = dup_s(str_of(o, "question"));
        q->id = dup_s("");
        add_string_answers(q, cJSON_GetObjectItem(o, "answers"));
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(o, "ctxs"))
            add_doc(q, str_of(x, "title"), str_of(x, "text"), max_docs);
        q->type = dup_s("");
    } else if (!strcmp(format, "triviaqa")) {
        q->question = dup_s(str_of(o, "question"));
        q->id = dup_s(str_of(o, "question_id"));
        add_string_answers(q, cJSON_GetObjectItem(o, "ground_truth"));
        cJSON_ArrayForEach(x, cJSON_GetObjectItem(o, "context"))
            add_doc(q, str_of(x, "title"), str_of(x, "text"), max_docs);
        q->type = dup_s("");
    }
    if (!q->question || !q->question[0] || q->n_answers == 0) {
        free_question(q);
        return -1;
    }
    return 0;
}

static const char *detect(const cJSON *o) {
    if (cJSON_GetObjectItem(o, "documents")) return "demo";
    if (cJSON_GetObjectItem(o, "question_text")) return "hotpotqa";
    if (cJSON_GetObjectItem(o, "golden_answers")) return "2wiki-flashrag";
    if (cJSON_GetObjectItem(o, "ground_truth")) return "triviaqa";
    if (cJSON_GetObjectItem(o, "nq_annotated_gold")) return "nq";
    if (cJSON_GetObjectItem(o, "ctxs")) return "cacheblend";
    return NULL;
}

static la_status push_record(la_rag_dataset *d, const cJSON *o, const char *path, long line,
                             int32_t max_docs, la_err *err) {
    const char *fmt = detect(o);
    if (!fmt) return la_err_set(err, LA_ERR_FORMAT, "%s:%ld: unknown RAG record format", path, line);
    if (!d->format) d->format = fmt;
    la_rag_question q;
    if (parse_record(o, d->format, max_docs, &q) != 0)
        return la_err_set(err, LA_ERR_FORMAT, "%s:%ld: record lacks a question or answers", path, line);
    la_rag_question *p = realloc(d->q, sizeof(la_rag_question) * (size_t)(d->n + 1));
    if (!p) {
        free_question(&q);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    d->q = p;
    d->n_empty_docs += q.n_empty_docs;
    d->q[d->n++] = q;
    return LA_OK;
}

/* A gzip file's whole content through zlib (gzread also reads a file that is not
 * compressed, and concatenated members, as gzip -dc does). *text: caller frees. */
static la_status read_gz(const char *path, char **text, size_t *len, la_err *err) {
    gzFile f = gzopen(path, "rb");
    if (!f) return la_err_set(err, LA_ERR_IO, "%s: %s", path, errno ? strerror(errno) : "cannot open");
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap + 1);
    la_status s = buf ? LA_OK : la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    while (s == LA_OK) {
        if (n == cap) {
            char *p = cap < ((size_t)1 << 40) ? realloc(buf, 2 * cap + 1) : NULL;
            if (!p) {
                s = la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
                break;
            }
            buf = p;
            cap *= 2;
        }
        size_t want = cap - n > (size_t)1 << 30 ? (size_t)1 << 30 : cap - n;
        int k = gzread(f, buf + n, (unsigned)want);
        if (k < 0) {
            int zerr = 0;
            const char *msg = gzerror(f, &zerr);
            s = la_err_set(err, LA_ERR_FORMAT, "%s: not a valid gzip file (%s)", path, msg ? msg : "zlib error");
            break;
        }
        if (k == 0) break;
        n += (size_t)k;
    }
    gzclose(f);
    if (s != LA_OK) {
        free(buf);
        return s;
    }
    buf[n] = '\0';
    *text = buf;
    *len = n;
    return LA_OK;
}

la_status la_rag_dataset_load(const char *path, int32_t max_q, int32_t max_docs,
                              la_rag_dataset *out, la_err *err) {
    char *text = NULL;
    size_t len = 0;
    size_t plen = strlen(path);
    if (plen > 3 && !strcmp(path + plen - 3, ".gz")) {
        LA_TRY(read_gz(path, &text, &len, err));    } else {
        LA_TRY(la_file_read(path, &text, &len, err));
    }
    la_rag_dataset d = {0};
    la_status s = LA_OK;
    size_t i = 0;
    while (i < len && isspace((unsigned char)text[i])) i++;
    if (i < len && text[i] == '[') { /* one JSON array (CacheBlend) */
        cJSON *root = NULL;
        s = la_json_parse(text, len, path, &root, err);
        const cJSON *o;
        long k = 0;
        if (s == LA_OK)
            cJSON_ArrayForEach(o, root) {
                if (max_q > 0 && d.n >= max_q) break;
                if ((s = push_record(&d, o, path, ++k, max_docs, err)) != LA_OK) break;
            }
        cJSON_Delete(root);
    } else { /* JSON lines */
        long line = 0;
        char *p = text;
        while (s == LA_OK && p && *p && !(max_q > 0 && d.n >= max_q)) {
            char *nl = strchr(p, '\n');
            size_t n = nl ? (size_t)(nl - p) : strlen(p);
            line++;
            if (n > 0 && !(n == 1 && p[0] == '\r')) {
                cJSON *o = cJSON_ParseWithLength(p, n);
                if (!o) s = la_err_set(err, LA_ERR_FORMAT, "%s:%ld: invalid JSON", path, line);
                else s = push_record(&d, o, path, line, max_docs, err);
                cJSON_Delete(o);
            }
            p = nl ? nl + 1 : NULL;
        }
    }
    free(text);
    if (s == LA_OK && d.n == 0) s = la_err_set(err, LA_ERR_FORMAT, "%s: no questions", path);
    if (s != LA_OK) {
        la_rag_dataset_free(&d);
        return s;
    }
    *out = d;
    return LA_OK;
}

char *la_rag_normalize(const char *s) {
    size_t n = strlen(s);
    char *tmp = malloc(n + 1), *out = malloc(n + 2);
    if (!tmp || !out) {
        free(tmp);
        free(out);
        return NULL;
    }
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 128 && ispunct(c)) continue;
        tmp[k++] = (char)(c < 128 ? tolower(c) : c);
    }
    tmp[k] = '\0';
    /* split on whitespace, drop articles, join with single spaces */
    size_t o = 0;
    char *save = NULL;
    for (char *w = strtok_r(tmp, " \t\r\n", &save); w; w = strtok_r(NULL, " \t\r\n", &save)) {
        if (!strcmp(w, "a") || !strcmp(w, "an") || !strcmp(w, "the")) continue;
        if (o) out[o++] = ' ';
        size_t wl = strlen(w);
        memcpy(out + o, w, wl);
        o += wl;
    }
    out[o] = '\0';
    free(tmp);
    return out;
}

int la_rag_answer_matches(const char *prediction, char *const *answers, int32_t n_answers) {
    char *p = la_rag_normalize(prediction);
    if (!p) return 0;
    int hit = 0;
    for (int32_t i = 0; i < n_answers && !hit; i++) {
        char *a = la_rag_normalize(answers[i]);
        if (a && a[0]) {
            /* containment on word boundaries */
            size_t al = strlen(a);
            for (const char *f = strstr(p, a); f && !hit; f = strstr(f + 1, a)) {
                bool left = f == p || f[-1] == ' ';
                bool right = f[al] == '\0' || f[al] == ' ';
                hit = left && right;
            }
        }
        free(a);
    }
    free(p);
    return hit;
}
