/* Indexed reads and writes on the CPU: gather, scatter(-add), index_select,
 * index_add/index_copy, and softmax along a dim. Indices are int64 and
 * checked: an index out of range is an error naming it. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/exp_f32.h"
#include "kernels/cpu/indexing.h"
#include "kernels/cpu/parallel.h"

/* The coordinates of the linear (row-major) index in shape. */
static void unravel(int64_t linear, int ndim, const int64_t *shape, int64_t *coord) {
  for (int d = ndim - 1; d >= 0; d--) {
    coord[d] = linear % shape[d];
    linear /= shape[d];
  }
}

static int64_t offset_of(int ndim, const int64_t *coord, const int64_t *strides) {
  int64_t off = 0;
  for (int d = 0; d < ndim; d++) off += coord[d] * strides[d];
  return off;
}

static char *at(const mx_kview *v, int64_t offset) {
  return (char *)v->data + offset * (int64_t)mx_dtype_size(v->dtype);
}

static mx_status bad_index(const char *op, int64_t index, int dim, int64_t size) {
  return mx__error(MX_INDEX_ERROR, "%s: index %lld out of range for dim %d of size %lld", op, (long long)index, dim,
                   (long long)size);
}

/* out[c] = x[c with c[dim] = k] for every position c of out, k read from
 * index at c (gather) or at c[dim] of the 1-d index (index_select). */
static mx_status pick_along(const char *op, const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim,
                            bool index_per_element) {
  int64_t n = mx__kview_numel(out), bad = 0;
  bool any_bad = false;
  size_t size = mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(n)
  for (int64_t i = 0; i < n; i++) {
    int64_t c[MX_MAX_DIMS];
    unravel(i, out->ndim, out->shape, c);
    int64_t where = index_per_element ? offset_of(index->ndim, c, index->strides) : c[dim] * index->strides[0];
    int64_t k = *(const int64_t *)at(index, where);
    if (k < 0 || k >= x->shape[dim]) {
      bad = k;
      any_bad = true;
      continue;
    }
    int64_t oc = offset_of(out->ndim, c, out->strides);
    c[dim] = k;
    memcpy(at(out, oc), at(x, offset_of(x->ndim, c, x->strides)), size);
  }
  return !any_bad ? MX_OK : bad_index(op, bad, dim, x->shape[dim]);
}

mx_status mx__cpu_gather(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim) {
  return pick_along("mx_gather", out, x, index, dim, true);
}

mx_status mx__cpu_index_select(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim) {
  return pick_along("mx_index_select", out, x, index, dim, false);
}

mx_status mx__cpu_scatter(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, bool accumulate) {
  int64_t n = mx__kview_numel(index);
  size_t size = mx_dtype_size(out->dtype);
  for (int64_t i = 0; i < n; i++) { /* serial: two writes may meet */
    int64_t c[MX_MAX_DIMS];
    unravel(i, index->ndim, index->shape, c);
    int64_t k = *(const int64_t *)at(index, offset_of(index->ndim, c, index->strides));
    if (k < 0 || k >= out->shape[dim]) return bad_index(accumulate ? "mx_scatter_add" : "mx_scatter", k, dim, out->shape[dim]);
    const char *s = at(src, offset_of(src->ndim, c, src->strides));
    c[dim] = k;
    char *o = at(out, offset_of(out->ndim, c, out->strides));
    if (accumulate) mx_element_store(o, out->dtype, mx_element_load(o, out->dtype) + mx_element_load(s, src->dtype));
    else memcpy(o, s, size);
  }
  return MX_OK;
}

mx_status mx__cpu_index_add(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, double alpha,
                            bool accumulate) {
  int64_t n = mx__kview_numel(src);
  size_t size = mx_dtype_size(out->dtype);
  if (!mx_dtype_is_floating(out->dtype)) alpha = trunc(alpha);
  for (int64_t i = 0; i < n; i++) { /* serial: repeated indices meet */
    int64_t c[MX_MAX_DIMS];
    unravel(i, src->ndim, src->shape, c);
    int64_t k = *(const int64_t *)at(index, c[dim] * index->strides[0]);
    if (k < 0 || k >= out->shape[dim])
      return bad_index(accumulate ? "mx_index_add" : "mx_index_copy", k, dim, out->shape[dim]);
    const char *s = at(src, offset_of(src->ndim, c, src->strides));
    c[dim] = k;
    char *o = at(out, offset_of(out->ndim, c, out->strides));
    if (accumulate) mx_element_store(o, out->dtype, mx_element_load(o, out->dtype) + alpha * mx_element_load(s, src->dtype));
    else memcpy(o, s, size);
  }
  return MX_OK;
}

/* A float32 line with unit strides (a row-major tensor's last dim): float
 * loads and exponentials, as PyTorch's float kernel computes, the sum and
 * the normalisation in double. The max and the sum keep partial results
 * per lane, so the compiler vectorises them without reassociating; enough
 * lanes that consecutive vectors do not wait on each other: 32 floats for
 * the max (two AVX-512 vectors), 16 doubles for the sum (two; 8 and 32
 * measured slower). */
