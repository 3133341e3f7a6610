/* Whole-file reads and read-only memory maps. */
#ifndef LA_BASE_FILE_H
#define LA_BASE_FILE_H

#include <stddef.h>
#include <stdint.h>
#include "lazyattn/status.h"

/* Read a whole file into a NUL-terminated heap buffer.
 *   *out_data  caller owns it; free with free()
 *   *out_len   bytes read (excluding the added NUL); may be NULL
 * Errors: LA_ERR_IO naming the path and errno text; outputs untouched. */
la_status la_file_read(const char *path, char **out_data, size_t *out_len, la_err *err);

/* A read-only private memory map of a whole file. */
typedef struct la_mmap {
    const uint8_t *data; /* NULL for an empty file */
    size_t size;         /* bytes */
} la_mmap;

/* Map `path` read-only. Errors: LA_ERR_IO (missing, unreadable, mmap failed); *m untouched. */
la_status la_mmap_open(la_mmap *m, const char *path, la_err *err);
/* Unmap; la_mmap_close on a zeroed struct does nothing. */
void la_mmap_close(la_mmap *m);

/* 1 if path names an existing regular file, else 0. */
int la_file_exists(const char *path);

/* Join dir and name with one '/'. Returns a heap string (caller frees) or NULL on OOM. */
char *la_path_join(const char *dir, const char *name);

#endif
