/* A convolution's bias gradient from the weight-gradient kernel (conv_backward_weight_bias, ops/conv.c; oneDNN's
 * diff_bias, kernels/cpu/dnnl_conv.c): the bias's gradient against the output's gradient summed per channel in
 * float64 and the weight's against the bias-free path, in every float dtype, row-major and channels-last, with
 * groups, strides, padding and 1 to 3 spatial dims; the one op making both; its gradients of gradients; the
 * kernel's checks of the bias view.
 *
 * Under valgrind the float32 channels-last cases are skipped, as in test_channels_last_conv.c: valgrind cannot
 * translate oneDNN 2.6's AVX2 channels-last JIT code; ASan checks those runs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "kernels/cpu/conv.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s: %s", #expr, mx_last_error())

typedef struct {
  int spatial;
  int64_t n, c_in, size, c_out, k, stride, padding, groups;
} conv_case;

/* an image's 3 channels (oneDNN's plain-layout kernels), 16 to 32 (its blocked ones), groups with a stride and
 * padding, 1-d and 3-d, and an empty batch (the sums are zeros) */
static const conv_case cases[] = {
    {2, 2, 3, 9, 16, 3, 1, 1, 1},  {2, 2, 16, 8, 32, 3, 1, 1, 1}, {2, 3, 8, 7, 12, 3, 2, 1, 2},
    {1, 2, 4, 11, 6, 3, 2, 1, 2},  {3, 2, 2, 5, 4, 2, 1, 0, 1},   {2, 0, 4, 5, 4, 3, 1, 1, 1},
};
#define N_CASES ((int)(sizeof cases / sizeof *cases))

static mx_shape input_shape(const conv_case *c) {
  mx_shape s = {c->spatial + 2, {c->n, c->c_in}};
  for (int d = 0; d < c->spatial; d++) s.d[2 + d] = c->size;
  return s;
}

static mx_shape weight_shape(const conv_case *c) {
  mx_shape s = {c->spatial + 2, {c->c_out, c->c_in / c->groups}};
  for (int d = 0; d < c->spatial; d++) s.d[2 + d] = c->k;
  return s;
}

static mx_tensor *leaf(mx_shape shape, mx_dtype dt, mx_generator *gen) {
  mx_tensor *t = mx_detach(mx_to_dtype(mx_randn(shape, MX_F32, MX_CPU, gen), dt));
  cr_assert(t && mx_set_requires_grad(t, true) == MX_OK, "%s", mx_last_error());
  return t;
}

static mx_tensor *conv(const conv_case *c, const mx_tensor *x, const mx_tensor *w, const mx_tensor *b) {
  mx_tensor *y = mx_conv(x, w, b, c->spatial, MX_SHAPE(c->stride), MX_SHAPE(c->padding), MX_DEFAULT, c->groups);
  cr_assert(y, "%s", mx_last_error());
  return y;
}

/* t's values as float64 on the host (the caller frees them) */
static double *host_values(const mx_tensor *t) {
  mx_tensor *d = mx_contiguous(mx_to_dtype(t, MX_F64));
  int64_t n = mx_numel(d);
  double *v = malloc(sizeof(double) * (size_t)(n ? n : 1));
  cr_assert(d && v, "%s", mx_last_error());
  OK(mx_to_host(d, v, sizeof(double) * (size_t)n));
  return v;
}

/* For a case, dtype and layout: the bias's gradient against r (the output's gradient) summed per channel in
 * float64, within one rounding to the dtype (plus float32's sums), and the weight's gradient against the one
 * computed with a bias that needs no gradient (conv_backward_weight alone). */
