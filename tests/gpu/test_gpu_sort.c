/* sort, argsort, topk and multinomial on CUDA against the CPU: the sort
 * kernel runs the CPU's own line sort (kernels/sort_line.h), so values and
 * indices are the same bits for every dtype, dim, direction and layout, NaN
 * and ties included; sort's gradient too. Multinomial with replacement
 * draws the same indices from the same generator state (the uniforms and
 * the cumulative sums are the same bits on both devices); without
 * replacement its keys go through log1p, whose last bit may differ, so
 * there the draws are checked for their rules. Skips without a GPU. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "compare.h"

/* Values and indices of sort (and argsort, topk) on both devices. */
static void expect_same_sort(const mx_tensor *cpu, int dim, bool descending, const char *what) {
  mx_tensor *gpu = to_cuda(cpu);
  mx_tensor *vc = NULL, *ic = NULL, *vg = NULL, *ig = NULL;
  cr_assert_eq(mx_sort(cpu, dim, descending, true, &vc, &ic), MX_OK, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_sort(gpu, dim, descending, true, &vg, &ig), MX_OK, "%s: %s", what, mx_last_error());
  assert_identical(vc, vg, what);
  assert_identical(ic, ig, what);
  assert_identical(mx_argsort(cpu, dim, descending, true), mx_argsort(gpu, dim, descending, true), what);
  int64_t size = mx_ndim(cpu) ? mx_shape_get(cpu).d[dim < 0 ? dim + mx_ndim(cpu) : dim] : 1;
  cr_assert_eq(mx_topk(cpu, size / 2, dim, !descending, true, &vc, &ic), MX_OK, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx_topk(gpu, size / 2, dim, !descending, true, &vg, &ig), MX_OK, "%s: %s", what, mx_last_error());
  assert_identical(vc, vg, what);
  assert_identical(ic, ig, what);
}

/* Every dtype (awkward values: NaN, infinities, signed zeros, ties after
 * rounding to the small dtypes), every dim, both directions, a strided view. */
Test(gpu_sort, same_values_and_indices_as_the_cpu) {
  require_gpu();
  for (int k = 0; k < COUNT(all_dtypes); k++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = awkward_tensor(all_dtypes[k], 40 + (uint64_t)k);
    char what[96];
    for (int dim = -1; dim < 3; dim++)
      for (int descending = 0; descending < 2; descending++) {
        snprintf(what, sizeof what, "%s dim %d%s", mx_dtype_name(all_dtypes[k]), dim, descending ? " desc" : "");
        expect_same_sort(x, dim, descending, what);
      }
    snprintf(what, sizeof what, "%s transposed", mx_dtype_name(all_dtypes[k]));
    expect_same_sort(mx_transpose(x, 0, 2), 1, false, what);
    mx_scope_end(s);
  }
}

/* Long lines (a vocabulary) and many short ones. */
Test(gpu_sort, long_and_many_lines) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3);
  mx_tensor *logits = mx_randn(MX_SHAPE(4, 50257), MX_F32, MX_CPU, gen);
  mx_tensor *rows = mx_randint(0, 50, MX_SHAPE(20000, 7), MX_I32, MX_CPU, gen);
  mx_generator_free(gen);
  expect_same_sort(logits, -1, true, "4 lines of 50257");
  expect_same_sort(rows, 1, false, "20000 lines of 7, with ties");
  mx_scope_end(s);
}

/* The gradient of sort's values scatters back through the indices: the same bits. */
Test(gpu_sort, gradient) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(9);
  mx_tensor *xc = mx_randn(MX_SHAPE(5, 33), MX_F64, MX_CPU, gen);
  mx_tensor *w = mx_randn(MX_SHAPE(5, 4), MX_F64, MX_CPU, gen);
  mx_generator_free(gen);
  mx_tensor *xg = to_cuda(xc), *wg = to_cuda(w), *grads[2] = {0};
  mx_tensor *inputs[2] = {xc, xg};
  for (int d = 0; d < 2; d++) {
    cr_assert_eq(mx_set_requires_grad(inputs[d], true), MX_OK, "%s", mx_last_error());
    mx_tensor *values = NULL;
    cr_assert_eq(mx_topk(inputs[d], 4, 1, true, true, &values, NULL), MX_OK, "%s", mx_last_error());
    mx_tensor *loss = mx_sum(mx_mul(values, d ? wg : w), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, 1, &inputs[d], NULL, false, false, false, &grads[d]), MX_OK, "%s",
                 mx_last_error());
  }
  assert_identical(grads[0], grads[1], "topk's gradient");
  mx_scope_end(s);
}

Test(gpu_sort, multinomial) {
  require_gpu();
  mx_scope *s = mx_scope_begin();
  const double weights[6] = {0.5, 0, 3, 1e-3, 0, 2};
  mx_tensor *w = mx_expand(mx_unsqueeze(mx_from_data(weights, MX_SHAPE(6), MX_F64, MX_CPU), 0), MX_SHAPE(64, 6));
  mx_generator *gen = mx_generator_new(17);
  mx_tensor *dc = mx_multinomial(w, 40, true, gen);
  mx_generator_set_state(gen, 17, 0);
  mx_tensor *dg = mx_multinomial(to_cuda(w), 40, true, gen);
  cr_assert_not_null(dg, "%s", mx_last_error());
  assert_identical(dc, dg, "multinomial with replacement");
  mx_tensor *without = mx_to_device(mx_multinomial(to_cuda(w), 4, false, gen), MX_CPU);
  mx_generator_free(gen);
  cr_assert_not_null(without, "%s", mx_last_error());
  size_t bytes = 0;
  int64_t *v = host_copy(without, &bytes);
  int64_t bad = 0;
  for (int r = 0; r < 64; r++)
    for (int a = 0; a < 4; a++) {
      bad += weights[v[r * 4 + a]] == 0;
      for (int b = 0; b < a; b++) bad += v[r * 4 + a] == v[r * 4 + b];
    }
  cr_expect_eq(bad, 0, "without replacement: %lld repeated or zero-weight draws", (long long)bad);
  free(v);
  mx_scope_end(s);
}
