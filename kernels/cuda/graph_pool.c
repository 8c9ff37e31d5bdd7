/* A CUDA graph's private memory pool: which blocks it has, which are in use,
 * what it holds for the graph (kernels/cuda/graph_pool.h says the rules). */
#include "kernels/cuda/graph_pool.h"

#include <stdlib.h>

#include "kernels/base_internal.h"

typedef struct {
  void *ptr;
  size_t bytes;
  bool in_use;
} pool_block;

typedef struct {
  void *ptr;
  size_t bytes;
} held_memory;

struct mx__graph_pool {
  mx__graph_pool_source source;
  pool_block *blocks; /* one per block the capture needed at once: a step's tensors, hundreds at most */
  int n_blocks, blocks_cap;
  held_memory *held;
  int n_held, held_cap;
  bool sealed, graph_gone;
};

mx__graph_pool *mx__graph_pool_new(const mx__graph_pool_source *source) {
  mx__graph_pool *p = calloc(1, sizeof *p);
  if (!p) {
    mx__error(MX_OUT_OF_MEMORY, "cuda graph: out of memory for the graph's memory pool");
    return NULL;
  }
  p->source = *source;
  return p;
}

/* Room for one more element in *items (of *cap), or false with the error set. */
static bool grow(void **items, int n, int *cap, size_t size) {
  if (n < *cap) return true;
  int want = *cap ? 2 * *cap : 16;
  void *grown = realloc(*items, size * (size_t)want);
  if (!grown) {
    mx__error(MX_OUT_OF_MEMORY, "cuda graph: out of memory for the graph's memory pool");
    return false;
  }
  *items = grown;
  *cap = want;
  return true;
}

mx_status mx__graph_pool_alloc(mx__graph_pool *p, size_t bytes, void **out) {
  *out = NULL;
  if (p->sealed)
    return mx__error(MX_STATE_ERROR, "cuda graph: the graph's memory pool was sealed when its capture ended "
                     "(allocating %zu bytes)", bytes);
  int best = -1;
  for (int i = 0; i < p->n_blocks; i++)
    if (!p->blocks[i].in_use && p->blocks[i].bytes >= bytes && (best < 0 || p->blocks[i].bytes < p->blocks[best].bytes))
      best = i;
  if (best < 0) {
    if (!grow((void **)&p->blocks, p->n_blocks, &p->blocks_cap, sizeof *p->blocks)) return mx_last_status();
    void *ptr = NULL;
    mx_status status = p->source.alloc(p->source.ctx, bytes, &ptr);
    if (status != MX_OK) return status;
    best = p->n_blocks++;
    p->blocks[best] = (pool_block){ptr, bytes, false};
  }
  p->blocks[best].in_use = true;
  *out = p->blocks[best].ptr;
  return MX_OK;
}

bool mx__graph_pool_free(mx__graph_pool *p, void *ptr) {
  for (int i = 0; i < p->n_blocks; i++)
    if (p->blocks[i].ptr == ptr && p->blocks[i].in_use) {
      p->blocks[i].in_use = false;
      return true;
    }
  return false;
}

bool mx__graph_pool_hold(mx__graph_pool *p, void *ptr, size_t bytes) {
  if (!grow((void **)&p->held, p->n_held, &p->held_cap, sizeof *p->held)) return false;
  p->held[p->n_held++] = (held_memory){ptr, bytes};
  return true;
}

void mx__graph_pool_seal(mx__graph_pool *p) { p->sealed = true; }

void mx__graph_pool_graph_gone(mx__graph_pool *p) {
  p->sealed = p->graph_gone = true;
  for (int i = 0; i < p->n_held; i++) p->source.free_held(p->source.ctx, p->held[i].ptr, p->held[i].bytes);
  p->n_held = 0;
}

bool mx__graph_pool_done(const mx__graph_pool *p) {
  if (!p->graph_gone) return false;
  for (int i = 0; i < p->n_blocks; i++)
    if (p->blocks[i].in_use) return false;
  return true;
}

void mx__graph_pool_release(mx__graph_pool *p) {
  if (!p) return;
  for (int i = 0; i < p->n_blocks; i++) p->source.free(p->source.ctx, p->blocks[i].ptr);
  for (int i = 0; i < p->n_held; i++) p->source.free_held(p->source.ctx, p->held[i].ptr, p->held[i].bytes);
  free(p->blocks);
  free(p->held);
  free(p);
}

mx__graph_pool_stats mx__graph_pool_stats_of(const mx__graph_pool *p) {
  mx__graph_pool_stats s = {.held = p->n_held, .blocks = p->n_blocks, .sealed = p->sealed};
  for (int i = 0; i < p->n_blocks; i++) {
    s.in_use += p->blocks[i].in_use;
    s.bytes += p->blocks[i].bytes;
  }
  return s;
}
