/* A 16-bit mx_linear adds its bias to the float32 sums and rounds once, as PyTorch's F.linear (addmm) does, where
 * matmul then add would round twice. Hand-computed: in bfloat16 (8 significant bits, a spacing of 2 from 256 to 512)
 * x = (16, 1), w = (16, 1) give the product 257 and a bias of 0.75 the sum 257.75, which rounds to 258; rounded
 * first, 257 is a tie that goes to the even 256, and 256 + 0.75 rounds to 256. In float16 (11 bits, a spacing of 2
 * from 2048) x = (32, 1), w = (64, 1) give 2049 and 2049.75: 2050 once, 2048 twice. Both PyTorch 1.13 and 2.15 give
 * 258 and 2050 for F.linear, and 256 and 2048 for x @ w.t() + b. The RNN cells' linears and addmm with a bias vector
 * round once too. */
#include <criterion/criterion.h>

#include <mixgrad.h>

typedef struct {
  mx_dtype dtype;
  float x0, w0;        /* x = (x0, 1), w = (w0, 1): the product x0 w0 + 1 */
  float once, twice;   /* the sum plus 0.75 rounded once, and the product rounded before the bias */
} rounding_case;

static const rounding_case cases[] = {{MX_BF16, 16, 16, 258, 256}, {MX_F16, 32, 64, 2050, 2048}};

/* rows copies of x in a (rows, 2) tensor of dtype dt; transposed: stored column by column (the fused kernels read
 * it in place), three_d: as (1, rows, 2) taken every other row from a (1, 2 rows, 2) tensor (not evenly strided
 * rows once flattened: the op's float32 fallback). */
static mx_tensor *input(const rounding_case *c, int rows, bool transposed, bool three_d) {
  float data[2 * 8 * 2];
  for (int r = 0; r < 2 * rows; r++) data[2 * r] = c->x0, data[2 * r + 1] = 1;
  if (three_d) {
    mx_tensor *t = mx_to_dtype(mx_from_data(data, MX_SHAPE(1, 2 * rows, 2), MX_F32, MX_CPU), c->dtype);
    return mx_slice(t, 1, 0, 2 * rows, 2);
  }
  mx_tensor *t = mx_to_dtype(mx_from_data(data, MX_SHAPE(rows, 2), MX_F32, MX_CPU), c->dtype);
  return transposed ? mx_transpose(mx_contiguous(mx_transpose(t, 0, 1)), 0, 1) : t;
}

static void expect_all(const mx_tensor *y, float want, const char *what, const rounding_case *c) {
  cr_assert_not_null(y, "%s %s: %s", mx_dtype_name(c->dtype), what, mx_last_error());
  cr_expect_eq(mx_dtype_of(y), c->dtype, "%s %s: dtype %s", mx_dtype_name(c->dtype), what,
               mx_dtype_name(mx_dtype_of(y)));
  float got[8];
  int64_t n = mx_numel(y);
  cr_assert(n <= 8 && mx_to_host(mx_to_dtype(mx_contiguous(y), MX_F32), got, sizeof(float) * (size_t)n) == MX_OK,
            "%s", mx_last_error());
  for (int64_t i = 0; i < n; i++)
    cr_expect_eq(got[i], want, "%s %s: element %lld is %g, want %g", mx_dtype_name(c->dtype), what, (long long)i,
                 got[i], want);
}

Test(linear_rounding, a_16_bit_linear_adds_its_bias_before_its_one_rounding) {
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const rounding_case *c = &cases[k];
    mx_scope *scope = mx_scope_begin();
    float wd[2] = {c->w0, 1}, bd[1] = {0.75f};
    mx_tensor *w = mx_to_dtype(mx_from_data(wd, MX_SHAPE(1, 2), MX_F32, MX_CPU), c->dtype);
    mx_tensor *b = mx_to_dtype(mx_from_data(bd, MX_SHAPE(1), MX_F32, MX_CPU), c->dtype);
    expect_all(mx_linear(input(c, 4, false, false), w, b), c->once, "linear", c);
    expect_all(mx_linear(input(c, 4, true, false), w, b), c->once, "linear of a transposed x", c);
    expect_all(mx_linear(input(c, 3, false, true), w, b), c->once, "linear of unevenly strided rows", c);
    expect_all(mx_linear(mx_squeeze(input(c, 1, false, false), 0), w, b), c->once, "linear of a vector", c);
    expect_all(mx_linear_relu(input(c, 4, false, false), w, b), c->once, "linear_relu", c);
    expect_all(mx_linear_relu(input(c, 3, false, true), w, b), c->once, "linear_relu of unevenly strided rows", c);
    /* the two ops linear is not */
    expect_all(mx_add(mx_matmul(input(c, 4, false, false), mx_transpose(w, 0, 1)), b), c->twice, "matmul then add", c);
    mx_scope_end(scope);
  }
}

