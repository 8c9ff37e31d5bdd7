/* cross_entropy over class indices on the CPU, forward and backward in one pass over each row of x (N, C): the
 * general rows of kernels/cross_entropy_row.h (CUDA's too), and float32 rows with unit stride on the vectorised
 * float exponential, as softmax's float32 lines (kernels/cpu/indexing.c), within rounding of the general rows. */
#include <math.h>
#include <stdlib.h>

#include "kernels/cpu/cross_entropy.h"
#include "kernels/cpu/exp_f32.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/wide_clones.h"
#include "kernels/cross_entropy_row.h"

enum { LANES = 16, CHUNK = 256 }; /* LANES partial maxima and sums, so the loops vectorise without reassociating */

/* The row's max (NaN wins; 0 for a row of -inf, which is not shifted), and sum of e^(x - max) in double. */
MX__INLINE float max_and_sum_f32(const float *x, int64_t len, double *sum) {
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
  if (isinf(m) && m < 0) m = 0;
  /* the exponentials through a buffer, then their sum: GCC leaves the two in one loop unvectorised */
  double lane_sum[LANES] = {0}, s = 0;
  float e[CHUNK];
  for (int64_t start = 0; start < len; start += CHUNK) {
    int64_t n = len - start < CHUNK ? len - start : CHUNK, whole = n / LANES * LANES;
    for (int64_t k = 0; k < n; k++) e[k] = exp_nonpositive(x[start + k] - m);
    for (int64_t k = 0; k < whole; k += LANES)
      for (int j = 0; j < LANES; j++) lane_sum[j] += e[k + j];
    for (int64_t k = whole; k < n; k++) s += e[k];
  }
  for (int j = 0; j < LANES; j++) s += lane_sum[j];
  *sum = s;
  return m;
}

static MX_WIDE_CLONES double lse_f32(const float *x, int64_t len) {
  double sum;
  float m = max_and_sum_f32(x, len, &sum);
  return m + log(sum);
}

/* dx = (softmax(x) - onehot(t)) scale: the exponentials go through dx, then each is normalised and scaled. */
static MX_WIDE_CLONES void grad_row_f32(float *dx, const float *x, int64_t len, int64_t t, double scale) {
  double sum;
  float m = max_and_sum_f32(x, len, &sum);
  for (int64_t k = 0; k < len; k++) dx[k] = exp_nonpositive(x[k] - m);
  double inverse = 1.0 / sum, at_t = t >= 0 && t < len ? dx[t] : 0;
  for (int64_t k = 0; k < len; k++) dx[k] = (float)(dx[k] * inverse * scale);
  if (t >= 0 && t < len) dx[t] = (float)((at_t * inverse - 1) * scale);
}

static bool f32_rows(const mx_kview *x) { return x->dtype == MX_F32 && x->strides[1] == 1; }

mx_status mx__cpu_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0], c = x->shape[1];
  double *loss = malloc(sizeof(double) * (size_t)(n ? n : 1));
  if (!loss) return mx__error(MX_OUT_OF_MEMORY, "mx_cross_entropy: out of memory for %lld rows", (long long)n);
  bool f32 = f32_rows(x);
  MX_PARALLEL_FOR(n * c)
  for (int64_t i = 0; i < n; i++) {
    int64_t t = mx_xent_target(target, i);
    if (f32 && t != ignore_index && t >= 0 && t < c) {
      const float *row = (const float *)x->data + i * x->strides[0];
      loss[i] = lse_f32(row, c) - row[t];
    } else {
      loss[i] = mx_xent_loss(x, target, i, ignore_index);
    }
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
  bool f32 = f32_rows(x) && dx->dtype == MX_F32 && dx->strides[1] == 1;
  MX_PARALLEL_FOR(n * c)
  for (int64_t i = 0; i < n; i++) {
    double scale = mx_xent_scale(grad, target, i, ignore_index, mean, count);
    int64_t t = mx_xent_target(target, i);
    if (f32 && t != ignore_index)
      grad_row_f32((float *)dx->data + i * dx->strides[0], (const float *)x->data + i * x->strides[0], c, t, scale);
    else
      mx_xent_grad_row(dx, x, target, i, ignore_index, scale);
  }
  return MX_OK;
}
