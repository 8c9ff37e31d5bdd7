/* What the one-output op table (op_cases.h) cannot say: dropout's random
 * masks (their statistics, the 1/(1-p) scaling, the gradient being the mask
 * times the scale, reproducibility from a seeded generator), the pieces of
 * split and chunk, and the side effects of batch_norm on its running
 * statistics and what its graph holds. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "op_checks.h"

/* uniform in [0.5, 1.5): never zero, so a zero in the output is the mask's */
static mx_tensor *positive(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_to_dtype(mx_add_scalar(mx_rand(shape, MX_F64, MX_CPU, gen), 0.5), dtype);
  mx_generator_free(gen);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* --- dropout ------------------------------------------------------------------------------------- */

/* The zeroed fraction is p (within 5 standard deviations), every kept element is x / (1 - p), and
 * the mean is kept. */
Test(nn_ops, dropout_mask_statistics_and_scale) {
  const double ps[] = {0.1, 0.3, 0.5, 0.9};
  const mx_dtype dtypes[] = {MX_F64, MX_F32};
  const int64_t n = 100000;
  for (int k = 0; k < 4; k++)
    for (int t = 0; t < 2; t++) {
      mx_scope *s = mx_scope_begin();
      double p = ps[k];
      mx_generator *gen = mx_generator_new(100 + (uint64_t)k);
      mx_tensor *x = mx_ones(MX_SHAPE(n), dtypes[t], MX_CPU);
      mx_tensor *y = mx_dropout(x, p, true, gen);
      mx_generator_free(gen);
      cr_assert_not_null(y, "%s", mx_last_error());
      cr_expect_eq(mx_dtype_of(y), dtypes[t]);
      double *v = op_host_values(y), scale = 1 / (1 - p), tol = dtypes[t] == MX_F64 ? 1e-15 : 1e-7;
      int64_t zeros = 0, wrong = 0;
      double sum = 0;
      for (int64_t i = 0; i < n; i++) {
        sum += v[i];
        if (v[i] == 0) zeros++;
        else if (fabs(v[i] - scale) > tol * scale) wrong++;
      }
      double frac = (double)zeros / (double)n, sd = sqrt(p * (1 - p) / (double)n);
      cr_expect(fabs(frac - p) < 5 * sd, "p %g (%s): %.4f of the elements zeroed", p, mx_dtype_name(dtypes[t]), frac);
      cr_expect_eq(wrong, 0, "p %g (%s): %lld kept elements are not scaled by 1/(1-p) = %.17g (first: %.17g)", p,
                   mx_dtype_name(dtypes[t]), (long long)wrong, scale, v[0]);
      cr_expect(fabs(sum / (double)n - 1) < 5 * sd * scale, "p %g: mean %.5f, expected 1", p, sum / (double)n);
      free(v);
      mx_scope_end(s);
    }
}

/* d sum(dropout(x) * w) / dx = w * mask / (1 - p), the mask read off the output. */
Test(nn_ops, dropout_gradient_is_the_mask_times_the_scale) {
  mx_scope *s = mx_scope_begin();
  const double p = 0.4;
  mx_tensor *x = positive(MX_SHAPE(20, 50), MX_F64, 1), *w = positive(MX_SHAPE(20, 50), MX_F64, 2);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  mx_generator *gen = mx_generator_new(3);
  mx_tensor *y = mx_dropout(x, p, true, gen);
  mx_generator_free(gen);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect(mx_requires_grad(y));
  mx_tensor *loss = mx_sum(mx_mul(y, w), MX_ALL_DIMS, false), *g = NULL;
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  double *xv = op_host_values(x), *yv = op_host_values(y), *wv = op_host_values(w), *gv = op_host_values(g);
  int bad = 0, kept = 0;
  for (int i = 0; i < 1000 && bad < 4; i++) {
    double mask = yv[i] == 0 ? 0 : 1;
    kept += (int)mask;
    double want = wv[i] * mask / (1 - p);
    if (mask) cr_expect(fabs(yv[i] - xv[i] / (1 - p)) <= 1e-15 * yv[i], "y[%d] %.17g, x / (1-p) %.17g", i, yv[i],
                        xv[i] / (1 - p));
    if (fabs(gv[i] - want) > 1e-15 * fabs(want)) {
      cr_expect(false, "grad[%d] is %.17g, expected w * mask / (1-p) = %.17g", i, gv[i], want);
      bad++;
    }
  }
  cr_expect(kept > 500 && kept < 700, "%d of 1000 kept at p 0.4", kept);
  free(xv), free(yv), free(wv), free(gv);
  mx_scope_end(s);
}

/* With a fresh generator of a fixed seed per call the function is deterministic, so gradcheck
 * applies. */
static mx_tensor *seeded_dropout(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  mx_generator *gen = mx_generator_new(77);
  mx_tensor *y = mx_dropout(in[0], 0.3, true, gen);
  mx_generator_free(gen);
  return y;
}

Test(nn_ops, dropout_gradcheck_with_a_seeded_generator) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = positive(MX_SHAPE(3, 4), MX_F64, 4);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  cr_expect_eq(mx_gradcheck(seeded_dropout, 1, &x, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradgradcheck(seeded_dropout, 1, &x, NULL, 1e-6, 1e-5, 1e-4), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

/* The same seed gives the same mask; the stream moves on between calls; another seed differs;
 * NULL uses the default generator, which mx_manual_seed makes reproducible. */
Test(nn_ops, dropout_seeded_generator_is_reproducible) {
  mx_scope *s = mx_scope_begin();
  const int64_t n = 1000;
  mx_tensor *x = mx_ones(MX_SHAPE(n), MX_F32, MX_CPU);
  mx_generator *g1 = mx_generator_new(5), *g2 = mx_generator_new(5), *g3 = mx_generator_new(6);
  double *a = op_host_values(mx_dropout(x, 0.5, true, g1)), *b = op_host_values(mx_dropout(x, 0.5, true, g2));
  double *c = op_host_values(mx_dropout(x, 0.5, true, g3)), *a2 = op_host_values(mx_dropout(x, 0.5, true, g1));
  mx_manual_seed(9);
  double *d1 = op_host_values(mx_dropout(x, 0.5, true, NULL));
  mx_manual_seed(9);
  double *d2 = op_host_values(mx_dropout(x, 0.5, true, NULL));
  int same_ab = 0, same_ac = 0, same_aa2 = 0, same_d = 0;
  for (int64_t i = 0; i < n; i++) {
    same_ab += a[i] == b[i];
    same_ac += a[i] == c[i];
    same_aa2 += a[i] == a2[i];
    same_d += d1[i] == d2[i];
  }
  cr_expect_eq(same_ab, n, "one seed, two generators: %d of %lld elements agree", same_ab, (long long)n);
  cr_expect_eq(same_d, n, "mx_manual_seed then NULL: %d of %lld elements agree", same_d, (long long)n);
  cr_expect_lt(same_ac, n * 3 / 4, "seeds 5 and 6 give the same mask (%d of %lld agree)", same_ac, (long long)n);
  cr_expect_lt(same_aa2, n * 3 / 4, "a second call on one generator repeats the mask (%d of %lld)", same_aa2,
               (long long)n);
  mx_generator_free(g1), mx_generator_free(g2), mx_generator_free(g3);
  free(a), free(b), free(c), free(a2), free(d1), free(d2);
  mx_scope_end(s);
}

/* Eval and p = 0: the identity, gradient ones; p = 1: zeros, gradient zeros (eval ignores p). */
Test(nn_ops, dropout_identity_and_zeros) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = positive(MX_SHAPE(4, 5), MX_F64, 8);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  struct {
    double p;
    bool training;
    double value_scale, grad;
  } cases[] = {{0.5, false, 1, 1}, {1.0, false, 1, 1}, {0.0, true, 1, 1}, {1.0, true, 0, 0}};
  double *xv = op_host_values(x);
  for (int k = 0; k < 4; k++) {
    mx_tensor *y = mx_dropout(x, cases[k].p, cases[k].training, NULL);
    cr_assert_not_null(y, "%s", mx_last_error());
    mx_tensor *loss = mx_sum(y, MX_ALL_DIMS, false), *g = NULL;
    cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, true, &g), MX_OK, "%s", mx_last_error());
    double *yv = op_host_values(y), *gv = g ? op_host_values(g) : calloc(20, sizeof(double));
    for (int i = 0; i < 20; i++) {
      cr_expect_eq(yv[i], xv[i] * cases[k].value_scale, "p %g training %d: y[%d] %.17g", cases[k].p,
                   cases[k].training, i, yv[i]);
      cr_expect_eq(gv[i], cases[k].grad, "p %g training %d: grad[%d] %.17g", cases[k].p, cases[k].training, i, gv[i]);
    }
    free(yv), free(gv);
  }
  free(xv);
  mx_scope_end(s);
}

