/* max_pool_relu(conv2d(x, w) + bias) on the CPU in one kernel, and its backward: oneDNN's convolution writes its
 * full-resolution output in the layout its primitive picks (nChw16c for float32: dnnl_conv_plan.h) into a buffer
 * of ours, and the pooling reads it from there; backward scatters the pooled gradient straight into the backward
 * primitives' diff_dst layout, relu's mask (relu_backward by the forward's y) applied as it is read, so no pass of
 * its own runs over the pooled gradient (demo CNN step, batch 128, 2 threads, medians of 5 alternating processes:
 * 5.86 to 5.75 ms in bfloat16, 9.77 to 9.47 ms in float32). Neither the full-resolution output nor its gradient
 * is ever a tensor, so neither is reordered to or from a plain layout (in the demo CNN's float32 step, four
 * reorders of its largest tensors).
 *
 * A blocked layout with B channels a block is, block by block, a channels-last image of B channels, so one loop
 * pools (and scatters) every layout given B: aBcd16b (B = 16), nhwc (B = C), abcd (B = 1). The search and the
 * scatter are pool_search.h's steps, so values and indices are those of conv2d and max_pool_relu run in turn, bit
 * for bit. On AVX-512 CPUs the commonest case (16-channel blocks, 2x2 windows, contiguous plain y and indices)
 * runs conv_pool_avx512.c's loops instead: the generic ones spent what the saved reorders win. Demo CNN step, batch
 * 128, 2 threads, AMD EPYC, medians of 7 alternating rounds: float32 8.82 ms fused with them, 9.81 ms with the
 * generic loops, 10.09 ms declined; bfloat16 5.16, 7.01 and 5.97 ms. Windows: 2-d, stride equal to the kernel, no
 * padding or dilation (each full-resolution element in at most one window, so the scatter writes each once); other
 * cases, and dtypes oneDNN does not run, decline (MX_NOT_SUPPORTED, no error) and the op runs the unfused kernels.
 * So do channels-last activations: their convolutions read and write nhwc as it lies, so there is no reorder to
 * save, and pool.c's channels-last kernels pool faster than this loop (the demo CNN's float32 channels-last step
 * took 1.09x as long fused).
 * Bfloat16 on a CPU without bf16 dot products, and float16 everywhere, are convolved in float32
 * (dnnl_conv_plan.h), as the unfused op does it: the full-resolution values stay float32 and the pooling rounds
 * each before it searches, as the unfused output is rounded; the backward scatters the gradient widened into
 * float32 blocks (demo CNN step, batch 128, 2 threads, Intel Xeon without AVX512_BF16, medians of 6 alternating
 * processes: 12.5 ms unfused, 11.3 fused; batch 512: 54.4 and 45.0). Float16's weights go to the plans in float32,
 * and its activations must be in oneDNN's 16-channel blocks, which mixgrad's transposes convert (oneDNN's float16
 * reorders are its reference code: dnnl_conv.c declines them); on AVX2 CPUs its blocks are 8 channels, and float16
 * declines. */
#include "kernels/cpu/dnnl_conv_pool.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/conv_pool_avx512.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_plan.h"
#include "kernels/cpu/host_cache.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool_search.h"
#include "kernels/cpu/via_f32.h"
#include "kernels/cpu/wide_clones.h"

static atomic_ullong runs[2], weight_chunks; /* forward, backward; the backward's chunks of its weight gradient */

uint64_t mx__cpu_conv_max_pool_relu_runs(bool backward) { return atomic_load(&runs[backward]); }
uint64_t mx__cpu_conv_max_pool_relu_weight_chunks(void) { return atomic_load(&weight_chunks); }

/* The pooling over the convolution's output in a layout of `block` channels a block. */
typedef struct {
  int64_t N, C, H, W;   /* the convolution's output */
  int64_t block, blocks; /* channels a block; blocks, the channels rounded up to whole ones */
  int64_t OH, OW, KH, KW;
  bool f32_plane; /* the full-resolution buffer holds float32 values of a 16-bit op (mx__dnnl_conv_plan.y_dtype) */
} geometry;

/* Whether the fused kernels cover these operands and params. */
static bool covered(const mx_kview *x, const mx_kview *y, const mx_kview *indices, const mx_conv_params *cp,
                    const mx_pool_params *pp) {
  if (x->dtype != MX_F32 && x->dtype != MX_BF16 && x->dtype != MX_F16) return false;
  if (cp->spatial != 2 || cp->groups != 1 || pp->spatial != 2 || indices->dtype != MX_U8 || x->ndim != 4 ||
      y->ndim != 4)
    return false;
  for (int i = 0; i < 2; i++)
    if (cp->dilation[i] != 1 || pp->kernel[i] != pp->stride[i] || pp->padding[i] != 0 || pp->dilation[i] != 1)
      return false;
  return pp->kernel[0] * pp->kernel[1] <= 256 && mx__kview_numel(x) > 0 && mx__kview_numel(y) > 0;
}

/* A view of the convolution's output as the unfused op would have made it (its data never read): its shape from
 * x, w and the params, row-major, so the primitives are the unfused call's. */
static mx_kview full_view(const mx_kview *x, const mx_kview *w, const mx_conv_params *cp) {
  mx_kview v = {.data = x->data, .dtype = x->dtype, .ndim = 4, .shape = {x->shape[0], w->shape[0]}};
  for (int i = 0; i < 2; i++)
    v.shape[2 + i] = (x->shape[2 + i] + 2 * cp->padding[i] - (w->shape[2 + i] - 1) - 1) / cp->stride[i] + 1;
  v.strides[3] = 1;
  for (int d = 2; d >= 0; d--) v.strides[d] = v.strides[d + 1] * v.shape[d + 1];
  return v;
}

static geometry geometry_of(const mx_kview *full, const mx_kview *pooled, const mx_pool_params *pp,
                            const mx__dnnl_conv_plan *plan) {
  int64_t C = full->shape[1], block = plan->block;
  return (geometry){.N = full->shape[0], .C = C, .H = full->shape[2], .W = full->shape[3], .block = block,
                    .blocks = (C + block - 1) / block, .OH = pooled->shape[2], .OW = pooled->shape[3],
                    .KH = pp->kernel[0], .KW = pp->kernel[1], .f32_plane = plan->y_dtype != pooled->dtype};
}

