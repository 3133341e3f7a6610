/* la_host_arena: fixed-size host blocks (one KV block's record payload each) for the host
 * tier and for records on their way to or from a lower tier (DESIGN.md §9, T1).
 *
 * Memory comes from the allocator the arena is given (the CUDA backend's pinned memory, so
 * copies to and from the GPU run at full PCIe speed on a copy stream; plain malloc on the
 * CPU backend) in chunks of chunk_blocks blocks, allocated when first needed and kept
 * until the arena is destroyed, so a block's address never changes.
 *
 * Not thread-safe: one thread (the engine thread) allocates and frees; other threads may
 * read and write the memory of blocks they were handed.
 */
#ifndef LA_KV_STORE_HOST_ARENA_H
#define LA_KV_STORE_HOST_ARENA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "lazyattn/status.h"

/* Host memory for the arena: alloc returns NULL on failure; free takes what alloc gave. */
typedef struct la_host_allocator {
    void *(*alloc)(void *user, size_t bytes);
    void (*free)(void *user, void *p);
    void *user;
} la_host_allocator;

typedef struct la_host_arena la_host_arena;

/* An arena of at most max_blocks blocks of block_bytes bytes (each 64-byte aligned when
 * the allocator's memory is). alloc NULL: malloc / free.
 * Errors: LA_ERR_INVALID_ARG (zero sizes), LA_ERR_NO_MEMORY. Caller owns *out; free with
 * la_host_arena_destroy(). */
la_status la_host_arena_create(size_t block_bytes, int64_t max_blocks, int64_t chunk_blocks,
                               const la_host_allocator *alloc, la_host_arena **out, la_err *err);
void la_host_arena_destroy(la_host_arena *a);

/* A free block's index, or -1 when all max_blocks are in use or a new chunk cannot be
 * allocated. */
int32_t la_host_arena_alloc(la_host_arena *a);
void la_host_arena_free(la_host_arena *a, int32_t block);
/* Address of block's block_bytes bytes (stable for the arena's life). */
void *la_host_arena_ptr(const la_host_arena *a, int32_t block);

/* Growth off the owning thread, for allocators that are slow (pinned memory: cudaHostAlloc
 * pins every page, about a quarter of a second per GiB). With async on, la_host_arena_alloc
 * never allocates a chunk (it returns -1 where it would): another thread allocates chunk i
 * (0 .. la_host_arena_chunk_count - 1, la_host_arena_chunk_bytes(i) bytes) with
 * la_host_arena_chunk_alloc, which touches only the allocator and the arena's fixed sizes
 * (thread-safe), and the owning thread hands chunks over in order with
 * la_host_arena_add_chunk (la_host_arena_chunks of them so far). */
void la_host_arena_set_async(la_host_arena *a, bool on);
int64_t la_host_arena_chunk_count(const la_host_arena *a);
size_t la_host_arena_chunk_bytes(const la_host_arena *a, int64_t i); /* 0 past the last */
int64_t la_host_arena_chunks(const la_host_arena *a);
int64_t la_host_arena_chunk_blocks(const la_host_arena *a); /* blocks a chunk holds (the last may hold fewer) */
void *la_host_arena_chunk_alloc(const la_host_arena *a, size_t bytes); /* NULL: out of memory */
void la_host_arena_add_chunk(la_host_arena *a, void *p);
/* Free a chunk la_host_arena_chunk_alloc made that will not be added. */
void la_host_arena_chunk_free(const la_host_arena *a, void *p);

size_t la_host_arena_block_bytes(const la_host_arena *a);
int64_t la_host_arena_capacity(const la_host_arena *a); /* max_blocks */
int64_t la_host_arena_in_use(const la_host_arena *a);
int64_t la_host_arena_allocated_bytes(const la_host_arena *a); /* chunks taken so far */

#endif
