/* Batch norm's per-channel coefficient vectors (the backends' batch_norm_vectors slot): the formulas for one
 * channel, shared by the CPU and CUDA kernels so both give the same bits by construction. Each step is the
 * elementwise op ops/norm.c would otherwise run, in the vectors' dtype T (float, or double for float64 data),
 * rounded in T in the same order (no contraction into an FMA: C11 mode on the CPU, --fmad=false under nvcc), its
 * C scalars rounded to T first as the ops round a wrapped scalar:
 *
 *   forward:  invstd = 1 / sqrt(var + eps), scale = weight invstd, shift = bias - mean scale, and with running
 *             statistics rm = rm (1 - m) + mean m, rv = rv (1 - m) + (var k) m, k = n / (n - 1)
 *   backward: invstd as above, dweight = sum_gxc invstd, scale = weight invstd,
 *             xc_scale = gvar (2 / n) + (-1 / n) ((scale invstd) dweight),
 *             shift = gmean (1 / n) + (-1 / n) (scale sum_g)
 *
 * with n the values per channel and m the momentum. */
#ifndef MX_KERNELS_BATCH_NORM_VECTORS_H
#define MX_KERNELS_BATCH_NORM_VECTORS_H

#include "kernels/backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A batch_norm_vectors call as the formulas read it: the vectors' addresses (NULL: not given, or not wanted) and
 * its C scalars, in double until the formula rounds them to T. */
typedef struct {
  const void *mean, *var, *weight, *bias, *sum_g, *sum_gxc, *grad_mean, *grad_var;
  void *running_mean, *running_var, *scale, *shift, *xc_scale, *dweight;
  mx_bn_vectors_formula formula;
  double eps, one_minus_momentum, momentum, unbias, two_over_n, one_over_n, minus_one_over_n;
} mx_bn_vectors_plan;

/* The formulas for one channel c, written once for T = float (f32) and T = double (f64). */
#define MX__BN_VECTORS_AT(T, SUFFIX, SQRT)                                                                         \
  MX_HD static inline void mx_bn_vectors_at_##SUFFIX(const mx_bn_vectors_plan *p, int64_t c) {                     \
    const T var = ((const T *)p->var)[c];                                                                            \
    const T invstd = (T)1 / SQRT(var + (T)p->eps);                                                                   \
    if (p->formula == MX_BN_VECTORS_FORWARD) {                                                                       \
      const T mean = ((const T *)p->mean)[c];                                                                        \
      const T scale = ((const T *)p->weight)[c] * invstd;                                                            \
      ((T *)p->scale)[c] = scale;                                                                                    \
      ((T *)p->shift)[c] = ((const T *)p->bias)[c] - mean * scale;                                                   \
      if (!p->running_mean) return;                                                                                  \
      T *rm = (T *)p->running_mean + c, *rv = (T *)p->running_var + c;                                              \
      const T unbiased = var * (T)p->unbias;                                                                         \
      *rm = *rm * (T)p->one_minus_momentum + mean * (T)p->momentum;                                                  \
      *rv = *rv * (T)p->one_minus_momentum + unbiased * (T)p->momentum;                                              \
      return;                                                                                                        \
    }                                                                                                                \
    const T dweight = ((const T *)p->sum_gxc)[c] * invstd;                                                           \
    if (p->dweight) ((T *)p->dweight)[c] = dweight;                                                                  \
    if (!p->scale) return;                                                                                           \
    const T scale = ((const T *)p->weight)[c] * invstd;                                                              \
    ((T *)p->scale)[c] = scale;                                                                                      \
    ((T *)p->xc_scale)[c] =                                                                                          \
        ((const T *)p->grad_var)[c] * (T)p->two_over_n + (T)p->minus_one_over_n * ((scale * invstd) * dweight);      \
    ((T *)p->shift)[c] =                                                                                             \
        ((const T *)p->grad_mean)[c] * (T)p->one_over_n + (T)p->minus_one_over_n * (scale * ((const T *)p->sum_g)[c]); \
  }
