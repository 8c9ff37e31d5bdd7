/* Convolutions on the CPU: the plain loops, and the dispatch to
 * oneDNN (float32, bfloat16) or to the loops (float64, and the fallback). */
#include "kernels/cpu/conv.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_check.h"
#include "kernels/conv_geom.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/cpu/via_f32.h"
#include "kernels/cpu/wide_clones.h"
#include "kernels/elementwise.h"
#include "kernels/math.h"

/* The three operands in their forward roles: x (or dx), w (or dw), y (or dy). */
enum { ROLE_X, ROLE_W, ROLE_Y };

/* The output's role for each kind of convolution. */
static int output_role(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? ROLE_Y : kind == MX_CONV_BACKWARD_DATA ? ROLE_X : ROLE_W;
}

/* --- the plain loops ------------------------------------------------------------- */

#define REF_CHUNK 256

#define REF_T float
#define REF_A float
#define REF_NAME f32
#include "kernels/cpu/conv_reference.inc"

#define REF_T double
#define REF_A double
#define REF_NAME f64
#include "kernels/cpu/conv_reference.inc"

/* views[ROLE_*] (and the forward's bias): the loops for float32 or float64 views. */
static void reference_typed(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias,
                            const mx_conv_params *p) {
  mx_conv_geom g = mx_conv_geom_of(v[ROLE_X], v[ROLE_W], v[ROLE_Y], p);
  g.bias = bias ? bias->data : NULL;
  bool f64 = v[ROLE_X]->dtype == MX_F64;
  switch (kind) {
  case MX_CONV_FORWARD: f64 ? ref_forward_f64(&g) : ref_forward_f32(&g); break;
  case MX_CONV_BACKWARD_DATA: f64 ? ref_backward_data_f64(&g) : ref_backward_data_f32(&g); break;
  case MX_CONV_BACKWARD_WEIGHT: f64 ? ref_backward_weight_f64(&g) : ref_backward_weight_f32(&g); break;
  }
}

/* oneDNN on float32 or bfloat16 views, by kind; relu: the forward's output through a ReLU post-op. */
static mx_status dnnl_run(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias, const mx_conv_params *p,
                          bool relu) {
  switch (kind) {
  case MX_CONV_FORWARD:
    return relu ? mx__dnnl_conv_forward_relu(v[ROLE_Y], v[ROLE_X], v[ROLE_W], bias, p)
                : mx__dnnl_conv_forward(v[ROLE_Y], v[ROLE_X], v[ROLE_W], bias, p);
  case MX_CONV_BACKWARD_DATA: return mx__dnnl_conv_backward_data(v[ROLE_X], v[ROLE_Y], v[ROLE_W], p);
  default: return mx__dnnl_conv_backward_weight(v[ROLE_W], v[ROLE_Y], v[ROLE_X], p);
  }
}

/* --- float16 and bfloat16 in float32, a block of samples at a time ---------------------------------------- */

/* Samples staged at a time: the whole batch where its float32 x and y take at most stage_from bytes or where the
 * convolution does STAGE_MACS products or more per staged element, else blocks of about stage_bytes, the batch split
 * evenly (at most two block sizes, so two cached primitives). A block's float32 operands are written, convolved and
 * read back while they are still in cache; a whole batch's past it stream through the last-level cache three times.
 * bfloat16 demo CNN on a 2-core Xeon with 2 MiB of L2 a core, medians: batch 512, one thread, on float32 copies, 163
 * ms a step whole and 124 in blocks of 2 MiB; converted by the reorders, 126-138 whole, 104-108 in blocks of 4 MiB
 * from 16 MiB. Smaller blocks, from 4 MiB, cost more than they save where each block's share of the work shrinks
 * (batch 128 on two threads, conv2's 9.6 MB: 13.9 ms whole against 15.3 in blocks of 2 MiB), but not where the
 * conversions are most of the work, under LIGHT_MACS products an element: there the limits are a quarter and a half
 * (conv1, 9 products an element, in blocks of 2 MiB from 4 MiB at batch 128: 14.2 -> 13.0 ms on two threads, 28.3 ->
 * 25.8 on one; float16 18.0-19.0 -> 15.7-16.5). Where the products dominate, a smaller batch costs more than the
 * copies save: oneDNN's Winograd tiles span the batch (ResNet-9's 3x3 layers, 384 products or more an element: 580
 * ms a step whole, 615 in two blocks, 720 in blocks of 16 samples); the CNN's layers do 9 and 192. */
