/* The CPU backend: host memory and the creation kernels. */
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/amp.h"
#include "kernels/cpu/amp_hist.h"
#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/batch_norm_vectors.h"
#include "kernels/cpu/conv.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_pool.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/host_cache.h"
#include "kernels/cpu/indexing.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/optim.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/sort.h"
#include "kernels/cpu/strided.h"
#include "kernels/math.h"

static mx_status cpu_alloc(size_t bytes, void **out) {
  *out = mx__host_cache_alloc(bytes);
  if (!*out) return mx__error(MX_OUT_OF_MEMORY, "cpu: out of memory allocating %zu bytes", bytes);
  return MX_OK;
}

static void cpu_free(void *ptr, size_t bytes) { mx__host_cache_free(ptr, bytes); }

static mx_status cpu_empty_cache(void) {
  mx__host_cache_empty();
  return MX_OK;
}

static mx_status cpu_copy(void *dst, const void *src, size_t bytes) {
  if (bytes) memcpy(dst, src, bytes);
  return MX_OK;
}

static mx_status cpu_synchronize(void) { return MX_OK; }

/* --- fill -------------------------------------------------------------------- */

typedef struct {
  size_t size;
  char value[8]; /* one element of the out dtype */
} fill_ctx;

/* One element's bytes at a time, in a loop typed by their size so it
 * compiles to plain stores (zeros in a dense row: memset). */
#define FILL_LOOP(type)                                                  \
  do {                                                                   \
    type v;                                                              \
    memcpy(&v, f->value, sizeof v);                                      \
    for (int64_t i = 0; i < row->n; i++) *(type *)(p + i * step) = v;    \
  } while (0)

static void fill_row(const mx__row *row, void *ctx) {
  const fill_ctx *f = ctx;
  char *p = row->ptr[0];
  int64_t step = row->step[0];
  static const char zeros[8];
  if (step == (int64_t)f->size && !memcmp(f->value, zeros, f->size)) {
    memset(p, 0, (size_t)row->n * f->size);
    return;
  }
  switch (f->size) {
  case 1: FILL_LOOP(uint8_t); break;
  case 2: FILL_LOOP(uint16_t); break;
  case 4: FILL_LOOP(uint32_t); break;
  default: FILL_LOOP(uint64_t); break;
  }
}

static mx_status cpu_fill(const mx_kview *out, double value) {
  fill_ctx ctx = {.size = mx_dtype_size(out->dtype)};
  mx_element_store(ctx.value, out->dtype, value);
  mx__cpu_foreach_row(out, NULL, fill_row, &ctx);
  return MX_OK;
}

/* --- convert: strided copy with dtype conversion ----------------------------- */

typedef struct {
  mx_dtype out, in;
} convert_ctx;

/* A dense row into float16 or bfloat16 from another 16-bit float or bool
 * (a mask), through a float32 block on the stack: what the element path
 * does (the input is exact in float32), in bulk. */
static void convert_to_16_via_f32(const mx__row *row, mx_dtype out, mx_dtype in) {
  enum { BLOCK = 1024 };
  float block[BLOCK];
  for (int64_t k = 0; k < row->n; k += BLOCK) {
    int64_t m = row->n - k < BLOCK ? row->n - k : BLOCK;
    const uint16_t *src = (const uint16_t *)row->ptr[1] + k;
    if (in == MX_BF16) mx__bf16_to_f32_n(src, block, m);
    else if (in == MX_F16) mx__f16_to_f32_n(src, block, m);
    else
      for (int64_t i = 0; i < m; i++) block[i] = ((const bool *)row->ptr[1])[k + i];
    uint16_t *dst = (uint16_t *)row->ptr[0] + k;
    if (out == MX_F16) mx__f32_to_f16_n(block, dst, m);
    else mx__f32_to_bf16_n(block, dst, m);
  }
}