/* --- split and chunk ------------------------------------------------------------------------------------- */

static void expect_pieces(const char *what, int n, mx_tensor **p, int want_n, const int64_t *sizes, int dim,
                          const mx_tensor *x) {
  cr_assert_eq(n, want_n, "%s: %d pieces, expected %d (%s)", what, n, want_n, mx_last_error());
  for (int i = 0; i < n; i++) {
    cr_expect_eq(mx_size(p[i], dim), sizes[i], "%s: piece %d has %lld along dim %d, expected %lld", what, i,
                 (long long)mx_size(p[i], dim), dim, (long long)sizes[i]);
    cr_expect(mx_shares_storage(p[i], x), "%s: piece %d is not a view", what, i);
  }
}

/* PyTorch's piece sizes: split by size (the last smaller), chunk into ceil(n / chunks) sized
 * pieces (so possibly fewer than asked for); an empty dim gives one empty piece to split and
 * `chunks` to chunk. */
Test(nn_ops, split_and_chunk_pieces) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_reshape(mx_arange(0, 15, 1, MX_F64, MX_CPU), MX_SHAPE(5, 3)), *p[8];
  expect_pieces("split 5 by 2", mx_split(x, 2, 0, p, 8), p, 3, (int64_t[]){2, 2, 1}, 0, x);
  cr_expect_eq(mx_at(p[2], MX_SHAPE(0, 1)), 13.0);
  expect_pieces("split 5 by 5", mx_split(x, 5, 0, p, 8), p, 1, (int64_t[]){5}, 0, x);
  expect_pieces("split 5 by 7", mx_split(x, 7, 0, p, 8), p, 1, (int64_t[]){5}, 0, x);
  expect_pieces("split 3 by 2 along -1", mx_split(x, 2, -1, p, 8), p, 2, (int64_t[]){2, 1}, 1, x);
  cr_expect_eq(mx_at(p[1], MX_SHAPE(4, 0)), 14.0);
  expect_pieces("chunk 5 into 3", mx_chunk(x, 3, 0, p, 8), p, 3, (int64_t[]){2, 2, 1}, 0, x);
  expect_pieces("chunk 5 into 2", mx_chunk(x, 2, 0, p, 8), p, 2, (int64_t[]){3, 2}, 0, x);
  mx_tensor *six = mx_arange(0, 6, 1, MX_F64, MX_CPU);
  expect_pieces("chunk 6 into 4", mx_chunk(six, 4, 0, p, 8), p, 3, (int64_t[]){2, 2, 2}, 0, six);
  expect_pieces("chunk 3 into 5", mx_chunk(x, 5, 1, p, 8), p, 3, (int64_t[]){1, 1, 1}, 1, x);
  /* an empty dim: torch.zeros(0, 3).split(2) is one empty piece, .chunk(3) three */
  mx_tensor *empty = mx_zeros(MX_SHAPE(0, 3), MX_F64, MX_CPU);
  expect_pieces("split 0 by 2", mx_split(empty, 2, 0, p, 8), p, 1, (int64_t[]){0}, 0, empty);
  expect_pieces("chunk 0 into 3", mx_chunk(empty, 3, 0, p, 8), p, 3, (int64_t[]){0, 0, 0}, 0, empty);
  cr_expect_eq(mx_chunk(empty, 3, 0, p, 2), -1, "three empty pieces do not fit in two slots");
  cr_expect_str_eq(mx_last_error(), "mx_chunk: 3 pieces do not fit in 2 slots");
  mx_clear_error();
  mx_scope_end(s);
}