enum { STAGE_MACS = 256, LIGHT_MACS = 32 };
static _Atomic int64_t stage_from = 16 << 20, stage_bytes = 4 << 20;
static atomic_ullong staged_blocks;

uint64_t mx__cpu_conv_staged_blocks(void) { return atomic_load(&staged_blocks); }

void mx__cpu_conv_staging(int64_t from, int64_t bytes) {
  atomic_store(&stage_from, from);
  atomic_store(&stage_bytes, bytes);
}

int64_t mx__cpu_conv_block_samples(const mx_kview *x, const mx_kview *w, const mx_kview *y, int64_t batch_bytes,
                                   int64_t from, int64_t bytes) {
  int64_t N = x->shape[0], staged = mx__kview_numel(x) + mx__kview_numel(y);
  /* each of y's elements sums C_in / groups x K products: w's elements an output channel */
  int64_t macs = w->shape[0] ? mx__kview_numel(w) / w->shape[0] * mx__kview_numel(y) : 0;
  if (macs < LIGHT_MACS * staged) from /= 4, bytes /= 2;
  if (N == 0 || batch_bytes <= from || macs >= STAGE_MACS * staged) return N;
  int64_t most = bytes / (batch_bytes / N ? batch_bytes / N : 1);
  if (most < 1) most = 1;
  int64_t blocks = (N + most - 1) / most;
  return (N + blocks - 1) / blocks;
}

static int64_t stage_samples(const mx_kview *const *v) {
  int64_t staged_bytes = 4 * (mx__kview_numel(v[ROLE_X]) + mx__kview_numel(v[ROLE_Y]));
  return mx__cpu_conv_block_samples(v[ROLE_X], v[ROLE_W], v[ROLE_Y], staged_bytes, atomic_load(&stage_from),
                                    atomic_load(&stage_bytes));
}

/* The float32 buffers of one call (or one block): dense copies of the operands (the output's only allocated), the
 * bias's too. */
typedef struct {
  float *buf[3], *bias;
  mx_kview dense[3], dense_bias;
} staged;

/* s's copy of v[r] (allocated only, for the output role out). */
static mx_status stage(staged *s, int r, int out, const mx_kview *v) {
  s->buf[r] = r == out ? mx__cpu_f32_alloc(mx__kview_numel(v)) : mx__cpu_dense_f32(v);
  if (!s->buf[r])
    return mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory converting %s operands to float32",
                     mx_dtype_name(v->dtype));
  s->dense[r] = mx__cpu_dense_f32_view(s->buf[r], v);
  return MX_OK;
}

/* The float32 kernel (oneDNN, or the loops when reference or where oneDNN declines) on s's copies. */
static mx_status run_staged(mx_conv_kind kind, const staged *s, bool bias, const mx_conv_params *p, bool reference) {
  const mx_kview *dv[3] = {&s->dense[0], &s->dense[1], &s->dense[2]}, *db = bias ? &s->dense_bias : NULL;
  mx_status status = reference ? MX_NOT_BUILT : dnnl_run(kind, dv, db, p, false);
  if (!mx__dnnl_declined(status)) return status;
  reference_typed(kind, dv, db, p);
  return MX_OK;
}

/* One block (xs, ys: its samples) on float32 copies: of w too when s has none yet; the output's stored but for a
 * weight's gradient, left in s's float32 buffer. */
