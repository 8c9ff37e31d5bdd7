/* Batch norm's (C) coefficient vectors in one kernel (the batch_norm_vectors slot, ops/norm.c): the CPU's kernel
 * against the elementwise ops it replaces, bit for bit, on awkward values in float32 and float64; and a whole
 * training step (forward, running statistics, backward) against the ops-built step batch norm ran before, bit for
 * bit, in float32, float64 and bfloat16, with and without relu, weight and bias, and running statistics, on 2-d,
 * 4-d and channels-last input; the running statistics' versions; their fallbacks. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "bn_input.h"

#include "kernels/cpu/batch_norm.h"
#include "kernels/cpu/batch_norm_vectors.h"
#include "ops/op_table.h"
#include "tensor/tensor_impl.h"

static mx_dtype vector_dtype(mx_dtype dtype) { return dtype == MX_F64 ? MX_F64 : MX_F32; }

/* a and b hold the same bits, element by element (any NaN matching any NaN) */
static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: missing (%s)", what, mx_last_error());
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s: dtypes differ", what);
  cr_assert_eq(mx_numel(a), mx_numel(b), "%s: sizes differ", what);
  int64_t n = mx_numel(a);
  double *va = malloc(sizeof(double) * (size_t)(n + 1)), *vb = malloc(sizeof(double) * (size_t)(n + 1));
  size_t size = mx_dtype_size(mx_dtype_of(a)), bytes = (size_t)n * size;
  unsigned char *pa = malloc(bytes + 1), *pb = malloc(bytes + 1);
  cr_assert(va && vb && pa && pb);
  cr_assert_eq(mx_to_host(mx_contiguous(a), pa, bytes), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_to_host(mx_contiguous(b), pb, bytes), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_to_host(mx_to_dtype(mx_contiguous(a), MX_F64), va, sizeof(double) * (size_t)n), MX_OK);
  cr_assert_eq(mx_to_host(mx_to_dtype(mx_contiguous(b), MX_F64), vb, sizeof(double) * (size_t)n), MX_OK);
  int64_t differ = 0, first = -1;
  for (int64_t i = 0; i < n; i++) {
    bool same = memcmp(pa + (size_t)i * size, pb + (size_t)i * size, size) == 0 || (isnan(va[i]) && isnan(vb[i]));
    if (!same && first < 0) first = i;
    differ += !same;
  }
  cr_expect_eq(differ, 0, "%s: %lld of %lld elements differ, first %lld: %.9g against %.9g", what, (long long)differ,
               (long long)n, (long long)first, first >= 0 ? va[first] : 0, first >= 0 ? vb[first] : 0);
  free(va), free(vb), free(pa), free(pb);
}

/* --- the kernel against the ops ------------------------------------------------------------------------------ */

/* An awkward value: scales from 2^-30 to 2^30 either sign, now and then 0, -0, a tiny one, NaN or an infinity. */
static double awkward(unsigned *seed) {
  int pick = rand_r(seed) % 40;
  if (pick == 0) return 0.0;
  if (pick == 1) return -0.0;
  if (pick == 2) return 1e-41;
  if (pick == 3) return NAN;
  if (pick == 4) return pick % 2 ? INFINITY : -INFINITY;
  double mantissa = 1 + (rand_r(seed) % 1000000) / 1e6;
  return (rand_r(seed) % 2 ? -1 : 1) * ldexp(mantissa, rand_r(seed) % 61 - 30);
}