/* Each piece's gradient lands in its own rows: sum over pieces of (k + 1) * sum(piece k). */
Test(nn_ops, split_piece_gradients) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = positive(MX_SHAPE(7, 2), MX_F64, 9), *p[4];
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  int n = mx_split(x, 3, 0, p, 4);
  cr_assert_eq(n, 3, "%s", mx_last_error());
  mx_tensor *loss = mx_scalar(0, MX_F64, MX_CPU);
  for (int k = 0; k < n; k++) loss = mx_add(loss, mx_mul_scalar(mx_sum(p[k], MX_ALL_DIMS, false), k + 1));
  mx_tensor *g = NULL;
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  double *gv = op_host_values(g);
  for (int i = 0; i < 14; i++) cr_expect_eq(gv[i], (double)(i / 2 / 3 + 1), "grad[%d] %g", i, gv[i]);
  free(gv);
  mx_scope_end(s);
}

/* --- batch_norm's running statistics ------------------------------------------------------------------ */

/* Training updates them in place, outside the graph (no grad, no version trouble for x's
 * gradient); eval reads them and leaves them alone. */
Test(nn_ops, batch_norm_running_statistics_side_effects) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = positive(MX_SHAPE(4, 3, 2), MX_F64, 10);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  mx_tensor *mean = mx_zeros(MX_SHAPE(3), MX_F64, MX_CPU), *var = mx_ones(MX_SHAPE(3), MX_F64, MX_CPU);
  mx_tensor *y = mx_batch_norm(x, mean, var, NULL, NULL, true, 0.5, 1e-5);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect(!mx_requires_grad(mean) && !mx_requires_grad(var), "the running statistics joined the graph");
  /* momentum 0.5 from 0 and 1: half the batch mean, (1 + unbiased batch variance) / 2 */
  double *xv = op_host_values(x);
  for (int c = 0; c < 3; c++) {
    double m = 0, v = 0;
    for (int b = 0; b < 4; b++)
      for (int j = 0; j < 2; j++) m += xv[b * 6 + c * 2 + j] / 8;
    for (int b = 0; b < 4; b++)
      for (int j = 0; j < 2; j++) v += pow(xv[b * 6 + c * 2 + j] - m, 2) / 7;
    cr_expect(fabs(mx_at(mean, MX_SHAPE(c)) - m / 2) < 1e-14, "running mean[%d] %.17g, expected %.17g", c,
              mx_at(mean, MX_SHAPE(c)), m / 2);
    cr_expect(fabs(mx_at(var, MX_SHAPE(c)) - (1 + v) / 2) < 1e-14, "running var[%d] %.17g, expected %.17g", c,
              mx_at(var, MX_SHAPE(c)), (1 + v) / 2);
  }
  free(xv);
  mx_tensor *loss = mx_sum(mx_mul(y, y), MX_ALL_DIMS, false), *g = NULL;
  cr_expect_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  double before[3] = {mx_at(mean, MX_SHAPE(0)), mx_at(mean, MX_SHAPE(1)), mx_at(mean, MX_SHAPE(2))};
  cr_assert_not_null(mx_batch_norm(x, mean, var, NULL, NULL, false, 0.5, 1e-5), "%s", mx_last_error());
  for (int c = 0; c < 3; c++) cr_expect_eq(mx_at(mean, MX_SHAPE(c)), before[c], "eval changed running mean[%d]", c);
  mx_scope_end(s);
}