static mx_status run_copies(mx_conv_kind kind, staged *s, const mx_kview *xs, const mx_kview *w, const mx_kview *ys,
                            bool bias, const mx_conv_params *p, bool reference) {
  int out = output_role(kind);
  mx_status status = s->buf[ROLE_W] ? MX_OK : stage(s, ROLE_W, out, w);
  if (status == MX_OK && (status = stage(s, ROLE_X, out, xs)) == MX_OK &&
      (status = stage(s, ROLE_Y, out, ys)) == MX_OK && (status = run_staged(kind, s, bias, p, reference)) == MX_OK &&
      out != ROLE_W)
    mx__cpu_store_f32(out == ROLE_X ? xs : ys, s->buf[out]);
  if (s->buf[ROLE_X]) mx__cpu_f32_free(s->buf[ROLE_X], mx__kview_numel(xs)), s->buf[ROLE_X] = NULL;
  if (s->buf[ROLE_Y]) mx__cpu_f32_free(s->buf[ROLE_Y], mx__kview_numel(ys)), s->buf[ROLE_Y] = NULL;
  return status;
}

/* float16 and bfloat16 as the GPU does them: float32 products and sums, one rounding of the result. They run on
 * oneDNN's float32 primitives, whose reorders convert their operands (mx__dnnl_conv_in_f32); where that declines,
 * on dense float32 copies of the inputs (the loops when reference). Over blocks of samples (stage_samples; the
 * loops take the whole batch): x and y a block at a time, w and the bias once; a weight gradient's blocks' float32
 * sums added in float32 and rounded once, so they differ from the whole batch's only in the order of their terms.
 * bias: the forward's, copied to float32; for a weight's gradient, db (an output): summed beside dw where every
 * block converted (oneDNN's diff_bias), *db_summed says whether (NULL: no db). */