enum { MAX_LANES = 32, SUM_LANES = 16 };

MX__INLINE void softmax_line_f32_body(float *out, const float *x, int64_t len, bool log_softmax) {
  float lane_max[MAX_LANES];
  for (int j = 0; j < MAX_LANES; j++) lane_max[j] = -INFINITY;
  int64_t max_body = len / MAX_LANES * MAX_LANES;
  for (int64_t k = 0; k < max_body; k += MAX_LANES)
    for (int j = 0; j < MAX_LANES; j++) { /* NaN wins, and stays */
      float v = x[k + j];
      lane_max[j] = select_bits(-(uint32_t)((v > lane_max[j]) | (v != v)), v, lane_max[j]);
    }
  float m = -INFINITY;
  for (int j = 0; j < MAX_LANES; j++) m = lane_max[j] > m || lane_max[j] != lane_max[j] ? lane_max[j] : m;
  for (int64_t k = max_body; k < len; k++) m = x[k] > m || x[k] != x[k] ? x[k] : m;
  double lane_sum[SUM_LANES] = {0};
  int64_t body = len / SUM_LANES * SUM_LANES;
  if (isinf(m) && m < 0) m = 0; /* a line of -inf: no shift */
  for (int64_t k = 0; k < len; k++) out[k] = exp_nonpositive(x[k] - m);
  for (int64_t k = 0; k < body; k += SUM_LANES)
    for (int j = 0; j < SUM_LANES; j++) lane_sum[j] += out[k + j];
  double sum = 0;
  for (int j = 0; j < SUM_LANES; j++) sum += lane_sum[j];
  for (int64_t k = body; k < len; k++) sum += out[k];
  if (log_softmax) {
    double log_sum = log(sum);
    for (int64_t k = 0; k < len; k++) out[k] = (float)((double)x[k] - m - log_sum);
  } else {
    double inverse = 1.0 / sum;
    for (int64_t k = 0; k < len; k++) out[k] = (float)(out[k] * inverse);
  }
}

/* The same line compiled for wider vectors: the baseline build's SSE2 is
 * 4 floats wide. No FMA: ISO C mode does not contract, so every clone
 * rounds as the baseline does and results do not depend on the CPU. */
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx512f"))) static void softmax_line_f32_avx512(float *out, const float *x, int64_t len,
                                                                       bool log_softmax) {
  softmax_line_f32_body(out, x, len, log_softmax);
}

__attribute__((target("avx2"))) static void softmax_line_f32_avx2(float *out, const float *x, int64_t len,
                                                                  bool log_softmax) {
  softmax_line_f32_body(out, x, len, log_softmax);
}
#endif

static void softmax_line_f32(float *out, const float *x, int64_t len, bool log_softmax) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx512f")) {
    softmax_line_f32_avx512(out, x, len, log_softmax);
    return;
  }
  if (__builtin_cpu_supports("avx2")) {
    softmax_line_f32_avx2(out, x, len, log_softmax);
    return;
  }
#endif
  softmax_line_f32_body(out, x, len, log_softmax);
}

/* Each line along dim: shift by the max, exponentiate, normalise (or take
 * logs), in double. */
mx_status mx__cpu_softmax(const mx_kview *out, const mx_kview *x, int dim, bool log_softmax) {
  int64_t len = x->shape[dim];
  int64_t lines = len ? mx__kview_numel(x) / len : 0;
  int64_t line_shape[MX_MAX_DIMS];
  memcpy(line_shape, x->shape, sizeof line_shape);
  line_shape[dim] = 1;
  bool f32_lines = x->dtype == MX_F32 && out->dtype == MX_F32 && x->strides[dim] == 1 && out->strides[dim] == 1;
  MX_PARALLEL_FOR(lines * len)
  for (int64_t l = 0; l < lines; l++) {
    int64_t c[MX_MAX_DIMS];
    unravel(l, x->ndim, line_shape, c);
    int64_t xo = offset_of(x->ndim, c, x->strides), oo = offset_of(out->ndim, c, out->strides);
    if (f32_lines) {
      softmax_line_f32((float *)at(out, oo), (const float *)at(x, xo), len, log_softmax);
      continue;
    }
    int64_t xs = x->strides[dim], os = out->strides[dim];
    double m = -INFINITY, sum = 0;
    for (int64_t k = 0; k < len; k++) {
      double v = mx_element_load(at(x, xo + k * xs), x->dtype);
      m = v > m || isnan(v) ? v : m;
    }
    if (isinf(m) && m < 0) m = 0; /* a line of -inf: no shift */
    for (int64_t k = 0; k < len; k++) sum += exp(mx_element_load(at(x, xo + k * xs), x->dtype) - m);
    double log_sum = log(sum);
    for (int64_t k = 0; k < len; k++) {
      double shifted = mx_element_load(at(x, xo + k * xs), x->dtype) - m;
      mx_element_store(at(out, oo + k * os), out->dtype, log_softmax ? shifted - log_sum : exp(shifted) / sum);
    }
  }
  return MX_OK;
}