/* A (C) vector of dtype: awkward values, or with positive set their magnitudes (variances). */
static mx_tensor *vector_of(int64_t channels, mx_dtype dtype, bool positive, unsigned *seed) {
  double v[64];
  for (int64_t c = 0; c < channels; c++) v[c] = positive ? fabs(awkward(seed)) : awkward(seed);
  mx_tensor *t = mx_to_dtype(mx_from_data(v, MX_SHAPE(channels), MX_F64, MX_CPU), dtype);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

static mx_tensor *empty_vector(int64_t channels, mx_dtype dtype) {
  mx_tensor *t = mx_full(MX_SHAPE(channels), 7.0, dtype, MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

static const mx_kview *view(mx_kview *v, const mx_tensor *t) {
  if (!t) return NULL;
  *v = mx__kview_of(t);
  return v;
}

/* Both formulas, with and without their optional parts, against the chains of ops ops/norm.c runs without the
 * kernel (the same calls, the same C scalars), on 61 channels of awkward values, for several eps, momentum and n. */
Test(batch_norm_vectors, kernel_is_the_ops_bit_for_bit) {
  const double eps[3] = {1e-5, 1e-3, 0}, momentum[3] = {0.1, 1.0 / 3, 0.9}, count[4] = {2, 3, 49, 50176};
  const int64_t channels = 61;
  unsigned seed = 17;
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 12; k++) {
      mx_scope *scope = mx_scope_begin();
      mx_dtype dtype = d ? MX_F64 : MX_F32;
      double e = eps[k % 3], m = momentum[k / 4 % 3], n = count[k % 4];
      mx_tensor *mean = vector_of(channels, dtype, false, &seed), *var = vector_of(channels, dtype, true, &seed);
      mx_tensor *weight = vector_of(channels, dtype, false, &seed), *bias = vector_of(channels, dtype, false, &seed);
      mx_tensor *rm = vector_of(channels, dtype, false, &seed), *rv = vector_of(channels, dtype, true, &seed);
      mx_tensor *sum_g = vector_of(channels, dtype, false, &seed), *sum_gxc = vector_of(channels, dtype, false, &seed);
      mx_tensor *gmean = vector_of(channels, dtype, false, &seed), *gvar = vector_of(channels, dtype, false, &seed);
      bool running = k % 2;
      char what[96];

      /* forward, as mx__fwd_batch_norm_training and batch_norm's running statistics ran it */
      mx_tensor *invstd = mx_rsqrt(mx_add_scalar(var, e));
      mx_tensor *scale = mx_mul(weight, invstd), *shift = mx_sub(bias, mx_mul(mean, scale));
      mx_tensor *unbiased = mx_mul_scalar(var, n / (n - 1));
      mx_tensor *want_rm = mx_add(mx_mul_scalar(rm, 1 - m), mx_mul_scalar(mean, m));
      mx_tensor *want_rv = mx_add(mx_mul_scalar(rv, 1 - m), mx_mul_scalar(unbiased, m));
      mx_tensor *got_scale = empty_vector(channels, dtype), *got_shift = empty_vector(channels, dtype);
      mx_tensor *got_rm = mx_clone(rm), *got_rv = mx_clone(rv);
      mx_kview v[14];
      mx_bn_vectors fw = {.mean = view(&v[0], mean), .var = view(&v[1], var), .weight = view(&v[2], weight),
                          .bias = view(&v[3], bias), .running_mean = running ? view(&v[4], got_rm) : NULL,
                          .running_var = running ? view(&v[5], got_rv) : NULL, .scale = view(&v[6], got_scale),
                          .shift = view(&v[7], got_shift), .eps = e, .momentum = m, .count = n};
      cr_assert_eq(mx__cpu_batch_norm_vectors(MX_BN_VECTORS_FORWARD, &fw), MX_OK, "%s", mx_last_error());
      snprintf(what, sizeof what, "%s, case %d, forward", mx_dtype_name(dtype), k);
      expect_same_bits(got_scale, scale, what);
      expect_same_bits(got_shift, shift, what);
      expect_same_bits(got_rm, running ? want_rm : rm, what);
      expect_same_bits(got_rv, running ? want_rv : rv, what);

      /* backward, as mx__bwd_batch_norm_training ran it: dweight alone, or with dx's coefficients */
      mx_tensor *dweight = mx_mul(sum_gxc, invstd);
      mx_tensor *xc_scale = mx_add_scaled(mx_mul_scalar(gvar, 2 / n), mx_mul(mx_mul(scale, invstd), dweight), -1 / n);
      mx_tensor *dx_shift = mx_add_scaled(mx_mul_scalar(gmean, 1 / n), mx_mul(scale, sum_g), -1 / n);
      bool want_dx = k % 3 != 1;
      mx_tensor *got[4];
      for (int i = 0; i < 4; i++) got[i] = empty_vector(channels, dtype);
      mx_bn_vectors bw = {.var = view(&v[0], var), .sum_gxc = view(&v[1], sum_gxc), .dweight = view(&v[2], got[0]),
                          .eps = e, .count = n};
      if (want_dx) {
        bw.weight = view(&v[3], weight), bw.sum_g = view(&v[4], sum_g), bw.grad_mean = view(&v[5], gmean);
        bw.grad_var = view(&v[6], gvar), bw.scale = view(&v[7], got[1]), bw.xc_scale = view(&v[8], got[2]);
        bw.shift = view(&v[9], got[3]);
      }
      cr_assert_eq(mx__cpu_batch_norm_vectors(MX_BN_VECTORS_BACKWARD, &bw), MX_OK, "%s", mx_last_error());
      snprintf(what, sizeof what, "%s, case %d, backward", mx_dtype_name(dtype), k);
      expect_same_bits(got[0], dweight, what);
      mx_tensor *untouched = empty_vector(channels, dtype);
      expect_same_bits(got[1], want_dx ? scale : untouched, what);
      expect_same_bits(got[2], want_dx ? xc_scale : untouched, what);
      expect_same_bits(got[3], want_dx ? dx_shift : untouched, what);
      mx_scope_end(scope);
    }
}

/* A formula given vectors it cannot take: an error naming the slot and the formula, nothing written. */
Test(batch_norm_vectors, kernel_refuses_what_it_cannot_take) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *f32 = mx_ones(MX_SHAPE(4), MX_F32, MX_CPU), *f64 = mx_ones(MX_SHAPE(4), MX_F64, MX_CPU);
  mx_tensor *short_one = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU), *out = mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU);
  mx_tensor *strided = mx_slice(mx_ones(MX_SHAPE(8), MX_F32, MX_CPU), 0, 0, 8, 2);
  mx_tensor *f16 = mx_ones(MX_SHAPE(4), MX_F16, MX_CPU);
  cr_assert(f32 && f64 && short_one && out && strided && f16, "%s", mx_last_error());
  mx_kview v[8];
  const mx_tensor *odd[4] = {f64, short_one, strided, NULL};
  for (int k = 0; k < 4; k++) {
    mx_bn_vectors fw = {.mean = view(&v[0], f32), .var = view(&v[1], f32), .weight = view(&v[2], odd[k]),
                        .bias = view(&v[3], f32), .scale = view(&v[4], out), .shift = view(&v[5], out), .count = 4};
    cr_expect_eq(mx__cpu_batch_norm_vectors(MX_BN_VECTORS_FORWARD, &fw), MX_INVALID_ARGUMENT, "weight %d", k);
    cr_expect_str_eq(mx_last_error(), "batch_norm_vectors: the forward formula's vectors are not contiguous (C) "
                                      "vectors of one dtype (float32 or float64) given as it needs them");
  }
  mx_bn_vectors half = {.var = view(&v[0], f16), .sum_gxc = view(&v[1], f16), .count = 4};
  cr_expect_eq(mx__cpu_batch_norm_vectors(MX_BN_VECTORS_BACKWARD, &half), MX_INVALID_ARGUMENT);
  cr_expect_str_eq(mx_last_error(), "batch_norm_vectors: the backward formula's vectors are not contiguous (C) "
                                    "vectors of one dtype (float32 or float64) given as it needs them");
  mx_bn_vectors one_running = {.mean = view(&v[0], f32), .var = view(&v[1], f32), .weight = view(&v[2], f32),
                               .bias = view(&v[3], f32), .running_mean = view(&v[4], f32),
                               .scale = view(&v[5], out), .shift = view(&v[6], out), .count = 4};
  cr_expect_eq(mx__cpu_batch_norm_vectors(MX_BN_VECTORS_FORWARD, &one_running), MX_INVALID_ARGUMENT);
  cr_expect_eq(mx_item(mx_sum(out, MX_DIMS(0), false)), 0.0, "nothing written");
  mx_scope_end(scope);
}

