/* cross_entropy over class indices on the CPU, forward and backward in one pass over each row of x (N, C): the
 * general rows of kernels/cross_entropy_row.h (CUDA's too), and float32 rows with unit stride on the vectorised
 * float exponential, as softmax's float32 lines (kernels/cpu/indexing.c), within rounding of the general rows.
 * Short float32 rows go in groups of up to CHUNK elements whose exponentials are one loop, so that they vectorise
 * across the rows: a classifier's 10 classes are less than one AVX-512 vector. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/exp_f32.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/wide_clones.h"
#include "kernels/cross_entropy_row.h"

enum { LANES = 16, CHUNK = 256 }; /* LANES partial maxima and sums, so the loops vectorise without reassociating */

/* The row's max: NaN wins; 0 for a row of -inf, which is not shifted. */
MX__INLINE float max_f32(const float *x, int64_t len) {
  float lane_max[LANES];
  for (int j = 0; j < LANES; j++) lane_max[j] = -INFINITY;
  int64_t body = len / LANES * LANES;
  for (int64_t k = 0; k < body; k += LANES)
    for (int j = 0; j < LANES; j++) {
      float v = x[k + j];
      lane_max[j] = select_bits(-(uint32_t)((v > lane_max[j]) | (v != v)), v, lane_max[j]);
    }
  float m = -INFINITY;
  for (int j = 0; j < LANES; j++) m = lane_max[j] > m || lane_max[j] != lane_max[j] ? lane_max[j] : m;
  for (int64_t k = body; k < len; k++) m = x[k] > m || x[k] != x[k] ? x[k] : m;
  return isinf(m) && m < 0 ? 0 : m;
}

MX__INLINE double sum_as_double(const float *e, int64_t len) {
  double lane_sum[LANES] = {0}, s = 0;
  int64_t body = len / LANES * LANES;
  for (int64_t k = 0; k < body; k += LANES)
    for (int j = 0; j < LANES; j++) lane_sum[j] += e[k + j];
  for (int j = 0; j < LANES; j++) s += lane_sum[j];
  for (int64_t k = body; k < len; k++) s += e[k];
  return s;
}

/* e into rows * len contiguous floats (at most CHUNK): e^(x - max) of each row of x (x_stride apart), the maxima into
 * m, the exponentials in one loop over the group */
MX__INLINE void group_exps(float *e, float *m, const float *x, int64_t x_stride, int64_t rows, int64_t len) {
  for (int64_t r = 0; r < rows; r++) {
    m[r] = max_f32(x + r * x_stride, len);
    for (int64_t k = 0; k < len; k++) e[r * len + k] = x[r * x_stride + k] - m[r];
  }
  for (int64_t k = 0; k < rows * len; k++) e[k] = exp_nonpositive(e[k]);
}

/* lse of each row of a group of rows of at most CHUNK elements in all, or of one longer row */
static MX_WIDE_CLONES void lse_rows_f32(double *lse, const float *x, int64_t x_stride, int64_t rows, int64_t len) {
  float e[CHUNK], m[CHUNK];
  if (len <= CHUNK) {
    group_exps(e, m, x, x_stride, rows, len);
    for (int64_t r = 0; r < rows; r++) lse[r] = m[r] + log(sum_as_double(e + r * len, len));
    return;
  }
  float top = max_f32(x, len);
  double sum = 0;
  for (int64_t start = 0; start < len; start += CHUNK) { /* through e, CHUNK at a time */
    int64_t n = len - start < CHUNK ? len - start : CHUNK;
    for (int64_t k = 0; k < n; k++) e[k] = exp_nonpositive(x[start + k] - top);
    sum += sum_as_double(e, n);
  }
  lse[0] = top + log(sum);
}

/* dx (rows * len, contiguous) = (softmax(x) - onehot(t[r])) scale[r] for each row of a group as lse_rows_f32's: the
 * exponentials go through dx, then each row's are normalised and scaled */
