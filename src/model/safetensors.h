/* Safetensors checkpoints (https://github.com/huggingface/safetensors, format spec in
 * its README): an 8-byte little-endian header length N, N bytes of JSON mapping tensor
 * name -> {dtype, shape, data_offsets:[begin,end]} (offsets in bytes relative to the
 * byte after the header; "__metadata__" is a free string map), then the data. Single
 * file (model.safetensors) or sharded (model.safetensors.index.json with a weight_map
 * name -> shard file). Files are memory-mapped read-only; nothing is copied here. */
#ifndef LA_MODEL_SAFETENSORS_H
#define LA_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>
#include "base/dtype.h"
#include "lazyattn/status.h"

#define LA_MAX_DIMS 4
/* Largest header accepted, bytes (the reference implementation's limit). */
#define LA_ST_MAX_HEADER_BYTES (100u << 20)

typedef struct la_st_tensor {
    char *name;
    la_dtype dtype;
    int32_t n_dims;              /* 0 (a scalar) .. LA_MAX_DIMS */
    int64_t shape[LA_MAX_DIMS];  /* outermost first; unused dims 0 */
    const void *data;            /* inside the shard's mmap, row-major; valid while the
                                  * la_st_file lives. Aligned only as the writer padded
                                  * it (HF and la_st_write: 8 bytes) */
    size_t n_bytes;
    int32_t file_id;             /* index of the shard holding it */
} la_st_tensor;

typedef struct la_st_file la_st_file; /* all shards of one checkpoint */

/* Open the checkpoint in dir: model.safetensors.index.json if present, else
 * model.safetensors.
 *
 * Validates every header field: header length >= 2, inside the file and at most
 * LA_ST_MAX_HEADER_BYTES; header a JSON object starting with '{' followed only by
 * whitespace; each entry an object with dtype (string), shape (list of integers >= 0,
 * at most LA_MAX_DIMS) and data_offsets (two integers, begin <= end <= data bytes);
 * product(shape) x dtype size == end - begin; no two tensors overlapping; no name twice
 * (within or across shards). __metadata__ is ignored. In an index, weight_map must be
 * an object of shard file names (no absolute paths, no ".."), every shard must open,
 * and every mapped tensor must be in its shard.
 *
 * Errors, each naming the file and, where there is one, the tensor:
 *   LA_ERR_IO           no model.safetensors / index, or a shard the index names is
 *                       missing or unreadable
 *   LA_ERR_FORMAT       any malformed field above, truncated file, bad index
 *   LA_ERR_UNSUPPORTED  a valid safetensors dtype other than F32/F16/BF16 (e.g. I64),
 *                       or more than LA_MAX_DIMS dims
 *   LA_ERR_NO_MEMORY
 * Caller owns *out (untouched on error); free with la_st_close(). */
la_status la_st_open(const char *dir, la_st_file **out, la_err *err);
/* Unmap all shards and free. la_st_close(NULL) does nothing. */
void la_st_close(la_st_file *f);

/* Look up a tensor by name (binary search). Returns NULL when absent. Valid while f
 * lives. */
const la_st_tensor *la_st_find(const la_st_file *f, const char *name);
/* Tensors are indexed 0..la_st_count()-1 in ascending name order (strcmp). */
int64_t la_st_count(const la_st_file *f);
const la_st_tensor *la_st_get(const la_st_file *f, int64_t i);
/* Number of shard files (1 for a single model.safetensors). */
int32_t la_st_file_count(const la_st_file *f);
/* Path of shard file_id (for messages). */
const char *la_st_file_path(const la_st_file *f, int32_t file_id);
/* Path of what la_st_open opened: the index when sharded, else model.safetensors. */
const char *la_st_source_path(const la_st_file *f);

/* Write a single-file safetensors checkpoint (used by tools and tests to make
 * checkpoints): n tensors with names, dtypes, shapes and data. Header keys are written
 * in the given order after "__metadata__": {"format":"pt"}; tensor data follows in the
 * same order, packed; the header is padded with spaces to a multiple of 8 bytes so the
 * data starts 8-byte aligned (the spec allows trailing spaces). The file is written
 * under a temporary name and renamed into place, so path never holds half a file.
 * Errors: LA_ERR_IO (naming path), LA_ERR_INVALID_ARG (NULL or duplicate name,
 * "__metadata__" as a name, n_dims outside 0..LA_MAX_DIMS, negative dim, byte size
 * overflow, bad dtype, NULL data for a non-empty tensor), LA_ERR_NO_MEMORY. */
typedef struct la_st_write_tensor {
    const char *name;
    la_dtype dtype;
    int32_t n_dims;
    int64_t shape[LA_MAX_DIMS];
    const void *data; /* product(shape) * dtype size bytes */
} la_st_write_tensor;
la_status la_st_write(const char *path, const la_st_write_tensor *tensors, int64_t n,
                      la_err *err);

/* Produce bytes [offset_bytes, offset_bytes + n_bytes) of tensor tensor_id's data into
 * buf. Called in order, tensor by tensor, chunk by chunk (chunks of at most 16 MiB). */
typedef la_status (*la_st_fill_fn)(void *user, int64_t tensor_id, void *buf,
                                   size_t offset_bytes, size_t n_bytes, la_err *err);

/* As la_st_write, but the data comes from fill instead of tensors[i].data (ignored), so a
 * checkpoint larger than memory can be streamed to disk. A fill error is returned as is
 * and the partial file is removed. */
la_status la_st_write_stream(const char *path, const la_st_write_tensor *tensors, int64_t n,
                             la_st_fill_fn fill, void *user, la_err *err);

#endif
