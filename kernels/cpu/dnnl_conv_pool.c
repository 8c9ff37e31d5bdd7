/* max_pool_relu(conv2d(x, w) + bias) on the CPU in one kernel, and its backward: oneDNN's convolution writes its
 * full-resolution output in the layout its primitive picks (nChw16c for float32: dnnl_conv_plan.h) into a buffer
 * of ours, and the pooling reads it from there; backward scatters the pooled gradient straight into the backward
 * primitives' diff_dst layout. Neither the full-resolution output nor its gradient is ever a tensor, so neither
 * is reordered to or from a plain layout (in the demo CNN's float32 step, four reorders of its largest tensors).
 *
 * A blocked layout with B channels a block is, block by block, a channels-last image of B channels, so one loop
 * pools (and scatters) every layout given B: aBcd16b (B = 16), nhwc (B = C), abcd (B = 1). The search and the
 * scatter are pool_search.h's steps, so values and indices are those of conv2d and max_pool_relu run in turn, bit
 * for bit. Windows: 2-d, stride equal to the kernel, no padding or dilation (each full-resolution element in at
 * most one window, so the scatter writes each once); other cases, and dtypes oneDNN does not run, decline
 * (MX_NOT_SUPPORTED, no error) and the op runs the unfused kernels. */
#include "kernels/cpu/dnnl_conv_pool.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/dnnl_conv_plan.h"
#include "kernels/cpu/host_cache.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool_search.h"
#include "kernels/cpu/wide_clones.h"

static atomic_ullong runs[2]; /* forward, backward */

uint64_t mx__cpu_conv_max_pool_relu_runs(bool backward) { return atomic_load(&runs[backward]); }

/* The pooling over the convolution's output in a layout of `block` channels a block. */
typedef struct {
  int64_t N, C, H, W;   /* the convolution's output */
  int64_t block, blocks; /* channels a block; blocks, the channels rounded up to whole ones */
  int64_t OH, OW, KH, KW;
} geometry;

/* Whether the fused kernels cover these operands and params. */
static bool covered(const mx_kview *x, const mx_kview *y, const mx_kview *indices, const mx_conv_params *cp,
                    const mx_pool_params *pp) {
  if (x->dtype != MX_F32 && x->dtype != MX_BF16) return false;
  if (cp->spatial != 2 || cp->groups != 1 || pp->spatial != 2 || indices->dtype != MX_U8 || x->ndim != 4 ||
      y->ndim != 4)
    return false;
  for (int i = 0; i < 2; i++)
    if (cp->dilation[i] != 1 || pp->kernel[i] != pp->stride[i] || pp->padding[i] != 0 || pp->dilation[i] != 1)
      return false;
  return pp->kernel[0] * pp->kernel[1] <= 256 && mx__kview_numel(x) > 0 && mx__kview_numel(y) > 0;
}

/* A view of the convolution's output as the unfused op would have made it (its data never read): its shape from
 * x, w and the params, laid out as x (channels_last) or row-major, so the primitives are the unfused call's. */
static mx_kview full_view(const mx_kview *x, const mx_kview *w, const mx_conv_params *cp, bool channels_last) {
  mx_kview v = {.data = x->data, .dtype = x->dtype, .ndim = 4, .shape = {x->shape[0], w->shape[0]}};
  for (int i = 0; i < 2; i++)
    v.shape[2 + i] = (x->shape[2 + i] + 2 * cp->padding[i] - (w->shape[2 + i] - 1) - 1) / cp->stride[i] + 1;
  if (channels_last) {
    mx__channels_last_strides(v.shape, v.strides);
  } else {
    v.strides[3] = 1;
    for (int d = 2; d >= 0; d--) v.strides[d] = v.strides[d + 1] * v.shape[d + 1];
  }
  return v;
}

static geometry geometry_of(const mx_kview *full, const mx_kview *pooled, const mx_pool_params *pp, int64_t block) {
  int64_t C = full->shape[1];
  return (geometry){.N = full->shape[0], .C = C, .H = full->shape[2], .W = full->shape[3], .block = block,
                    .blocks = (C + block - 1) / block, .OH = pooled->shape[2], .OW = pooled->shape[3],
                    .KH = pp->kernel[0], .KW = pp->kernel[1]};
}

enum { TILE = 64 }; /* channels searched at once */

/* --- forward: the search ------------------------------------------------------------------------------------ */

