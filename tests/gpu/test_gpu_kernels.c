/* The CUDA kernels against the CPU's: every elementwise code, where, the
 * ops and their gradients, matrix products in every dtype and layout,
 * reductions, scans, softmax, indexing, and the AMP check-and-unscale and scale
 * update. Each gives the same bits on both devices, or, where the two sum
 * in different orders or call different libm functions, agrees within the
 * bound its test states. Skips without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "kernels/elementwise.h"
#include "kernels/math.h"
#include "tensor/tensor_impl.h" /* the AMP and elementwise kernels are called through the backends */

/* --- the elementwise kernels --------------------------------------------------------- */

/* The codes computed by libm-like functions (the _LIBM rows of
 * kernels/elementwise.def): CUDA's libdevice and glibc may round their last
 * bit differently, so these compare within a few units in the last place;
 * every other code must give the same bits on both devices. */
static const bool unary_libm[MX_UN_COUNT] = {
#define MX_UNARY_LIBM(code, expr) [MX_UN_##code] = true,
#include "kernels/elementwise.def"
};
static const bool binary_libm[MX_BIN_COUNT] = {
#define MX_BINARY_LIBM(code, expr) [MX_BIN_##code] = true,
#include "kernels/elementwise.def"
};
static bool unary_uses_libm(int code) { return unary_libm[code]; }
static bool binary_uses_libm(int code) { return binary_libm[code]; }

/* Expects the same results of one kernel code on both devices (the same
 * bits, or within eight_ulps for a libm code on a float dtype), and goes on
 * to the next code either way, so that one run names every code that
 * differs. GELU's 1 + erf(x / sqrt 2) (and its tanh form) cancels for
 * negative x, where the two devices agree to a few ulp of 1 rather than of
 * the result: those compare with a floor of 1. */
static void expect_same_results(const mx_tensor *cpu, const mx_tensor *gpu, bool libm, bool cancels,
                                const char *what) {
  mx_dtype dtype = mx_dtype_of(cpu);
  bool close = libm && mx_dtype_is_floating(dtype);
  char why[256];
  size_t n = differences(cpu, gpu, close ? eight_ulps(dtype) : 0, cancels ? 1.0 : smallest_normal(dtype), why,
                         sizeof why);
  cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
}

/* A (6, 7, 9) CPU tensor of `dtype`: awkward_values for the floats, small
 * integers in [-20, 20) for the others (wrapped to uint8, nonzero to bool),
 * so that integer arithmetic stays clear of signed overflow. */
static mx_tensor *elementwise_input(mx_dtype dtype, uint64_t seed) {
  if (mx_dtype_is_floating(dtype)) return awkward_tensor(dtype, seed);
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *i64 = mx_randint(-20, 20, MX_SHAPE(6, 7, 9), MX_I64, MX_CPU, g);
  mx_generator_free(g);
  cr_assert_not_null(i64, "%s", mx_last_error());
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* The same (9, 7, 6) transposed view of one input on both devices. */

static device_pair strided_input(mx_dtype dtype, uint64_t seed) {
  mx_tensor *c = elementwise_input(dtype, seed);
  return (device_pair){mx_transpose(c, 0, 2), mx_transpose(to_cuda(c), 0, 2)};
}

/* A (1, 7, 1) input broadcast to (9, 7, 6) on both devices (stride 0 on two dims). */
static device_pair broadcast_input(mx_dtype dtype, uint64_t seed) {
  mx_tensor *c = mx_reshape(mx_transpose(elementwise_input(dtype, seed), 0, 2), MX_SHAPE(-1));
  c = mx_reshape(mx_slice(c, 0, 0, 7, 1), MX_SHAPE(1, 7, 1));
  cr_assert_not_null(c, "%s", mx_last_error());
  return (device_pair){mx_expand(c, MX_SHAPE(9, 7, 6)), mx_expand(to_cuda(c), MX_SHAPE(9, 7, 6))};
}

static void new_outputs(device_pair like, mx_dtype dtype, device_pair *out, mx_kview views[2]) {
  out->cpu = mx_empty(mx_shape_get(like.cpu), dtype, MX_CPU);
  out->gpu = mx_empty(mx_shape_get(like.gpu), dtype, MX_CUDA);
  cr_assert(out->cpu && out->gpu, "%s", mx_last_error());
  views[0] = mx__kview_of(out->cpu);
  views[1] = mx__kview_of(out->gpu);
}

/* Every unary code on every dtype that has it, from a strided view, against
 * the CPU kernel; the parameters (1.5, 3) serve every code that takes them
 * (leaky slope, ELU alpha, softplus beta and threshold, clamp's bounds). */
Test(gpu, unary_every_code_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair in = strided_input(dtype, 80 + (uint64_t)d);
    mx_kview in_c = mx__kview_of(in.cpu), in_g = mx__kview_of(in.gpu);
    for (int code = 0; code < MX_UN_COUNT; code++) {
      if (!mx_dtype_is_floating(dtype) && !mx__unary_has_int(code)) continue;
      device_pair out;
      mx_kview o[2];
      new_outputs(in, dtype, &out, o);
      char what[96];
      snprintf(what, sizeof what, "unary code %d on %s", code, mx_dtype_name(dtype));
      cr_assert_eq(bc->unary(code, &o[0], &in_c, 1.5, 3.0), MX_OK, "%s: %s", what, mx_last_error());
      cr_assert_eq(bg->unary(code, &o[1], &in_g, 1.5, 3.0), MX_OK, "%s: %s", what, mx_last_error());
      expect_same_results(out.cpu, out.gpu, unary_uses_libm(code),
                          code == MX_UN_GELU || code == MX_UN_GELU_TANH, what);
      mx_release(out.cpu);
      mx_release(out.gpu);
    }
    mx_scope_end(scope);
  }
}