static void check_case(int k, mx_dtype dt, bool channels_last) {
  const conv_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(3802 + (uint64_t)k);
  mx_tensor *x = leaf(input_shape(c), dt, gen), *w = leaf(weight_shape(c), dt, gen);
  mx_tensor *b = leaf(MX_SHAPE(c->c_out), dt, gen), *b_fixed = mx_detach(b);
  if (channels_last) x = mx_to_channels_last(x);
  mx_tensor *y = conv(c, x, w, b), *y_fixed = conv(c, x, w, b_fixed);
  mx_tensor *r = mx_to_dtype(mx_randn(mx_shape_get(y), MX_F32, MX_CPU, gen), dt);
  if (channels_last) r = mx_to_channels_last(r);
  mx_tensor *inputs[2] = {w, b}, *grad[2] = {0}, *dw_alone = NULL;
  OK(mx_grad(1, &y, 2, inputs, &r, false, false, false, grad));
  OK(mx_grad(1, &y_fixed, 1, &w, &r, false, false, false, &dw_alone));

  const char *layout = channels_last ? "channels-last" : "row-major";
  int64_t per_channel = mx_numel(r) / c->c_out;
  double *gr = host_values(r), *db = host_values(grad[1]); /* row-major (N, C, ...) whatever r's layout */
  double unit = dt == MX_F64 ? 0x1p-52 : dt == MX_F32 ? 0x1p-23 : dt == MX_BF16 ? 0x1p-8 : 0x1p-11;
  for (int64_t o = 0; o < c->c_out; o++) {
    double want = 0, size = 0;
    for (int64_t n = 0; n < c->n; n++)
      for (int64_t i = 0; i < per_channel / (c->n ? c->n : 1); i++) {
        double v = gr[(n * c->c_out + o) * (per_channel / c->n) + i];
        want += v, size += fabs(v);
      }
    /* one rounding of the result, and float32 sums for the 16-bit dtypes and float32 */
    double tol = unit * fabs(want) + (dt == MX_F64 ? 1e-12 : 0x1p-23 * 4) * size;
    cr_expect(fabs(db[o] - want) <= tol, "case %d (%s, %s): bias gradient %lld is %.9g, float64 sum %.9g", k,
              mx_dtype_name(dt), layout, (long long)o, db[o], want);
  }
  double *dw = host_values(grad[0]), *dw_ref = host_values(dw_alone), largest = 0, diff = 0;
  for (int64_t i = 0; i < mx_numel(grad[0]); i++)
    largest = fmax(largest, fabs(dw_ref[i])), diff = fmax(diff, fabs(dw[i] - dw_ref[i]));
  double rel = dt == MX_F64 ? 1e-12 : dt == MX_F32 ? 1e-5 : dt == MX_BF16 ? 1.0 / 128 : 1.0 / 1024;
  cr_expect(diff <= rel * largest, "case %d (%s, %s): the weight gradient with the bias's differs by %g (largest %g)",
            k, mx_dtype_name(dt), layout, diff, largest);
  free(gr), free(db), free(dw), free(dw_ref);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

static void check_all(mx_dtype dt) {
  for (int k = 0; k < N_CASES; k++) {
    check_case(k, dt, false);
    if (cases[k].spatial == 2 && !(dt == MX_F32 && RUNNING_ON_VALGRIND)) check_case(k, dt, true);
  }
}

Test(conv_bias_grad, float32) { check_all(MX_F32); }
Test(conv_bias_grad, bfloat16) { check_all(MX_BF16); }
Test(conv_bias_grad, float16) { check_all(MX_F16); }
Test(conv_bias_grad, float64) { check_all(MX_F64); }

/* The weight's and the bias's gradients come from one node, conv_backward_weight_bias, when the bias needs one
 * (create_graph shows which op made them); the weight's alone from conv_backward_weight otherwise. */
Test(conv_bias_grad, one_op_makes_both) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  const conv_case *c = &cases[2];
  mx_tensor *x = leaf(input_shape(c), MX_F32, gen), *w = leaf(weight_shape(c), MX_F32, gen);
  mx_tensor *b = leaf(MX_SHAPE(c->c_out), MX_F32, gen);
  mx_tensor *y = conv(c, x, w, b), *inputs[2] = {w, b}, *grad[2] = {0}, *dw_alone = NULL;
  mx_tensor *y_relu = mx_conv2d_relu(x, w, b, MX_SHAPE(c->stride), MX_SHAPE(c->padding), MX_DEFAULT, c->groups);
  mx_tensor *r = mx_randn(mx_shape_get(y), MX_F32, MX_CPU, gen);
  OK(mx_grad(1, &y, 2, inputs, &r, true, true, false, grad));
  cr_expect_str_eq(mx_grad_fn_name(grad[0]), "CONV_BACKWARD_WEIGHT_BIASBackward");
  cr_expect_str_eq(mx_grad_fn_name(grad[1]), "CONV_BACKWARD_WEIGHT_BIASBackward");
  OK(mx_grad(1, &y_relu, 2, inputs, &r, true, true, false, grad));
  cr_expect_str_eq(mx_grad_fn_name(grad[1]), "CONV_BACKWARD_WEIGHT_BIASBackward");
  mx_tensor *y_fixed = conv(c, x, w, mx_detach(b));
  OK(mx_grad(1, &y_fixed, 1, &w, &r, false, true, false, &dw_alone));
  cr_expect_str_eq(mx_grad_fn_name(dw_alone), "CONV_BACKWARD_WEIGHTBackward");
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* --- gradients of gradients, in float64 ---------------------------------------------------------------------- */

/* (dw flattened, db) of a grouped, strided, padded convolution as a function of x and of r, the output's gradient;
 * x channels-last when ctx says so */
static mx_tensor *weight_and_bias_grads(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  const conv_case *c = &cases[2];
  mx_tensor *x = *(const bool *)ctx ? mx_to_channels_last(in[0]) : in[0];
  mx_tensor *w = mx_zeros(weight_shape(c), MX_F64, MX_CPU), *b = mx_zeros(MX_SHAPE(c->c_out), MX_F64, MX_CPU);
  if (!w || !b || mx_set_requires_grad(w, true) != MX_OK || mx_set_requires_grad(b, true) != MX_OK) return NULL;
  bool create = mx_is_grad_enabled(), previous = mx_set_grad_enabled(true);
  mx_tensor *y = mx_conv(x, w, b, 2, MX_SHAPE(c->stride), MX_SHAPE(c->padding), MX_DEFAULT, c->groups);
  mx_tensor *leaves[2] = {w, b}, *g[2] = {0}, *r = in[1];
  mx_status status = y ? mx_grad(1, &y, 2, leaves, &r, create, create, false, g) : mx_last_status();
  mx_set_grad_enabled(previous);
  mx_tensor *parts[2] = {status == MX_OK ? mx_flatten(g[0], 0, -1) : NULL, g[1]};
  return parts[0] && parts[1] ? mx_cat(2, parts, 0) : NULL;
}

static void check_gradgrad(bool channels_last) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(17);
  const conv_case *c = &cases[2];
  mx_tensor *x = leaf(input_shape(c), MX_F64, gen);
  mx_tensor *y = conv(c, mx_detach(x), mx_zeros(weight_shape(c), MX_F64, MX_CPU), NULL);
  mx_tensor *inputs[2] = {x, leaf(mx_shape_get(y), MX_F64, gen)};
  OK(mx_gradcheck(weight_and_bias_grads, 2, inputs, &channels_last, 1e-6, 1e-7, 1e-6));
  OK(mx_gradgradcheck(weight_and_bias_grads, 2, inputs, &channels_last, 1e-6, 1e-7, 1e-6));
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(conv_bias_grad, gradients_of_gradients) { check_gradgrad(false); }
Test(conv_bias_grad, gradients_of_gradients_channels_last) { check_gradgrad(true); }

/* --- the CPU kernel's checks of the bias's view ---------------------------------------------------------------- */

typedef struct {
  mx_kview v;
  float *data;
} buffer;

static buffer make(mx_dtype dt, int ndim, const int64_t *shape) {
  buffer b = {.v = {.dtype = dt, .ndim = ndim}};
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; d--) b.v.shape[d] = shape[d], b.v.strides[d] = n, n *= shape[d];
  b.data = calloc((size_t)n, sizeof(double));
  b.v.data = b.data;
  return b;
}

Test(conv_bias_grad, the_kernel_checks_the_bias) {
  mx_conv_params p = {.spatial = 1, .stride = {1}, .padding = {0}, .dilation = {1}, .groups = 1};
  buffer x = make(MX_F32, 3, (int64_t[]){2, 2, 5}), dw = make(MX_F32, 3, (int64_t[]){3, 2, 3});
  buffer dy = make(MX_F32, 3, (int64_t[]){2, 3, 3}), short_db = make(MX_F32, 1, (int64_t[]){2});
  buffer db64 = make(MX_F64, 1, (int64_t[]){3});
  EXPECT_STATUS_ERROR(mx__cpu_conv_backward_weight_bias(&dw.v, &short_db.v, &dy.v, &x.v, &p),
                      "mx_conv: a bias of 1 dims, 2 elements, stride 1 for 3 output channels (expected a contiguous "
                      "vector of one per channel)");
  EXPECT_STATUS_ERROR(mx__cpu_conv_backward_weight_bias(&dw.v, &db64.v, &dy.v, &x.v, &p),
                      "mx_conv: a float64 bias for float32 operands");
  free(x.data), free(dw.data), free(dy.data), free(short_db.data), free(db64.data);
}
