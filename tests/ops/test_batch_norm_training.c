/* batch_norm_training (ops/norm.c), batch norm in training as one node: the CPU's channel_combine kernel against
 * hand-computed values; gradients and gradients of gradients in float64 against finite differences for
 * batch_norm and batch_norm_relu (weight and bias present or absent, 2-d, 4-d and channels-last input); the
 * forward's bits against the statistics and elemt primitives run in turn as batch_norm ran them before; and the
 * one-pass gradients against the composite of elemt's node and the statistics as ops, and against float64. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "bn_input.h"

#include "kernels/cpu/batch_norm.h"
#include "ops/op_table.h"
#include "tensor/tensor_impl.h"

static mx_dtype vector_dtype(mx_dtype dtype) { return dtype == MX_F64 ? MX_F64 : MX_F32; }

static double *host_values(const mx_tensor *t) {
  int64_t n = mx_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(n + 1));
  cr_assert(v && mx_to_host(mx_to_dtype(mx_contiguous(t), MX_F64), v, sizeof(double) * (size_t)n) == MX_OK, "%s",
            mx_last_error());
  return v;
}

/* channel_combine(a, b, ...) into a new tensor of a's shape and dtype (a, b, mask: contiguous (N, C, *), or (R, C)
 * rows when rows), the vectors in the statistics' dtype. */
static mx_tensor *combine(const mx_tensor *a, const mx_tensor *b, const mx_tensor *mask, const double *sa,
                          const double *cb, const double *sb, const double *sh, int64_t channels) {
  mx_dtype vd = vector_dtype(mx_dtype_of(a));
  mx_tensor *v[4];
  const double *values[4] = {sa, cb, sb, sh};
  for (int k = 0; k < 4; k++) v[k] = mx_to_dtype(mx_from_data(values[k], MX_SHAPE(channels), MX_F64, MX_CPU), vd);
  mx_tensor *y = mx_zeros(mx_shape_get(a), mx_dtype_of(a), MX_CPU);
  cr_assert(y && v[0] && v[1] && v[2] && v[3], "%s", mx_last_error());
  mx_kview yv = mx__kview_of(y), av = mx__kview_of(a), bv = mx__kview_of(b), mv = mask ? mx__kview_of(mask) : av,
           vv[4];
  for (int k = 0; k < 4; k++) vv[k] = mx__kview_of(v[k]);
  cr_assert_eq(mx__cpu_channel_combine(&yv, &av, &bv, &vv[0], &vv[1], &vv[2], &vv[3], mask ? &mv : NULL), MX_OK,
               "%s", mx_last_error());
  return y;
}

static mx_tensor *of(const double *v, mx_shape shape, mx_dtype dtype) {
  return mx_to_dtype(mx_from_data(v, shape, MX_F64, MX_CPU), dtype);
}

static void expect_values(const mx_tensor *t, const double *want, const char *what) {
  double *got = host_values(t);
  for (int64_t i = 0, bad = 0; i < mx_numel(t) && bad < 4; i++) {
    cr_expect(got[i] == want[i], "%s, element %lld: %.9g, expected %.9g", what, (long long)i, got[i], want[i]);
    bad += got[i] != want[i];
  }
  free(got);
}

/* A (1, 2, 3) input, and the same values as (3, 2) rows (the channels-last kernels' view), worked by hand:
 * channel 0: a 2 + (b - 1) 0.25 + 1, channel 1: a 0.5 + (b - 3) (-1) - 2; masked, a is 0 where the mask is <= 0. */