/* Every binary code (arithmetic, comparisons, logical) on every dtype that
 * has it: x a strided view, y broadcast along two dims, alpha 0.75. */
Test(gpu, binary_every_code_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair x = strided_input(dtype, 90 + (uint64_t)d), y = broadcast_input(dtype, 100 + (uint64_t)d);
    mx_kview x_c = mx__kview_of(x.cpu), x_g = mx__kview_of(x.gpu);
    mx_kview y_c = mx__kview_of(y.cpu), y_g = mx__kview_of(y.gpu);
    for (int code = 0; code < MX_BIN_COUNT; code++) {
      if (!mx_dtype_is_floating(dtype) && !mx__binary_has_int(code)) continue;
      device_pair out;
      mx_kview o[2];
      new_outputs(x, code >= MX_BIN_EQ ? MX_BOOL : dtype, &out, o);
      char what[96];
      snprintf(what, sizeof what, "binary code %d on %s", code, mx_dtype_name(dtype));
      cr_assert_eq(bc->binary(code, &o[0], &x_c, &y_c, 0.75), MX_OK, "%s: %s", what, mx_last_error());
      cr_assert_eq(bg->binary(code, &o[1], &x_g, &y_g, 0.75), MX_OK, "%s: %s", what, mx_last_error());
      expect_same_results(out.cpu, out.gpu, binary_uses_libm(code), false, what);
      mx_release(out.cpu);
      mx_release(out.gpu);
    }
    mx_scope_end(scope);
  }
}

/* where on every dtype: a broadcast condition, x strided, y broadcast. */
Test(gpu, where_matches_cpu) {
  require_gpu();
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    device_pair x = strided_input(dtype, 110 + (uint64_t)d), y = broadcast_input(dtype, 120 + (uint64_t)d);
    device_pair cond = broadcast_input(MX_BOOL, 130 + (uint64_t)d);
    mx_kview x_c = mx__kview_of(x.cpu), x_g = mx__kview_of(x.gpu), y_c = mx__kview_of(y.cpu);
    mx_kview y_g = mx__kview_of(y.gpu), c_c = mx__kview_of(cond.cpu), c_g = mx__kview_of(cond.gpu);
    device_pair out;
    mx_kview o[2];
    new_outputs(x, dtype, &out, o);
    cr_assert_eq(bc->where(&o[0], &c_c, &x_c, &y_c), MX_OK, "%s", mx_last_error());
    cr_assert_eq(bg->where(&o[1], &c_g, &x_g, &y_g), MX_OK, "%s", mx_last_error());
    assert_identical(out.cpu, out.gpu, "where");
    mx_scope_end(scope);
  }
}

/* Through the ops: broadcasting, type promotion and autograd run on CUDA
 * tensors as on the CPU, and a code without an integer version is refused. */