/* The size of an element of g's full-resolution buffer. */
static int64_t plane_size(const geometry *g, mx_dtype dtype) { return dtype == MX_BF16 && !g->f32_plane ? 2 : 4; }

enum { LANES = 2048 }; /* window-channel pairs searched or scattered at once: a block's channels at most */

/* --- forward: the search ------------------------------------------------------------------------------------ */

/* count windows side by side from src (the first one's first channel; the next KW pixels on, pixels block apart,
 * rows W pixels apart), channels 0 .. n of each: max_pool_relu's search (relu on load, MX__MAX_STEP in row-major
 * order over the window, its first element the start) into best and where (the max's offset in the window),
 * window ow's channel b at ow * n + b. */
#define MX__CONV_POOL_SEARCH(name, type, load, channels)                                                           \
  MX_WIDE_CLONES static void name(const type *restrict src, int64_t block, int64_t W, int64_t KH, int64_t KW,      \
                                  int64_t count, int64_t lanes, float *restrict bests, int32_t *restrict wheres) { \
    const int64_t n = channels;                                                                                    \
    for (int64_t ow = 0; ow < count; ow++) {                                                                       \
      const type *window = src + ow * KW * block;                                                                  \
      float *best_of = bests + ow * n;                                                                             \
      int32_t *where_of = wheres + ow * n;                                                                         \
      for (int64_t b = 0; b < n; b++) best_of[b] = load(window[b]), where_of[b] = 0;                               \
      for (int64_t kh = 0; kh < KH; kh++)                                                                          \
        for (int64_t kw = kh == 0; kw < KW; kw++) {                                                                \
          const type *pixel = window + (kh * W + kw) * block;                                                      \
          int32_t r = (int32_t)(kh * KW + kw);                                                                     \
          for (int64_t b = 0; b < n; b++) {                                                                        \
            float best = best_of[b], v = load(pixel[b]);                                                           \
            int32_t where = where_of[b];                                                                           \
            MX__MAX_STEP(v, r);                                                                                    \
            best_of[b] = best;                                                                                     \
            where_of[b] = where;                                                                                   \
          }                                                                                                        \
        }                                                                                                          \
    }                                                                                                              \
  }
/* any number of channels (lanes), and whole blocks of 16 (oneDNN's nChw16c), whose loops the compiler unrolls */
MX__CONV_POOL_SEARCH(search_f32, float, mx__pool_relu_of_f32, lanes)
MX__CONV_POOL_SEARCH(search_bf16, uint16_t, mx__pool_relu_of_bf16, lanes)
MX__CONV_POOL_SEARCH(search16_f32, float, mx__pool_relu_of_f32, 16)
MX__CONV_POOL_SEARCH(search16_bf16, uint16_t, mx__pool_relu_of_bf16, 16)
/* float32 values of a bfloat16 or float16 op, each rounded first, as the unfused convolution's output is */
static inline float relu_of_rounded(float v) { return mx__pool_relu_of_bf16(mx_f32_to_bf16(v)); }
static inline float relu_of_rounded_f16(float v) { return mx__pool_relu_bits(mx_f16_to_f32(mx_f32_to_f16(v))); }
MX__CONV_POOL_SEARCH(search_rounded, float, relu_of_rounded, lanes)
MX__CONV_POOL_SEARCH(search16_rounded, float, relu_of_rounded, 16)
MX__CONV_POOL_SEARCH(search_rounded_f16, float, relu_of_rounded_f16, lanes)
MX__CONV_POOL_SEARCH(search16_rounded_f16, float, relu_of_rounded_f16, 16)

/* Stores count windows of m channels (window ow's channel b at ow * m + b of best and where) into y from element o
 * and indices from element i, along the windows (y's unit stride) or along the channels. */
/* The loops of store for out's element type, convert making a maximum one. */
#define MX__STORE_WINDOWS(out, convert)                                                                            \
  do {                                                                                                            \
    if (along_windows)                                                                                            \
      for (int64_t b = 0; b < m; b++)                                                                             \
        for (int64_t ow = 0; ow < count; ow++)                                                                    \
          out[b * ys + ow * yw] = convert(best[ow * m + b]), index[b * is + ow * iw] = (uint8_t)where[ow * m + b]; \
    else                                                                                                          \
      for (int64_t ow = 0; ow < count; ow++)                                                                      \
        for (int64_t b = 0; b < m; b++)                                                                           \
          out[b * ys + ow * yw] = convert(best[ow * m + b]), index[b * is + ow * iw] = (uint8_t)where[ow * m + b]; \
  } while (0)

static void store(const mx_kview *y, const mx_kview *indices, int64_t o, int64_t i, const float *best,
                  const int32_t *where, int64_t count, int64_t m, bool along_windows) {
  int64_t ys = y->strides[1], yw = y->strides[3], is = indices->strides[1], iw = indices->strides[3];
  uint8_t *index = (uint8_t *)indices->data + i;
  if (y->dtype == MX_BF16) {
    uint16_t *out = (uint16_t *)y->data + o;
    MX__STORE_WINDOWS(out, mx__pool_bf16_store);
  } else if (y->dtype == MX_F16) { /* best is a float16 value: exact (pool.c's float16 maxima go the same way) */
    uint16_t *out = (uint16_t *)y->data + o;
    MX__STORE_WINDOWS(out, mx_f32_to_f16);
  } else {
    float *out = (float *)y->data + o;
    MX__STORE_WINDOWS(out, mx__pool_f32_store);
  }
}

/* Whether v (a pooled tensor of g) lies in plain row-major order, with no gaps. */
static bool contiguous(const mx_kview *v, const geometry *g) {
  return v->strides[3] == 1 && v->strides[2] == g->OW && v->strides[1] == g->OH * g->OW &&
         v->strides[0] == g->C * g->OH * g->OW;
}

/* Whether conv_pool_avx512.c's loops run g's 2x2 windows of 16-channel blocks into (or from) y and indices. */
static bool wide(const geometry *g, const mx_kview *y, const mx_kview *indices) {
#ifdef MX__POOL_AVX512
  return g->block == 16 && g->KH == 2 && g->KW == 2 && contiguous(y, g) && contiguous(indices, g) &&
         mx__pool_avx512();
#else
  (void)g, (void)y, (void)indices;
  return false;
#endif
}