/* The window at `window` (its first element's first channel; rows W * block apart, pixels block apart), channels
 * 0 .. n: max_pool_relu's search (relu on load, MX__MAX_STEP in row-major order over the window, the first
 * element the start) into best and where (the max's offset in the window). */
#define MX__CONV_POOL_SEARCH(name, type, load)                                                                     \
  MX_WIDE_CLONES static void name(const type *restrict window, int64_t block, int64_t W, int64_t KH, int64_t KW,   \
                                  int64_t n, float *restrict bests, int32_t *restrict wheres) {                  \
    for (int64_t b = 0; b < n; b++) bests[b] = load(window[b]), wheres[b] = 0;                                    \
    for (int64_t kh = 0; kh < KH; kh++)                                                                            \
      for (int64_t kw = kh == 0; kw < KW; kw++) {                                                                  \
        const type *pixel = window + (kh * W + kw) * block;                                                        \
        int32_t r = (int32_t)(kh * KW + kw);                                                                       \
        for (int64_t b = 0; b < n; b++) {                                                                          \
          float best = bests[b], v = load(pixel[b]);                                                               \
          int32_t where = wheres[b];                                                                               \
          MX__MAX_STEP(v, r);                                                                                      \
          bests[b] = best;                                                                                         \
          wheres[b] = where;                                                                                       \
        }                                                                                                          \
      }                                                                                                            \
  }
MX__CONV_POOL_SEARCH(search_f32, float, mx__pool_relu_of_f32)
MX__CONV_POOL_SEARCH(search_bf16, uint16_t, mx__pool_relu_of_bf16)

/* Pools the full-resolution output src (g's layout) into y and indices (any strides). */
static void pool(const geometry *g, const void *src, const mx_kview *y, const mx_kview *indices) {
  bool bf16 = y->dtype == MX_BF16;
  size_t size = bf16 ? 2 : 4;
  int64_t rows = g->N * g->blocks * g->OH;
  MX_PARALLEL_FOR(rows * g->OW * g->block * g->KH * g->KW)
  for (int64_t row = 0; row < rows; row++) {
    int64_t oh = row % g->OH, nb = row / g->OH, cb = nb % g->blocks, n = nb / g->blocks;
    const char *plane = (const char *)src + (size_t)(nb * g->H * g->W * g->block) * size;
    for (int64_t ow = 0; ow < g->OW; ow++) {
      const char *window = plane + (size_t)(((oh * g->KH) * g->W + ow * g->KW) * g->block) * size;
      for (int64_t b0 = 0; b0 < g->block && cb * g->block + b0 < g->C; b0 += TILE) {
        int64_t c0 = cb * g->block + b0, m = g->block - b0 < TILE ? g->block - b0 : TILE;
        if (m > g->C - c0) m = g->C - c0; /* the padding channels of the last block */
        float best[TILE];
        int32_t where[TILE];
        if (bf16) search_bf16((const uint16_t *)window + b0, g->block, g->W, g->KH, g->KW, m, best, where);
        else search_f32((const float *)window + b0, g->block, g->W, g->KH, g->KW, m, best, where);
        int64_t o = n * y->strides[0] + c0 * y->strides[1] + oh * y->strides[2] + ow * y->strides[3];
        int64_t i = n * indices->strides[0] + c0 * indices->strides[1] + oh * indices->strides[2] +
                    ow * indices->strides[3];
        for (int64_t b = 0; b < m; b++) {
          if (bf16) ((uint16_t *)y->data)[o + b * y->strides[1]] = mx__pool_bf16_store(best[b]);
          else ((float *)y->data)[o + b * y->strides[1]] = mx__pool_f32_store(best[b]);
          ((uint8_t *)indices->data)[i + b * indices->strides[1]] = (uint8_t)where[b];
        }
      }
    }
  }
}