Test(batch_norm_training, channel_combine_by_hand) {
  static const double a[6] = {1, 2, 3, 4, 5, 6}, b[6] = {2, 4, 6, 1, 3, 5}, mask[6] = {1, 0, 1, -1, 1, 1};
  static const double sa[2] = {2, 0.5}, cb[2] = {1, 3}, sb[2] = {0.25, -1}, sh[2] = {1, -2};
  static const double want[6] = {3.25, 5.75, 8.25, 2, 0.5, -1}, want_masked[6] = {3.25, 1.75, 8.25, 0, 0.5, -1};
  const mx_dtype dtypes[4] = {MX_F32, MX_F64, MX_BF16, MX_F16};
  for (int d = 0; d < 4; d++)
    for (int rows = 0; rows < 2; rows++) {
      mx_scope *scope = mx_scope_begin();
      double at[6], bt[6], mt[6], w[6], wm[6]; /* rows: element (r, c) is the plane's (c, r) */
      for (int i = 0; i < 6; i++) {
        int k = rows ? i % 2 * 3 + i / 2 : i;
        at[i] = a[k], bt[i] = b[k], mt[i] = mask[k], w[i] = want[k], wm[i] = want_masked[k];
      }
      mx_shape shape = rows ? MX_SHAPE(3, 2) : MX_SHAPE(1, 2, 3);
      mx_tensor *ta = of(at, shape, dtypes[d]), *tb = of(bt, shape, dtypes[d]), *tm = of(mt, shape, dtypes[d]);
      char what[96];
      snprintf(what, sizeof what, "%s %s", mx_dtype_name(dtypes[d]), rows ? "rows" : "planes");
      expect_values(combine(ta, tb, NULL, sa, cb, sb, sh, 2), w, what);
      snprintf(what, sizeof what, "%s %s, masked", mx_dtype_name(dtypes[d]), rows ? "rows" : "planes");
      expect_values(combine(ta, tb, tm, sa, cb, sb, sh, 2), wm, what);
      mx_scope_end(scope);
    }
}

/* Larger inputs through every loop: planes of 700 values (the 16-bit blocks of 512 and their tail), many short
 * rows (16-bit rows a group per block) and rows of 600 channels (a block's part of a row), masked and not, on
 * small integers and quarters, whose results every dtype holds exactly: the formula worked in double. */
Test(batch_norm_training, channel_combine_every_loop) {
  const mx_shape shapes[3] = {MX_SHAPE(2, 3, 700), MX_SHAPE(300, 5), MX_SHAPE(3, 600)};
  const mx_dtype dtypes[4] = {MX_F32, MX_F64, MX_BF16, MX_F16};
  srand(7);
  for (int s = 0; s < 3; s++)
    for (int d = 0; d < 4; d++)
      for (int masked = 0; masked < 2; masked++) {
        mx_scope *scope = mx_scope_begin();
        int64_t n = 1, channels = shapes[s].d[1];
        for (int k = 0; k < shapes[s].ndim; k++) n *= shapes[s].d[k];
        int64_t inner = n / shapes[s].d[0] / channels;
        double *a = malloc(sizeof(double) * (size_t)n), *b = malloc(sizeof(double) * (size_t)n);
        double *m = malloc(sizeof(double) * (size_t)n), *want = malloc(sizeof(double) * (size_t)n);
        double *v = malloc(sizeof(double) * (size_t)(4 * channels));
        cr_assert(a && b && m && want && v);
        for (int64_t c = 0; c < channels; c++) {
          v[c] = (rand() % 5 + 1) * 0.5;                    /* scale_a */
          v[channels + c] = rand() % 9 - 4;                 /* center_b */
          v[2 * channels + c] = (rand() % 8 - 4) * 0.25;    /* scale_b */
          v[3 * channels + c] = rand() % 9 - 4;             /* shift */
        }
        for (int64_t i = 0; i < n; i++) {
          int64_t c = i / inner % channels;
          a[i] = rand() % 9 - 4, b[i] = rand() % 9 - 4, m[i] = rand() % 3 - 1;
          double g = masked && !(m[i] > 0) ? 0 : a[i];
          want[i] = g * v[c] + (b[i] - v[channels + c]) * v[2 * channels + c] + v[3 * channels + c];
        }
        mx_tensor *ta = of(a, shapes[s], dtypes[d]), *tb = of(b, shapes[s], dtypes[d]);
        mx_tensor *tm = masked ? of(m, shapes[s], dtypes[d]) : NULL;
        mx_tensor *y = combine(ta, tb, tm, v, v + channels, v + 2 * channels, v + 3 * channels, channels);
        char what[96];
        snprintf(what, sizeof what, "%s, shape %d%s", mx_dtype_name(dtypes[d]), s, masked ? ", masked" : "");
        expect_values(y, want, what);
        free(a), free(b), free(m), free(want), free(v);
        mx_scope_end(scope);
      }
}

/* --- gradients in float64 ------------------------------------------------------------------------------------ */