/* --- a training step against the ops-built one ---------------------------------------------------------------- */

static mx_tensor *of(const double *v, mx_dtype dtype) {
  return mx_to_dtype(mx_from_data(v, MX_SHAPE(4), MX_F64, MX_CPU), dtype);
}

/* The per-channel kernels' view of t laid out channels-last or not, as ops/norm.c's channel_view gives it. */
static mx_kview channel_view(const mx_tensor *t, bool channels_last) {
  mx_kview v = mx__kview_of(t);
  if (!channels_last) return v;
  int64_t pixels = v.shape[0] * v.shape[2] * v.shape[3], channels = v.shape[1];
  v.ndim = 2;
  v.shape[0] = pixels, v.shape[1] = channels;
  v.strides[0] = channels, v.strides[1] = 1;
  return v;
}

static mx_tensor *alloc_like(const mx_tensor *like, bool channels_last) {
  mx_tensor *t = channels_last ? mx__tensor_alloc_channels_last("test", mx_shape_get(like), mx_dtype_of(like), MX_CPU)
                               : mx__tensor_alloc("test", mx_shape_get(like), mx_dtype_of(like), MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* The training step as batch norm ran it before the kernel: the statistics' primitive, the (C) vectors by ops, y
 * through channel_affine, the running statistics by ops and mx_copy_ (running NULL: none); then for gradient gy the
 * backward's sums (channel_sums), its vectors by ops (the mean and var outputs' gradients zeros, as the engine
 * gives them) and dx through channel_combine. grads: dx, dweight, dbias. */
static mx_tensor *step_by_ops(mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_tensor *const *running, mx_tensor *gy,
                              bool relu, mx_tensor **grads) {
  const double momentum = 0.1, eps = 1e-5;
  mx_dtype vd = vector_dtype(mx_dtype_of(x));
  int64_t channels = mx_shape_get(x).d[1];
  double n = (double)mx_numel(x) / (double)channels;
  mx_tensor *stats[MX__MAX_OUTPUTS] = {0}, *y = NULL;
  MX_NO_GRAD {
    mx_tensor *weight = w ? w : mx_ones(MX_SHAPE(channels), vd, MX_CPU);
    mx_tensor *bias = b ? b : mx_zeros(MX_SHAPE(channels), vd, MX_CPU);
    cr_assert_eq(mx__dispatch(MX_OP_BATCH_NORM_STATS, 1, (const mx_tensor *const[]){x}, NULL, stats), MX_OK, "%s",
                 mx_last_error());
    mx_tensor *mean = stats[0], *var = stats[1];
    mx_tensor *invstd = mx_rsqrt(mx_add_scalar(var, eps));
    mx_tensor *scale = mx_mul(weight, invstd), *shift = mx_sub(bias, mx_mul(mean, scale));
    if (running) {
      mx_tensor *unbiased = mx_mul_scalar(var, n / (n - 1));
      mx_copy_(running[0], mx_add(mx_mul_scalar(running[0], 1 - momentum), mx_mul_scalar(mean, momentum)));
      mx_copy_(running[1], mx_add(mx_mul_scalar(running[1], 1 - momentum), mx_mul_scalar(unbiased, momentum)));
    }
    bool cl = mx__suggests_channels_last(x) && mx_ndim(x) == 4;
    y = alloc_like(x, cl);
    mx_kview yv = channel_view(y, cl), xv = channel_view(x, cl), sv = mx__kview_of(scale), hv = mx__kview_of(shift);
    cr_assert_eq(mx__cpu_channel_affine(&yv, &xv, NULL, &sv, &hv, NULL, relu), MX_OK, "%s", mx_last_error());

    mx_tensor *mask = relu ? y : NULL;
    bool sums_cl = mx_ndim(x) == 4 && (mx__suggests_channels_last(gy) || mx__suggests_channels_last(x));
    mx_tensor *gs = mx__tensor_in_layout("test", gy, sums_cl), *xs = mx__tensor_in_layout("test", x, sums_cl);
    mx_tensor *ms = mask ? mx__tensor_in_layout("test", mask, sums_cl) : NULL;
    mx_tensor *sum_g = mx_zeros(MX_SHAPE(channels), vd, MX_CPU), *sum_gxc = mx_zeros(MX_SHAPE(channels), vd, MX_CPU);
    mx_kview v[4], gv = channel_view(gs, sums_cl), xsv = channel_view(xs, sums_cl);
    mx_kview mv = ms ? channel_view(ms, sums_cl) : gv;
    v[0] = mx__kview_of(sum_g), v[1] = mx__kview_of(sum_gxc), v[2] = mx__kview_of(mean);
    cr_assert_eq(mx__cpu_channel_sums(&v[0], &v[1], &gv, &xsv, NULL, &v[2], ms ? &mv : NULL), MX_OK, "%s",
                 mx_last_error());
    mx_tensor *zeros = mx_zeros(MX_SHAPE(channels), vd, MX_CPU);
    mx_tensor *dweight = mx_mul(sum_gxc, invstd);
    mx_tensor *xc_scale =
        mx_add_scaled(mx_mul_scalar(zeros, 2 / n), mx_mul(mx_mul(scale, invstd), dweight), -1 / n);
    mx_tensor *dx_shift = mx_add_scaled(mx_mul_scalar(zeros, 1 / n), mx_mul(scale, sum_g), -1 / n);
    mx_tensor *gc = mx__tensor_in_layout("test", gy, cl), *mc = mask ? mx__tensor_in_layout("test", mask, cl) : NULL;
    mx_tensor *dx = alloc_like(x, cl);
    mx_kview dv = channel_view(dx, cl), av = channel_view(gc, cl), mcv = mc ? channel_view(mc, cl) : av, c[4];
    mx_tensor *vectors[4] = {scale, mean, xc_scale, dx_shift};
    for (int k = 0; k < 4; k++) c[k] = mx__kview_of(vectors[k]);
    cr_assert_eq(mx__cpu_channel_combine(&dv, &av, &xv, &c[0], &c[1], &c[2], &c[3], mc ? &mcv : NULL), MX_OK, "%s",
                 mx_last_error());
    grads[0] = dx, grads[1] = dweight, grads[2] = sum_g;
  }
  return y;
}

/* The step through mx_batch_norm(_relu) and mx_grad: y, the running statistics (NULL: none), grads as above (the
 * weight's and the bias's NULL where they are not given). */
static mx_tensor *step(mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_tensor *const *running, mx_tensor *gy, bool relu,
                       mx_tensor **grads) {
  mx_tensor *in[3] = {x, w, b}, *wanted[3], *got[3] = {0};
  int n = 0;
  for (int i = 0; i < 3; i++)
    if (in[i]) {
      cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
      wanted[n++] = in[i];
    }
  mx_tensor *rm = running ? running[0] : NULL, *rv = running ? running[1] : NULL;
  mx_tensor *y = relu ? mx_batch_norm_relu(x, rm, rv, w, b, true, 0.1, 1e-5)
                      : mx_batch_norm(x, rm, rv, w, b, true, 0.1, 1e-5);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_assert_eq(mx_grad(1, &y, n, wanted, &gy, false, false, false, got), MX_OK, "%s", mx_last_error());
  for (int i = 0, k = 0; i < 3; i++) grads[i] = in[i] ? got[k++] : NULL;
  for (int i = 0; i < 3; i++)
    if (in[i]) mx_set_requires_grad(in[i], false);
  return mx_detach(y);
}

/* The step's y, running statistics and gradients hold the ops-built step's bits, in float32, float64 and bfloat16
 * (float32 statistics), with and without relu, weight and bias, and running statistics, on 2-d, 4-d and
 * channels-last input; each running statistic's version moves on by one, as mx_copy_ moves it. */
Test(batch_norm_vectors, training_step_is_the_ops_bit_for_bit) {
  const mx_shape shapes[3] = {{2, {64, 4}}, {4, {4, 4, 9, 7}}, {4, {4, 4, 9, 7}}};
  const mx_dtype dtypes[3] = {MX_F32, MX_F64, MX_BF16};
  const char *names[3] = {"dx", "dweight", "dbias"};
  for (int d = 0; d < 3; d++)
    for (int s = 0; s < 3; s++)
      for (int mode = 0; mode < 8; mode++) {
        mx_scope *scope = mx_scope_begin();
        bool relu = mode & 1, affine = mode & 2, running = mode & 4;
        mx_dtype dtype = dtypes[d], vd = vector_dtype(dtype);
        mx_tensor *x = bn_input(shapes[s], dtype, s == 2, 40 + (uint64_t)(8 * s + mode));
        mx_tensor *w = affine ? of((double[]){1.5, -0.75, 0.25, 1}, vd) : NULL;
        mx_tensor *b = affine ? of((double[]){0.25, -0.5, 0.125, 0.1}, vd) : NULL;
        mx_generator *gen = mx_generator_new(60 + (uint64_t)s);
        mx_tensor *gy = mx_to_dtype(mx_randn(shapes[s], MX_F64, MX_CPU, gen), dtype);
        mx_generator_free(gen);
        gy = s == 2 ? mx_to_channels_last(gy) : gy;
        mx_tensor *stats[2][2];
        for (int k = 0; k < 2; k++) {
          stats[k][0] = of((double[]){0.5, -0.25, 1.0, 0.0}, vd);
          stats[k][1] = of((double[]){0.5, 2.0, 1.5, 1.0}, vd);
        }
        uint64_t versions[2] = {mx_version(stats[1][0]), mx_version(stats[1][1])};
        mx_tensor *want[3], *got[3];
        mx_tensor *want_y = step_by_ops(x, w, b, running ? stats[0] : NULL, gy, relu, want);
        mx_tensor *got_y = step(x, w, b, running ? stats[1] : NULL, gy, relu, got);
        char what[128];
        snprintf(what, sizeof what, "%s, shape %d, %s%s%s", mx_dtype_name(dtype), s, relu ? "relu, " : "",
                 affine ? "affine, " : "", running ? "running" : "no running");
        char part[160];
        snprintf(part, sizeof part, "%s: y", what);
        expect_same_bits(got_y, want_y, part);
        for (int i = 0; i < 3; i++) {
          if (!affine && i > 0) continue;
          snprintf(part, sizeof part, "%s: %s", what, names[i]);
          expect_same_bits(got[i], want[i], part);
        }
        for (int k = 0; k < 2; k++) {
          snprintf(part, sizeof part, "%s: running %s", what, k ? "var" : "mean");
          expect_same_bits(stats[1][k], stats[0][k], part);
          cr_expect_eq(mx_version(stats[1][k]), versions[k] + running, "%s: version %llu, was %llu", part,
                       (unsigned long long)mx_version(stats[1][k]), (unsigned long long)versions[k]);
        }
        mx_scope_end(scope);
      }
}

/* Running statistics the kernel cannot update in place take the ops, with their bits: float64 ones beside float32
 * statistics, a pair sharing one storage, a strided pair. */
Test(batch_norm_vectors, running_statistics_it_cannot_take_fall_back) {
  for (int kind = 0; kind < 3; kind++) {
    mx_scope *scope = mx_scope_begin();
    mx_tensor *x = bn_input(MX_SHAPE(4, 4, 5, 3), MX_F32, false, 31);
    mx_tensor *w = of((double[]){1.5, -0.75, 0.25, 1}, MX_F32), *b = of((double[]){0.25, -0.5, 0.125, 0.1}, MX_F32);
    mx_tensor *gy = mx_randn(MX_SHAPE(4, 4, 5, 3), MX_F32, MX_CPU, NULL);
    const double init[8] = {0.5, -0.25, 1.0, 0.0, 0.5, 2.0, 1.5, 1.0};
    mx_tensor *stats[2][2];
    for (int k = 0; k < 2; k++) {
      if (kind == 0) {
        stats[k][0] = of(init, MX_F64), stats[k][1] = of(init + 4, MX_F64);
      } else {
        mx_tensor *both = mx_from_data(init, MX_SHAPE(2, 4), MX_F64, MX_CPU);
        both = mx_contiguous(kind == 1 ? mx_to_dtype(both, MX_F32) : mx_transpose(mx_to_dtype(both, MX_F32), 0, 1));
        stats[k][0] = kind == 1 ? mx_select(both, 0, 0) : mx_select(both, 1, 0);
        stats[k][1] = kind == 1 ? mx_select(both, 0, 1) : mx_select(both, 1, 1);
      }
      cr_assert(stats[k][0] && stats[k][1], "%s", mx_last_error());
    }
    mx_tensor *want[3], *got[3];
    mx_tensor *want_y = step_by_ops(x, w, b, stats[0], gy, false, want);
    mx_tensor *got_y = step(x, w, b, stats[1], gy, false, got);
    expect_same_bits(got_y, want_y, "y");
    for (int i = 0; i < 3; i++) expect_same_bits(got[i], want[i], "gradient");
    expect_same_bits(stats[1][0], stats[0][0], kind == 0 ? "float64 running mean" : "running mean");
    expect_same_bits(stats[1][1], stats[0][1], kind == 0 ? "float64 running var" : "running var");
    mx_scope_end(scope);
  }
}