/* Pools the full-resolution output src (g's layout) into y and indices (any strides). */
static void pool(const geometry *g, const void *src, const mx_kview *y, const mx_kview *indices) {
  bool bf16 = y->dtype == MX_BF16, f16 = y->dtype == MX_F16, wide_plane = g->f32_plane;
  int64_t size = plane_size(g, y->dtype), rows = g->N * g->blocks * g->OH;
#ifdef MX__POOL_AVX512
  if (wide(g, y, indices)) { /* a block's plane at a time, 16 outputs at a time across its rows */
    MX_PARALLEL_FOR(rows * g->OW * g->block * 4)
    for (int64_t nb = 0; nb < g->N * g->blocks; nb++) {
      int64_t cb = nb % g->blocks, n = nb / g->blocks, c0 = cb * 16, m = g->C - c0 < 16 ? g->C - c0 : 16;
      int64_t o = n * y->strides[0] + c0 * y->strides[1];
      mx__conv_pool16_avx512((const char *)src + nb * g->H * g->W * 16 * size, g->W, g->OH, g->OW,
                             (char *)y->data + o * (bf16 || f16 ? 2 : 4), (uint8_t *)indices->data + o, m, y->dtype,
                             wide_plane);
    }
    return;
  }
#endif
  /* the stores run along the output's unit stride: the windows in a row-major output, the channels otherwise */
  bool along_windows = y->strides[3] == 1;
  MX_PARALLEL_FOR(rows * g->OW * g->block * g->KH * g->KW)
  for (int64_t row = 0; row < rows; row++) {
    int64_t oh = row % g->OH, nb = row / g->OH, cb = nb % g->blocks, n = nb / g->blocks;
    const char *first = (const char *)src + ((nb * g->H + oh * g->KH) * g->W * g->block) * size;
    float best[LANES];
    int32_t where[LANES];
    for (int64_t b0 = 0; b0 < g->block && cb * g->block + b0 < g->C; b0 += LANES) {
      int64_t c0 = cb * g->block + b0, m = g->block - b0 < LANES ? g->block - b0 : LANES;
      if (m > g->C - c0) m = g->C - c0; /* not the padding channels of the last block */
      int64_t windows = LANES / m;
      for (int64_t ow0 = 0; ow0 < g->OW; ow0 += windows) {
        int64_t count = g->OW - ow0 < windows ? g->OW - ow0 : windows;
        const char *at = first + ((ow0 * g->KW) * g->block + b0) * size;
        const float *wide = (const float *)at;
        const uint16_t *narrow = (const uint16_t *)at;
        if (m == 16 && f16) search16_rounded_f16(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (f16) search_rounded_f16(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (m == 16 && wide_plane) search16_rounded(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (m == 16 && bf16) search16_bf16(narrow, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (m == 16) search16_f32(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (wide_plane) search_rounded(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else if (bf16) search_bf16(narrow, g->block, g->W, g->KH, g->KW, count, m, best, where);
        else search_f32(wide, g->block, g->W, g->KH, g->KW, count, m, best, where);
        int64_t o = n * y->strides[0] + c0 * y->strides[1] + oh * y->strides[2] + ow0 * y->strides[3];
        int64_t i = n * indices->strides[0] + c0 * indices->strides[1] + oh * indices->strides[2] +
                    ow0 * indices->strides[3];
        store(y, indices, o, i, best, where, count, m, along_windows);
      }
    }
  }
}

/* A contiguous float32 view of v's shape at data: a float32 bias, or the float32 sums of v's gradient. */
static mx_kview float32_like(const mx_kview *v, float *data) {
  mx_kview f = {.data = data, .dtype = MX_F32, .ndim = v->ndim};
  int64_t step = 1;
  for (int d = v->ndim - 1; d >= 0; d--) f.shape[d] = v->shape[d], f.strides[d] = step, step *= v->shape[d];
  return f;
}

/* The convolution into buf (plan's layout), then the pooling into y and indices. */
static mx_status convolve_and_pool(const mx__dnnl_conv_plan *plan, const mx_kview *y, const mx_kview *indices,
                                   const mx_kview *x, const mx_kview *w, const mx_kview *full, const mx_kview *bias,
                                   const mx_pool_params *pp) {
  void *buf = mx__host_cache_alloc(plan->bytes);
  if (!buf)
    return mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer", plan->bytes);
  mx_status status = mx__dnnl_conv_plan_run(plan, x, w, full, bias, buf);
  if (status == MX_OK) {
    geometry g = geometry_of(full, y, pp, plan);
    pool(&g, buf, y, indices);
  }
  mx__host_cache_free(buf, plan->bytes);
  return status;
}

/* Samples a chunk of the batch when the full-resolution output (or its gradient) is made and used a chunk at a time,
 * so that the convolution's writes are still in cache when the pooling (or the backward primitives) read them:
 * mx__cpu_conv_block_samples, the rule conv.c's staging follows, from chunk_from bytes of the plans' buffers in
 * chunks of about chunk_bytes. Otherwise the whole batch at once: smaller chunks only cost (oneDNN splits a chunk
 * among the threads less evenly, and its Winograd tiles span the batch: the demo CNN's second layer's input gradient
 * took 2.79 ms a step in chunks of 2 MiB against 2.56 whole). The demo CNN's first layer (9 products an element)
 * chunks from 4 MiB in chunks of 2 MiB. Where the last-level cache is near and large, whole batches did better:
 * on the 32 MiB L3 of rounds 19-25's AMD EPYC, that layer's fused forward alone, 2 threads, CPU time a sample:
 * float32 batch 512 (51 MB of output) 12.4 -> 6.0 us in chunks of 4 MiB; batch 128 (12.8 MB) 5.2 whole, 6.0 in
 * chunks of 2 MiB. On round 38's Intel Xeon (2 MiB of L2 a core, a mesh L3) the chunks win at batch 128: oneDNN's
 * forward and weight-gradient primitives for that layer 0.70 and 0.68 ms whole, 0.33-0.45 and 0.35-0.48 in chunks
 * of 2 MiB, the float32 step 12.8 -> 12.1 ms on 2 threads and 31.5 -> 24.6 on 1 (medians of alternating
 * processes). */
static _Atomic int64_t chunk_from = 16 << 20, chunk_bytes = 4 << 20;

void mx__cpu_conv_max_pool_relu_chunking(int64_t from, int64_t bytes) {
  atomic_store(&chunk_from, from);
  atomic_store(&chunk_bytes, bytes);
}

static int64_t chunk_samples(const mx_kview *x, const mx_kview *w, const mx_kview *full, int64_t sample_bytes) {
  return mx__cpu_conv_block_samples(x, w, full, x->shape[0] * sample_bytes, atomic_load(&chunk_from),
                                    atomic_load(&chunk_bytes));
}

/* Whether the batch may run in chunks: where the primitive reads x as it lies, or where x is small beside the
 * convolution's output (an eighth of its elements at most: a first layer's few channels). A reordered x is kept
 * whole for the backward (dnnl_conv.c), and a chunk's copy would not be found there: each chunk reorders it again,
 * a pass over x that costs little only where x is small. */
static bool may_chunk(const mx__dnnl_conv_plan *plan, const mx_kview *x, const mx_kview *full) {
  return mx__dnnl_conv_plan_reads_x_as_is(plan) || 8 * mx__kview_numel(x) <= mx__kview_numel(full);
}

static mx_status forward(const mx_kview *y, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                         const mx_kview *bias, const mx_conv_params *cp, const mx_pool_params *pp) {
  mx_kview full = full_view(x, w, cp);
  mx__dnnl_conv_plan plan;
  mx_status status = mx__dnnl_conv_plan_begin(&plan, MX__DNNL_CONV_FORWARD, x, w, &full, bias != NULL, cp);
  if (status != MX_OK) return status == MX_NOT_BUILT ? MX_NOT_SUPPORTED : status;
  if (!plan.block) {
    mx__dnnl_conv_plan_end(&plan);
    return MX_NOT_SUPPORTED;
  }
  /* a plan computed in float32 takes a float32 bias */
  int64_t C = w->shape[0];
  bool widen_bias = bias && plan.y_dtype != bias->dtype;
  float *bias32 = widen_bias ? mx__host_cache_alloc(sizeof(float) * (size_t)C) : NULL;
  if (widen_bias && !bias32) {
    mx__dnnl_conv_plan_end(&plan);
    return mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a float32 bias");
  }
  mx_kview bias_view;
  if (widen_bias) {
    for (int64_t c = 0; c < C; c++) {
      uint16_t bits = ((const uint16_t *)bias->data)[c * bias->strides[0]];
      bias32[c] = bias->dtype == MX_F16 ? mx_f16_to_f32(bits) : mx_bf16_to_f32(bits);
    }
    bias_view = float32_like(bias, bias32);
    bias = &bias_view;
  }
  int64_t N = x->shape[0], chunk = chunk_samples(x, w, &full, (int64_t)plan.bytes / N);
  /* each sample's output is the same sums in either case */
  if (chunk >= N || !may_chunk(&plan, x, &full)) {
    status = convolve_and_pool(&plan, y, indices, x, w, &full, bias, pp);
    mx__dnnl_conv_plan_end(&plan);
  } else {
    mx__dnnl_conv_plan_end(&plan);
    for (int64_t n0 = 0; n0 < N && status == MX_OK; n0 += chunk) {
      int64_t n = N - n0 < chunk ? N - n0 : chunk;
      mx_kview xs = mx__kview_samples(x, n0, n), ys = mx__kview_samples(y, n0, n);
      mx_kview is = mx__kview_samples(indices, n0, n), fs = full;
      fs.shape[0] = n; /* its data is never read */
      status = mx__dnnl_conv_plan_begin(&plan, MX__DNNL_CONV_FORWARD, &xs, w, &fs, bias != NULL, cp);
      if (status == MX_OK && !plan.block) status = MX_NOT_SUPPORTED; /* not after the batch's plan had one */
      if (status == MX_OK) status = convolve_and_pool(&plan, &ys, &is, &xs, w, &fs, bias, pp);
      mx__dnnl_conv_plan_end(&plan);
    }
    if (status == MX_NOT_BUILT) status = MX_NOT_SUPPORTED;
  }
  if (bias32) mx__host_cache_free(bias32, sizeof(float) * (size_t)C);
  if (status == MX_OK) atomic_fetch_add(&runs[false], 1);
  return status;
}

/* Float16 weights as the plans take them: a float32 copy (dnnl_conv.c declines oneDNN's float16 reorders, its
 * reference code), in *copy (NULL: w itself, *w32 unused); w's view to use. */
static const mx_kview *plans_weights(const mx_kview *w, mx_kview *w32, float **copy) {
  *copy = NULL;
  if (w->dtype != MX_F16) return w;
  if (!(*copy = mx__cpu_dense_f32(w))) return NULL;
  *w32 = mx__cpu_dense_f32_view(*copy, w);
  return w32;
}

static void plans_weights_free(const mx_kview *w, float *copy) {
  if (copy) mx__cpu_f32_free(copy, mx__kview_numel(w));
}

mx_status mx__cpu_conv_max_pool_relu(const mx_kview *y, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                                     const mx_kview *bias, const mx_conv_params *cp, const mx_pool_params *pp,
                                     bool channels_last) {
  if (channels_last || !covered(x, y, indices, cp, pp)) return MX_NOT_SUPPORTED;
  mx_kview w32;
  float *copy;
  const mx_kview *plan_w = plans_weights(w, &w32, &copy);
  if (!plan_w) return mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for float32 weights");
  mx_status status = forward(y, indices, x, plan_w, bias, cp, pp);
  plans_weights_free(w, copy);
  return status;
}

/* --- backward: the scatter ---------------------------------------------------------------------------------- */

/* One row of windows of the gradient's layout: each pixel of the row gets, channel by channel (0 .. block, those
 * past the channels zeros), 0 + gradient where the window's max came from that pixel's offset r, else 0, as a
 * select on the bits (a conditional float add is not if-converted: it could trap). The gradient and the offsets of
 * the row's windows are gathered in grad and offset (window ow's at ow * block). */
#define MX__CONV_POOL_SCATTER(name, out, type, plus_zero, select, put, channels)                                   \
  MX_WIDE_CLONES static void name(out *restrict dst, const type *restrict grad, const uint8_t *restrict offset,    \
                                  int64_t count, int64_t KW, int64_t kh, int64_t lanes) {                        \
    const int64_t block = channels;                                                                                \
    for (int64_t ow = 0; ow < count; ow++)                                                                         \
      for (int64_t kw = 0; kw < KW; kw++) {                                                                        \
        uint8_t r = (uint8_t)(kh * KW + kw);                                                                       \
        out *pixel = dst + (ow * KW + kw) * block;                                                                 \
        const type *from = grad + ow * block;                                                                      \
        const uint8_t *at = offset + ow * block;                                                                   \
        for (int64_t b = 0; b < block; b++) pixel[b] = put(select(at[b] == r, plus_zero(from[b])));               \
      }                                                                                                            \
  }
static inline float plus_zero_f32(float d) { return 0.0f + d; }
static inline float select_f32(bool take, float v) { return mx__pool_select_f32(-(uint32_t)take, v, 0.0f); }
static inline uint16_t select_bf16(bool take, uint16_t v) { return (uint16_t)(v & -(uint32_t)take); }
static inline float put_f32(float v) { return v; }
static inline uint16_t put_bf16(uint16_t v) { return v; }
MX__CONV_POOL_SCATTER(scatter_f32, float, float, plus_zero_f32, select_f32, put_f32, lanes)
MX__CONV_POOL_SCATTER(scatter_bf16, uint16_t, uint16_t, mx__pool_bf16_plus_zero, select_bf16, put_bf16, lanes)
MX__CONV_POOL_SCATTER(scatter16_f32, float, float, plus_zero_f32, select_f32, put_f32, 16)
MX__CONV_POOL_SCATTER(scatter16_bf16, uint16_t, uint16_t, mx__pool_bf16_plus_zero, select_bf16, put_bf16, 16)
/* a 16-bit gradient into float32 blocks (mx__dnnl_conv_plan.y_dtype): the values it would scatter, widened */
MX__CONV_POOL_SCATTER(scatter_widened, float, uint16_t, mx__pool_bf16_plus_zero, select_bf16, mx_bf16_to_f32, lanes)
MX__CONV_POOL_SCATTER(scatter16_widened, float, uint16_t, mx__pool_bf16_plus_zero, select_bf16, mx_bf16_to_f32, 16)
MX__CONV_POOL_SCATTER(scatter_widened_f16, float, uint16_t, mx__pool_f16_plus_zero, select_bf16, mx_f16_to_f32, lanes)
MX__CONV_POOL_SCATTER(scatter16_widened_f16, float, uint16_t, mx__pool_f16_plus_zero, select_bf16, mx_f16_to_f32, 16)

/* relu_backward's test on its mask y: g passes where y > 0 or y is NaN, else it becomes +0 (kernels/math.h). */
static inline bool keep_f32(float y) { return !(y <= 0); }
static inline bool keep_bf16(uint16_t y) { return !(mx_bf16_to_f32(y) <= 0); }
static inline bool keep_f16(uint16_t y) { return !(mx_f16_to_f32(y) <= 0); }

/* count windows of m channels of g and indices, from elements gi and ii, into grad (g's dtype) and offset, window
 * ow's channel b at ow * block + b, along the windows (g's unit stride) or along the channels; g masked by relu's
 * where a mask comes (from its element mi): relu_backward's +0 where it stops g, so the scatter writes what it
 * writes from relu_backward's output. */
#define MX__CONV_POOL_GATHER_ONE(type, keep, b, ow)                                                                \
  do {                                                                                                             \
    offset[(ow) * block + (b)] = index[(b) * is + (ow) * iw];                                                       \
    type v = from[(b) * gs + (ow) * gw];                                                                           \
    to[(ow) * block + (b)] = by && !keep(by[(b) * ms + (ow) * mw]) ? (type)0 : v;                                  \
  } while (0)
#define MX__CONV_POOL_GATHER(type, keep)                                                                           \
  do {                                                                                                             \
    const type *from = (const type *)g->data + gi, *by = mask ? (const type *)mask->data + mi : NULL;             \
    type *to = grad;                                                                                               \
    if (along_windows)                                                                                             \
      for (int64_t b = 0; b < m; b++)                                                                              \
        for (int64_t ow = 0; ow < count; ow++) MX__CONV_POOL_GATHER_ONE(type, keep, b, ow);                        \
    else                                                                                                           \
      for (int64_t ow = 0; ow < count; ow++)                                                                       \
        for (int64_t b = 0; b < m; b++) MX__CONV_POOL_GATHER_ONE(type, keep, b, ow);                               \
  } while (0)
static void gather(const mx_kview *g, const mx_kview *mask, const mx_kview *indices, int64_t gi, int64_t mi,
                   int64_t ii, int64_t count, int64_t m, int64_t block, bool along_windows, void *grad,
                   uint8_t *offset) {
  int64_t gs = g->strides[1], gw = g->strides[3], is = indices->strides[1], iw = indices->strides[3];
  int64_t ms = mask ? mask->strides[1] : 0, mw = mask ? mask->strides[3] : 0;
  const uint8_t *index = (const uint8_t *)indices->data + ii;
  if (g->dtype == MX_BF16) MX__CONV_POOL_GATHER(uint16_t, keep_bf16);
  else if (g->dtype == MX_F16) MX__CONV_POOL_GATHER(uint16_t, keep_f16);
  else MX__CONV_POOL_GATHER(float, keep_f32);
}

/* The pooled gradient g (with indices, and relu's mask unless NULL, any strides) scattered into dst, the
 * full-resolution gradient in the layout of geometry's block: max_pool_backward's values, and zeros in the padding
 * channels oneDNN expects. */
static void scatter(const geometry *geo, void *dst, const mx_kview *g, const mx_kview *mask,
                    const mx_kview *indices) {
  bool bf16 = g->dtype == MX_BF16, f16 = g->dtype == MX_F16;
  bool wide_plane = geo->f32_plane;
  int64_t g_size = bf16 || f16 ? 2 : 4, size = plane_size(geo, g->dtype), rows = geo->N * geo->blocks * geo->OH;
  int64_t row_bytes = geo->W * geo->block * size;
  int64_t windows = LANES / geo->block; /* at once */
  bool along_windows = g->strides[3] == 1; /* the gather runs along g's unit stride */
  bool fast = wide(geo, g, indices) && (!mask || contiguous(mask, geo)); /* the AVX-512 loop reads g's offsets */
  int64_t numel = mx__kview_numel(g);
#ifdef MX__POOL_AVX512
  if (fast) { /* a block's plane at a time, 16 outputs at a time across its rows */
    MX_PARALLEL_FOR(rows * geo->KH * geo->W * geo->block)
    for (int64_t nb = 0; nb < geo->N * geo->blocks; nb++) {
      int64_t cb = nb % geo->blocks, n = nb / geo->blocks, at = n * g->strides[0] + cb * 16 * g->strides[1];
      int64_t real = geo->C - cb * 16 < 16 ? geo->C - cb * 16 : 16; /* the padding channels get zeros */
      mx__conv_pool16_backward_avx512((char *)dst + nb * geo->H * row_bytes, geo->W, geo->OH, geo->OW,
                                      (const char *)g->data + at * g_size,
                                      mask ? (const char *)mask->data + at * g_size : NULL,
                                      (const uint8_t *)indices->data + at, g->strides[1], real, numel - at, g->dtype,
                                      wide_plane);
    }
  }
#endif
  /* the rows' windows (unless fast did them) and the columns no window reaches, which get zeros */
  int64_t reached = geo->OW * geo->KW * geo->block * size, row_count = fast && reached == row_bytes ? 0 : rows;
  MX_PARALLEL_FOR(row_count * geo->KH * geo->W * geo->block)
  for (int64_t row = 0; row < row_count; row++) {
    int64_t oh = row % geo->OH, nb = row / geo->OH, cb = nb % geo->blocks, n = nb / geo->blocks;
    char *plane = (char *)dst + nb * geo->H * row_bytes;
    union {
      float f32[LANES];
      uint16_t half[LANES]; /* bfloat16 or float16 */
    } grad;
    uint8_t offset[LANES];
    /* the channels of this block that exist; the padding ones get zeros (0 + 0 wherever their offset is found) */
    int64_t real = geo->C - cb * geo->block < geo->block ? geo->C - cb * geo->block : geo->block;
    for (int64_t ow0 = 0; ow0 < geo->OW && !fast; ow0 += windows) {
      int64_t count = geo->OW - ow0 < windows ? geo->OW - ow0 : windows;
      int64_t gi = n * g->strides[0] + cb * geo->block * g->strides[1] + oh * g->strides[2] + ow0 * g->strides[3];
      int64_t ii = n * indices->strides[0] + cb * geo->block * indices->strides[1] + oh * indices->strides[2] +
                   ow0 * indices->strides[3];
      int64_t mi = mask ? n * mask->strides[0] + cb * geo->block * mask->strides[1] + oh * mask->strides[2] +
                              ow0 * mask->strides[3]
                        : 0;
      gather(g, mask, indices, gi, mi, ii, count, real, geo->block, along_windows, grad.f32, offset);
      for (int64_t ow = 0; ow < count && real < geo->block; ow++)
        for (int64_t b = real; b < geo->block; b++) {
          offset[ow * geo->block + b] = 0;
          if (g_size == 2) grad.half[ow * geo->block + b] = 0;
          else grad.f32[ow * geo->block + b] = 0;
        }
      for (int64_t kh = 0; kh < geo->KH; kh++) {
        char *line = plane + (oh * geo->KH + kh) * row_bytes + ow0 * geo->KW * geo->block * size;
        bool sixteen = geo->block == 16;
        if (f16 && sixteen) scatter16_widened_f16((float *)line, grad.half, offset, count, geo->KW, kh, 16);
        else if (f16) scatter_widened_f16((float *)line, grad.half, offset, count, geo->KW, kh, geo->block);
        else if (wide_plane && sixteen) scatter16_widened((float *)line, grad.half, offset, count, geo->KW, kh, 16);
        else if (wide_plane) scatter_widened((float *)line, grad.half, offset, count, geo->KW, kh, geo->block);
        else if (bf16 && sixteen) scatter16_bf16((uint16_t *)line, grad.half, offset, count, geo->KW, kh, 16);
        else if (sixteen) scatter16_f32((float *)line, grad.f32, offset, count, geo->KW, kh, 16);
        else if (bf16) scatter_bf16((uint16_t *)line, grad.half, offset, count, geo->KW, kh, geo->block);
        else scatter_f32((float *)line, grad.f32, offset, count, geo->KW, kh, geo->block);
      }
    }
    for (int64_t kh = 0; kh < geo->KH; kh++)
      memset(plane + (oh * geo->KH + kh) * row_bytes + reached, 0, (size_t)(row_bytes - reached));
  }
  for (int64_t nb = 0; nb < geo->N * geo->blocks && geo->OH * geo->KH < geo->H; nb++) /* the rows no window reaches */
    memset((char *)dst + (nb * geo->H + geo->OH * geo->KH) * row_bytes, 0,
           (size_t)((geo->H - geo->OH * geo->KH) * row_bytes));
}

/* The input's gradient a chunk of the batch at a time (chunk samples): each chunk's part of the full-resolution
 * gradient is scattered in data's layout just before its backward-data primitive reads it back, from cache. The
 * part lies at its place in buf when buf is the batch's (the weight's plan shares the layout and reads the whole
 * buffer afterwards), else buf holds one chunk. */
static mx_status data_in_chunks(const mx__dnnl_conv_plan *data, int64_t chunk, char *buf, bool batch_buf,
                                const mx_kview *dx, const mx_kview *g, const mx_kview *mask, const mx_kview *indices,
                                const mx_kview *w, const mx_kview *full, const mx_conv_params *cp,
                                const mx_pool_params *pp) {
  int64_t N = full->shape[0], sample_bytes = (int64_t)data->bytes / N;
  mx_status status = MX_OK;
  for (int64_t n0 = 0; n0 < N && status == MX_OK; n0 += chunk) {
    int64_t n = N - n0 < chunk ? N - n0 : chunk;
    mx_kview dxs = mx__kview_samples(dx, n0, n), gs = mx__kview_samples(g, n0, n);
    mx_kview is = mx__kview_samples(indices, n0, n), fs = *full, ms;
    if (mask) ms = mx__kview_samples(mask, n0, n);
    fs.shape[0] = n; /* its data is never read */
    char *part = batch_buf ? buf + n0 * sample_bytes : buf;
    geometry geo = geometry_of(&fs, &gs, pp, data);
    scatter(&geo, part, &gs, mask ? &ms : NULL, &is);
    mx__dnnl_conv_plan plan;
    status = mx__dnnl_conv_plan_begin(&plan, MX__DNNL_CONV_BACKWARD_DATA, &dxs, w, &fs, false, cp);
    if (status == MX_OK && (plan.block != data->block || (int64_t)plan.bytes != n * sample_bytes))
      status = MX_NOT_SUPPORTED; /* the chunk's layout is not a slice of the batch's */
    if (status == MX_OK) status = mx__dnnl_conv_plan_run(&plan, &dxs, w, &fs, NULL, part);
    mx__dnnl_conv_plan_end(&plan);
  }
  return status;
}

/* The float32 sums into v (contiguous: mx__cpu_conv_max_pool_relu_backward declines other strides), rounded once
 * to its dtype. */
static void store_sums(const mx_kview *v, const float *sums) {
  int64_t numel = mx__kview_numel(v);
  if (v->dtype == MX_BF16)
    mx__f32_to_bf16_n(sums, v->data, numel);
  else if (v->dtype == MX_F16)
    mx__f32_to_f16_n(sums, v->data, numel);
  else
    memcpy(v->data, sums, sizeof(float) * (size_t)numel);
}

/* What the backward reads and writes (dx, db and mask NULL: none). */
typedef struct {
  const mx_kview *dx, *dw, *db, *g, *mask, *indices, *x, *w, *full;
  const mx_conv_params *cp;
  const mx_pool_params *pp;
} operands;

/* The whole backward a chunk of the batch at a time (chunk samples), for the weight's gradient as for the input's:
 * each chunk's full-resolution gradient is scattered into a buffer of one chunk's size and read back from cache by
 * the backward-data primitive (with dx), then scattered again in the weight's layout for the backward-weights one,
 * run on the chunk's x. dw and db are sums over the batch, so the chunks' are added: oneDNN writes each chunk's in
 * float32 (a plan with float32 gradients of bfloat16 activations: oneDNN sums bfloat16 products in float32
 * anyway), added in float32 and rounded to dw's dtype once, as the whole batch's sums are (a bfloat16 sum a chunk,
 * added, would round once a chunk). They differ from the whole batch's only in the order of their terms. sample:
 * the larger of the batch plans' sizes a sample. */
static mx_status in_chunks(const operands *o, int64_t chunk, int64_t sample) {
  int64_t N = o->x->shape[0], w_numel = mx__kview_numel(o->dw), b_numel = o->db ? mx__kview_numel(o->db) : 0;
  size_t buf_bytes = (size_t)(chunk * sample), sum_bytes = 2 * sizeof(float) * (size_t)(w_numel + b_numel);
  char *buf = mx__host_cache_alloc(buf_bytes);
  float *sums = mx__host_cache_alloc(sum_bytes); /* the sums so far, then a chunk's */
  mx_status status = MX_OK;
  if (!buf || !sums)
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for %zu bytes of buffers",
                       buf_bytes + sum_bytes);
  for (int64_t n0 = 0; n0 < N && status == MX_OK; n0 += chunk) {
    int64_t n = N - n0 < chunk ? N - n0 : chunk;
    mx_kview xs = mx__kview_samples(o->x, n0, n), gs = mx__kview_samples(o->g, n0, n);
    mx_kview is = mx__kview_samples(o->indices, n0, n), fs = *o->full;
    mx_kview ms = o->mask ? mx__kview_samples(o->mask, n0, n) : (mx_kview){0};
    mx_kview dxs = o->dx ? mx__kview_samples(o->dx, n0, n) : xs;
    fs.shape[0] = n;                                  /* its data is never read */
    float *to = n0 ? sums + w_numel + b_numel : sums; /* the first chunk's are the sums so far */
    mx_kview dw = float32_like(o->dw, to), db = o->db ? float32_like(o->db, to + w_numel) : dw;
    mx__dnnl_conv_plan weights = {0}, data = {0};
    status = mx__dnnl_conv_plan_begin(&weights, MX__DNNL_CONV_BACKWARD_WEIGHTS, &xs, &dw, &fs, o->db != NULL, o->cp);
    if (status == MX_OK && o->dx)
      status = mx__dnnl_conv_plan_begin(&data, MX__DNNL_CONV_BACKWARD_DATA, &dxs, o->w, &fs, false, o->cp);
    if (status == MX_OK && (!weights.block || weights.block > LANES || weights.bytes > buf_bytes ||
                            (o->dx && (!data.block || data.block > LANES || data.bytes > buf_bytes))))
      status = MX_NOT_SUPPORTED; /* the chunk's layouts fit neither the buffer nor the loops */
    if (status == MX_OK && o->dx) {
      geometry geo = geometry_of(&fs, &gs, o->pp, &data);
      scatter(&geo, buf, &gs, o->mask ? &ms : NULL, &is);
      status = mx__dnnl_conv_plan_run(&data, &dxs, o->w, &fs, NULL, buf);
    }
    if (status == MX_OK) {
      geometry geo = geometry_of(&fs, &gs, o->pp, &weights);
      scatter(&geo, buf, &gs, o->mask ? &ms : NULL, &is);
      status = mx__dnnl_conv_plan_run(&weights, &xs, &dw, &fs, o->db ? &db : NULL, buf);
    }
    for (int64_t i = 0; i < w_numel + b_numel && status == MX_OK && n0; i++) sums[i] += to[i];
    if (status == MX_OK) atomic_fetch_add(&weight_chunks, 1);
    mx__dnnl_conv_plan_end(&data);
    mx__dnnl_conv_plan_end(&weights);
  }
  if (status == MX_OK) store_sums(o->dw, sums);
  if (status == MX_OK && o->db) store_sums(o->db, sums + w_numel);
  if (buf) mx__host_cache_free(buf, buf_bytes);
  if (sums) mx__host_cache_free(sums, sum_bytes);
  return status;
}

/* The whole batch's weight gradient at once, its full-resolution gradient in a buffer of the batch's; the input's
 * gradient before it, in chunks where its own gradient is large. */
static mx_status whole(const operands *o, const mx__dnnl_conv_plan *weights, const mx__dnnl_conv_plan *data) {
  bool shared = o->dx && mx__dnnl_conv_plans_share_y(weights, data);
  int64_t N = o->x->shape[0], chunk = o->dx ? chunk_samples(o->x, o->w, o->full, (int64_t)data->bytes / N) : N;
  bool chunked = chunk < N && data->bytes % (size_t)N == 0;
  size_t data_bytes = chunked ? (size_t)chunk * (data->bytes / (size_t)N) : data->bytes;
  void *buf = NULL, *data_buf = NULL;
  mx_status status = MX_OK;
  if (!(buf = mx__host_cache_alloc(weights->bytes)))
    status =
        mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer", weights->bytes);
  if (status == MX_OK && o->dx && !shared && !(data_buf = mx__host_cache_alloc(data_bytes)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer", data_bytes);
  if (status == MX_OK && !(chunked && shared)) { /* the weight's gradient's, unless the chunks fill it */
    geometry geo = geometry_of(o->full, o->g, o->pp, weights);
    scatter(&geo, buf, o->g, o->mask, o->indices);
  }
  /* the input's gradient first, as the unfused backward runs them (the weight's reads x last: kept copies go) */
  if (status == MX_OK && o->dx && chunked) {
    status = data_in_chunks(data, chunk, shared ? buf : data_buf, shared, o->dx, o->g, o->mask, o->indices, o->w,
                            o->full, o->cp, o->pp);
  } else if (status == MX_OK && o->dx) {
    if (data_buf) {
      geometry geo = geometry_of(o->full, o->g, o->pp, data);
      scatter(&geo, data_buf, o->g, o->mask, o->indices);
    }
    status = mx__dnnl_conv_plan_run(data, o->dx, o->w, o->full, NULL, shared ? buf : data_buf);
  }
  /* a plan computed in float32 writes float32 sums, rounded once to dw's dtype here, as in_chunks' are */
  int64_t w_numel = mx__kview_numel(o->dw), b_numel = o->db ? mx__kview_numel(o->db) : 0;
  size_t sum_bytes = sizeof(float) * (size_t)(w_numel + b_numel);
  float *sums = status == MX_OK && weights->y_dtype != o->dw->dtype ? mx__host_cache_alloc(sum_bytes) : NULL;
  if (status == MX_OK && weights->y_dtype != o->dw->dtype && !sums)
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for %zu bytes of sums", sum_bytes);
  mx_kview dw = *o->dw, db = o->db ? *o->db : dw;
  if (sums) dw = float32_like(o->dw, sums);
  if (sums && o->db) db = float32_like(o->db, sums + w_numel);
  if (status == MX_OK) status = mx__dnnl_conv_plan_run(weights, o->x, &dw, o->full, o->db ? &db : NULL, buf);
  if (status == MX_OK && sums) store_sums(o->dw, sums);
  if (status == MX_OK && sums && o->db) store_sums(o->db, sums + w_numel);
  if (sums) mx__host_cache_free(sums, sum_bytes);
  if (buf) mx__host_cache_free(buf, weights->bytes);
  if (data_buf) mx__host_cache_free(data_buf, data_bytes);
  return status;
}

static mx_status backward(const mx_kview *dx, const mx_kview *dw, const mx_kview *db, const mx_kview *g,
                          const mx_kview *mask, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                          const mx_conv_params *cp, const mx_pool_params *pp) {
  mx_kview full = full_view(x, w, cp);
  operands o = {dx, dw, db, g, mask, indices, x, w, &full, cp, pp};
  mx__dnnl_conv_plan weights = {0}, data = {0};
  /* 16-bit values computed in float32 (dnnl_conv_plan.h) sum dw in float32, rounded once (whole, in_chunks) */
  mx_kview dw32 = float32_like(dw, NULL); /* its data never read */
  bool in_f32 = (x->dtype == MX_BF16 && !mx__dnnl_native(MX_BF16)) || x->dtype == MX_F16;
  const mx_kview *dw_sums = in_f32 ? &dw32 : dw;
  mx_status status =
      mx__dnnl_conv_plan_begin(&weights, MX__DNNL_CONV_BACKWARD_WEIGHTS, x, dw_sums, &full, db != NULL, cp);
  if (status == MX_OK && dx) status = mx__dnnl_conv_plan_begin(&data, MX__DNNL_CONV_BACKWARD_DATA, dx, w, &full,
                                                               false, cp);
  bool fits = weights.block && weights.block <= LANES && (!dx || (data.block && data.block <= LANES));
  if (status == MX_OK && !fits) status = MX_NOT_SUPPORTED;
  /* The whole backward in chunks where the batch's full-resolution gradient is large and the batch may run in
   * chunks (may_chunk); the input's gradient alone in chunks otherwise. */
  int64_t N = x->shape[0], w_sample = (int64_t)weights.bytes / N, d_sample = dx ? (int64_t)data.bytes / N : 0;
  int64_t sample = w_sample > d_sample ? w_sample : d_sample, chunk = chunk_samples(x, w, &full, sample);
  if (status == MX_OK && chunk < N && weights.bytes % (size_t)N == 0 && (!dx || data.bytes % (size_t)N == 0) &&
      may_chunk(&weights, x, &full)) {
    mx__dnnl_conv_plan_end(&data); /* the chunks' plans are their own */
    mx__dnnl_conv_plan_end(&weights);
    status = in_chunks(&o, chunk, sample);
  } else if (status == MX_OK) {
    status = whole(&o, &weights, &data);
  }
  if (status == MX_OK) atomic_fetch_add(&runs[true], 1);
  if (status == MX_NOT_BUILT) status = MX_NOT_SUPPORTED; /* oneDNN absent: declined too */
  mx__dnnl_conv_plan_end(&data);
  mx__dnnl_conv_plan_end(&weights);
  return status;
}

mx_status mx__cpu_conv_max_pool_relu_backward(const mx_kview *dx, const mx_kview *dw, const mx_kview *db,
                                              const mx_kview *g, const mx_kview *mask, const mx_kview *indices,
                                              const mx_kview *x, const mx_kview *w, const mx_conv_params *cp,
                                              const mx_pool_params *pp, bool channels_last) {
  if (channels_last || !covered(x, g, indices, cp, pp) || (mask && mask->dtype != g->dtype)) return MX_NOT_SUPPORTED;
  /* dw and db as the op makes them, so the float32 sums store in one pass (store_sums) */
  if (!mx__kview_is_contiguous(dw) || (db && !mx__kview_is_contiguous(db))) return MX_NOT_SUPPORTED;
  mx_kview w32;
  float *copy;
  const mx_kview *plan_w = plans_weights(w, &w32, &copy);
  if (!plan_w) return mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for float32 weights");
  mx_status status = backward(dx, dw, db, g, mask, indices, x, plan_w, cp, pp);
  plans_weights_free(w, copy);
  return status;
}