static void convert_row(const mx__row *row, void *ctx) {
  const convert_ctx *c = ctx;
  size_t out_size = mx_dtype_size(c->out);
  bool out_dense = row->step[0] == (int64_t)out_size;
  bool in_dense = row->step[1] == (int64_t)mx_dtype_size(c->in);
  if (out_dense && in_dense) {
    if (c->out == c->in) {
      memcpy(row->ptr[0], row->ptr[1], (size_t)row->n * out_size);
      return;
    }
    if (c->in == MX_F32 && c->out == MX_F16) {
      mx__f32_to_f16_n((const float *)row->ptr[1], (uint16_t *)row->ptr[0], row->n);
      return;
    }
    if (c->in == MX_F16 && c->out == MX_F32) {
      mx__f16_to_f32_n((const uint16_t *)row->ptr[1], (float *)row->ptr[0], row->n);
      return;
    }
    if (c->in == MX_F32 && c->out == MX_BF16) {
      mx__f32_to_bf16_n((const float *)row->ptr[1], (uint16_t *)row->ptr[0], row->n);
      return;
    }
    if (c->in == MX_BF16 && c->out == MX_F32) {
      mx__bf16_to_f32_n((const uint16_t *)row->ptr[1], (float *)row->ptr[0], row->n);
      return;
    }
    bool out_16 = c->out == MX_F16 || c->out == MX_BF16;
    if (out_16 && (c->in == MX_F16 || c->in == MX_BF16 || c->in == MX_BOOL)) {
      convert_to_16_via_f32(row, c->out, c->in);
      return;
    }
  }
  char *o = row->ptr[0];
  const char *in = row->ptr[1];
  if (c->out == c->in) { /* any dtype, same type: copy the bytes (int64 stays exact) */
    for (int64_t i = 0; i < row->n; i++, o += row->step[0], in += row->step[1])
      memcpy(o, in, out_size);
    return;
  }
  for (int64_t i = 0; i < row->n; i++, o += row->step[0], in += row->step[1])
    mx_element_convert(o, c->out, in, c->in);
}

static mx_status cpu_convert(const mx_kview *out, const mx_kview *src) {
  convert_ctx ctx = {out->dtype, src->dtype};
  mx__cpu_foreach_row(out, src, convert_row, &ctx);
  return MX_OK;
}

/* --- random ------------------------------------------------------------------ */

typedef struct {
  const mx_rand_params *params;
  mx_dtype dtype, p_dtype;
} random_ctx;

static void random_row(const mx__row *row, void *ctx) {
  const random_ctx *c = ctx;
  char *o = row->ptr[0];
  for (int64_t i = 0; i < row->n; i++, o += row->step[0]) {
    uint64_t index = (uint64_t)(row->first + i);
    if (c->params->kind == MX_RAND_INT && c->dtype == MX_I64) /* exact beyond 2^53 */
      *(int64_t *)o = mx_rand_int(c->params, index);
    else
      mx_element_store(o, c->dtype, mx_rand_sample(c->params, index, mx_mantissa_bits(c->dtype)));
  }
}

static mx_status cpu_random(const mx_kview *out, const mx_rand_params *params) {
  random_ctx ctx = {params, out->dtype, out->dtype};
  mx__cpu_foreach_row_indexed(out, NULL, random_row, &ctx);
  return MX_OK;
}

static void bernoulli_row(const mx__row *row, void *ctx) {
  const random_ctx *c = ctx;
  char *o = row->ptr[0];
  const char *p = row->ptr[1];
  for (int64_t i = 0; i < row->n; i++, o += row->step[0], p += row->step[1]) {
    mx_philox_block r = mx_philox_draw(c->params->seed, c->params->offset, (uint64_t)(row->first + i));
    double prob = mx_element_load(p, c->p_dtype);
    mx_element_store(o, c->dtype, mx_uniform53(r.v[0], r.v[1]) < prob);
  }
}

static mx_status cpu_bernoulli(const mx_kview *out, const mx_kview *p, const mx_rand_params *params) {
  random_ctx ctx = {params, out->dtype, p->dtype};
  mx__cpu_foreach_row_indexed(out, p, bernoulli_row, &ctx);
  return MX_OK;
}

