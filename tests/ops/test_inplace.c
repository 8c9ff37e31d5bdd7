/* In-place ops outside a graph, where the kernel writes straight into self
 * (ops/inplace.c), and the cases that must take the general path instead:
 * an operand overlapping self in another layout, a result of another
 * dtype, a broadcast that would grow self. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <string.h>

static mx_scope *scope;
static void begin(void) { scope = mx_scope_begin(); }
static void end(void) { mx_scope_end(scope); }
TestSuite(inplace, .init = begin, .fini = end);

static mx_tensor *f32(mx_shape shape, const float *values) { return mx_from_data(values, shape, MX_F32, MX_CPU); }

static void expect_values(const mx_tensor *t, const double *want, int n) {
  mx_tensor *flat = mx_reshape(t, MX_SHAPE(-1));
  cr_assert_not_null(flat, "%s", mx_last_error());
  for (int i = 0; i < n; i++)
    cr_expect_eq(mx_at(flat, MX_SHAPE(i)), want[i], "element %d: %g, want %g", i, mx_at(flat, MX_SHAPE(i)), want[i]);
}

Test(inplace, binary_ops_write_into_self_and_bump_its_version) {
  mx_tensor *a = f32(MX_SHAPE(2, 3), (float[]){1, 2, 3, 4, 5, 6});
  mx_tensor *row = f32(MX_SHAPE(3), (float[]){10, 20, 30});
  uint64_t version = mx_version(a);
  cr_assert_eq(mx_add_(a, row), MX_OK, "%s", mx_last_error()); /* the row broadcasts over self */
  expect_values(a, (double[]){11, 22, 33, 14, 25, 36}, 6);
  cr_assert_eq(mx_mul_(a, mx_scalar(2, MX_F32, MX_CPU)), MX_OK, "%s", mx_last_error());
  expect_values(a, (double[]){22, 44, 66, 28, 50, 72}, 6);
  cr_assert_eq(mx_add_scalar_(a, -2), MX_OK);
  cr_assert_eq(mx_mul_scalar_(a, 0.5), MX_OK);
  expect_values(a, (double[]){10, 21, 32, 13, 24, 35}, 6);
  cr_expect_eq(mx_version(a), version + 4, "each write counts once");
}

Test(inplace, unary_ops_write_into_a_strided_self) {
  mx_tensor *a = f32(MX_SHAPE(2, 2), (float[]){-1, 2, -3, 0});
  mx_tensor *t = mx_transpose(a, 0, 1); /* a view: writes reach a */
  cr_assert_eq(mx_relu_(t), MX_OK, "%s", mx_last_error());
  expect_values(a, (double[]){0, 2, 0, 0}, 4);
  cr_assert_eq(mx_exp_(t), MX_OK);
  expect_values(a, (double[]){1, expf(2.0f), 1, 1}, 4); /* float32's exp, as the kernel computes */
}

Test(inplace, bfloat16_self_computes_in_float_and_rounds_once) {
  mx_tensor *a = mx_to_dtype(f32(MX_SHAPE(2), (float[]){1, 256}), MX_BF16);
  cr_assert_eq(mx_add_scalar_(a, 1), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_dtype_of(a), MX_BF16);
  /* 257 is not a bfloat16 (8 bits of mantissa): it rounds to even, 256 */
  expect_values(a, (double[]){2, 256}, 2);
}

Test(inplace, self_plus_itself_reads_each_element_before_writing_it) {
  mx_tensor *a = f32(MX_SHAPE(3), (float[]){1, 2, 3});
  cr_assert_eq(mx_add_(a, a), MX_OK);
  expect_values(a, (double[]){2, 4, 6}, 3);
}

Test(inplace, an_operand_overlapping_self_in_another_layout_sees_the_old_values) {
  mx_tensor *a = f32(MX_SHAPE(2, 2), (float[]){1, 2, 3, 4});
  cr_assert_eq(mx_add_(a, mx_transpose(a, 0, 1)), MX_OK, "%s", mx_last_error());
  /* [[1,2],[3,4]] + [[1,3],[2,4]], as if the transpose were a copy */
  expect_values(a, (double[]){2, 5, 5, 8}, 4);
}

Test(inplace, a_result_of_a_wider_dtype_or_shape_is_refused) {
  mx_tensor *i = mx_arange(0, 3, 1, MX_I64, MX_CPU);
  cr_expect_eq(mx_add_scalar_(i, 0.5), MX_DTYPE_ERROR);
  cr_expect(strstr(mx_last_error(), "mx_add_scalar_: result type float32 cannot be written into a int64 tensor"),
            "%s", mx_last_error());
  expect_values(i, (double[]){0, 1, 2}, 3);
  mx_clear_error();
  mx_tensor *row = f32(MX_SHAPE(3), (float[]){1, 2, 3}), *column = f32(MX_SHAPE(2, 1), (float[]){1, 2});
  cr_expect_neq(mx_add_(row, column), MX_OK, "self cannot grow to the broadcast shape (2, 3)");
  expect_values(row, (double[]){1, 2, 3}, 3);
}

Test(inplace, while_recording_the_op_joins_the_graph_instead) {
  mx_tensor *w = f32(MX_SHAPE(2), (float[]){1, -2});
  cr_assert_eq(mx_set_requires_grad(w, true), MX_OK);
  mx_tensor *y = mx_mul_scalar(w, 3);
  cr_assert_eq(mx_relu_(y), MX_OK, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(y), "RELUBackward");
  cr_assert_eq(mx_backward(mx_sum(y, MX_DIMS(0), false), NULL, false), MX_OK, "%s", mx_last_error());
  expect_values(mx_grad_of(w), (double[]){3, 0}, 2);
}
