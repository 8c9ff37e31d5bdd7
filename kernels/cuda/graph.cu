/* CUDA graphs: a training step captured once on the backend's stream and
 * replayed with one launch, as torch.cuda.graphs does for static shapes.
 *
 * mx_cuda_graph_capture runs the warm-up steps eagerly (they create what a
 * step makes lazily: the GradScaler's tensors and found_inf flags, cuDNN's
 * handle and algorithm choices), waits for them, then captures one step
 * with cudaStreamCaptureModeGlobal. The backend's stream is one mixgrad made
 * (cudaStreamNonBlocking), never the legacy default stream, so it can be
 * captured as it is: no side stream is needed, and the warm-up already ran
 * on the stream the capture uses. While the step is captured, tensor memory
 * comes from the capture's private pool (kernels/cuda/graph_pool.h), whose
 * blocks come from cudaMalloc in relaxed capture mode (PyTorch's way): a
 * cudaMallocAsync would be captured as an allocation node, and the tensors
 * the step leaves behind (its static outputs) would be graph allocations
 * that block a relaunch until freed. Kernel scratch (cudaMallocAsync paired
 * with cudaFreeAsync inside one op) is captured as CUDA's own graph memory
 * nodes, and so is cuBLAS's workspace, which cuBLAS takes with
 * cudaMallocAsync since CUDA 12.2 (PyTorch dropped its own
 * cublasSetWorkspace for graphs then). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/graph.h"
#include "kernels/cuda/graph_pool.h"

struct mx_cuda_graph {
  cudaGraphExec_t exec;
  mx__graph_pool *pool;
  size_t nodes; /* in the captured graph */
};

/* Every pool not yet released, and the one of the capture in progress. */
static struct {
  pthread_mutex_t lock;
  mx__graph_pool *capturing;
  mx__graph_pool **pools;
  int n, cap;
} graphs = {PTHREAD_MUTEX_INITIALIZER, NULL, NULL, 0, 0};

/* The thread's error with fn in front (the module has no mx__error_prefix:
 * kernels/cuda/cuda_backend.h). */
static mx_status prefixed(const char *fn) {
  char why[768];
  snprintf(why, sizeof why, "%s", mx_last_error());
  return mx__error(mx_last_status(), "%s: %s", fn, why);
}

/* --- the pools' memory ------------------------------------------------------------------- */

/* cudaMalloc is not stream work, so a global-mode capture refuses it; the
 * block is the graph's for its whole life, so the relaxed mode is right for
 * this one call (the calling thread's mode is put back after it). */
static mx_status pool_alloc(void *ctx, size_t bytes, void **out) {
  (void)ctx;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  MX_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  mx_status status = MX_CUDA_STATUS(cudaMalloc(out, bytes ? bytes : 1));
  mx_status restored = MX_CUDA_STATUS(cudaThreadExchangeStreamCaptureMode(&mode));
  if (status == MX_OK && restored != MX_OK) {
    (void)cudaFree(*out);
    *out = NULL;
    return restored;
  }
  if (status != MX_OK) {
    char why[640];
    snprintf(why, sizeof why, "%s", mx_last_error());
    return mx__error(status, "cuda graph: allocating %zu bytes for the graph's memory pool: %s", bytes, why);
  }
  return MX_OK;
}

/* Pools are released outside any capture, after their graph's launches
 * were waited for (graph_destroy), so the blocks are idle. */
static void pool_free(void *ctx, void *ptr) {
  (void)ctx;
  cudaError_t err = cudaFree(ptr);
  if (err != cudaSuccess && mx_last_status() == MX_OK) (void)mx__cuda_status(err, "cudaFree(block)", __FILE__, __LINE__);
  else if (err != cudaSuccess) (void)cudaGetLastError();
}

/* Memory of the backend's own pool (cudaMallocAsync), stream-ordered after
 * the graph's last launch. */
static void pool_free_held(void *ctx, void *ptr, size_t bytes) {
  (void)ctx, (void)bytes;
  cudaError_t err = cudaFreeAsync(ptr, mx__cuda_stream());
  if (err != cudaSuccess && mx_last_status() == MX_OK)
    (void)mx__cuda_status(err, "cudaFreeAsync(held, stream)", __FILE__, __LINE__);
  else if (err != cudaSuccess) (void)cudaGetLastError();
}

static const mx__graph_pool_source pool_source = {NULL, pool_alloc, pool_free, pool_free_held};

/* Releases the pools that are done (graphs.lock held, no capture in progress). */
static void sweep_locked(void) {
  if (graphs.capturing) return;
  int kept = 0;
  for (int i = 0; i < graphs.n; i++) {
    if (mx__graph_pool_done(graphs.pools[i])) mx__graph_pool_release(graphs.pools[i]);
    else graphs.pools[kept++] = graphs.pools[i];
  }
  graphs.n = kept;
}

