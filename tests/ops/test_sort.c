/* What the op table's cases (op_cases.h, with PyTorch fixtures) cannot say
 * about sort, argsort, topk and multinomial: int64 beyond 2^53, every dtype
 * in one place, 0-d and empty inputs, the autocast policy, the error
 * messages, and multinomial's draws (reproducible from a seeded generator,
 * with and without replacement, their frequencies by a chi-square bound). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "op_checks.h"

static mx_tensor *from_doubles(int n, const double *v, mx_dtype dtype) {
  mx_tensor *t = mx_to_dtype(mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU), dtype);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}
#define VEC(dtype, ...) \
  from_doubles((int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]){__VA_ARGS__}, dtype)

/* t holds exactly the n values want. */
static void expect_values(const char *what, const mx_tensor *t, int n, const double *want) {
  cr_assert_not_null(t, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_numel(t), n, "%s: %lld values, expected %d", what, (long long)mx_numel(t), n);
  double *v = op_host_values(t);
  for (int i = 0; i < n; i++)
    cr_expect(v[i] == want[i] || (isnan(v[i]) && isnan(want[i])), "%s[%d] is %g, expected %g", what, i, v[i],
              want[i]);
  free(v);
}
#define EXPECT_VALUES(what, t, ...)                                                                    \
  expect_values(what, t, (int)(sizeof((double[]){__VA_ARGS__}) / sizeof(double)), (double[]){__VA_ARGS__})

/* --- sort ------------------------------------------------------------------------------------------------ */

/* int64 compares as int64: 2^53 and 2^53 + 1 are one double, two integers. */
Test(sort, int64_beyond_2_to_the_53) {
  mx_scope *s = mx_scope_begin();
  const int64_t data[] = {(1LL << 53) + 1, 1LL << 53, (1LL << 53) + 2, -(1LL << 62), INT64_MAX, INT64_MIN};
  mx_tensor *x = mx_from_data(data, MX_SHAPE(6), MX_I64, MX_CPU);
  mx_tensor *values = NULL, *indices = NULL;
  cr_assert_eq(mx_sort(x, 0, false, true, &values, &indices), MX_OK, "%s", mx_last_error());
  EXPECT_VALUES("indices", indices, 5, 3, 1, 0, 2, 4);
  const int64_t *v = mx_data_ptr(values);
  const int64_t want[] = {INT64_MIN, -(1LL << 62), 1LL << 53, (1LL << 53) + 1, (1LL << 53) + 2, INT64_MAX};
  for (int i = 0; i < 6; i++) cr_expect_eq(v[i], want[i], "values[%d] is %lld", i, (long long)v[i]);
  mx_scope_end(s);
}

/* Every dtype sorts in its own dtype, indices in int64, ties in input order both ways. */
Test(sort, every_dtype) {
  const mx_dtype dtypes[] = {MX_F64, MX_F32, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};
  for (size_t k = 0; k < sizeof dtypes / sizeof *dtypes; k++) {
    mx_scope *s = mx_scope_begin();
    bool is_bool = dtypes[k] == MX_BOOL;
    mx_tensor *x = is_bool ? VEC(MX_BOOL, 1, 0, 1, 0) : VEC(dtypes[k], 3, 1, 2, 1);
    mx_tensor *values = NULL, *indices = NULL;
    cr_assert_eq(mx_sort(x, -1, false, false, &values, &indices), MX_OK, "%s", mx_last_error());
    cr_expect_eq(mx_dtype_of(values), dtypes[k], "%s: values are %s", mx_dtype_name(dtypes[k]),
                 mx_dtype_name(mx_dtype_of(values)));
    cr_expect_eq(mx_dtype_of(indices), MX_I64);
    if (is_bool) {
      EXPECT_VALUES("bool values", values, 0, 0, 1, 1);
      EXPECT_VALUES("bool indices", indices, 1, 3, 0, 2);
    } else {
      EXPECT_VALUES(mx_dtype_name(dtypes[k]), values, 1, 1, 2, 3);
      EXPECT_VALUES(mx_dtype_name(dtypes[k]), indices, 1, 3, 2, 0);
    }
    EXPECT_VALUES("descending", mx_argsort(x, 0, true, true), 0, 2, 1, 3);
    mx_scope_end(s);
  }
}