typedef struct {
  bool relu, weight, bias, channels_last;
} bn_mode;

/* in: x, then the weight and the bias the mode has */
static mx_tensor *batch_norm_of(int n, mx_tensor *const *in, void *ctx) {
  const bn_mode *m = ctx;
  (void)n;
  mx_tensor *x = m->channels_last ? mx_to_channels_last(in[0]) : in[0];
  const mx_tensor *w = m->weight ? in[1] : NULL, *b = m->bias ? in[1 + m->weight] : NULL;
  return m->relu ? mx_batch_norm_relu(x, NULL, NULL, w, b, true, 0.1, 1e-5)
                 : mx_batch_norm(x, NULL, NULL, w, b, true, 0.1, 1e-5);
}

/* Gradients and gradients of gradients against finite differences, through the one node (checked by name):
 * every combination of relu, weight and bias, on a 2-d, a 4-d and a channels-last 4-d input. */
Test(batch_norm_training, gradcheck_and_gradgradcheck_in_float64) {
  const mx_shape shapes[3] = {MX_SHAPE(6, 3), MX_SHAPE(2, 3, 3, 4), MX_SHAPE(2, 3, 3, 4)};
  for (int s = 0; s < 3; s++)
    for (int mode = 0; mode < 8; mode++) {
      bn_mode m = {.relu = mode & 1, .weight = mode & 2, .bias = mode & 4, .channels_last = s == 2};
      mx_scope *scope = mx_scope_begin();
      mx_generator *gen = mx_generator_new(90 + (uint64_t)(8 * s + mode));
      mx_tensor *in[3] = {mx_randn(shapes[s], MX_F64, MX_CPU, gen)};
      int n = 1;
      if (m.weight) in[n++] = mx_add_scalar(mx_rand(MX_SHAPE(3), MX_F64, MX_CPU, gen), 0.5);
      if (m.bias) in[n++] = mx_randn(MX_SHAPE(3), MX_F64, MX_CPU, gen);
      mx_generator_free(gen);
      for (int i = 0; i < n; i++) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
      const char *node = mx_grad_fn_name(batch_norm_of(n, in, &m));
      cr_assert(node && !strcmp(node, "BATCH_NORM_TRAININGBackward"), "shape %d, mode %d: the output's node is %s", s,
                mode, node ? node : "(none)");
      cr_expect_eq(mx_gradcheck(batch_norm_of, n, in, &m, 1e-6, 1e-5, 1e-4), MX_OK, "shape %d, mode %d: %s", s, mode,
                   mx_last_error());
      cr_expect_eq(mx_gradgradcheck(batch_norm_of, n, in, &m, 1e-6, 1e-5, 1e-4), MX_OK, "shape %d, mode %d: %s", s,
                   mode, mx_last_error());
      mx_scope_end(scope);
    }
}

/* --- against batch norm's primitives run in turn ----------------------------------------------------------------- */

/* What batch_norm's training forward did before it was one primitive: batch_norm_stats, invstd by ops, then
 * batch_norm_elemt(_relu) as a node of its own (its formula: the composite's gradient of x, weight and bias given the
 * statistics), and the running statistics by ops. The statistics' gradient comes from mean and var as ops of x in
 * the statistics' dtype (what batch_norm_stats' formula was). */