/* --- the backend's hooks ------------------------------------------------------------------ */

bool mx__cuda_graph_take_alloc(size_t bytes, void **out, mx_status *status) {
  pthread_mutex_lock(&graphs.lock);
  bool taken = graphs.capturing != NULL;
  if (taken) *status = mx__graph_pool_alloc(graphs.capturing, bytes, out);
  pthread_mutex_unlock(&graphs.lock);
  return taken;
}

bool mx__cuda_graph_take_free(void *ptr, size_t bytes) {
  pthread_mutex_lock(&graphs.lock);
  bool taken = false;
  for (int i = 0; i < graphs.n && !taken; i++) taken = mx__graph_pool_free(graphs.pools[i], ptr);
  if (taken) {
    sweep_locked();
  } else if (graphs.capturing) {
    /* the captured work may read it: kept for the graph (when even the
     * list cannot grow, it stays allocated: a leak, not a fault) */
    (void)mx__graph_pool_hold(graphs.capturing, ptr, bytes);
    taken = true;
  }
  pthread_mutex_unlock(&graphs.lock);
  return taken;
}

bool mx__cuda_capturing(void) {
  pthread_mutex_lock(&graphs.lock);
  bool capturing = graphs.capturing != NULL;
  pthread_mutex_unlock(&graphs.lock);
  return capturing;
}

mx_status mx__cuda_refuse_during_capture(const char *what, size_t bytes) {
  if (!mx__cuda_capturing()) return MX_OK;
  char size[48] = "";
  if (bytes) snprintf(size, sizeof size, " (%zu bytes)", bytes);
  return mx__error(MX_STATE_ERROR, "cuda: %s%s while a CUDA graph is being captured: a graph cannot hold a wait "
                   "for the device or a copy between host and device memory (mx_item, mx_to_host, mx_to_device, "
                   "mx_from_data, mx_synchronize, an op that checks values on the host); do it outside the "
                   "captured step: copy inputs into the static tensors before mx_cuda_graph_replay, read outputs "
                   "after it", what, size);
}

/* --- capture ------------------------------------------------------------------------------- */

/* The capture's pool, registered and made the allocator's; NULL with the
 * error set. */
static mx__graph_pool *start_pool(void) {
  pthread_mutex_lock(&graphs.lock);
  mx__graph_pool *pool = NULL;
  if (graphs.capturing) {
    mx__error(MX_STATE_ERROR, "mx_cuda_graph_capture: a capture is already in progress (captures do not nest)");
  } else if (graphs.n == graphs.cap) {
    int cap = graphs.cap ? 2 * graphs.cap : 4;
    mx__graph_pool **grown = (mx__graph_pool **)realloc(graphs.pools, sizeof *grown * (size_t)cap);
    if (grown) graphs.pools = grown, graphs.cap = cap;
    else mx__error(MX_OUT_OF_MEMORY, "mx_cuda_graph_capture: out of memory");
  }
  if (!graphs.capturing && graphs.n < graphs.cap && (pool = mx__graph_pool_new(&pool_source))) {
    graphs.pools[graphs.n++] = pool;
    graphs.capturing = pool;
  }
  pthread_mutex_unlock(&graphs.lock);
  return pool;
}

/* The capture is over: the allocator is the stream's pool again. */
static void end_pool(mx__graph_pool *pool, bool graph_made) {
  pthread_mutex_lock(&graphs.lock);
  graphs.capturing = NULL;
  mx__graph_pool_seal(pool);
  if (!graph_made) mx__graph_pool_graph_gone(pool);
  sweep_locked();
  pthread_mutex_unlock(&graphs.lock);
}

/* The step, captured into *graph: MX_OK, or the error naming what failed. */
static mx_status capture_step(mx_status (*step)(void *ctx), void *ctx, cudaGraph_t *graph) {
  cudaStream_t stream = mx__cuda_stream();
  *graph = NULL;
  cudaError_t began = cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal);
  if (began != cudaSuccess) {
    (void)mx__cuda_status(began, "cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal)", __FILE__, __LINE__);
    return prefixed("mx_cuda_graph_capture");
  }
  mx_status status = step(ctx);
  char why[768] = "";
  if (status != MX_OK) snprintf(why, sizeof why, "%s", mx_last_error());
  /* always ended, so the stream leaves capture mode whatever the step did */
  cudaError_t ended = cudaStreamEndCapture(stream, graph);
  if (ended != cudaSuccess) (void)cudaGetLastError();
  if (status != MX_OK)
    return mx__error(status, "mx_cuda_graph_capture: the step failed while it was captured: %s", why);
  if (ended != cudaSuccess)
    return mx__error(MX_BACKEND_ERROR, "mx_cuda_graph_capture: cudaStreamEndCapture failed: %s (%s): the captured "
                     "step did something a CUDA graph cannot hold (a synchronisation, a copy with pageable host "
                     "memory, work on the legacy default stream, or a CUDA call from another thread)",
                     cudaGetErrorString(ended), cudaGetErrorName(ended));
  return MX_OK;
}