/* PyTorch's order: NaN above +inf, -0.0 and 0.0 equal (input order kept). */
Test(sort, nan_and_signed_zeros) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = VEC(MX_F32, NAN, 0.0, -INFINITY, -0.0, NAN, INFINITY);
  EXPECT_VALUES("ascending", mx_argsort(x, 0, false, true), 2, 1, 3, 5, 0, 4);
  EXPECT_VALUES("descending", mx_argsort(x, 0, true, true), 0, 4, 5, 1, 3, 2);
  mx_tensor *values = NULL;
  cr_assert_eq(mx_topk(x, 2, 0, false, true, &values, NULL), MX_OK, "%s", mx_last_error());
  EXPECT_VALUES("smallest two", values, -INFINITY, 0.0);
  cr_assert_eq(mx_topk(x, 3, 0, true, true, &values, NULL), MX_OK, "%s", mx_last_error());
  EXPECT_VALUES("largest three", values, NAN, NAN, INFINITY);
  mx_scope_end(s);
}

/* A 0-d tensor is one line of one element; an empty dim sorts to empty outputs. */
Test(sort, zero_d_and_empty) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_scalar(2.5, MX_F64, MX_CPU), *values = NULL, *indices = NULL;
  cr_assert_eq(mx_sort(x, 0, false, true, &values, &indices), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(values), 0);
  cr_expect_eq(mx_item(values), 2.5);
  cr_expect_eq(mx_item(indices), 0);
  for (int k = 0; k < 2; k++) { /* PyTorch gives the 0-d tensor back for k 0 and 1 alike */
    cr_assert_eq(mx_topk(x, k, -1, true, true, &values, &indices), MX_OK, "%s", mx_last_error());
    cr_expect_eq(mx_ndim(values), 0, "k %d", k);
    cr_expect_eq(mx_item(values), 2.5);
  }
  EXPECT_STATUS_ERROR(mx_topk(x, 2, 0, true, true, &values, &indices),
                      "mx_topk: k 2 is out of range for dim 0 of size 1");
  mx_tensor *empty = mx_zeros(MX_SHAPE(3, 0), MX_F32, MX_CPU);
  cr_assert_eq(mx_sort(empty, 1, false, true, &values, &indices), MX_OK, "%s", mx_last_error());
  op_expect_shape("empty values", values, MX_SHAPE(3, 0));
  op_expect_shape("empty indices", indices, MX_SHAPE(3, 0));
  cr_assert_eq(mx_topk(empty, 0, 1, true, true, &values, &indices), MX_OK, "%s", mx_last_error());
  op_expect_shape("topk of empty", values, MX_SHAPE(3, 0));
  mx_scope_end(s);
}

/* Long lines (past the merge's first widths, an odd length) against a sort by
 * qsort on the host, and the indices put the input back. */
static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}
Test(sort, long_lines_match_qsort) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  const int64_t rows = 3, len = 1001;
  mx_tensor *x = mx_rand(MX_SHAPE(rows, len), MX_F64, MX_CPU, gen);
  mx_generator_free(gen);
  mx_tensor *values = NULL, *indices = NULL;
  cr_assert_eq(mx_sort(x, 1, false, true, &values, &indices), MX_OK, "%s", mx_last_error());
  double *want = op_host_values(x), *got = op_host_values(values);
  for (int64_t r = 0; r < rows; r++) qsort(want + r * len, (size_t)len, sizeof(double), compare_doubles);
  int64_t wrong = 0;
  for (int64_t i = 0; i < rows * len; i++) wrong += got[i] != want[i];
  cr_expect_eq(wrong, 0, "%lld values out of place", (long long)wrong);
  cr_expect(op_bitwise_equal(mx_gather(x, 1, indices), values), "x gathered at the indices is not the values");
  free(want);
  free(got);
  mx_scope_end(s);
}