static mx_status via_f32(mx_conv_kind kind, const mx_kview *const *v, const mx_kview *bias, const mx_conv_params *p,
                         bool reference, bool *db_summed) {
  int out = output_role(kind);
  int64_t N = v[ROLE_X]->shape[0], block = reference ? N : stage_samples(v), w_numel = mx__kview_numel(v[ROLE_W]);
  bool converting = !reference; /* oneDNN's reorders convert: no copies */
  const mx_kview *db = out == ROLE_W ? bias : NULL;
  int64_t total = w_numel + (db ? mx__kview_numel(db) : 0); /* a weight's gradient: dw's float32 sums, db's after */
  staged s = {0};
  float *sums = NULL; /* a weight gradient's sums so far, when in blocks */
  mx_status status = MX_OK;
  if (out == ROLE_W && (s.buf[ROLE_W] = mx__cpu_f32_alloc(total))) {
    s.dense[ROLE_W] = mx__cpu_dense_f32_view(s.buf[ROLE_W], v[ROLE_W]);
    if (db) s.dense_bias = mx__cpu_dense_f32_view(s.buf[ROLE_W] + w_numel, db);
  } else if (out == ROLE_W) {
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory for the weight gradient in float32");
  }
  if (status == MX_OK && bias && !db && !(s.bias = mx__cpu_dense_f32(bias)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory converting the bias to float32");
  if (s.bias) s.dense_bias = mx__cpu_dense_f32_view(s.bias, bias);
  if (status == MX_OK && out == ROLE_W && block < N && !(sums = mx__cpu_f32_alloc(total)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory for the weight gradient's float32 sums");
  /* float16 weights converted here, once (mx__dnnl_conv_in_f32 declines oneDNN's float16 reorders) */
  if (status == MX_OK && converting && out != ROLE_W && v[ROLE_W]->dtype == MX_F16)
    status = stage(&s, ROLE_W, out, v[ROLE_W]);
  bool all_converted = true;
  if (block < 1) block = 1;
  for (int64_t n0 = 0; (n0 < N || n0 == 0) && status == MX_OK; n0 += block) { /* once for an empty batch */
    int64_t n = N - n0 < block ? N - n0 : block;
    mx_kview xs = mx__kview_samples(v[ROLE_X], n0, n), ys = mx__kview_samples(v[ROLE_Y], n0, n);
    const mx_kview *w = s.buf[ROLE_W] ? &s.dense[ROLE_W] : v[ROLE_W], *b = bias ? &s.dense_bias : NULL;
    status = converting ? mx__dnnl_conv_in_f32(kind, &xs, w, &ys, b, p) : MX_NOT_SUPPORTED;
    if (mx__dnnl_declined(status)) {
      converting = all_converted = false;
      status = run_copies(kind, &s, &xs, v[ROLE_W], &ys, bias && !db, p, reference);
    }
    if (status == MX_OK && sums) { /* the first block's sums are the sums so far */
      for (int64_t i = 0; i < total; i++) sums[i] = n0 ? sums[i] + s.buf[ROLE_W][i] : s.buf[ROLE_W][i];
    }
    if (status == MX_OK && block < N) atomic_fetch_add(&staged_blocks, 1);
  }
  const float *result = sums ? sums : s.buf[ROLE_W];
  if (status == MX_OK && out == ROLE_W) mx__cpu_store_f32(v[ROLE_W], result);
  if (status == MX_OK && db && all_converted) mx__cpu_store_f32(db, result + w_numel);
  if (db_summed) *db_summed = status == MX_OK && db && all_converted;
  if (sums) mx__cpu_f32_free(sums, total);
  if (s.buf[ROLE_W]) mx__cpu_f32_free(s.buf[ROLE_W], total);
  if (s.bias) mx__cpu_f32_free(s.bias, mx__kview_numel(bias));
  return status;
}

/* relu: the forward's output through a ReLU, fused into oneDNN's kernel
 * where it runs natively (or oneDNN's plain convolution when it has no
 * fused one), applied to y after every other path: float16's and
 * bfloat16's float32 sums round first, so the ReLU sees what the unfused
 * one would. */
static mx_status run(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y, const mx_kview *bias,
                     const mx_conv_params *p, bool reference, bool relu) {
  mx_status status = mx__conv_check(kind, x, w, y, bias, p);
  if (status != MX_OK) return status;
  const mx_kview *v[3] = {x, w, y};
  if (mx__kview_numel(v[output_role(kind)]) == 0) return MX_OK;
  /* an empty operand (no batch, no channels in a group): the sums are empty
   * and the loops write the zeros */
  bool empty = false;
  for (int r = 0; r < 3; r++) empty |= mx__kview_numel(v[r]) == 0;
  mx_dtype dt = x->dtype;
  bool loops = dt == MX_F64 || (dt == MX_F32 && (reference || empty));
  bool dnnl = !loops && (dt == MX_F32 || (dt == MX_BF16 && !reference && !empty));
  if (dnnl && relu && !mx__dnnl_declined(status = dnnl_run(kind, v, bias, p, true))) return status;
  if (dnnl && !mx__dnnl_declined(status = dnnl_run(kind, v, bias, p, false))) {
    if (status != MX_OK) return status;
  } else if (loops || dt == MX_F32) {
    reference_typed(kind, v, bias, p);
  } else if ((status = via_f32(kind, v, bias, p, reference || empty, NULL)) != MX_OK) {
    return status; /* float16 always, bfloat16 where oneDNN has no native kernel (mx__dnnl_native) */
  }
  return relu ? mx__cpu_unary(MX_UN_RELU, y, y, 0, 0) : MX_OK;
}

mx_status mx__cpu_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                               const mx_conv_params *p) {
  return run(MX_CONV_FORWARD, x, w, y, bias, p, false, false);
}

mx_status mx__cpu_conv_forward_relu(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                    const mx_conv_params *p) {
  return run(MX_CONV_FORWARD, x, w, y, bias, p, false, true);
}

mx_status mx__cpu_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                     const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_DATA, dx, w, dy, NULL, p, false, false);
}

mx_status mx__cpu_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                       const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p, false, false);
}

/* n dense float16, bfloat16 or float32 values at x as float32 (exact): x itself for float32, else widened into
 * chunk (n of them at most) by the conversions. */
static inline const float *widened(const char *x, mx_dtype dtype, int64_t n, float *chunk) {
  if (dtype == MX_F32) return (const float *)x;
  if (dtype == MX_F16) mx__f16_to_f32_n((const uint16_t *)x, chunk, n);
  else mx__bf16_to_f32_n((const uint16_t *)x, chunk, n);
  return chunk;
}

enum { SUM_CHUNK = 1024 }; /* floats widened at a time */

/* lanes[l] += x[k + l] over a run of n dense values (widened's dtypes), in whole blocks of 8, then the tail's
 * values into the first lanes: eight sums in double, each in its own order, so the loop vectorises without
 * reassociating any of them (a 16-bit or float32 value is exact in double). */