static mx_tensor *composite(mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_tensor *running[2], bool relu,
                            bool stats_by_ops) {
  const double momentum = 0.1, eps = 1e-5;
  mx_dtype vd = vector_dtype(mx_dtype_of(x));
  mx_tensor *stats[MX__MAX_OUTPUTS] = {0};
  mx_shape dims = mx__all_but_channels(mx_ndim(x));
  double count = (double)mx_numel(x) / (double)mx_shape_get(x).d[1];
  if (stats_by_ops) {
    mx_tensor *xs = mx_to_dtype(x, vd);
    stats[0] = mx_mean(xs, dims, false);
    mx_tensor *centered = mx_sub(xs, mx_mean(xs, dims, true));
    stats[1] = mx_div_scalar(mx_sum(mx_mul(centered, centered), dims, false), count);
  } else {
    cr_assert_eq(mx__dispatch(MX_OP_BATCH_NORM_STATS, 1, (const mx_tensor *const[]){x}, NULL, stats), MX_OK, "%s",
                 mx_last_error());
  }
  mx_tensor *invstd = mx_rsqrt(mx_add_scalar(stats[1], eps));
  if (running) {
    MX_NO_GRAD {
      mx_tensor *unbiased = mx_mul_scalar(stats[1], count / (count - 1));
      mx_copy_(running[0], mx_add(mx_mul_scalar(running[0], 1 - momentum), mx_mul_scalar(stats[0], momentum)));
      mx_copy_(running[1], mx_add(mx_mul_scalar(running[1], 1 - momentum), mx_mul_scalar(unbiased, momentum)));
    }
  }
  mx__args args = {.dtype = mx_dtype_of(x)}; /* float32 weight and bias keep 16-bit x's dtype, as batch_norm does */
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[5] = {x, stats[0], invstd, w, b};
  cr_assert_eq(mx__dispatch(relu ? MX_OP_BATCH_NORM_ELEMT_RELU : MX_OP_BATCH_NORM_ELEMT, 5, in, &args, out), MX_OK,
               "%s", mx_last_error());
  return out[0];
}

static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert(a && b, "%s: missing", what);
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s: dtypes differ", what);
  int64_t n = mx_numel(a);
  size_t size = mx_dtype_size(mx_dtype_of(a)), bytes = (size_t)n * size;
  unsigned char *pa = malloc(bytes + 1), *pb = malloc(bytes + 1);
  cr_assert(pa && pb);
  cr_assert_eq(mx_to_host(mx_contiguous(a), pa, bytes), MX_OK);
  cr_assert_eq(mx_to_host(mx_contiguous(b), pb, bytes), MX_OK);
  int64_t differ = 0;
  for (int64_t i = 0; i < n; i++) differ += memcmp(pa + (size_t)i * size, pb + (size_t)i * size, size) != 0;
  cr_expect_eq(differ, 0, "%s: %lld of %lld elements differ", what, (long long)differ, (long long)n);
  free(pa), free(pb);
}

static const mx_shape bn_shapes[3] = {{2, {64, 4}}, {4, {4, 4, 9, 7}}, {4, {4, 4, 9, 7}}};
static const mx_dtype bn_dtypes[4] = {MX_F32, MX_BF16, MX_F16, MX_F64};

/* The forward: y and the running statistics hold the bits the primitives in turn give, in every float dtype, with
 * and without relu, on 2-d, 4-d and channels-last input. */
Test(batch_norm_training, forward_is_the_primitives_bit_for_bit) {
  for (int d = 0; d < 4; d++)
    for (int s = 0; s < 3; s++)
      for (int relu = 0; relu < 2; relu++) {
        mx_scope *scope = mx_scope_begin();
        mx_dtype dtype = bn_dtypes[d], vd = vector_dtype(dtype);
        mx_tensor *x = bn_input(bn_shapes[s], dtype, s == 2, 70 + (uint64_t)s);
        mx_tensor *w = of((double[]){1.5, -0.75, 0.25, 1}, MX_SHAPE(4), vd);
        mx_tensor *b = of((double[]){0.25, -0.5, 0.125, 0.1}, MX_SHAPE(4), vd);
        mx_tensor *running[2][2];
        for (int k = 0; k < 2; k++) {
          running[k][0] = of((double[]){0.5, -0.25, 1.0, 0.0}, MX_SHAPE(4), vd);
          running[k][1] = of((double[]){0.5, 2.0, 1.5, 1.0}, MX_SHAPE(4), vd);
        }
        mx_tensor *want = composite(x, w, b, running[0], relu, false);
        mx_tensor *got = relu ? mx_batch_norm_relu(x, running[1][0], running[1][1], w, b, true, 0.1, 1e-5)
                              : mx_batch_norm(x, running[1][0], running[1][1], w, b, true, 0.1, 1e-5);
        char what[96];
        snprintf(what, sizeof what, "%s, shape %d%s: y", mx_dtype_name(dtype), s, relu ? ", relu" : "");
        expect_same_bits(got, want, what);
        cr_expect_eq(mx_is_channels_last(got), s == 2, "%s: layout", what);
        snprintf(what, sizeof what, "%s, shape %d%s: running mean", mx_dtype_name(dtype), s, relu ? ", relu" : "");
        expect_same_bits(running[1][0], running[0][0], what);
        snprintf(what, sizeof what, "%s, shape %d%s: running var", mx_dtype_name(dtype), s, relu ? ", relu" : "");
        expect_same_bits(running[1][1], running[0][1], what);
        mx_scope_end(scope);
      }
}