/* The graph keeps x itself and a few vectors of C (mean, var, invstd; ones and zeros for a missing
 * weight and bias), where a composite of elementwise ops kept x - mean and the normalised x as well:
 * the storage alive after the forward, beyond its inputs and y, is per-channel only. */
Test(nn_ops, batch_norm_graph_saves_x_and_per_channel_statistics) {
  const int64_t channels = 4, per_channel = channels * (int64_t)sizeof(float);
  for (int mode = 0; mode < 4; mode++) {
    bool training = mode & 1, affine = mode & 2;
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = positive(MX_SHAPE(8, channels, 16, 16), MX_F32, 12);
    mx_tensor *weight = positive(MX_SHAPE(channels), MX_F32, 13), *bias = positive(MX_SHAPE(channels), MX_F32, 14);
    mx_tensor *mean = mx_zeros(MX_SHAPE(channels), MX_F32, MX_CPU), *var = mx_ones(MX_SHAPE(channels), MX_F32, MX_CPU);
    cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
    cr_assert_eq(mx_set_requires_grad(weight, true), MX_OK);
    cr_assert_eq(mx_set_requires_grad(bias, true), MX_OK);
    int64_t before = mx_memory_stats_get(MX_CPU).bytes_in_use;
    mx_tensor *y = mx_batch_norm(x, mean, var, affine ? weight : NULL, affine ? bias : NULL, training, 0.1, 1e-5);
    cr_assert_not_null(y, "%s", mx_last_error());
    int64_t held = mx_memory_stats_get(MX_CPU).bytes_in_use - before - mx_numel(y) * (int64_t)sizeof(float);
    cr_expect_leq(held, 6 * per_channel + 64, "training %d, affine %d: the graph holds %lld bytes beyond x and y "
                  "(x is %lld)", training, affine, (long long)held, (long long)(mx_numel(x) * (int64_t)sizeof(float)));
    /* and what it holds is enough for backward */
    mx_tensor *loss = mx_sum(mx_mul(y, y), MX_ALL_DIMS, false), *g = NULL;
    cr_expect_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
    mx_scope_end(s);
  }
}