/* Matrix products and convolutions in 16 bits run on oneDNN's bfloat16
 * kernels where the CPU has bf16 dot products; float16 always, and
 * bfloat16 elsewhere, run on float32 copies rounded once (kernels/cpu/
 * matmul.c, conv.c). Everything else runs in its dtype: 16-bit elementwise
 * work computes each element in float32 and rounds it, as a GPU does. */
static mx_kernel_support cpu_supports(mx_kernel kernel, mx_dtype dtype) {
  bool gemm = kernel == MX_KERNEL_MATMUL || kernel == MX_KERNEL_CONV_FORWARD || kernel == MX_KERNEL_CONV_FORWARD_RELU ||
              kernel == MX_KERNEL_CONV_BACKWARD_DATA || kernel == MX_KERNEL_CONV_BACKWARD_WEIGHT ||
              kernel == MX_KERNEL_CONV_BACKWARD_WEIGHT_BIAS || kernel == MX_KERNEL_CONV_MAX_POOL_RELU ||
              kernel == MX_KERNEL_CONV_MAX_POOL_RELU_BACKWARD;
  if (!gemm || (dtype != MX_F16 && dtype != MX_BF16)) return MX_KERNEL_NATIVE;
  return dtype == MX_BF16 && mx__dnnl_native(MX_BF16) ? MX_KERNEL_NATIVE : MX_KERNEL_VIA_F32;
}

const mx_backend mx__cpu_backend = {
    .name = "cpu",
    .device = MX_CPU,
    .supports = cpu_supports,
    .alloc = cpu_alloc,
    .free = cpu_free,
    .empty_cache = cpu_empty_cache,
    .copy_from_host = cpu_copy,
    .copy_to_host = cpu_copy,
    .synchronize = cpu_synchronize,
    .fill = cpu_fill,
    .convert = cpu_convert,
    .random = cpu_random,
    .bernoulli = cpu_bernoulli,
    .unary = mx__cpu_unary,
    .binary = mx__cpu_binary,
    .where = mx__cpu_where,
    .reduce = mx__cpu_reduce,
    .scan = mx__cpu_scan,
    .sort = mx__cpu_sort,
    .matmul = mx__cpu_matmul,
    .softmax = mx__cpu_softmax,
    .cross_entropy = mx__cpu_cross_entropy,
    .cross_entropy_backward = mx__cpu_cross_entropy_backward,
    .gather = mx__cpu_gather,
    .scatter = mx__cpu_scatter,
    .index_select = mx__cpu_index_select,
    .index_add = mx__cpu_index_add,
    .conv_forward = mx__cpu_conv_forward,
    .conv_backward_data = mx__cpu_conv_backward_data,
    .conv_backward_weight = mx__cpu_conv_backward_weight,
    .conv_forward_relu = mx__cpu_conv_forward_relu,
    .conv_backward_weight_bias = mx__cpu_conv_backward_weight_bias,
    .conv_max_pool_relu = mx__cpu_conv_max_pool_relu,
    .conv_max_pool_relu_backward = mx__cpu_conv_max_pool_relu_backward,
    .linear = mx__cpu_linear,
    .channel_affine = mx__cpu_channel_affine,
    .channel_sums = mx__cpu_channel_sums,
    .channel_moments = mx__cpu_channel_moments,
    .channel_combine = mx__cpu_channel_combine,
    .max_pool = mx__cpu_max_pool,
    .max_pool_backward = mx__cpu_max_pool_backward,
    .avg_pool = mx__cpu_avg_pool,
    .avg_pool_backward = mx__cpu_avg_pool_backward,
    .amp_unscale = mx__cpu_amp_unscale,
    .amp_update_scale = mx__cpu_amp_update_scale,
    .amp_histogram = mx__cpu_amp_histogram,
    .amp_unscale_histogram = mx__cpu_amp_unscale_histogram,
    .sgd_step = mx__cpu_sgd_step,
    .adam_step = mx__cpu_adam_step,
    .batch_norm_vectors = mx__cpu_batch_norm_vectors,
    .optim_casts = true,
};