MX_WIDE_CLONES static void add_run_to_lanes(double lanes[8], const char *x, mx_dtype dtype, int64_t n) {
  float chunk[SUM_CHUNK];
  size_t bytes = mx_dtype_size(dtype);
  for (int64_t k0 = 0; k0 < n; k0 += SUM_CHUNK) {
    int64_t len = n - k0 < SUM_CHUNK ? n - k0 : SUM_CHUNK, k = 0;
    const float *v = widened(x + k0 * (int64_t)bytes, dtype, len, chunk);
    for (; k + 8 <= len; k += 8)
      for (int l = 0; l < 8; l++) lanes[l] += v[k + l];
    for (int l = 0; k < len; k++, l++) lanes[l] += v[k];
  }
}

/* acc[c] += x[p][c] over the pixels of a dense (pixels, C) block (channels-last; C <= SUM_CHUNK), in pixel
 * order, widened a whole number of pixels at a time: a sum in double for each channel, vectorised across them. */
MX_WIDE_CLONES static void add_pixels_to_channels(double *acc, const char *x, mx_dtype dtype, int64_t pixels,
                                                  int64_t C) {
  float chunk[SUM_CHUNK];
  size_t bytes = mx_dtype_size(dtype);
  int64_t per = SUM_CHUNK / C;
  for (int64_t p0 = 0; p0 < pixels; p0 += per) {
    int64_t count = pixels - p0 < per ? pixels - p0 : per;
    const float *v = widened(x + p0 * C * (int64_t)bytes, dtype, count * C, chunk);
    for (int64_t p = 0; p < count; p++)
      for (int64_t c = 0; c < C; c++) acc[c] += v[p * C + c];
  }
}

/* Whether dy (floating, 16 or 32 bits) lies so that channel_sums can read it in runs: each sample's channel a
 * dense plane (row-major), or each sample a dense (pixels, C) block (channels-last). */
static bool sums_in_runs(const mx_kview *dy, const int64_t size[3], const int64_t stride[3], int64_t unit) {
  return (size[2] == 1 || stride[2] == unit) && (size[1] == 1 || stride[1] == size[2] * unit) &&
         (size[0] == 1 || stride[0] == size[1] * size[2] * unit) &&
         (dy->dtype == MX_F32 || dy->dtype == MX_F16 || dy->dtype == MX_BF16);
}

/* A channels-last dy's sums: each sample's in pixel order (in parallel), then the samples' in order, so the
 * result does not depend on the thread count. false: out of memory for the partial sums (nothing written). */
static bool channel_sums_channels_last(const mx_kview *db, const mx_kview *dy, int64_t pixels) {
  int64_t N = dy->shape[0], C = dy->shape[1];
  size_t bytes = mx_dtype_size(dy->dtype);
  double *partial = calloc((size_t)(N * C), sizeof *partial);
  if (!partial) return false;
  MX_PARALLEL_FOR(mx__kview_numel(dy))
  for (int64_t n = 0; n < N; n++)
    add_pixels_to_channels(partial + n * C, (const char *)dy->data + n * dy->strides[0] * (int64_t)bytes, dy->dtype,
                           pixels, C);
  for (int64_t c = 0; c < C; c++) {
    double sum = 0;
    for (int64_t n = 0; n < N; n++) sum += partial[n * C + c];
    mx_element_store((char *)db->data + c * (int64_t)bytes, db->dtype, sum);
  }
  free(partial);
  return true;
}

/* db[c] = dy summed over the batch and the spatial dims, in double and rounded once: the bias's gradient where
 * oneDNN does not write it (float64, float16, bfloat16 on a CPU without its dot products, the loops' cases).
 * float16, bfloat16 and float32 read in runs (sums_in_runs): a row-major sample's channel plane at a time into
 * eight lanes (add_run_to_lanes), a channels-last sample at a time (channel_sums_channels_last); only the order of
 * the sum differs from the element loop's, which reads the rest, float64 included. */