/* PyTorch's autocast lists name none of them: under autocast nothing is cast. */
Test(sort, autocast_policy_is_none) {
  const char *names[] = {"sort", "argsort", "topk", "multinomial"};
  for (size_t k = 0; k < 4; k++) {
    int found = -1;
    for (int op = 0; op < mx_op_count(); op++)
      if (!strcmp(mx_op_name(op), names[k])) found = op;
    cr_assert_geq(found, 0, "no op %s in the table", names[k]);
    cr_expect_eq(mx_op_policy(found), MX_CAST_NONE, "%s: %s", names[k], mx_cast_policy_name(mx_op_policy(found)));
  }
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = VEC(MX_F32, 0.1, 0.7, 0.2), *values = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    cr_assert_eq(mx_topk(x, 2, 0, true, true, &values, NULL), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(mx_dtype_of(values), MX_F32);
  cr_expect_eq(mx_item(mx_select(values, 0, 1)), (float)0.2, "the value was rounded: %.9g",
               mx_item(mx_select(values, 0, 1)));
  mx_scope_end(s);
}

Test(sort, errors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU), *v = NULL, *i = NULL;
  EXPECT_STATUS_ERROR(mx_sort(x, 2, false, false, &v, &i),
                      "mx_sort: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_ERROR(mx_argsort(x, -3, false, false), "mx_argsort: dim -3 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_STATUS_ERROR(mx_topk(x, 1, 5, true, true, &v, &i),
                      "mx_topk: dim 5 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_STATUS_ERROR(mx_topk(x, 4, 1, true, true, &v, &i), "mx_topk: k 4 is out of range for dim 1 of size 3");
  EXPECT_STATUS_ERROR(mx_topk(x, -1, 0, true, true, &v, &i), "mx_topk: k -1 is out of range for dim 0 of size 2");
  EXPECT_STATUS_ERROR(mx_sort(NULL, 0, false, false, &v, &i), "mx_sort: argument 'x' is NULL");
  mx_scope_end(s);
}

/* --- multinomial ----------------------------------------------------------------------------------------- */

static mx_tensor *draw(const mx_tensor *probs, int64_t n, bool replacement, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_multinomial(probs, n, replacement, gen);
  mx_generator_free(gen);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

Test(multinomial, shapes_dtype_and_reproducible_draws) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = mx_reshape(VEC(MX_F32, 1, 2, 3, 4, 0.5, 0.5, 0.5, 0.5), MX_SHAPE(2, 4));
  for (int replacement = 0; replacement < 2; replacement++) {
    mx_tensor *a = draw(w, 3, replacement, 11), *b = draw(w, 3, replacement, 11);
    op_expect_shape("2-D draws", a, MX_SHAPE(2, 3));
    cr_expect_eq(mx_dtype_of(a), MX_I64);
    cr_expect(op_bitwise_equal(mx_to_dtype(a, MX_F64), mx_to_dtype(b, MX_F64)), "one seed, other draws");
    op_expect_shape("1-D draws", draw(mx_select(w, 0, 0), 2, replacement, 3), MX_SHAPE(2));
  }
  /* another seed draws another sequence (40 draws over 4 categories: equal by chance with p 4^-40) */
  mx_tensor *a = draw(w, 20, true, 1), *b = draw(w, 20, true, 2);
  cr_expect_not(op_bitwise_equal(mx_to_dtype(a, MX_F64), mx_to_dtype(b, MX_F64)), "two seeds, one sequence");
  /* float16 and float64 weights, not normalised */
  op_expect_shape("f16", draw(VEC(MX_F16, 5, 0, 7), 4, true, 1), MX_SHAPE(4));
  op_expect_shape("f64", draw(VEC(MX_F64, 500, 0, 700), 2, false, 1), MX_SHAPE(2));
  mx_scope_end(s);
}

/* Without replacement no index repeats in a row, and every positive category comes
 * once when all are drawn; zero weights are never drawn either way. */
Test(multinomial, replacement_semantics) {
  mx_scope *s = mx_scope_begin();
  const int64_t rows = 200, cats = 6;
  double weights[6] = {0.3, 0, 2, 1e-3, 0, 5};
  mx_tensor *w = mx_expand(mx_unsqueeze(from_doubles(6, weights, MX_F64), 0), MX_SHAPE(rows, cats));
  mx_tensor *without = draw(w, 4, false, 21), *with = draw(w, 50, true, 22);
  double *v = op_host_values(without);
  int64_t repeats = 0, zero_drawn = 0;
  for (int64_t r = 0; r < rows; r++)
    for (int a = 0; a < 4; a++) {
      zero_drawn += weights[(int)v[r * 4 + a]] == 0;
      for (int b = 0; b < a; b++) repeats += v[r * 4 + a] == v[r * 4 + b];
    }
  cr_expect_eq(repeats, 0, "%lld repeated indices without replacement", (long long)repeats);
  cr_expect_eq(zero_drawn, 0, "%lld zero-weight categories drawn without replacement", (long long)zero_drawn);
  free(v);
  v = op_host_values(with);
  zero_drawn = 0;
  bool repeated = false;
  for (int64_t r = 0; r < rows; r++)
    for (int a = 0; a < 50; a++) {
      zero_drawn += weights[(int)v[r * 50 + a]] == 0;
      repeated |= a > 0 && v[r * 50 + a] == v[r * 50];
    }
  cr_expect_eq(zero_drawn, 0, "%lld zero-weight categories drawn with replacement", (long long)zero_drawn);
  cr_expect(repeated, "with replacement, 50 draws of 4 categories never repeated");
  free(v);
  /* trailing zero weights: a draw never lands past the last positive one */
  v = op_host_values(draw(VEC(MX_F64, 1, 1, 0, 0), 4000, true, 23));
  int64_t past = 0;
  for (int i = 0; i < 4000; i++) past += v[i] > 1;
  cr_expect_eq(past, 0, "%lld draws past the last positive weight", (long long)past);
  free(v);
  mx_scope_end(s);
}

/* Pearson's chi-square of the counts against n * p over the positive categories,
 * with a bound at the 99.9% quantile of its distribution for 3 degrees of freedom
 * (16.27): with a fixed seed a correct sampler stays below it, and a sampler off
 * by one category, uniform, or ignoring the weights exceeds it many times over. */
static double chi_square(const double *draws, int64_t n, int stride, const double *p, int cats) {
  double counts[8] = {0}, chi = 0;
  for (int64_t i = 0; i < n; i++) counts[(int)draws[i * stride]]++;
  for (int c = 0; c < cats; c++) {
    if (p[c] == 0) {
      cr_expect_eq(counts[c], 0, "category %d of weight 0 drawn %g times", c, counts[c]);
      continue;
    }
    double expected = (double)n * p[c];
    chi += (counts[c] - expected) * (counts[c] - expected) / expected;
  }
  return chi;
}

Test(multinomial, frequencies_follow_the_weights) {
  mx_scope *s = mx_scope_begin();
  const double weights[5] = {1, 2, 3, 0, 4}, p[5] = {0.1, 0.2, 0.3, 0, 0.4}, bound = 16.27;
  const int64_t n = 20000;
  mx_tensor *w32 = from_doubles(5, weights, MX_F32);
  double *v = op_host_values(draw(w32, n, true, 31));
  double chi = chi_square(v, n, 1, p, 5);
  cr_expect_lt(chi, bound, "with replacement: chi-square %.2f over %lld draws", chi, (long long)n);
  free(v);
  /* without replacement, the first draw of each row has the weights' distribution */
  mx_tensor *rows = mx_expand(mx_unsqueeze(w32, 0), MX_SHAPE(n, 5));
  v = op_host_values(draw(rows, 2, false, 32));
  chi = chi_square(v, n, 2, p, 5);
  cr_expect_lt(chi, bound, "without replacement: chi-square %.2f over %lld first draws", chi, (long long)n);
  free(v);
  mx_scope_end(s);
}

Test(multinomial, errors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = VEC(MX_F32, 1, 0, 2);
  EXPECT_ERROR(mx_multinomial(w, 4, false, NULL),
               "mx_multinomial: cannot draw 4 samples from 3 categories without replacement");
  EXPECT_ERROR(mx_multinomial(w, 3, false, NULL),
               "mx_multinomial: row 0 of probs has 2 nonzero weights, fewer than num_samples 3 without replacement");
  EXPECT_ERROR(mx_multinomial(w, 0, true, NULL), "mx_multinomial: num_samples 0 is not positive");
  EXPECT_ERROR(mx_multinomial(VEC(MX_F32, 1, -0.5, 2), 1, true, NULL),
               "mx_multinomial: probs contain a negative weight (-0.5)");
  EXPECT_ERROR(mx_multinomial(mx_reshape(VEC(MX_F64, 1, 2, 0, 0), MX_SHAPE(2, 2)), 1, true, NULL),
               "mx_multinomial: row 1 of probs has every weight zero");
  EXPECT_ERROR(mx_multinomial(VEC(MX_F32, 1, NAN), 1, true, NULL), "mx_multinomial: probs contain inf or NaN");
  EXPECT_ERROR(mx_multinomial(VEC(MX_F32, 1, INFINITY), 1, true, NULL), "mx_multinomial: probs contain inf or NaN");
  EXPECT_ERROR(mx_multinomial(VEC(MX_I64, 1, 2), 1, true, NULL), "mx_multinomial: probs dtype int64 is not floating");
  EXPECT_ERROR(mx_multinomial(mx_zeros(MX_SHAPE(1, 1, 2), MX_F32, MX_CPU), 1, true, NULL),
               "mx_multinomial: probs must be 1-D or 2-D, got 3-D");
  EXPECT_ERROR(mx_multinomial(mx_zeros(MX_SHAPE(2, 0), MX_F32, MX_CPU), 1, true, NULL),
               "mx_multinomial: probs has no categories");
  mx_scope_end(s);
}