MX__BN_VECTORS_AT(float, f32, sqrtf)
MX__BN_VECTORS_AT(double, f64, sqrt)
#undef MX__BN_VECTORS_AT

/* v's data, or NULL for none. */
static inline void *mx__bn_vector_data(const mx_kview *v) { return v ? v->data : NULL; }

/* Whether v is given as a formula needs it: a contiguous (C) vector of dtype (or absent where not needed). */
static inline bool mx__bn_vector_fits(const mx_kview *v, bool needed, mx_dtype dtype, int64_t channels) {
  if (!v) return !needed;
  return v->dtype == dtype && mx__kview_numel(v) == channels && mx__kview_is_contiguous(v);
}

/* The plan of a call, after checking that it gives what its formula reads and writes (what kernels/backend.h
 * says), or the error naming the slot. */
static inline mx_status mx_bn_vectors_plan_of(mx_bn_vectors_formula formula, const mx_bn_vectors *v,
                                              mx_bn_vectors_plan *p) {
  bool forward = formula == MX_BN_VECTORS_FORWARD, running = forward && (v->running_mean || v->running_var);
  bool coefficients = forward || v->scale;
  mx_dtype dtype = v->var ? v->var->dtype : MX_F32;
  int64_t channels = v->var ? mx__kview_numel(v->var) : 0;
  bool fits = (formula == MX_BN_VECTORS_FORWARD || formula == MX_BN_VECTORS_BACKWARD) && v->var &&
              (dtype == MX_F32 || dtype == MX_F64) && mx__bn_vector_fits(v->var, true, dtype, channels) &&
              mx__bn_vector_fits(v->mean, forward, dtype, channels) &&
              mx__bn_vector_fits(v->weight, coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->bias, forward, dtype, channels) &&
              mx__bn_vector_fits(v->running_mean, running, dtype, channels) &&
              mx__bn_vector_fits(v->running_var, running, dtype, channels) &&
              mx__bn_vector_fits(v->sum_gxc, !forward, dtype, channels) &&
              mx__bn_vector_fits(v->sum_g, !forward && coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->grad_mean, !forward && coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->grad_var, !forward && coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->scale, coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->shift, coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->xc_scale, !forward && coefficients, dtype, channels) &&
              mx__bn_vector_fits(v->dweight, false, dtype, channels) && (!forward || !v->dweight);
  if (!fits)
    return mx__error(MX_INVALID_ARGUMENT, "batch_norm_vectors: the %s formula's vectors are not contiguous (C) vectors "
                     "of one dtype (float32 or float64) given as it needs them", forward ? "forward" : "backward");
  /* plain assignments: C++17 (nvcc) has no designated initializers */
  memset(p, 0, sizeof *p);
  p->mean = mx__bn_vector_data(v->mean), p->var = v->var->data, p->weight = mx__bn_vector_data(v->weight);
  p->bias = mx__bn_vector_data(v->bias), p->sum_g = mx__bn_vector_data(v->sum_g);
  p->sum_gxc = mx__bn_vector_data(v->sum_gxc), p->grad_mean = mx__bn_vector_data(v->grad_mean);
  p->grad_var = mx__bn_vector_data(v->grad_var), p->running_mean = mx__bn_vector_data(v->running_mean);
  p->running_var = mx__bn_vector_data(v->running_var), p->scale = mx__bn_vector_data(v->scale);
  p->shift = mx__bn_vector_data(v->shift), p->xc_scale = mx__bn_vector_data(v->xc_scale);
  p->dweight = mx__bn_vector_data(v->dweight), p->formula = formula, p->eps = v->eps;
  /* the C scalars as ops/norm.c computes them in double before the ops round them */
  p->one_minus_momentum = 1 - v->momentum, p->momentum = v->momentum, p->unbias = v->count / (v->count - 1);
  p->two_over_n = 2 / v->count, p->one_over_n = 1 / v->count, p->minus_one_over_n = -1 / v->count;
  return MX_OK;
}

#ifdef __cplusplus
}
#endif

#endif