Test(gpu, elementwise_ops_and_their_gradients_on_cuda) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_tensor *a = mx_from_data((float[]){1, -2, 3, -4, 5, -6}, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *b = mx_from_data((double[]){0.5, 2, -1}, MX_SHAPE(3), MX_F64, MX_CPU);
  mx_tensor *ag = to_cuda(a), *bg = to_cuda(b);
  cr_assert_eq(mx_set_requires_grad(ag, true), MX_OK);
  mx_tensor *y = mx_relu(mx_mul(ag, bg)); /* float32 * float64: float64, as in PyTorch */
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_assert_eq(mx_device_of(y), MX_CUDA);
  cr_assert_eq(mx_dtype_of(y), MX_F64);
  assert_identical(mx_relu(mx_mul(a, b)), y, "relu(a * b)");
  cr_assert_eq(mx_backward(y, mx_full(MX_SHAPE(2, 3), 1.0, MX_F64, MX_CUDA), false), MX_OK, "%s", mx_last_error());
  /* d/da relu(a * b) = b where a * b > 0 (a * b = 0.5, -4, -3; -2, 10, 6),
   * else 0 * b: -0 where b is negative, as IEEE multiplication gives */
  mx_tensor *expected = mx_from_data((float[]){0.5f, 0, -0.0f, 0, 2, -1}, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  assert_identical(expected, mx_grad_of(ag), "the gradient of a");

  mx_tensor *ints = to_cuda(mx_from_data((int64_t[]){1, 2}, MX_SHAPE(2), MX_I64, MX_CPU));
  mx_kview v = mx__kview_of(ints);
  mx_clear_error();
  cr_assert_eq(mx__backend(MX_CUDA)->unary(MX_UN_EXP, &v, &v, 0, 0), MX_DTYPE_ERROR);
  cr_assert_str_eq(mx_last_error(), "cuda unary kernel 3: no int64 version");
  mx_scope_end(scope);
}

/* --- matrix products, reductions, softmax -------------------------------------------- */

/* A CPU tensor of `shape` holding integers in [low, high] as `dtype`: sums
 * and products of these are exact in any order, so the devices must agree
 * bit for bit however cuBLAS or a block reduction orders them. */
static mx_tensor *small_integers(mx_shape shape, int64_t low, int64_t high, mx_dtype dtype, uint64_t seed) {
  mx_generator *g = mx_generator_new(seed);
  mx_tensor *i64 = mx_randint(low, high + 1, shape, MX_I64, MX_CPU, g);
  mx_generator_free(g);
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* A CPU tensor of `shape` holding integers in [-4, 4] but 0, as `dtype`:
 * exact products and sums, and no product of zero, whose sign (-0 from a
 * negative factor) would depend on where a sum starts (the CPU's reference
 * at +0, cuBLAS at the first product). */
static mx_tensor *nonzero_integers(mx_shape shape, mx_dtype dtype, uint64_t seed) {
  mx_tensor *draws = small_integers(shape, 0, 7, MX_I64, seed);
  size_t bytes;
  int64_t *v = host_copy(draws, &bytes);
  for (size_t i = 0; i < bytes / sizeof *v; i++) v[i] = v[i] < 4 ? v[i] - 4 : v[i] - 3;
  mx_tensor *i64 = mx_from_data(v, shape, MX_I64, MX_CPU);
  free(v);
  mx_release(draws);
  mx_tensor *t = mx_to_dtype(i64, dtype);
  mx_release(i64);
  cr_assert_not_null(t, "%s", mx_last_error());
  return t;
}

/* How an operand (B, R, C) is laid out: row-major; the transpose of a
 * (B, C, R) tensor (column-major, cuBLAS's OP_T); a batch of one broadcast
 * (batch stride 0); every second column (no BLAS layout: copied first). */
typedef enum { ROW_MAJOR, COLUMN_MAJOR, BATCH_BROADCAST, EVERY_SECOND_COLUMN } operand_layout;

static device_pair operand(operand_layout layout, int64_t B, int64_t R, int64_t C, mx_dtype dtype, uint64_t seed) {
  mx_tensor *base;
  switch (layout) {
  case COLUMN_MAJOR: base = nonzero_integers(MX_SHAPE(B, C, R), dtype, seed); break;
  case BATCH_BROADCAST: base = nonzero_integers(MX_SHAPE(1, R, C), dtype, seed); break;
  case EVERY_SECOND_COLUMN: base = nonzero_integers(MX_SHAPE(B, R, 2 * C), dtype, seed); break;
  default: base = nonzero_integers(MX_SHAPE(B, R, C), dtype, seed); break;
  }
  mx_tensor *on[2] = {base, to_cuda(base)};
  for (int d = 0; d < 2; d++) {
    if (layout == COLUMN_MAJOR) on[d] = mx_transpose(on[d], 1, 2);
    if (layout == BATCH_BROADCAST) on[d] = mx_expand(on[d], MX_SHAPE(B, R, C));
    if (layout == EVERY_SECOND_COLUMN) on[d] = mx_slice(on[d], 2, 0, 2 * C, 2);
    cr_assert_not_null(on[d], "%s", mx_last_error());
  }
  return (device_pair){on[0], on[1]};
}

static void compare_matmul(operand_layout la, operand_layout lb, int64_t B, int64_t M, int64_t N, int64_t K,
                           mx_dtype dtype) {
  mx_scope *scope = mx_scope_begin();
  device_pair a = operand(la, B, M, K, dtype, 200 + (uint64_t)la), b = operand(lb, B, K, N, dtype, 300 + (uint64_t)lb);
  device_pair out;
  mx_kview o[2];
  out.cpu = mx_empty(MX_SHAPE(B, M, N), dtype, MX_CPU);
  out.gpu = mx_empty(MX_SHAPE(B, M, N), dtype, MX_CUDA);
  cr_assert(out.cpu && out.gpu, "%s", mx_last_error());
  o[0] = mx__kview_of(out.cpu), o[1] = mx__kview_of(out.gpu);
  mx_kview a_c = mx__kview_of(a.cpu), a_g = mx__kview_of(a.gpu), b_c = mx__kview_of(b.cpu), b_g = mx__kview_of(b.gpu);
  char what[128];
  snprintf(what, sizeof what, "matmul %s, (%lld, %lld, %lld) x %lld, layouts %d and %d", mx_dtype_name(dtype),
           (long long)M, (long long)N, (long long)K, (long long)B, (int)la, (int)lb);
  cr_assert_eq(mx__backend(MX_CPU)->matmul(&o[0], &a_c, &b_c), MX_OK, "%s: %s", what, mx_last_error());
  cr_assert_eq(mx__backend(MX_CUDA)->matmul(&o[1], &a_g, &b_g), MX_OK, "%s: %s", what, mx_last_error());
  char why[256];
  size_t n = differences(out.cpu, out.gpu, 0, 0, why, sizeof why);
  cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
  mx_scope_end(scope);
}

/* Every dtype (the floats through cuBLAS, the integers through the plain
 * kernel) and every operand layout, small nonzero integers: the products
 * and sums are exact, so the two devices agree bit for bit. Edge shapes: a
 * vector (M = 1, N = 1), K = 1, and K = 0 (zeros). */
Test(gpu, matmul_every_dtype_and_layout_matches_cpu) {
  require_gpu();
  const operand_layout layouts[] = {ROW_MAJOR, COLUMN_MAJOR, BATCH_BROADCAST, EVERY_SECOND_COLUMN};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    if (all_dtypes[d] == MX_BOOL || all_dtypes[d] == MX_U8) continue; /* no products of these */
    for (int i = 0; i < COUNT(layouts); i++)
      for (int j = 0; j < COUNT(layouts); j++) compare_matmul(layouts[i], layouts[j], 3, 17, 9, 33, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, COLUMN_MAJOR, 2, 1, 5, 7, all_dtypes[d]);
    compare_matmul(COLUMN_MAJOR, ROW_MAJOR, 2, 6, 1, 7, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, ROW_MAJOR, 1, 4, 5, 1, all_dtypes[d]);
    compare_matmul(ROW_MAJOR, ROW_MAJOR, 2, 4, 5, 0, all_dtypes[d]);
  }
}

/* Random float32 and float64 values of one product, 128 x 96 x 300: the
 * devices sum in different orders, so they agree within a few ulp of the
 * partial sums' typical magnitude, sqrt(300) (a run on an H100 found
 * float32 differences of 1.1e-5 on results near 1). */
Test(gpu, matmul_random_values_close_to_cpu) {
  require_gpu();
  const mx_dtype dtypes[] = {MX_F32, MX_F64};
  for (int d = 0; d < 2; d++) {
    mx_scope *scope = mx_scope_begin();
    mx_generator *g = mx_generator_new(41);
    mx_tensor *a = mx_randn(MX_SHAPE(128, 300), dtypes[d], MX_CPU, g);
    mx_tensor *b = mx_randn(MX_SHAPE(300, 96), dtypes[d], MX_CPU, g);
    mx_generator_free(g);
    mx_tensor *b_column_major = mx_transpose(to_cuda(mx_contiguous(mx_transpose(b, 0, 1))), 0, 1);
    mx_tensor *c = mx_mm(a, b), *r = mx_mm(to_cuda(a), b_column_major);
    cr_assert(c && r, "%s", mx_last_error());
    char why[256];
    size_t n = differences(c, r, 64 * (dtypes[d] == MX_F64 ? 0x1p-52 : 0x1p-23), sqrt(300), why, sizeof why);
    cr_expect_eq(n, 0, "mm %s: %zu elements differ; the first, %s", mx_dtype_name(dtypes[d]), n, why);
    mx_scope_end(scope);
  }
}

/* Every reduction code over three masks (one dim, two dims, all) of a
 * strided (9, 7, 6) view, in every dtype: sum and product of integers in
 * [-2, 2] (exact in any order), max and min (with their indices), all and
 * any of the awkward values (NaN wins; the first extremum's index). */
Test(gpu, reduce_every_code_matches_cpu) {
  require_gpu();
  const uint32_t masks[] = {1u << 1, (1u << 0) | (1u << 2), 7u};
  const int codes[] = {MX_RED_SUM, MX_RED_PROD, MX_RED_MAX, MX_RED_MIN, MX_RED_ALL, MX_RED_ANY};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    for (int c = 0; c < COUNT(codes); c++) {
      int code = codes[c];
      bool arithmetic = code == MX_RED_SUM || code == MX_RED_PROD;
      if (arithmetic && dtype == MX_BOOL) continue;
      mx_scope *scope = mx_scope_begin();
      mx_tensor *base = arithmetic ? small_integers(MX_SHAPE(6, 7, 9), -2, 2, dtype, 400 + (uint64_t)d)
                                   : elementwise_input(dtype, 500 + (uint64_t)d);
      device_pair in = {mx_transpose(base, 0, 2), mx_transpose(to_cuda(base), 0, 2)};
      mx_kview in_c = mx__kview_of(in.cpu), in_g = mx__kview_of(in.gpu);
      mx_dtype out_dtype = code == MX_RED_ALL || code == MX_RED_ANY ? MX_BOOL
                           : arithmetic && !mx_dtype_is_floating(dtype) ? MX_I64
                                                                       : dtype;
      bool indexed = code == MX_RED_MAX || code == MX_RED_MIN;
      for (int m = 0; m < COUNT(masks); m++) {
        int64_t shape[3] = {9, 7, 6};
        for (int k = 0; k < 3; k++)
          if (masks[m] & (1u << k)) shape[k] = 1;
        device_pair out = {mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), out_dtype, MX_CPU),
                           mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), out_dtype, MX_CUDA)};
        device_pair idx = {mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), MX_I64, MX_CPU),
                           mx_empty(MX_SHAPE(shape[0], shape[1], shape[2]), MX_I64, MX_CUDA)};
        mx_kview o_c = mx__kview_of(out.cpu), o_g = mx__kview_of(out.gpu);
        mx_kview i_c = mx__kview_of(idx.cpu), i_g = mx__kview_of(idx.gpu);
        char what[128];
        snprintf(what, sizeof what, "reduce code %d, mask %u, %s", code, masks[m], mx_dtype_name(dtype));
        cr_assert_eq(mx__backend(MX_CPU)->reduce(code, &o_c, indexed ? &i_c : NULL, &in_c, masks[m]), MX_OK, "%s: %s",
                     what, mx_last_error());
        cr_assert_eq(mx__backend(MX_CUDA)->reduce(code, &o_g, indexed ? &i_g : NULL, &in_g, masks[m]), MX_OK,
                     "%s: %s", what, mx_last_error());
        char why[256];
        size_t n = differences(out.cpu, out.gpu, 0, 0, why, sizeof why);
        cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
        if (indexed) {
          n = differences(idx.cpu, idx.gpu, 0, 0, why, sizeof why);
          cr_expect_eq(n, 0, "%s, indices: %zu elements differ; the first, %s", what, n, why);
        }
      }
      mx_scope_end(scope);
    }
  }
}

