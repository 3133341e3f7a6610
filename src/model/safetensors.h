/* Safetensors checkpoints (https://github.com/huggingface/safetensors, format spec in
 * its README): an 8-byte little-endian header length N, N bytes of JSON mapping tensor
 * name -> {dtype, shape, data_offsets:[begin,end]} (offsets relative to the byte after
 * the header), then the data. Single file (model.safetensors) or sharded
 * (model.safetensors.index.json with a weight_map name -> shard file). Files are
 * memory-mapped; nothing is copied here. */
#ifndef LA_MODEL_SAFETENSORS_H
#define LA_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "lazyattn/status.h"

#define LA_MAX_DIMS 4

typedef struct la_st_tensor {
    char *name;
    la_dtype dtype;
    int32_t n_dims;
    int64_t shape[LA_MAX_DIMS];
    const void *data; /* inside the shard's mmap; valid while the la_st_file lives */
    size_t n_bytes;
    int32_t file_id;  /* index of the shard holding it */
} la_st_tensor;

typedef struct la_st_file la_st_file; /* all shards of one checkpoint */

/* Open the checkpoint in dir: model.safetensors.index.json if present, else
 * model.safetensors. Validates every header field: JSON well-formed; dtype one of
 * F32/F16/BF16 (others: LA_ERR_UNSUPPORTED naming tensor and dtype); data_offsets
 * inside the file, non-overlapping; product(shape) x dtype size == byte length.
 * Every failure names the file and the tensor. Caller owns *out; free with
 * la_st_close(). Errors: LA_ERR_IO, LA_ERR_FORMAT, LA_ERR_UNSUPPORTED. */
la_status la_st_open(const char *dir, la_st_file **out, la_err *err);
void la_st_close(la_st_file *f);

/* Look up a tensor by name. Returns NULL when absent. Valid while f lives. */
const la_st_tensor *la_st_find(const la_st_file *f, const char *name);
int64_t la_st_count(const la_st_file *f);
const la_st_tensor *la_st_get(const la_st_file *f, int64_t i);
/* Path of shard file_id (for messages). */
const char *la_st_file_path(const la_st_file *f, int32_t file_id);

/* Write a single-file safetensors checkpoint (used by tools and tests to make
 * checkpoints): n tensors with names, dtypes, shapes and data. Header keys are written
 * in the given order with an optional __metadata__ {"format":"pt"}.
 * Errors: LA_ERR_IO, LA_ERR_INVALID_ARG (bad dims). */
typedef struct la_st_write_tensor {
    const char *name;
    la_dtype dtype;
    int32_t n_dims;
    int64_t shape[LA_MAX_DIMS];
    const void *data; /* product(shape) * dtype size bytes */
} la_st_write_tensor;
la_status la_st_write(const char *path, const la_st_write_tensor *tensors, int64_t n,
                      la_err *err);

#endif