mx_status mx__cpu_conv_max_pool_relu(const mx_kview *y, const mx_kview *indices, const mx_kview *x, const mx_kview *w,
                                     const mx_kview *bias, const mx_conv_params *cp, const mx_pool_params *pp,
                                     bool channels_last) {
  if (!covered(x, y, indices, cp, pp)) return MX_NOT_SUPPORTED;
  mx_kview full = full_view(x, w, cp, channels_last);
  mx__dnnl_conv_plan plan;
  mx_status status = mx__dnnl_conv_plan_begin(&plan, MX__DNNL_CONV_FORWARD, x, w, &full, bias != NULL, cp);
  if (status != MX_OK) return status == MX_NOT_BUILT ? MX_NOT_SUPPORTED : status;
  if (!plan.block) {
    mx__dnnl_conv_plan_end(&plan);
    return MX_NOT_SUPPORTED;
  }
  void *buf = mx__host_cache_alloc(plan.bytes);
  if (!buf) status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer",
                               plan.bytes);
  if (status == MX_OK) status = mx__dnnl_conv_plan_run(&plan, x, w, &full, bias, buf);
  if (status == MX_OK) {
    geometry g = geometry_of(&full, y, pp, plan.block);
    pool(&g, buf, y, indices);
    atomic_fetch_add(&runs[false], 1);
  }
  if (buf) mx__host_cache_free(buf, plan.bytes);
  mx__dnnl_conv_plan_end(&plan);
  return status;
}

/* --- backward: the scatter ---------------------------------------------------------------------------------- */

/* One row of windows of the gradient's layout: each pixel of the row gets, channel by channel (0 .. block, those
 * past the channels zeros), 0 + gradient where the window's max came from that pixel's offset r, else 0. The
 * gradient and the offsets of the row's windows are gathered in grad and offset (window ow's at ow * block). */
#define MX__CONV_POOL_SCATTER(name, type, plus_zero)                                                               \
  MX_WIDE_CLONES static void name(type *restrict dst, const type *restrict grad, const uint8_t *restrict offset,   \
                                  int64_t OW, int64_t KW, int64_t kh, int64_t block) {                           \
    for (int64_t ow = 0; ow < OW; ow++)                                                                            \
      for (int64_t kw = 0; kw < KW; kw++) {                                                                        \
        uint8_t r = (uint8_t)(kh * KW + kw);                                                                       \
        type *pixel = dst + (ow * KW + kw) * block;                                                                \
        for (int64_t b = 0; b < block; b++)                                                                        \
          pixel[b] = offset[ow * block + b] == r ? plus_zero(grad[ow * block + b]) : (type)0;                     \
      }                                                                                                            \
  }
static inline float plus_zero_f32(float d) { return 0.0f + d; }
MX__CONV_POOL_SCATTER(scatter_f32, float, plus_zero_f32)
MX__CONV_POOL_SCATTER(scatter_bf16, uint16_t, mx__pool_bf16_plus_zero)

enum { GATHER_LANES = 2048 }; /* the most channels (window by channel) gathered at once; a block's at most */

/* The pooled gradient g (with indices, any strides) scattered into dst, the full-resolution gradient in the
 * layout of geometry's block: max_pool_backward's values, and zeros in the padding channels oneDNN expects. */
static void scatter(const geometry *geo, void *dst, const mx_kview *g, const mx_kview *indices) {
  bool bf16 = g->dtype == MX_BF16;
  int64_t size = bf16 ? 2 : 4, rows = geo->N * geo->blocks * geo->OH, row_bytes = geo->W * geo->block * size;
  int64_t windows = GATHER_LANES / geo->block; /* at once */
  MX_PARALLEL_FOR(rows * geo->KH * geo->W * geo->block)
  for (int64_t row = 0; row < rows; row++) {
    int64_t oh = row % geo->OH, nb = row / geo->OH, cb = nb % geo->blocks, n = nb / geo->blocks;
    char *plane = (char *)dst + nb * geo->H * row_bytes;
    union {
      float f32[GATHER_LANES];
      uint16_t bf16[GATHER_LANES];
    } grad;
    uint8_t offset[GATHER_LANES];
    for (int64_t ow0 = 0; ow0 < geo->OW; ow0 += windows) {
      int64_t count = geo->OW - ow0 < windows ? geo->OW - ow0 : windows;
      for (int64_t ow = 0; ow < count; ow++)
        for (int64_t b = 0; b < geo->block; b++) {
          int64_t c = cb * geo->block + b, lane = ow * geo->block + b;
          if (c >= geo->C) { /* a padding channel: zeros (0 + 0 wherever its offset is found) */
            offset[lane] = 0;
            if (bf16) grad.bf16[lane] = 0;
            else grad.f32[lane] = 0;
            continue;
          }
          int64_t at[4] = {n, c, oh, ow0 + ow}, gi = 0, ii = 0;
          for (int d = 0; d < 4; d++) gi += at[d] * g->strides[d], ii += at[d] * indices->strides[d];
          offset[lane] = ((const uint8_t *)indices->data)[ii];
          if (bf16) grad.bf16[lane] = ((const uint16_t *)g->data)[gi];
          else grad.f32[lane] = ((const float *)g->data)[gi];
        }
      for (int64_t kh = 0; kh < geo->KH; kh++) {
        char *line = plane + (oh * geo->KH + kh) * row_bytes + ow0 * geo->KW * geo->block * size;
        if (bf16) scatter_bf16((uint16_t *)line, grad.bf16, offset, count, geo->KW, kh, geo->block);
        else scatter_f32((float *)line, grad.f32, offset, count, geo->KW, kh, geo->block);
      }
    }
    int64_t reached = geo->OW * geo->KW * geo->block * size; /* the columns no window reaches: zeros */
    for (int64_t kh = 0; kh < geo->KH; kh++)
      memset(plane + (oh * geo->KH + kh) * row_bytes + reached, 0, (size_t)(row_bytes - reached));
  }
  for (int64_t nb = 0; nb < geo->N * geo->blocks && geo->OH * geo->KH < geo->H; nb++) /* the rows no window reaches */
    memset((char *)dst + (nb * geo->H + geo->OH * geo->KH) * row_bytes, 0,
           (size_t)((geo->H - geo->OH * geo->KH) * row_bytes));
}

