#include "base/file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"

la_status la_file_read(const char *path, char **out_data, size_t *out_len, la_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap + 1);
    if (!buf) {
        fclose(f);
        return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
    }
    for (;;) {
        size_t n = fread(buf + len, 1, cap - len, f);
        len += n;
        if (len < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            fclose(f);
            return la_err_set(err, LA_ERR_NO_MEMORY, "%s: out of memory", path);
        }
        buf = nb;
    }
    int bad = ferror(f), e = errno;
    fclose(f);
    if (bad) {
        free(buf);
        return la_err_set(err, LA_ERR_IO, "%s: read error: %s", path, strerror(e));
    }
    buf[len] = '\0';
    *out_data = buf;
    if (out_len) *out_len = len;
    return LA_OK;
}

la_status la_mmap_open(la_mmap *m, const char *path, la_err *err) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return la_err_set(err, LA_ERR_IO, "%s: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return la_err_set(err, LA_ERR_IO, "%s: not a regular file", path);
    }
    const uint8_t *data = NULL;
    if (st.st_size > 0) {
        void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (p == MAP_FAILED) {
            int e = errno;
            close(fd);
            return la_err_set(err, LA_ERR_IO, "%s: mmap: %s", path, strerror(e));
        }
        data = p;
    }
    close(fd);
    m->data = data;
    m->size = (size_t)st.st_size;
    return LA_OK;
}

void la_mmap_close(la_mmap *m) {
    if (m && m->data) munmap((void *)m->data, m->size);
    if (m) {
        m->data = NULL;
        m->size = 0;
    }
}

int la_file_exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

char *la_path_join(const char *dir, const char *name) {
    size_t a = strlen(dir), b = strlen(name);
    char *s = malloc(a + b + 2);
    if (!s) return NULL;
    memcpy(s, dir, a);
    size_t n = a;
    if (a > 0 && dir[a - 1] != '/') s[n++] = '/';
    memcpy(s + n, name, b + 1);
    return s;
}