/* float32 leaves in a 16-bit region: linear lowers all three, then rounds once. */
Test(linear_rounding, autocast_lowers_then_rounds_once) {
  for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
    const rounding_case *c = &cases[k];
    mx_scope *scope = mx_scope_begin();
    float xd[2] = {c->x0, 1}, wd[2] = {c->w0, 1}, bd[1] = {0.75f};
    mx_tensor *x = mx_from_data(xd, MX_SHAPE(1, 2), MX_F32, MX_CPU);
    mx_tensor *w = mx_from_data(wd, MX_SHAPE(1, 2), MX_F32, MX_CPU);
    mx_tensor *b = mx_from_data(bd, MX_SHAPE(1), MX_F32, MX_CPU), *y = NULL;
    MX_AUTOCAST(MX_CPU, c->dtype, true, true) { y = mx_linear(x, w, b); }
    expect_all(y, c->once, "linear under autocast", c);
    mx_scope_end(scope);
  }
}

/* The gradients are the composite's: bias's the sum of the output's gradient over the rows, x's g w, w's g^T x. */
Test(linear_rounding, its_gradients_are_the_composites) {
  mx_scope *scope = mx_scope_begin();
  float xd[3 * 2] = {1, 2, 3, 4, 5, 6}, wd[2 * 2] = {1, -1, 2, 0.5f}, bd[2] = {0.25f, -0.5f};
  float gd[3 * 2] = {1, 2, 3, 4, 5, 6};
  mx_tensor *x = mx_to_dtype(mx_from_data(xd, MX_SHAPE(3, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *w = mx_to_dtype(mx_from_data(wd, MX_SHAPE(2, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *b = mx_to_dtype(mx_from_data(bd, MX_SHAPE(2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *g = mx_to_dtype(mx_from_data(gd, MX_SHAPE(3, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *leaves[3] = {x, w, b};
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad(leaves[i], true), MX_OK, "%s", mx_last_error());
  mx_tensor *y = mx_linear(x, w, b);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(y), "LINEAR_BIASBackward");
  cr_assert_eq(mx_backward(y, g, false), MX_OK, "%s", mx_last_error());
  /* dx = g w: rows (1 + 4, -1 + 1), (3 + 8, -3 + 2), (5 + 12, -5 + 3); dw = g^T x; db = column sums of g */
  float dx[6] = {5, 0, 11, -1, 17, -2}, dw[4] = {1 + 9 + 25, 2 + 12 + 30, 2 + 12 + 30, 4 + 16 + 36}, db[2] = {9, 12};
  const float *want[3] = {dx, dw, db};
  for (int i = 0; i < 3; i++) {
    float got[6];
    int64_t n = mx_numel(leaves[i]);
    cr_assert_eq(mx_to_host(mx_to_dtype(mx_grad_of(leaves[i]), MX_F32), got, sizeof(float) * (size_t)n), MX_OK);
    for (int64_t j = 0; j < n; j++)
      cr_expect_eq(got[j], want[i][j], "input %d, element %lld: %g", i, (long long)j, got[j]);
  }
  mx_scope_end(scope);
}

/* The RNN cells' linears are linear's, as in PyTorch's cells: relu((16, 1) . (16, 1) + 0.75 + 0 h + 0) is 258 in
 * bfloat16, where rounding the product first would give 256. */
Test(linear_rounding, the_rnn_cells_round_each_linear_once) {
  mx_scope *scope = mx_scope_begin();
  const rounding_case *c = &cases[0];
  float xd[2] = {16, 1}, wd[2] = {16, 1}, bd[1] = {0.75f}, zero[1] = {0};
  mx_tensor *x = mx_to_dtype(mx_from_data(xd, MX_SHAPE(1, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *w_ih = mx_to_dtype(mx_from_data(wd, MX_SHAPE(1, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *b_ih = mx_to_dtype(mx_from_data(bd, MX_SHAPE(1), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *h = mx_to_dtype(mx_from_data(zero, MX_SHAPE(1, 1), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *w_hh = mx_to_dtype(mx_from_data(zero, MX_SHAPE(1, 1), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *b_hh = mx_to_dtype(mx_from_data(zero, MX_SHAPE(1), MX_F32, MX_CPU), MX_BF16);
  expect_all(mx_rnn_relu_cell(x, h, w_ih, w_hh, b_ih, b_hh), c->once, "rnn_relu_cell", c);
  mx_scope_end(scope);
}

/* addmm with a vector of b's columns, beta and alpha 1, is F.linear's call: one rounding, 258 in bfloat16. */
Test(linear_rounding, addmm_of_a_bias_vector_rounds_once) {
  mx_scope *scope = mx_scope_begin();
  const rounding_case *c = &cases[0];
  float xd[2] = {16, 1}, wd[2] = {16, 1}, bd[1] = {0.75f};
  mx_tensor *x = mx_to_dtype(mx_from_data(xd, MX_SHAPE(1, 2), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *wt = mx_to_dtype(mx_from_data(wd, MX_SHAPE(2, 1), MX_F32, MX_CPU), MX_BF16);
  mx_tensor *b = mx_to_dtype(mx_from_data(bd, MX_SHAPE(1), MX_F32, MX_CPU), MX_BF16);
  expect_all(mx_addmm(b, x, wt, 1, 1), c->once, "addmm", c);
  mx_scope_end(scope);
}
