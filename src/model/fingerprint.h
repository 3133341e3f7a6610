/* The model fingerprint: what names a checkpoint's KV in the KV store (DESIGN.md §9), so a
 * record written under one model is never used under another.
 *
 *   fingerprint = H_key(TAG "lazyattn-model-fingerprint-1", config.json bytes,
 *                       for each weight file in order: its XXH3-128 under key)
 *
 * where H_key is XXH3-128 keyed with the deployment key (base/hash.h) and a weight file's
 * hash covers every byte of it (safetensors header and tensors). Hashing a 16 GB
 * checkpoint takes seconds, so each file's hash is cached in cache_path, one line per
 * file: "1 <key id> <size> <mtime sec>.<nsec> <hash hex> <path>", valid while the file's
 * path, size and modification time (and the key) are the same.
 */
#ifndef LA_MODEL_FINGERPRINT_H
#define LA_MODEL_FINGERPRINT_H

#include "base/hash.h"
#include "lazyattn/status.h"

/* Fingerprint of the checkpoint in model_dir (config.json) with weight files
 * weight_paths[0:n_weights] (la_st_file_path of its shards), keyed with key.
 * cache_path: the cache file (NULL: none); an unreadable or damaged cache is ignored and
 * rewritten, a cache that cannot be written is not an error.
 * Errors: LA_ERR_IO (config.json or a weight file unreadable), LA_ERR_NO_MEMORY. */
la_status la_model_fingerprint(const char *model_dir, const char *const *weight_paths, int32_t n_weights,
                               const la_hash_key *key, const char *cache_path, la_hash128 *out, la_err *err);

/* Fingerprint of random weights of a named shape ("llama3-8b"): they are a deterministic
 * function of the shape, so the name is the checkpoint. */
la_hash128 la_model_fingerprint_random(const char *shape_name, const la_hash_key *key);

#endif