/* A bfloat16 input under float32 weight and bias keeps its dtype (PyTorch's
 * mixed-type batch norm, what autocast's bf16 activations meet): computed
 * in float32 and rounded once, so it equals the float32 result rounded. */
Test(nn_ops, batch_norm_keeps_a_16_bit_input_dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_to_dtype(positive(MX_SHAPE(4, 3, 5, 5), MX_F32, 21), MX_BF16);
  mx_tensor *weight = positive(MX_SHAPE(3), MX_F32, 22), *bias = positive(MX_SHAPE(3), MX_F32, 23);
  mx_tensor *y = mx_batch_norm(x, NULL, NULL, weight, bias, true, 0.1, 1e-5);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(y), MX_BF16);
  mx_tensor *want = mx_to_dtype(mx_batch_norm(mx_to_dtype(x, MX_F32), NULL, NULL, weight, bias, true, 0.1, 1e-5), MX_BF16);
  double *got = op_host_values(y), *ref = op_host_values(want);
  for (int64_t i = 0; i < mx_numel(y); i++) cr_expect_eq(got[i], ref[i], "element %lld", (long long)i);
  free(got), free(ref);
  cr_expect_eq(mx_dtype_of(mx_batch_norm(mx_to_dtype(x, MX_F32), NULL, NULL, mx_to_dtype(weight, MX_BF16), NULL, true,
                                        0.1, 1e-5)), MX_F32, "a float32 input keeps float32");
  mx_scope_end(s);
}

/* Batch norm's backward runs the backend's per-channel kernels (one pass
 * for both sums, one for the statistics' gradient) when it records no
 * graph, and the elementwise ops when it builds one for double backward.
 * Both give the same gradients for x, weight and bias: to float32
 * rounding (the sums add in another order), and for a bfloat16 x to one
 * of its ulps. The means put every channel far from zero, where a
 * gradient computed from x * k - mean * k instead of (x - mean) * k would
 * lose its digits. */