mx_status mx__cpu_conv_max_pool_relu_backward(const mx_kview *dx, const mx_kview *dw, const mx_kview *db,
                                              const mx_kview *g, const mx_kview *indices, const mx_kview *x,
                                              const mx_kview *w, const mx_conv_params *cp, const mx_pool_params *pp,
                                              bool channels_last) {
  if (!covered(x, g, indices, cp, pp)) return MX_NOT_SUPPORTED;
  /* the unfused backward sums a float32 channels-last gradient's bias apart (kernels/cpu/conv.c) */
  if (db && x->dtype == MX_F32 && channels_last) return MX_NOT_SUPPORTED;
  mx_kview full = full_view(x, w, cp, channels_last);
  mx__dnnl_conv_plan weights = {0}, data = {0};
  mx_status status = mx__dnnl_conv_plan_begin(&weights, MX__DNNL_CONV_BACKWARD_WEIGHTS, x, dw, &full, db != NULL, cp);
  if (status == MX_OK && dx) status = mx__dnnl_conv_plan_begin(&data, MX__DNNL_CONV_BACKWARD_DATA, dx, w, &full,
                                                               false, cp);
  bool fits = weights.block && weights.block <= GATHER_LANES && (!dx || (data.block && data.block <= GATHER_LANES));
  if (status == MX_OK && !fits) status = MX_NOT_SUPPORTED;
  bool shared = dx && status == MX_OK && mx__dnnl_conv_plans_share_y(&weights, &data);
  void *buf = NULL, *data_buf = NULL;
  if (status == MX_OK && !(buf = mx__host_cache_alloc(weights.bytes)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer",
                       weights.bytes);
  if (status == MX_OK && dx && !shared && !(data_buf = mx__host_cache_alloc(data.bytes)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv2d_max_pool_relu: out of memory for a %zu-byte buffer",
                       data.bytes);
  if (status == MX_OK) {
    geometry geo = geometry_of(&full, g, pp, weights.block);
    scatter(&geo, buf, g, indices);
  }
  if (status == MX_OK && data_buf) {
    geometry geo = geometry_of(&full, g, pp, data.block);
    scatter(&geo, data_buf, g, indices);
  }
  /* the input's gradient first, as the unfused backward runs them (the weight's reads x last: kept copies go) */
  if (status == MX_OK && dx) status = mx__dnnl_conv_plan_run(&data, dx, w, &full, NULL, shared ? buf : data_buf);
  if (status == MX_OK) status = mx__dnnl_conv_plan_run(&weights, x, dw, &full, db, buf);
  if (status == MX_OK) atomic_fetch_add(&runs[true], 1);
  if (status == MX_NOT_BUILT) status = MX_NOT_SUPPORTED; /* oneDNN absent: declined too */
  if (buf) mx__host_cache_free(buf, weights.bytes);
  if (data_buf) mx__host_cache_free(data_buf, data.bytes);
  mx__dnnl_conv_plan_end(&data);
  mx__dnnl_conv_plan_end(&weights);
  return status;
}
