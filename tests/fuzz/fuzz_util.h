/* Helpers of the libFuzzer harnesses (tests/fuzz, README "Fuzzing"): an input as a file in a
 * per-process scratch directory, for the parsers that read files (config.json,
 * tokenizer.json, model.safetensors). */
#ifndef LA_FUZZ_UTIL_H
#define LA_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A directory of this process's own (/dev/shm when it exists), made once. */
static inline const char *fuzz_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/lazyattn-fuzz-%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp",
                 (int)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", dir);
        if (system(cmd) != 0) abort(); /* a harness, not the library */
    }
    return dir;
}

/* data[0:n] as dir/name. */
static inline void fuzz_write(const char *name, const uint8_t *data, size_t n) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
}

#endif