Test(nn_ops, batch_norm_backward_kernels_match_the_ops) {
  const mx_dtype dtypes[2] = {MX_F32, MX_BF16};
  const double tolerance[2] = {2e-5, 1.0 / 128}, spacing[2] = {1e5, 30}; /* bfloat16 keeps 8 bits */
  for (int k = 0; k < 2; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *means = mx_mul_scalar(mx_reshape(mx_arange(1, 4, 1, MX_F32, MX_CPU), MX_SHAPE(1, 3, 1, 1)), spacing[k]);
    mx_tensor *x = mx_to_dtype(mx_add(mx_randn(MX_SHAPE(4, 3, 5, 6), MX_F32, MX_CPU, NULL), means), dtypes[k]);
    mx_tensor *weight = positive(MX_SHAPE(3), MX_F32, 31), *bias = positive(MX_SHAPE(3), MX_F32, 32);
    mx_tensor *inputs[3] = {x, weight, bias};
    for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK);
    mx_tensor *y = mx_batch_norm(x, NULL, NULL, weight, bias, true, 0.1, 1e-5);
    mx_tensor *g = mx_to_dtype(mx_randn(MX_SHAPE(4, 3, 5, 6), MX_F32, MX_CPU, NULL), dtypes[k]);
    mx_tensor *kernels[3] = {0}, *ops[3] = {0};
    cr_assert_eq(mx_grad(1, &y, 3, inputs, &g, true, false, false, kernels), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_grad(1, &y, 3, inputs, &g, false, true, false, ops), MX_OK, "%s", mx_last_error());
    for (int i = 0; i < 3; i++) {
      cr_expect_eq(mx_dtype_of(kernels[i]), mx_dtype_of(ops[i]), "dtype %d, input %d", k, i);
      double *got = op_host_values(kernels[i]), *want = op_host_values(ops[i]), scale = 0;
      for (int64_t e = 0; e < mx_numel(ops[i]); e++) scale = fmax(scale, fabs(want[e]));
      for (int64_t e = 0; e < mx_numel(ops[i]); e++)
        cr_expect(fabs(got[e] - want[e]) <= tolerance[k] * scale, "dtype %d, input %d, element %lld: %g, ops %g", k,
                  i, (long long)e, got[e], want[e]);
      free(got), free(want);
    }
    mx_scope_end(s);
  }
}

/* max_pool's indices are int64, flat within each (N, C) plane, and either output may be skipped. */
Test(nn_ops, max_pool_indices) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_reshape(mx_arange(0, 16, 1, MX_F32, MX_CPU), MX_SHAPE(1, 1, 4, 4)), *v = NULL, *i = NULL;
  cr_assert_eq(mx_max_pool_with_indices(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, &v, &i), MX_OK, "%s",
               mx_last_error());
  cr_expect_eq(mx_dtype_of(i), MX_I64);
  cr_expect_eq(mx_dtype_of(v), MX_F32);
  const double want[4] = {5, 7, 13, 15};
  for (int k = 0; k < 4; k++) {
    cr_expect_eq(mx_at(i, MX_SHAPE(0, 0, k / 2, k % 2)), want[k]);
    cr_expect_eq(mx_at(v, MX_SHAPE(0, 0, k / 2, k % 2)), want[k]);
  }
  mx_tensor *only = NULL;
  cr_expect_eq(mx_max_pool_with_indices(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, NULL, &only), MX_OK);
  cr_expect_not_null(only);
  mx_scope_end(s);
}

/* What the graph keeps: max pooling its values and uint8 offsets in the
 * window (int64 would outweigh bf16 activations 4:1), an add of a bias
 * nothing at all. */