static void channel_sums(const mx_kview *db, const mx_kview *dy) {
  int64_t size[3] = {1, 1, 1}, stride[3] = {0, 0, 0};
  for (int d = 2; d < dy->ndim; d++) size[d - 2] = dy->shape[d], stride[d - 2] = dy->strides[d];
  int64_t pixels = size[0] * size[1] * size[2], C = dy->shape[1];
  if (dy->strides[1] == 1 && C > 1 && C <= SUM_CHUNK && sums_in_runs(dy, size, stride, C) &&
      channel_sums_channels_last(db, dy, pixels))
    return;
  const char *base = dy->data;
  size_t bytes = mx_dtype_size(dy->dtype);
  bool planes = sums_in_runs(dy, size, stride, 1);
  MX_PARALLEL_FOR(mx__kview_numel(dy))
  for (int64_t c = 0; c < C; c++) {
    double lanes[8] = {0};
    for (int64_t n = 0; n < dy->shape[0]; n++) {
      const char *plane = base + (n * dy->strides[0] + c * dy->strides[1]) * (int64_t)bytes;
      if (planes) {
        add_run_to_lanes(lanes, plane, dy->dtype, pixels);
        continue;
      }
      for (int64_t i = 0; i < size[0]; i++)
        for (int64_t j = 0; j < size[1]; j++)
          for (int64_t k = 0; k < size[2]; k++)
            lanes[0] += mx_element_load(plane + (i * stride[0] + j * stride[1] + k * stride[2]) * (int64_t)bytes,
                                        dy->dtype);
    }
    double sum = 0;
    for (int l = 0; l < 8; l++) sum += lanes[l];
    mx_element_store((char *)db->data + c * (int64_t)bytes, db->dtype, sum);
  }
}

/* db = dy summed per channel by the reduction kernel (its vector column sums for a channels-last dy). */
static mx_status reduced_channel_sums(const mx_kview *db, const mx_kview *dy) {
  mx_kview kept = *db; /* db viewed with dy's rank, every dim but the channels 1: the reduction's output */
  kept.ndim = dy->ndim;
  for (int d = 0; d < dy->ndim; d++) kept.shape[d] = d == 1 ? dy->shape[1] : 1, kept.strides[d] = d == 1 ? 1 : 0;
  return mx__cpu_reduce(MX_RED_SUM, &kept, NULL, dy, ~2u & ((1u << dy->ndim) - 1));
}

mx_status mx__cpu_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                            const mx_kview *x, const mx_conv_params *p) {
  mx_status status = mx__conv_check(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, db, p);
  if (status != MX_OK) return status;
  bool empty = mx__kview_numel(x) == 0 || mx__kview_numel(dw) == 0 || mx__kview_numel(dy) == 0;
  bool dnnl = !empty && (x->dtype == MX_F32 || x->dtype == MX_BF16 || x->dtype == MX_F16);
  /* oneDNN 2.6's float32 nhwc weight-gradient kernels sum diff_bias outside their JIT code, slower than a separate
   * column sum (the demo CNN's channels-last step: 4% slower with it) */
  bool separate_sum = dnnl && x->dtype == MX_F32 && mx__kview_is_channels_last(dy);
  if (dnnl && !separate_sum && !mx__dnnl_declined(status = mx__dnnl_conv_backward_weight_bias(dw, db, dy, x, p)))
    return status;
  if (dnnl && x->dtype != MX_F32) { /* no native kernel: float32 primitives, their diff_bias beside dw */
    const mx_kview *v[3] = {x, dw, dy};
    bool summed;
    if ((status = via_f32(MX_CONV_BACKWARD_WEIGHT, v, db, p, false, &summed)) != MX_OK) return status;
    if (!summed) channel_sums(db, dy);
    return MX_OK;
  }
  if ((status = run(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p, false, false)) != MX_OK) return status;
  if (separate_sum) return reduced_channel_sums(db, dy);
  channel_sums(db, dy);
  return MX_OK;
}

mx_status mx__cpu_conv_forward_reference(const mx_kview *y, const mx_kview *x, const mx_kview *w,
                                         const mx_kview *bias, const mx_conv_params *p) {
  return run(MX_CONV_FORWARD, x, w, y, bias, p, true, false);
}

mx_status mx__cpu_conv_backward_data_reference(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                               const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_DATA, dx, w, dy, NULL, p, true, false);
}

mx_status mx__cpu_conv_backward_weight_reference(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                                 const mx_conv_params *p) {
  return run(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p, true, false);
}