static mx_status graph_capture(mx_status (*step)(void *ctx), void *ctx, int warmup, mx_cuda_graph **out) {
  *out = NULL;
  if (!mx__cuda_backend_get()) return prefixed("mx_cuda_graph_capture");
  if (mx__cuda_capturing())
    return mx__error(MX_STATE_ERROR, "mx_cuda_graph_capture: a capture is already in progress (captures do not nest)");
  for (int i = 0; i < warmup; i++) {
    mx_status status = step(ctx);
    if (status != MX_OK) {
      char why[768];
      snprintf(why, sizeof why, "%s", mx_last_error());
      return mx__error(status, "mx_cuda_graph_capture: warm-up step %d of %d failed: %s", i + 1, warmup, why);
    }
  }
  /* the warm-up's work done, so no eager work is pending on the stream as
   * the capture starts */
  cudaError_t synced = cudaStreamSynchronize(mx__cuda_stream());
  if (synced != cudaSuccess) {
    (void)mx__cuda_status(synced, "cudaStreamSynchronize(stream)", __FILE__, __LINE__);
    return prefixed("mx_cuda_graph_capture: after the warm-up");
  }
  mx__graph_pool *pool = start_pool();
  if (!pool) return mx_last_status();
  cudaGraph_t graph = NULL;
  mx_status status = capture_step(step, ctx, &graph);
  size_t nodes = 0;
  if (status == MX_OK && (status = MX_CUDA_STATUS(cudaGraphGetNodes(graph, NULL, &nodes))) != MX_OK)
    status = prefixed("mx_cuda_graph_capture");
  if (status == MX_OK && nodes == 0)
    status = mx__error(MX_INVALID_ARGUMENT, "mx_cuda_graph_capture: the captured step launched no CUDA work (are its "
                       "tensors on the CPU?): a CUDA graph replays work on CUDA tensors only");
  cudaGraphExec_t exec = NULL;
  if (status == MX_OK) {
    /* AutoFreeOnLaunch: an allocation node whose free the graph lacks is
     * freed before the next launch, so a replay never fails on it */
    cudaError_t made = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagAutoFreeOnLaunch);
    if (made != cudaSuccess) {
      (void)mx__cuda_status(made, "cudaGraphInstantiateWithFlags(&exec, graph, AutoFreeOnLaunch)", __FILE__, __LINE__);
      status = prefixed("mx_cuda_graph_capture");
      exec = NULL;
    }
  }
  if (graph) (void)cudaGraphDestroy(graph); /* the executable graph does not need it */
  mx_cuda_graph *g = NULL;
  if (status == MX_OK && !(g = (mx_cuda_graph *)malloc(sizeof *g))) {
    status = mx__error(MX_OUT_OF_MEMORY, "mx_cuda_graph_capture: out of memory");
    (void)cudaGraphExecDestroy(exec);
  }
  end_pool(pool, status == MX_OK);
  if (status != MX_OK) return status;
  *g = (mx_cuda_graph){exec, pool, nodes};
  *out = g;
  return MX_OK;
}

/* --- replay and free --------------------------------------------------------------------- */

static mx_status graph_replay(mx_cuda_graph *g) {
  if (mx__cuda_capturing())
    return mx__error(MX_STATE_ERROR, "mx_cuda_graph_replay: called while a CUDA graph is being captured (a "
                     "captured step cannot replay a graph)");
  mx_status status = MX_CUDA_STATUS(cudaGraphLaunch(g->exec, mx__cuda_stream()));
  return status == MX_OK ? MX_OK : prefixed("mx_cuda_graph_replay");
}

static mx_status graph_destroy(mx_cuda_graph *g) {
  if (mx__cuda_capturing())
    return mx__error(MX_STATE_ERROR, "mx_cuda_graph_free: called while a CUDA graph is being captured; free "
                     "graphs outside the captured step");
  /* the launches in flight still use the pool and the held memory */
  mx_status status = MX_CUDA_STATUS(cudaStreamSynchronize(mx__cuda_stream()));
  mx_status destroyed = MX_CUDA_STATUS(cudaGraphExecDestroy(g->exec));
  if (status == MX_OK) status = destroyed;
  pthread_mutex_lock(&graphs.lock);
  mx__graph_pool_graph_gone(g->pool);
  sweep_locked();
  pthread_mutex_unlock(&graphs.lock);
  free(g);
  return status == MX_OK ? MX_OK : prefixed("mx_cuda_graph_free");
}

static const mx__cuda_graph_api api = {graph_capture, graph_replay, graph_destroy};

extern "C" const mx__cuda_graph_api *mx__cuda_graph_get(void) { return &api; }