/* cumsum and cumprod along each dim of a strided (9, 7, 6) view, forward
 * and from the end, in every dtype but bool: the devices run the same
 * line scan (kernels/scan_line.h), so the same bits, the awkward values'
 * infinities and NaNs included; integers scan into int64. Then the op on
 * CUDA with its gradient. */
Test(gpu, scan_matches_cpu) {
  require_gpu();
  const int codes[] = {MX_RED_SUM, MX_RED_PROD};
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    if (dtype == MX_BOOL) continue;
    mx_dtype out_dtype = mx_dtype_is_floating(dtype) ? dtype : MX_I64;
    for (int c = 0; c < 2; c++)
      for (int dim = 0; dim < 3; dim++)
        for (int reverse = 0; reverse < 2; reverse++) {
          mx_scope *scope = mx_scope_begin();
          device_pair in = strided_input(dtype, 700 + (uint64_t)d), out;
          mx_kview in_c = mx__kview_of(in.cpu), in_g = mx__kview_of(in.gpu), views[2];
          new_outputs(in, out_dtype, &out, views);
          char what[128];
          snprintf(what, sizeof what, "scan code %d along dim %d%s, %s", codes[c], dim, reverse ? " reversed" : "",
                   mx_dtype_name(dtype));
          cr_assert_eq(mx__backend(MX_CPU)->scan(codes[c], &views[0], &in_c, dim, reverse), MX_OK, "%s: %s", what,
                       mx_last_error());
          cr_assert_eq(mx__backend(MX_CUDA)->scan(codes[c], &views[1], &in_g, dim, reverse), MX_OK, "%s: %s", what,
                       mx_last_error());
          char why[256];
          size_t n = differences(out.cpu, out.gpu, 0, 0, why, sizeof why);
          cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
          mx_scope_end(scope);
        }
  }
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = mx_from_data((double[]){1, 2, 3, 4, 5, 6}, MX_SHAPE(2, 3), MX_F64, MX_CPU), *xg = to_cuda(x);
  cr_assert_eq(mx_set_requires_grad(xg, true), MX_OK);
  mx_tensor *y = mx_cumprod(xg, 1);
  cr_assert(y && mx_device_of(y) == MX_CUDA, "%s", mx_last_error());
  assert_identical(mx_from_data((double[]){1, 2, 6, 4, 20, 120}, MX_SHAPE(2, 3), MX_F64, MX_CPU), y, "cumprod");
  cr_assert_eq(mx_backward(mx_sum(y, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  /* d/dx_j of sum_k prod_{i<=k} x_i = sum_{k>=j} prod_{i<=k, i!=j} x_i */
  assert_identical(mx_from_data((double[]){9, 4, 2, 36, 28, 20}, MX_SHAPE(2, 3), MX_F64, MX_CPU), mx_grad_of(xg),
                   "the gradient of cumprod");
  mx_scope_end(scope);
}

/* softmax and log_softmax of the awkward values along the contiguous dim
 * and along a strided one, every float dtype, within 8 ulp; except the
 * CPU's float32 softmax along a unit-stride dim, which shifts by the max
 * in float before its vectorised exp: up to 88 * 2^-24 relative for the
 * smallest results (the H100 run saw 16 ulp at 1.6e-37), so 64 ulp there,
 * and its exp gives 0 below the smallest normal result (the GPU 1.7e-43). */
Test(gpu, softmax_matches_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(float_dtypes); d++) {
    mx_scope *scope = mx_scope_begin();
    mx_dtype dtype = float_dtypes[d];
    mx_tensor *x = awkward_tensor(dtype, 600 + (uint64_t)d), *xg = to_cuda(x);
    for (int log = 0; log < 2; log++)
      for (int dim = 0; dim < 3; dim += 2) {
        mx_tensor *c = log ? mx_log_softmax(mx_transpose(x, 0, 1), dim) : mx_softmax(mx_transpose(x, 0, 1), dim);
        mx_tensor *g = log ? mx_log_softmax(mx_transpose(xg, 0, 1), dim) : mx_softmax(mx_transpose(xg, 0, 1), dim);
        cr_assert(c && g, "%s", mx_last_error());
        char what[64], why[256];
        snprintf(what, sizeof what, "%s along dim %d, %s", log ? "log_softmax" : "softmax", dim, mx_dtype_name(dtype));
        bool float_line = dtype == MX_F32 && dim == 2 && !log;
        double rel = eight_ulps(dtype) * (float_line ? 8 : 1);
        /* the float lines' exp flushes subnormal results to 0: those differ by up to the smallest normal */
        double floor = smallest_normal(dtype) * (float_line ? 1 / rel : 1);
        size_t n = differences(c, g, rel, floor, why, sizeof why);
        cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
      }
    mx_scope_end(scope);
  }
}

/* gather, index_select, scatter, scatter_add, index_add and index_copy
 * through the ops, every dtype, with repeated indices: the same bits on
 * both devices (the CUDA writes walk each line along dim in the CPU's
 * order). An index out of range gives the CPU's error. */
Test(gpu, indexing_matches_cpu) {
  require_gpu();
  for (int d = 0; d < COUNT(all_dtypes); d++) {
    mx_dtype dtype = all_dtypes[d];
    mx_scope *scope = mx_scope_begin();
    mx_tensor *x = elementwise_input(dtype, 700 + (uint64_t)d), *src = elementwise_input(dtype, 710 + (uint64_t)d);
    mx_tensor *rows = small_integers(MX_SHAPE(6, 4, 9), 0, 6, MX_I64, 720 + (uint64_t)d); /* dim 1: 7 */
    mx_tensor *cols = small_integers(MX_SHAPE(5), 0, 8, MX_I64, 730 + (uint64_t)d);       /* dim 2: 9 */
    mx_tensor *src_rows = mx_slice(src, 1, 0, 4, 1), *src_cols = mx_slice(src, 2, 0, 5, 1);
    mx_tensor *xg = to_cuda(x), *rows_g = to_cuda(rows), *cols_g = to_cuda(cols);
    mx_tensor *src_rows_g = to_cuda(src_rows), *src_cols_g = to_cuda(src_cols);
    struct {
      const char *what;
      mx_tensor *cpu, *gpu;
    } cases[] = {
        {"gather", mx_gather(x, 1, rows), mx_gather(xg, 1, rows_g)},
        {"index_select", mx_index_select(x, 2, cols), mx_index_select(xg, 2, cols_g)},
        {"scatter", mx_scatter(x, 1, rows, src_rows), mx_scatter(xg, 1, rows_g, src_rows_g)},
        {"scatter_add", mx_scatter_add(x, 1, rows, src_rows), mx_scatter_add(xg, 1, rows_g, src_rows_g)},
        {"index_add", mx_index_add(x, 2, cols, src_cols, 2.5), mx_index_add(xg, 2, cols_g, src_cols_g, 2.5)},
        {"index_copy", mx_index_copy(x, 2, cols, src_cols), mx_index_copy(xg, 2, cols_g, src_cols_g)},
    };
    for (int c = 0; c < COUNT(cases); c++) {
      char what[64], why[256];
      snprintf(what, sizeof what, "%s, %s", cases[c].what, mx_dtype_name(dtype));
      cr_assert(cases[c].cpu && cases[c].gpu, "%s: %s", what, mx_last_error());
      size_t n = differences(cases[c].cpu, cases[c].gpu, 0, 0, why, sizeof why);
      cr_expect_eq(n, 0, "%s: %zu elements differ; the first, %s", what, n, why);
    }
    mx_scope_end(scope);
  }
  mx_scope *scope = mx_scope_begin();
  mx_tensor *x = to_cuda(mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU));
  mx_tensor *bad = to_cuda(mx_from_data((int64_t[]){0, 4, 1}, MX_SHAPE(3, 1), MX_I64, MX_CPU));
  mx_clear_error();
  cr_assert_null(mx_gather(x, 1, bad));
  cr_assert_str_eq(mx_last_error(), "mx_gather: index 4 out of range for dim 1 of size 4");
  cr_assert_null(mx_scatter_add(x, 1, bad, mx_gather(x, 1, mx_zeros_like(bad))));
  cr_assert_str_eq(mx_last_error(), "mx_scatter_add: index 4 out of range for dim 1 of size 4");
  mx_scope_end(scope);
}

