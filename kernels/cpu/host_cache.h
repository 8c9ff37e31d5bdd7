/* The CPU backend's caching allocator (see host_cache.c): 64-byte aligned
 * blocks, kept for reuse when freed. */
#ifndef MX_KERNELS_CPU_HOST_CACHE_H
#define MX_KERNELS_CPU_HOST_CACHE_H

#include <stddef.h>

/* A block of at least `bytes` bytes, or NULL when the system has none. */
void *mx__host_cache_alloc(size_t bytes);
/* Takes back a block from mx__host_cache_alloc; bytes as asked for. */
void mx__host_cache_free(void *ptr, size_t bytes);
/* Gives every cached block back to the system. */
void mx__host_cache_empty(void);
/* Bytes held in the cache now (not in use by tensors). */
size_t mx__host_cache_bytes(void);

#endif
