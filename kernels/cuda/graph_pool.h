/* A CUDA graph's private memory pool: the bookkeeping (plain C, no CUDA), so
 * the CPU tests can run it over a fake device allocator.
 *
 * As PyTorch's graph pools: while a step is captured, every tensor
 * allocation comes from the pool, and a block freed during the capture is
 * reused by a later allocation of the same capture (the captured work runs
 * in one stream's order, so the reuse is safe in every replay). After the
 * capture the pool hands out nothing more: its blocks are the graph's, which
 * writes them at each replay, so a block freed by the user stays the pool's
 * until the pool is released. Memory that was allocated before the capture
 * and freed during it may still be read by the captured work, so it is held
 * too, and given back when the graph goes. The pool is released when its
 * graph is gone and none of its blocks is still in use. */
#ifndef MX_KERNELS_CUDA_GRAPH_POOL_H
#define MX_KERNELS_CUDA_GRAPH_POOL_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/base.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Where the pool's memory comes from and goes back to. */
typedef struct {
  void *ctx;
  /* a new block of bytes for the pool (the error set on failure) */
  mx_status (*alloc)(void *ctx, size_t bytes, void **out);
  /* a block of the pool's, given back when the pool is released */
  void (*free)(void *ctx, void *ptr);
  /* memory allocated outside the pool and freed during the capture, given
   * back with the graph */
  void (*free_held)(void *ctx, void *ptr, size_t bytes);
} mx__graph_pool_source;

typedef struct mx__graph_pool mx__graph_pool;

/* A pool taking its memory from source; NULL with the error set. */
mx__graph_pool *mx__graph_pool_new(const mx__graph_pool_source *source);
/* During the capture: a free block of at least bytes (the smallest that
 * fits), else a new one. */
mx_status mx__graph_pool_alloc(mx__graph_pool *p, size_t bytes, void **out);
/* Whether ptr is one of the pool's blocks in use; if so, it is now free. */
bool mx__graph_pool_free(mx__graph_pool *p, void *ptr);
/* During the capture: memory from outside the pool, freed by the step, kept
 * until the graph goes (false: out of memory, the error set). */
bool mx__graph_pool_hold(mx__graph_pool *p, void *ptr, size_t bytes);
/* The capture is over: the pool hands out no more blocks. */
void mx__graph_pool_seal(mx__graph_pool *p);
/* The graph is gone: the held memory goes back now, and the blocks once
 * none is in use. */
void mx__graph_pool_graph_gone(mx__graph_pool *p);
/* Whether the pool can be released (its graph is gone and no block is in
 * use); mx__graph_pool_release then gives back every block and the pool. */
bool mx__graph_pool_done(const mx__graph_pool *p);
void mx__graph_pool_release(mx__graph_pool *p);

/* What the pool holds, for the tests and the messages. */
typedef struct {
  int blocks, in_use, held;
  size_t bytes; /* of the blocks */
  bool sealed;
} mx__graph_pool_stats;
mx__graph_pool_stats mx__graph_pool_stats_of(const mx__graph_pool *p);

#ifdef __cplusplus
}
#endif

#endif