/* --- the AMP kernels ------------------------------------------------------------------ */

/* The dense float32 pass (every gradient float32 and one run of memory): a
 * row-major gradient and a channels-last one, as a channels-last
 * convolution's weight gradient lies, holding inf, NaN and subnormals. */
Test(gpu, amp_unscale_dense_float32_channels_last_same_bits) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  mx_tensor *cpu[2] = {NULL}, *gpu[2] = {NULL};
  mx_kview vc[2], vg[2];
  for (int d = 0; d < 2; d++) {
    mx_tensor *c = mx_reshape(awkward_tensor(MX_F32, 70 + (uint64_t)d), MX_SHAPE(2, 3, 7, 9));
    cpu[d] = d ? mx_to_channels_last(c) : c;
    gpu[d] = d ? mx_to_channels_last(to_cuda(c)) : to_cuda(c);
    cr_assert(cpu[d] && gpu[d], "%s", mx_last_error());
    vc[d] = mx__kview_of(cpu[d]);
    vg[d] = mx__kview_of(gpu[d]);
  }
  cr_assert(!mx_is_contiguous(gpu[1]), "the second gradient is channels-last");
  mx_tensor *scale_c = mx_scalar(3072.0, MX_F32, MX_CPU), *scale_g = to_cuda(scale_c);
  mx_tensor *found_c = mx_scalar(0.0, MX_F32, MX_CPU), *found_g = to_cuda(found_c);
  mx_tensor *stats_c = mx_zeros(MX_SHAPE(2, 3), MX_I64, MX_CPU), *stats_g = to_cuda(stats_c);
  cr_assert_eq(mx__backend(MX_CPU)->amp_unscale(2, vc, mx__kview_of(scale_c).data, mx__kview_of(found_c).data,
                                                mx__kview_of(stats_c).data), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx__backend(MX_CUDA)->amp_unscale(2, vg, mx__kview_of(scale_g).data, mx__kview_of(found_g).data,
                                                 mx__kview_of(stats_g).data), MX_OK, "%s", mx_last_error());
  for (int d = 0; d < 2; d++) assert_identical(cpu[d], gpu[d], "amp_unscale");
  assert_identical(found_c, found_g, "amp_unscale found_inf");
  assert_identical(stats_c, stats_g, "amp_unscale counts");
  cr_assert_eq(mx_item(found_c), 1.0, "the planted inf and NaN are found");
  mx_scope_end(scope);
}

