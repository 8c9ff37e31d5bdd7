/* The host's time to queue one call on CUDA, for the calls a training step
 * is made of: where a host-bound GPU step (bench/NOTES.md, rounds 28-31)
 * spends its time, call by call.
 *
 *     build-gpu/bench/cuda_host_cost        # on a GPU machine
 *
 * Each line is one kind of call: the median over 20 batches of the host's
 * microseconds a call, each batch 100 calls queued without waiting (the
 * device drains the queue between batches, untimed). The raw CUDA calls
 * are the floor: cudaMemsetAsync of 4 bytes (a queued operation, as a
 * kernel launch is) and a stream-ordered cudaMallocAsync with its
 * cudaFreeAsync. Then mixgrad's ops on small operands, so the device's
 * work is short and the host's shows: each call in a scope of its own, so
 * its outputs are freed as a step frees them. scripts/gpu-check runs it
 * and quotes every line in bench/GPU.md. */
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "mixgrad.h"

enum { BATCHES = 20, CALLS = 100 };

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void fail(const char *what, const char *why) {
  fprintf(stderr, "cuda_host_cost: %s: %s\n", what, why);
  exit(1);
}

/* One kind of call: call(ctx) queues it, returning false on an error. */
typedef bool (*call_fn)(void *ctx);

static void report(const char *what, call_fn call, void *ctx) {
  double per_call[BATCHES];
  for (int b = -1; b < BATCHES; b++) { /* batch -1 warms up: first calls make plans and caches */
    double start = now_us();
    for (int i = 0; i < CALLS; i++)
      if (!call(ctx)) fail(what, mx_last_error());
    double end = now_us();
    /* the whole device: the raw calls queue on the legacy stream, mixgrad's on its own */
    if (cudaDeviceSynchronize() != cudaSuccess) fail(what, "cudaDeviceSynchronize failed");
    if (b >= 0) per_call[b] = (end - start) / CALLS;
  }
  qsort(per_call, BATCHES, sizeof *per_call, by_value);
  printf("host: %-58s %7.2f us a call\n", what, (per_call[BATCHES / 2 - 1] + per_call[BATCHES / 2]) / 2);
}

/* --- the raw CUDA calls --- */

typedef struct {
  void *buffer;
  size_t bytes;
} raw_ctx;

static bool memset_call(void *ctx) { return cudaMemsetAsync(((raw_ctx *)ctx)->buffer, 0, 4, 0) == cudaSuccess; }

static bool malloc_free_call(void *ctx) {
  void *p;
  if (cudaMallocAsync(&p, ((raw_ctx *)ctx)->bytes, 0) != cudaSuccess) return false;
  return cudaFreeAsync(p, 0) == cudaSuccess;
}

/* --- mixgrad's ops: in a scope each, inputs made once --- */

typedef struct {
  mx_tensor *x, *y, *w, *b, *image, *filter, *grad_x, *grad_y;
} op_ctx;

static bool scoped(mx_tensor *(*op)(const op_ctx *), const op_ctx *c) {
  mx_scope *s = mx_scope_begin();
  bool ok = op(c) != NULL;
  mx_scope_end(s);
  return ok;
}

static mx_tensor *add(const op_ctx *c) { return mx_add(c->x, c->y); }
static mx_tensor *add_grad(const op_ctx *c) { return mx_add(c->grad_x, c->grad_y); }
static mx_tensor *relu(const op_ctx *c) { return mx_relu(c->x); }
static mx_tensor *to_bf16(const op_ctx *c) { return mx_to_dtype(c->x, MX_BF16); }
static mx_tensor *sum_rows(const op_ctx *c) { return mx_sum(c->x, MX_DIMS(0), false); }
static mx_tensor *matmul(const op_ctx *c) { return mx_matmul(c->x, mx_transpose(c->w, 0, 1)); }
static mx_tensor *linear_relu(const op_ctx *c) { return mx_linear_relu(c->x, c->w, c->b); }
static mx_tensor *conv(const op_ctx *c) {
  return mx_conv2d(c->image, c->filter, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
}

static bool fill_call(void *ctx) { return mx_fill_(((op_ctx *)ctx)->x, 1.0) == MX_OK; }
static bool add_call(void *ctx) { return scoped(add, ctx); }
static bool add_grad_call(void *ctx) { return scoped(add_grad, ctx); }
static bool relu_call(void *ctx) { return scoped(relu, ctx); }
static bool to_bf16_call(void *ctx) { return scoped(to_bf16, ctx); }
static bool sum_rows_call(void *ctx) { return scoped(sum_rows, ctx); }
static bool matmul_call(void *ctx) { return scoped(matmul, ctx); }
static bool linear_relu_call(void *ctx) { return scoped(linear_relu, ctx); }
static bool conv_call(void *ctx) { return scoped(conv, ctx); }

static mx_tensor *cuda_randn(mx_shape shape, bool requires_grad) {
  mx_tensor *t = mx_keep(mx_to_device(mx_randn(shape, MX_F32, MX_CPU, NULL), MX_CUDA));
  if (!t || (requires_grad && mx_set_requires_grad(t, true) != MX_OK)) fail("making an input", mx_last_error());
  return t;
}

int main(void) {
  if (mx_cuda_device_count() < 1) fail("no CUDA device", "nothing to time");
  raw_ctx small = {NULL, 4096}, large = {NULL, 4 << 20};
  if (cudaMalloc(&small.buffer, 4) != cudaSuccess) fail("cudaMalloc", "failed");
  report("cudaMemsetAsync, 4 bytes", memset_call, &small);
  report("cudaMallocAsync + cudaFreeAsync, 4 KiB", malloc_free_call, &small);
  report("cudaMallocAsync + cudaFreeAsync, 4 MiB", malloc_free_call, &large);
  if (cudaFree(small.buffer) != cudaSuccess) fail("cudaFree", "failed");

  mx_scope *inputs = mx_scope_begin();
  op_ctx c = {.x = cuda_randn(MX_SHAPE(128, 512), false), .y = cuda_randn(MX_SHAPE(128, 512), false),
              .w = cuda_randn(MX_SHAPE(512, 512), false), .b = cuda_randn(MX_SHAPE(512), false),
              .image = cuda_randn(MX_SHAPE(8, 32, 14, 14), false), .filter = cuda_randn(MX_SHAPE(64, 32, 3, 3), false),
              .grad_x = cuda_randn(MX_SHAPE(128, 512), true), .grad_y = cuda_randn(MX_SHAPE(128, 512), true)};
  mx_scope_end(inputs);
  report("mx_fill_ (in place: dispatch and launch, no allocation)", fill_call, &c);
  report("mx_add, (128, 512) float32", add_call, &c);
  report("mx_add, inputs requiring grad (a graph node too)", add_grad_call, &c);
  report("mx_relu", relu_call, &c);
  report("mx_to_dtype, float32 to bfloat16", to_bf16_call, &c);
  report("mx_sum over the rows", sum_rows_call, &c);
  report("mx_matmul, (128, 512) x (512, 512)^T, cuBLAS", matmul_call, &c);
  report("mx_linear_relu, the same with a bias, cuBLASLt", linear_relu_call, &c);
  report("mx_conv2d, (8, 32, 14, 14) by (64, 32, 3, 3), cuDNN", conv_call, &c);
  mx_tensor *all[] = {c.x, c.y, c.w, c.b, c.image, c.filter, c.grad_x, c.grad_y};
  for (size_t i = 0; i < sizeof all / sizeof *all; i++) mx_release(all[i]);
  return 0;
}