static MX_WIDE_CLONES void grad_rows_f32(float *dx, const float *x, int64_t x_stride, int64_t rows, int64_t len,
                                         const int64_t *t, const double *scale) {
  float m[CHUNK];
  if (len <= CHUNK) {
    group_exps(dx, m, x, x_stride, rows, len);
  } else {
    m[0] = max_f32(x, len);
    for (int64_t k = 0; k < len; k++) dx[k] = exp_nonpositive(x[k] - m[0]);
  }
  for (int64_t r = 0; r < rows; r++) {
    float *d = dx + r * len;
    double inverse = 1.0 / sum_as_double(d, len), at_t = t[r] >= 0 && t[r] < len ? d[t[r]] : 0;
    for (int64_t k = 0; k < len; k++) d[k] = (float)(d[k] * inverse * scale[r]);
    if (t[r] >= 0 && t[r] < len) d[t[r]] = (float)((at_t * inverse - 1) * scale[r]);
  }
}

/* Rows per group: as many as fit CHUNK elements, or one. */
static int64_t group_rows(int64_t len) { return len > CHUNK ? 1 : CHUNK / len; }

mx_status mx__cpu_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0], c = x->shape[1];
  double *loss = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!loss) return mx__error(MX_OUT_OF_MEMORY, "mx_cross_entropy: out of memory for %lld rows", (long long)n);
  if (x->dtype == MX_F32 && x->strides[1] == 1 && c > 0) {
    const float *xf = x->data;
    int64_t group = group_rows(c), groups = (n + group - 1) / group;
    MX_PARALLEL_FOR(n * c)
    for (int64_t g = 0; g < groups; g++) {
      int64_t first = g * group;
      lse_rows_f32(loss + first, xf + first * x->strides[0], x->strides[0], n - first < group ? n - first : group, c);
    }
    for (int64_t i = 0; i < n; i++) { /* the lse of ignored rows, maybe NaN, counts for nothing */
      int64_t t = mx_xent_target(target, i);
      loss[i] = t == ignore_index ? 0 : t < 0 || t >= c ? NAN : loss[i] - xf[i * x->strides[0] + t];
    }
  } else {
    MX_PARALLEL_FOR(n * c)
    for (int64_t i = 0; i < n; i++) loss[i] = mx_xent_loss(x, target, i, ignore_index);
  }
  if (rows)
    for (int64_t i = 0; i < n; i++)
      mx_element_store((char *)rows->data + i * rows->strides[0] * mx_xent_size(rows->dtype), rows->dtype, loss[i]);
  if (out) {
    double sum = 0; /* in row order, so the result does not depend on the threads */
    for (int64_t i = 0; i < n; i++) sum += loss[i];
    mx_element_store(out->data, out->dtype, mean ? sum / (double)mx_xent_count(target, ignore_index) : sum);
  }
  free(loss);
  return MX_OK;
}

mx_status mx__cpu_cross_entropy_backward(const mx_kview *dx, const mx_kview *grad, const mx_kview *x,
                                         const mx_kview *target, int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0], c = x->shape[1];
  int64_t count = mean ? mx_xent_count(target, ignore_index) : 1;
  if (x->dtype == MX_F32 && x->strides[1] == 1 && dx->dtype == MX_F32 && dx->strides[1] == 1 && dx->strides[0] == c &&
      c > 0) {
    int64_t group = group_rows(c), groups = (n + group - 1) / group;
    MX_PARALLEL_FOR(n * c)
    for (int64_t g = 0; g < groups; g++) {
      int64_t first = g * group, size = n - first < group ? n - first : group, t[CHUNK];
      double scale[CHUNK];
      for (int64_t r = 0; r < size; r++) {
        t[r] = mx_xent_target(target, first + r);
        scale[r] = mx_xent_scale(grad, target, first + r, ignore_index, mean, count);
      }
      float *d = (float *)dx->data + first * c;
      grad_rows_f32(d, (const float *)x->data + first * x->strides[0], x->strides[0], size, c, t, scale);
      for (int64_t r = 0; r < size; r++) /* an ignored row's gradient is 0, whatever its x */
        if (t[r] == ignore_index) memset(d + r * c, 0, sizeof(float) * (size_t)c);
    }
    return MX_OK;
  }
  MX_PARALLEL_FOR(n * c)
  for (int64_t i = 0; i < n; i++)
    mx_xent_grad_row(dx, x, target, i, ignore_index, mx_xent_scale(grad, target, i, ignore_index, mean, count));
  return MX_OK;
}