/* Check-and-unscale over gradients of each dtype it takes (one a strided
 * view), holding inf, NaN and subnormals, then four scale updates: the same
 * bits on both devices, found_inf and the per-gradient counts included. */
Test(gpu, amp_unscale_and_update_same_bits) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  const mx_dtype dtypes[] = {MX_F32, MX_F64, MX_BF16};
  mx_tensor *cpu[3], *gpu[3];
  mx_kview vc[3], vg[3];
  for (int d = 0; d < 3; d++) {
    mx_tensor *c = awkward_tensor(dtypes[d], 60 + (uint64_t)d);
    cpu[d] = d == 0 ? mx_transpose(c, 0, 2) : c;
    gpu[d] = d == 0 ? mx_transpose(to_cuda(c), 0, 2) : to_cuda(c);
    vc[d] = mx__kview_of(cpu[d]);
    vg[d] = mx__kview_of(gpu[d]);
  }
  mx_tensor *scale_c = mx_scalar(3072.0, MX_F32, MX_CPU), *scale_g = to_cuda(scale_c);
  mx_tensor *found_c = mx_scalar(0.0, MX_F32, MX_CPU), *found_g = to_cuda(found_c);
  mx_tensor *stats_c = mx_zeros(MX_SHAPE(3, 3), MX_I64, MX_CPU), *stats_g = to_cuda(stats_c);
  const mx_backend *bc = mx__backend(MX_CPU), *bg = mx__backend(MX_CUDA);
  cr_assert_eq(bc->amp_unscale(3, vc, mx__kview_of(scale_c).data, mx__kview_of(found_c).data,
                               mx__kview_of(stats_c).data), MX_OK, "%s", mx_last_error());
  cr_assert_eq(bg->amp_unscale(3, vg, mx__kview_of(scale_g).data, mx__kview_of(found_g).data,
                               mx__kview_of(stats_g).data), MX_OK, "%s", mx_last_error());
  for (int d = 0; d < 3; d++) assert_identical(cpu[d], gpu[d], "amp_unscale");
  assert_identical(found_c, found_g, "amp_unscale found_inf");
  assert_identical(stats_c, stats_g, "amp_unscale counts");
  cr_assert_eq(mx_item(found_c), 1.0, "the planted inf and NaN are found");

  mx_tensor *tracker_c = mx_scalar(0, MX_I32, MX_CPU), *tracker_g = to_cuda(tracker_c);
  mx_tensor *counters_c = mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU), *counters_g = to_cuda(counters_c);
  mx_amp_update_params p = {2.0, 0.5, 2, 0, 0};
  for (int step = 0; step < 4; step++) {
    float flag = step == 1 ? 1.0f : 0.0f;
    mx_tensor *f_c = mx_scalar(flag, MX_F32, MX_CPU), *f_g = to_cuda(f_c);
    /* the step with the inf clears its flag (read first) and the counts in the same launch */
    mx_amp_clear clear_c = {0}, clear_g = {0};
    if (step == 1) {
      clear_c = (mx_amp_clear){mx__kview_of(f_c).data, mx__kview_of(stats_c).data, 9};
      clear_g = (mx_amp_clear){mx__kview_of(f_g).data, mx__kview_of(stats_g).data, 9};
    }
    cr_assert_eq(bc->amp_update_scale(mx__kview_of(scale_c).data, mx__kview_of(tracker_c).data,
                                      mx__kview_of(f_c).data, &p, mx__kview_of(counters_c).data, &clear_c), MX_OK);
    cr_assert_eq(bg->amp_update_scale(mx__kview_of(scale_g).data, mx__kview_of(tracker_g).data,
                                      mx__kview_of(f_g).data, &p, mx__kview_of(counters_g).data, &clear_g), MX_OK,
                 "%s", mx_last_error());
    cr_assert_eq(mx_item(f_g), 0.0, "step %d: the flag is clear after the update", step);
    mx_release(f_c);
    mx_release(f_g);
  }
  assert_identical(scale_c, scale_g, "amp_update_scale scale");
  assert_identical(tracker_c, tracker_g, "amp_update_scale tracker");
  assert_identical(counters_c, counters_g, "amp_update_scale counters");
  cr_assert_eq(mx_item(scale_c), 3072.0, "x1 (no growth yet), x0.5 (inf read before it was cleared), then 2 clean "
               "steps: x2");
  assert_identical(stats_c, stats_g, "the counts the update cleared");
  cr_assert_eq(mx_item(mx_sum(mx_abs(mx_to_dtype(stats_g, MX_F64)), MX_ALL_DIMS, false)), 0.0,
               "the update cleared all 9 counts");
  mx_scope_end(scope);
  cr_assert_eq(mx_memory_stats_get(MX_CUDA).live_tensors, 0, "the test's CUDA tensors are all released");
}