Test(nn_ops, the_graph_keeps_uint8_pool_offsets_and_nothing_for_an_add) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = positive(MX_SHAPE(2, 3, 8, 8), MX_BF16, 31), *bias = positive(MX_SHAPE(3, 1, 1), MX_BF16, 32);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  cr_assert_eq(mx_set_requires_grad(bias, true), MX_OK);
  int64_t before = mx_memory_stats_get(MX_CPU).bytes_in_use;
  mx_tensor *y = mx_add(x, bias);
  cr_expect_eq(mx_memory_stats_get(MX_CPU).bytes_in_use - before, mx_numel(y) * 2, "the add holds only its output");
  before = mx_memory_stats_get(MX_CPU).bytes_in_use;
  mx_tensor *pooled = mx_max_pool(y, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT);
  cr_assert_not_null(pooled, "%s", mx_last_error());
  cr_expect_eq(mx_memory_stats_get(MX_CPU).bytes_in_use - before, mx_numel(pooled) * (2 + 1),
               "bf16 values and uint8 offsets");
  mx_tensor *loss = mx_sum(pooled, MX_ALL_DIMS, false), *g = NULL;
  cr_assert_eq(mx_grad(1, &loss, 1, &bias, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  /* each channel's bias reaches 2 x 16 window maxima: a gradient of 32 */
  for (int c = 0; c < 3; c++) cr_expect_eq(mx_at(g, MX_SHAPE(c, 0, 0)), 32);
  mx_scope_end(s);
}

/* A window of more than 256 elements has no uint8 offset: the op keeps
 * int64 positions instead, and indices and gradient still land on the max. */
Test(nn_ops, max_pool_over_a_window_of_300) {
  mx_scope *s = mx_scope_begin();
  float data[2 * 300];
  for (int i = 0; i < 600; i++) data[i] = (float)((i * 37) % 600); /* distinct values */
  mx_tensor *x = mx_from_data(data, MX_SHAPE(1, 2, 300), MX_F32, MX_CPU), *v = NULL, *i = NULL;
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  cr_assert_eq(mx_max_pool_with_indices(x, 1, MX_SHAPE(300), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, &v, &i), MX_OK, "%s",
               mx_last_error());
  int64_t where[2];
  for (int c = 0; c < 2; c++) {
    where[c] = 0;
    for (int k = 1; k < 300; k++)
      if (data[c * 300 + k] > data[c * 300 + where[c]]) where[c] = k;
    cr_expect_eq(mx_at(v, MX_SHAPE(0, c, 0)), data[c * 300 + where[c]]);
    cr_expect_eq(mx_at(i, MX_SHAPE(0, c, 0)), (double)where[c], "channel %d: index %g, max at %lld", c,
                 mx_at(i, MX_SHAPE(0, c, 0)), (long long)where[c]);
  }
  mx_tensor *loss = mx_sum(v, MX_ALL_DIMS, false), *g = NULL;
  cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  for (int c = 0; c < 2; c++)
    for (int k = 0; k < 300; k++) cr_expect_eq(mx_at(g, MX_SHAPE(0, c, k)), k == where[c] ? 1 : 0);
  mx_scope_end(s);
}

/* bfloat16 and float16 planes pool through float32 blocks of rows; rows
 * wider than a block search in bfloat16, or through float16's general
 * loop: all give the float32 result's values and indices. */
Test(nn_ops, max_pool_16bit_short_and_wide_rows_match_float32) {
  const int64_t widths[2] = {28, 4100};
  for (int k = 0; k < 4; k++) {
    mx_scope *s = mx_scope_begin();
    mx_dtype dt = k < 2 ? MX_BF16 : MX_F16;
    mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(2, 2, 6, widths[k % 2]), MX_F32, MX_CPU, NULL), dt), *v = NULL,
              *i = NULL, *v32 = NULL, *i32 = NULL;
    cr_assert_eq(mx_max_pool_with_indices(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, &v, &i), MX_OK);
    cr_assert_eq(mx_max_pool_with_indices(mx_to_dtype(x, MX_F32), 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT,
                                          &v32, &i32), MX_OK);
    double *got = op_host_values(v), *want = op_host_values(v32), *gi = op_host_values(i), *wi = op_host_values(i32);
    for (int64_t e = 0; e < mx_numel(v); e++) {
      cr_expect_eq(got[e], want[e], "%s width %lld, output %lld", mx_dtype_name(dt), (long long)widths[k % 2],
                   (long long)e);
      cr_expect_eq(gi[e], wi[e], "%s width %lld, index %lld", mx_dtype_name(dt), (long long)widths[k % 2],
                   (long long)e);
    }
    free(got), free(want), free(gi), free(wi);
    mx_scope_end(s);
  }
}

/* The 2x2 stride-2 backward in float32, bfloat16 and float16 decodes the
 * window offsets in place: each gradient lands at its window's max as
 * 0 + dy (a -0 becomes +0, as PyTorch's scatter into zeros makes it), zeros
 * elsewhere, the odd last column included. */