/* The largest |got - want| over the largest |want|. */
static double relative_difference(const mx_tensor *got, const mx_tensor *want) {
  double *g = host_values(got), *w = host_values(want), largest = 0, worst = 0;
  for (int64_t i = 0; i < mx_numel(want); i++) largest = fmax(largest, fabs(w[i]));
  for (int64_t i = 0; i < mx_numel(want); i++) worst = fmax(worst, fabs(g[i] - w[i]));
  free(g), free(w);
  return largest > 0 ? worst / largest : worst;
}

/* The gradients of x, weight and bias for grad_y, of batch_norm(_relu) (the one node) or of the composite. */
static void gradients(mx_tensor *x0, mx_tensor *w0, mx_tensor *b0, mx_tensor *grad_y, bool relu, int which,
                      mx_tensor **grads) {
  mx_tensor *in[3] = {mx_clone(x0), mx_clone(w0), mx_clone(b0)};
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
  mx_tensor *y = which == 0 ? (relu ? mx_batch_norm_relu(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5)
                                    : mx_batch_norm(in[0], NULL, NULL, in[1], in[2], true, 0.1, 1e-5))
                            : composite(in[0], in[1], in[2], NULL, relu, true);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_assert_eq(mx_grad(1, &y, 3, in, &grad_y, false, false, false, grads), MX_OK, "%s", mx_last_error());
}

/* The backward: dx, dweight and dbias of the one node against the composite's in the same dtype and against the
 * float64 composite, within 2^-18 of the largest (float32) or 2^-6 (bfloat16: its gradients are rounded once where
 * the composite's two were rounded and added, each within half an ulp, 2^-8, of the true sum). */
Test(batch_norm_training, backward_is_the_composites_within_rounding) {
  const mx_dtype dtypes[2] = {MX_F32, MX_BF16};
  const double tolerance[2] = {0x1p-18, 0x1p-6};
  const char *names[3] = {"dx", "dweight", "dbias"};
  for (int d = 0; d < 2; d++)
    for (int s = 0; s < 3; s++)
      for (int relu = 0; relu < 2; relu++) {
        mx_scope *scope = mx_scope_begin();
        mx_dtype dtype = dtypes[d];
        mx_tensor *x = bn_input(bn_shapes[s], dtype, s == 2, 80 + (uint64_t)s);
        mx_tensor *w = of((double[]){1.5, -0.75, 0.25, 1}, MX_SHAPE(4), MX_F32);
        mx_tensor *b = of((double[]){0.25, -0.5, 0.125, 0.1}, MX_SHAPE(4), MX_F32);
        mx_generator *gen = mx_generator_new(85 + (uint64_t)s);
        mx_tensor *grad_y = mx_to_dtype(mx_randn(bn_shapes[s], MX_F64, MX_CPU, gen), dtype);
        mx_generator_free(gen);
        mx_tensor *got[3], *want[3], *exact[3];
        gradients(x, w, b, grad_y, relu, 0, got);
        gradients(x, w, b, grad_y, relu, 1, want);
        gradients(mx_to_dtype(x, MX_F64), mx_to_dtype(w, MX_F64), mx_to_dtype(b, MX_F64), mx_to_dtype(grad_y, MX_F64),
                  relu, 1, exact);
        for (int i = 0; i < 3; i++) {
          double to_composite = relative_difference(got[i], want[i]), to_f64 = relative_difference(got[i], exact[i]);
          cr_expect_leq(to_composite, tolerance[d], "%s, shape %d%s: %s differs from the composite's by %.3g",
                        mx_dtype_name(dtype), s, relu ? ", relu" : "", names[i], to_composite);
          cr_expect_leq(to_f64, tolerance[d], "%s, shape %d%s: %s differs from float64's by %.3g", mx_dtype_name(dtype),
                        s, relu ? ", relu" : "", names[i], to_f64);
        }
        mx_scope_end(scope);
      }
}
