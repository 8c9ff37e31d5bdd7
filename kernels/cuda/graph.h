/* CUDA graphs in the CUDA module: capture, replay and free (the public API is
 * kernels/cuda_graph.h). kernels/backend.c finds mx__cuda_graph_get by name
 * (dlsym) in libmixgrad_cuda.so. The backend's allocator and copies ask the
 * hooks below while a step is captured. Plain C: kernels/cuda_graph.c
 * includes it. */
#ifndef MX_KERNELS_CUDA_GRAPH_H
#define MX_KERNELS_CUDA_GRAPH_H

#include <stdbool.h>
#include <stddef.h>

#include "kernels/base.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mx_cuda_graph mx_cuda_graph;

typedef struct {
  /* warmup eager steps, then one step captured on the backend's stream with
   * the allocator on a private pool, instantiated into *out */
  mx_status (*capture)(mx_status (*step)(void *ctx), void *ctx, int warmup, mx_cuda_graph **out);
  /* one launch of the graph on the backend's stream (no wait) */
  mx_status (*replay)(mx_cuda_graph *g);
  /* waits for the graph's launches, destroys it; its pool goes once no
   * tensor uses it */
  mx_status (*destroy)(mx_cuda_graph *g);
} mx__cuda_graph_api;

/* In the module: the table. */
const mx__cuda_graph_api *mx__cuda_graph_get(void);
/* In the library (kernels/backend.c): the module's table, loading the
 * module; NULL with the error set when CUDA cannot be used. */
const mx__cuda_graph_api *mx__cuda_graph(void);

/* The backend's hooks (in the module). While a capture is in progress an
 * allocation comes from its pool: take_alloc returns true with *status
 * (and *out) set. A free of a pool's block, or any free during a capture,
 * is the pools' business: take_free returns true. */
bool mx__cuda_graph_take_alloc(size_t bytes, void **out, mx_status *status);
bool mx__cuda_graph_take_free(void *ptr, size_t bytes);
/* Whether a capture is in progress on the backend's stream. */
bool mx__cuda_capturing(void);
/* MX_OK, or, during a capture, the error that `what` (a host copy or a
 * wait, which a graph cannot hold) is refused, with what to do instead. */
mx_status mx__cuda_refuse_during_capture(const char *what, size_t bytes);

#ifdef __cplusplus
}
#endif

#endif