Test(nn_ops, max_pool_2x2_backward_places_each_gradient_at_its_max) {
  const float data[2 * 5 * 2] = {0, 9, 1, 2, 7, /**/ 3, 1, 8, 0, 9, /**/ 4, 0, 0, 6, 1, /**/ 0, 0, 0, 0, 9};
  const float dy[2 * 2] = {-0.0f, NAN, 2.5f, -3};
  const int64_t at[4] = {1, 7, 10, 13}; /* the maxima 9, 8, 4, 6 */
  const mx_dtype dtypes[3] = {MX_F32, MX_BF16, MX_F16};
  for (int k = 0; k < 3; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = mx_to_dtype(mx_from_data(data, MX_SHAPE(1, 1, 4, 5), MX_F32, MX_CPU), dtypes[k]), *g = NULL;
    cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
    mx_tensor *v = mx_max_pool(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT);
    mx_tensor *grad_out = mx_to_dtype(mx_from_data(dy, MX_SHAPE(1, 1, 2, 2), MX_F32, MX_CPU), dtypes[k]);
    cr_assert_eq(mx_grad(1, &v, 1, &x, &grad_out, false, false, false, &g), MX_OK, "%s", mx_last_error());
    double *dx = op_host_values(g);
    for (int64_t e = 0; e < 20; e++) {
      int w = -1;
      for (int j = 0; j < 4; j++)
        if (at[j] == e) w = j;
      if (w == 1) cr_expect(isnan(dx[e]), "dtype %d: NaN at %lld", k, (long long)e);
      else if (w >= 0) cr_expect_eq(dx[e], dy[w], "dtype %d: dx[%lld] = %g", k, (long long)e, dx[e]);
      else cr_expect(dx[e] == 0 && !signbit(dx[e]), "dtype %d: dx[%lld] = %g, not +0", k, (long long)e, dx[e]);
    }
    cr_expect(!signbit(dx[at[0]]), "dtype %d: 0 + -0 is +0", k);
    free(dx);
    mx_scope_end(s);
  }
}

/* The 2x2 stride-2 backward writes whole row pairs: on random planes with an
 * odd last row and column, each input gets its window's gradient where the
 * forward's index points and +0 everywhere else, in float32, bfloat16 and
 * float16. */
Test(nn_ops, max_pool_2x2_backward_fills_planes_with_odd_edges) {
  const mx_dtype dtypes[3] = {MX_F32, MX_BF16, MX_F16};
  for (int k = 0; k < 3; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = mx_to_dtype(mx_randn(MX_SHAPE(2, 3, 7, 9), MX_F32, MX_CPU, NULL), dtypes[k]), *g = NULL, *v, *i;
    cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
    cr_assert_eq(mx_max_pool_with_indices(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, &v, &i), MX_OK);
    mx_tensor *grad_out = mx_to_dtype(mx_randn(MX_SHAPE(2, 3, 3, 4), MX_F32, MX_CPU, NULL), dtypes[k]);
    cr_assert_eq(mx_grad(1, &v, 1, &x, &grad_out, false, false, false, &g), MX_OK, "%s", mx_last_error());
    double *dx = op_host_values(g), *dy = op_host_values(grad_out), *at = op_host_values(i), want[2 * 3 * 7 * 9] = {0};
    for (int64_t o = 0; o < 2 * 3 * 3 * 4; o++) want[o / 12 * 63 + (int64_t)at[o]] = dy[o];
    for (int64_t e = 0; e < 2 * 3 * 7 * 9; e++)
      cr_expect(dx[e] == want[e] && !signbit(dx[e]) == !signbit(want[e]), "dtype %d: dx[%lld] = %g, want %g", k,
                (long long)e, dx[e], want[e]);
    free(dx), free(dy), free(at);
    mx_scope_end(s);
  }
}

/* The 2x2 stride-2 fast path in float32, bfloat16 and float16: a tie keeps
 * the first index, a NaN wins over larger numbers and the last NaN wins; an
 * odd last column is left out. */
Test(nn_ops, max_pool_2x2_ties_and_nan) {
  const float data[2 * 5] = {1, 1, NAN, 5, 9, 1, 1, NAN, 2, 9};
  const mx_dtype dtypes[3] = {MX_F32, MX_BF16, MX_F16};
  for (int k = 0; k < 3; k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = mx_to_dtype(mx_from_data(data, MX_SHAPE(1, 1, 2, 5), MX_F32, MX_CPU), dtypes[k]), *v = NULL, *i = NULL;
    cr_assert_eq(mx_max_pool_with_indices(x, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, &v, &i), MX_OK, "%s",
                 mx_last_error());
    double *values = op_host_values(v), *indices = op_host_values(i);
    cr_expect_eq(indices[0], 0, "tie: first index (dtype %d)", k);
    cr_expect_eq(values[0], 1);
    cr_expect_eq(indices[1], 7, "the last NaN (dtype %d), got %g", k, indices[1]);
    cr_expect(isnan(values[1]));
    free(values), free(indices);
    mx_scope_end(s);
  }
}
