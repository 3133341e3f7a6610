/* The deployment secret (DESIGN.md §9): a file the replicas of one deployment share,
 * from which every process derives the same hash key, so block hashes and record keys
 * agree across processes and restarts, and nobody without the file can predict or forge
 * them. */
#ifndef LA_KV_STORE_SECRET_H
#define LA_KV_STORE_SECRET_H

#include <stdbool.h>

#include "base/hash.h"
#include "lazyattn/status.h"

/* The key of the secret file at path. A missing file is created (mode 0600, 64 random hex
 * digits) when create is true. The secret is the file's content without surrounding
 * white space, at least 16 bytes.
 * Errors: LA_ERR_IO (unreadable, or cannot be created), LA_ERR_FORMAT (shorter than 16
 * bytes), LA_ERR_NOT_FOUND (missing and create false). *key is written only on success. */
la_status la_kv_secret_load(const char *path, bool create, la_hash_key *key, la_err *err);

#endif
