/* CUDA Graphs' public API (kernels/cuda_graph.h): the checks and the graphs
 * that are alive; the capture itself is in the CUDA module
 * (kernels/cuda/graph.cu), reached through kernels/backend.c. */
#include "kernels/cuda_graph.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/base_internal.h"
#include "kernels/cuda/graph.h"

/* The graphs made and not freed, by address, so that a freed graph is
 * refused instead of used (an address a newer graph reuses is that graph). */
static struct {
  pthread_mutex_t lock;
  uintptr_t *live;
  int n, cap;
} graphs = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, 0};

static atomic_bool capturing;

bool mx_cuda_graph_capturing(void) { return atomic_load(&capturing); }

static int find_locked(uintptr_t g) {
  for (int i = 0; i < graphs.n; i++)
    if (graphs.live[i] == g) return i;
  return -1;
}

static bool is_live(const mx_cuda_graph *g) {
  pthread_mutex_lock(&graphs.lock);
  bool live = find_locked((uintptr_t)g) >= 0;
  pthread_mutex_unlock(&graphs.lock);
  return live;
}

static bool add_live(const mx_cuda_graph *g) {
  pthread_mutex_lock(&graphs.lock);
  bool added = graphs.n < graphs.cap;
  if (!added) {
    int cap = graphs.cap ? 2 * graphs.cap : 8;
    uintptr_t *grown = realloc(graphs.live, sizeof *grown * (size_t)cap);
    if (grown) graphs.live = grown, graphs.cap = cap, added = true;
  }
  if (added) graphs.live[graphs.n++] = (uintptr_t)g;
  pthread_mutex_unlock(&graphs.lock);
  return added;
}

static void remove_live(const mx_cuda_graph *g) {
  pthread_mutex_lock(&graphs.lock);
  int i = find_locked((uintptr_t)g);
  if (i >= 0) graphs.live[i] = graphs.live[--graphs.n];
  if (graphs.n == 0) { /* the last graph gone: so is the list (no leak at exit) */
    free(graphs.live);
    graphs.live = NULL;
    graphs.cap = 0;
  }
  pthread_mutex_unlock(&graphs.lock);
}

/* The module's table, or NULL with MX_NOT_SUPPORTED naming fn and why. */
static const mx__cuda_graph_api *graph_api(const char *fn) {
  const mx__cuda_graph_api *api = mx__cuda_graph();
  if (!api) {
    char why[768];
    snprintf(why, sizeof why, "%s", mx_last_error());
    mx__error(MX_NOT_SUPPORTED, "%s: CUDA graphs are not supported here: %s", fn, why);
  }
  return api;
}

mx_cuda_graph *mx_cuda_graph_capture(mx_cuda_graph_step step, void *ctx, int warmup) {
  const char *fn = "mx_cuda_graph_capture";
  if (!step) return mx__null_input(fn, "step"), NULL;
  if (warmup < 0) return mx__error(MX_INVALID_ARGUMENT, "%s: warmup must be >= 0, got %d", fn, warmup), NULL;
  bool was = false;
  if (!atomic_compare_exchange_strong(&capturing, &was, true))
    return mx__error(MX_STATE_ERROR, "%s: a capture is already in progress (captures do not nest)", fn), NULL;
  const mx__cuda_graph_api *api = graph_api(fn);
  mx_cuda_graph *g = NULL;
  /* the flag is up for the warm-up too: ops skip the same host checks in
   * the steps the capture is compared with */
  if (api && api->capture(step, ctx, warmup, &g) == MX_OK && !add_live(g)) {
    (void)api->destroy(g);
    g = NULL;
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  atomic_store(&capturing, false);
  return g;
}

mx_status mx_cuda_graph_replay(mx_cuda_graph *g) {
  const char *fn = "mx_cuda_graph_replay";
  if (!g) return mx__null_input(fn, "g");
  if (!is_live(g))
    return mx__error(MX_STATE_ERROR, "%s: the graph was freed (or was not made by mx_cuda_graph_capture)", fn);
  const mx__cuda_graph_api *api = graph_api(fn);
  return api ? api->replay(g) : mx_last_status();
}

void mx_cuda_graph_free(mx_cuda_graph *g) {
  if (!g) return;
  if (!is_live(g)) {
    mx__error(MX_STATE_ERROR, "mx_cuda_graph_free: the graph was already freed (or was not made by "
              "mx_cuda_graph_capture)");
    return;
  }
  if (mx_cuda_graph_capturing()) {
    mx__error(MX_STATE_ERROR, "mx_cuda_graph_free: called while a CUDA graph is being captured; free graphs "
              "outside the captured step");
    return;
  }
  const mx__cuda_graph_api *api = mx__cuda_graph(); /* loaded: the graph was made */
  if (api) (void)api->destroy(g); /* freed even when waiting for its launches failed (the error is kept) */
  remove_live(g);
}
