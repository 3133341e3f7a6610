#include "kv/store/secret.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/err.h"
#include "base/file.h"

#define MIN_SECRET_BYTES 16

static la_status create_secret(const char *path, la_err *err) {
    unsigned char raw[32];
    size_t got = 0;
    while (got < sizeof raw) {
        ssize_t n = getrandom(raw + got, sizeof raw - got, 0);
        if (n <= 0) return la_err_set(err, LA_ERR_IO, "%s: getrandom failed", path);
        got += (size_t)n;
    }
    char text[2 * sizeof raw + 2];
    for (size_t i = 0; i < sizeof raw; i++) snprintf(text + 2 * i, 3, "%02x", raw[i]);
    text[2 * sizeof raw] = '\n';
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    if (fd < 0) {
        if (errno == EEXIST) return LA_OK; /* another replica made it first: read theirs */
        return la_err_set(err, LA_ERR_IO, "%s: cannot create the KV secret: %s", path, strerror(errno));
    }
    size_t n = 2 * sizeof raw + 1;
    bool ok = write(fd, text, n) == (ssize_t)n;
    if (close(fd) != 0) ok = false;
    if (!ok) {
        unlink(path);
        return la_err_set(err, LA_ERR_IO, "%s: cannot write the KV secret", path);
    }
    return LA_OK;
}

la_status la_kv_secret_load(const char *path, bool create, la_hash_key *key, la_err *err) {
    if (!la_file_exists(path)) {
        if (!create) return la_err_set(err, LA_ERR_NOT_FOUND, "%s: no such KV secret file", path);
        LA_TRY(create_secret(path, err));
    }
    char *data = NULL;
    size_t len = 0;
    la_status s = la_file_read(path, &data, &len, err);
    if (s != LA_OK) return la_err_prefix(err, "KV secret");
    size_t a = 0, b = len;
    while (a < b && isspace((unsigned char)data[a])) a++;
    while (b > a && isspace((unsigned char)data[b - 1])) b--;
    if (b - a < MIN_SECRET_BYTES) {
        free(data);
        return la_err_set(err, LA_ERR_FORMAT, "%s: a KV secret needs at least %d bytes, it has %zu", path,
                          MIN_SECRET_BYTES, b - a);
    }
    la_hash_key_derive(key, data + a, b - a);
    memset(data, 0, len);
    free(data);
    return LA_OK;
}
