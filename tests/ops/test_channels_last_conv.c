/* Convolutions on channels-last activations (ops/conv.c, kernels/cpu/dnnl_conv.c): conv2d and conv2d_relu forward
 * and backward equal to the row-major results in every float dtype, outputs and input gradients laid out
 * channels-last, a row-major gradient arriving still right, and a small CNN's training step running no activation
 * reorder at all.
 *
 * Under valgrind (no AVX-512 there: oneDNN's AVX2 kernels) the float32 cases
 * are skipped: valgrind cannot translate the JIT code of oneDNN 2.6's AVX2
 * channels-last kernels ("VEX temporary storage exhausted") and reports reads
 * of it on the stack; ASan checks those runs, as it does the demos'. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "kernels/cpu/dnnl.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

static void skip_float32_under_valgrind(void) {
  if (RUNNING_ON_VALGRIND) cr_skip_test("under valgrind: oneDNN's AVX2 channels-last JIT code is beyond it");
}

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s: %s", #expr, mx_last_error())

typedef struct {
  int64_t n, c_in, h, w, c_out, k, stride, padding, groups;
  bool bias;
} conv_case;

/* an image's 3 channels, 16 and more (oneDNN's blocked kernels and bf16's channel blocks on row-major operands),
 * strides, padding, groups, with and without a bias */
static const conv_case cases[] = {
    {2, 3, 9, 9, 16, 3, 1, 1, 1, true},
    {2, 16, 8, 8, 32, 3, 1, 1, 1, true},
    {1, 32, 7, 6, 16, 3, 2, 1, 1, false},
    {2, 8, 9, 7, 12, 3, 1, 2, 2, true},
};

static mx_tensor *leaf(mx_shape shape, mx_dtype dt, mx_generator *gen) {
  mx_tensor *t = mx_detach(mx_to_dtype(mx_randn(shape, MX_F32, MX_CPU, gen), dt));
  cr_assert(t && mx_set_requires_grad(t, true) == MX_OK, "%s", mx_last_error());
  return t;
}

static bool is_cl(const mx_tensor *t) { return t && mx_is_channels_last(t) && !mx_is_contiguous(t); }

/* |a - b| <= rel * max|b|, elementwise: the two layouts run different oneDNN kernels, which sum in other orders */
static void expect_close(const mx_tensor *a, const mx_tensor *b, double rel, const char *what, int k, mx_dtype dt) {
  cr_assert(a && b, "case %d %s (%s): %s", k, what, mx_dtype_name(dt), mx_last_error());
  mx_tensor *da = mx_to_dtype(a, MX_F64), *db = mx_to_dtype(b, MX_F64);
  double scale = mx_item(mx_amax(mx_abs(db), MX_ALL_DIMS, false));
  double diff = mx_item(mx_amax(mx_abs(mx_sub(da, db)), MX_ALL_DIMS, false));
  cr_expect(diff <= rel * scale, "case %d %s (%s): channels-last and row-major differ by %g (largest value %g)", k,
            what, mx_dtype_name(dt), diff, scale);
}

static mx_tensor *forward(const conv_case *c, mx_tensor *x, mx_tensor *w, mx_tensor *b, bool relu) {
  mx_shape stride = MX_SHAPE(c->stride), padding = MX_SHAPE(c->padding);
  mx_tensor *y = relu ? mx_conv2d_relu(x, w, b, stride, padding, MX_DEFAULT, c->groups)
                      : mx_conv2d(x, w, b, stride, padding, MX_DEFAULT, c->groups);
  cr_assert(y, "%s", mx_last_error());
  return y;
}

/* The gradients of sum(y * r) for x, weight and bias (grad[2] NULL without one). */
static void gradients(mx_tensor *y, mx_tensor *r, mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_tensor **grad) {
  mx_tensor *loss = mx_sum(mx_mul(y, r), MX_ALL_DIMS, false), *inputs[3] = {x, w, b};
  grad[2] = NULL;
  OK(mx_grad(1, &loss, b ? 3 : 2, inputs, NULL, false, false, false, grad));
}

/* conv2d (or conv2d_relu) of a channels-last x against the same of its row-major twin, r (the output's cotangent)
 * channels-last too, or row-major when mixed: a row-major gradient reaching channels-last activations. */
static void check_case(int k, mx_dtype dt, bool relu, bool mixed) {
  const conv_case *c = &cases[k];
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(380 + (uint64_t)k);
  mx_tensor *x = leaf(MX_SHAPE(c->n, c->c_in, c->h, c->w), dt, gen);
  mx_tensor *w = leaf(MX_SHAPE(c->c_out, c->c_in / c->groups, c->k, c->k), dt, gen);
  mx_tensor *b = c->bias ? leaf(MX_SHAPE(c->c_out), dt, gen) : NULL;
  mx_tensor *xc = mx_detach(mx_to_channels_last(x));
  OK(mx_set_requires_grad(xc, true));
  mx_tensor *y = forward(c, x, w, b, relu), *yc = forward(c, xc, w, b, relu);
  mx_tensor *r = mx_to_dtype(mx_randn(mx_shape_get(y), MX_F32, MX_CPU, gen), dt);
  mx_tensor *grad[3], *grad_c[3];
  gradients(y, r, x, w, b, grad);
  gradients(yc, mixed ? r : mx_to_channels_last(r), xc, w, b, grad_c);
  /* float32: a few units of its epsilon over the sums; 16 bits: one rounding of the result, a unit of 2^-8 or
   * 2^-11; float64: the loops, in either layout */
  double rel = dt == MX_F32 ? 1e-5 : dt == MX_BF16 ? 1.0 / 128 : dt == MX_F16 ? 1.0 / 1024 : 1e-12;
  const char *what = mixed ? "a row-major gradient" : relu ? "conv2d_relu" : "conv2d";
  char name[96];
  cr_expect(is_cl(yc), "case %d %s (%s): the output is not channels-last", k, what, mx_dtype_name(dt));
  cr_expect(is_cl(grad_c[0]), "case %d %s (%s): x's gradient is not channels-last", k, what, mx_dtype_name(dt));
  cr_expect(mx_is_contiguous(grad_c[1]), "case %d %s (%s): the weight's gradient is not row-major", k, what,
            mx_dtype_name(dt));
  static const char *names[3] = {"grad of x", "grad of weight", "grad of bias"};
  snprintf(name, sizeof name, "%s output", what);
  expect_close(yc, y, rel, name, k, dt);
  for (int i = 0; i < (b ? 3 : 2); i++) {
    snprintf(name, sizeof name, "%s %s", what, names[i]);
    expect_close(grad_c[i], grad[i], rel, name, k, dt);
  }
  mx_generator_free(gen);
  mx_scope_end(scope);
}

static void check_all(mx_dtype dt) {
  for (int k = 0; k < (int)(sizeof cases / sizeof *cases); k++) {
    check_case(k, dt, false, false);
    check_case(k, dt, true, false);
    check_case(k, dt, false, true);
  }
}

Test(channels_last_conv, float32_matches_row_major) {
  skip_float32_under_valgrind();
  check_all(MX_F32);
}

Test(channels_last_conv, bfloat16_matches_row_major) { check_all(MX_BF16); }

/* float16 runs on float32 copies, float64 on the plain loops: both read any strides */
Test(channels_last_conv, float16_and_float64_match_row_major) {
  check_all(MX_F16);
  check_all(MX_F64);
}

Test(channels_last_conv, autocast_keeps_the_layout) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(41);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 16, 6, 6), MX_F32, MX_CPU, gen);
  mx_tensor *w = mx_randn(MX_SHAPE(16, 16, 3, 3), MX_F32, MX_CPU, gen);
  mx_tensor *y = NULL, *want = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    y = mx_relu(mx_conv2d(mx_to_channels_last(x), w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1));
    want = mx_relu(mx_conv2d(x, w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1));
  }
  cr_expect(is_cl(y) && mx_dtype_of(y) == MX_BF16, "relu(conv2d) of channels-last float32 under bfloat16 autocast");
  expect_close(y, want, 1.0 / 128, "relu(conv2d) under autocast", 0, MX_BF16);
  mx_generator_free(gen);
  mx_scope_end(s);
}

/* --- a training step without reorders ---------------------------------------------------------------------------- */

/* conv + relu, conv, relu, then the classifier (pooling left out: tests/ops/ has its own channels-last tests) */
typedef struct {
  mx_tensor *w1, *b1, *w2, *b2, *w3, *b3;
} small_cnn;

static mx_tensor *cnn_forward(const small_cnn *m, mx_tensor *x) {
  mx_tensor *h = mx_conv2d_relu(x, m->w1, m->b1, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  h = mx_relu(mx_conv2d(h, m->w2, m->b2, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1));
  return mx_linear(mx_flatten(h, 1, -1), m->w3, m->b3);
}

/* The convolutions' activation reorders (all reorders but the weights') in the third of three SGD steps on a
 * batch of 3-channel 8x8 images, channels-last or not, under autocast to amp unless it is float32. */
static uint64_t activation_reorders(bool channels_last, mx_dtype amp) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(7);
  small_cnn m = {leaf(MX_SHAPE(16, 3, 3, 3), MX_F32, gen),  leaf(MX_SHAPE(16), MX_F32, gen),
                 leaf(MX_SHAPE(32, 16, 3, 3), MX_F32, gen), leaf(MX_SHAPE(32), MX_F32, gen),
                 leaf(MX_SHAPE(10, 32 * 8 * 8), MX_F32, gen), leaf(MX_SHAPE(10), MX_F32, gen)};
  mx_tensor *params[6] = {m.w1, m.b1, m.w2, m.b2, m.w3, m.b3};
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.01;
  mx_optimizer *opt = mx_sgd_new(6, params, &o);
  mx_tensor *x = mx_randn(MX_SHAPE(4, 3, 8, 8), MX_F32, MX_CPU, gen);
  mx_tensor *y = mx_randint(0, 10, MX_SHAPE(4), MX_I64, MX_CPU, gen);
  cr_assert(opt && x && y, "%s", mx_last_error());
  if (channels_last) x = mx_to_channels_last(x); /* once, at the edge */
  uint64_t all = 0, weights = 0;
  for (int step = 0; step < 3; step++) {
    if (step == 2) all = mx__dnnl_conv_reorders(), weights = mx__dnnl_conv_weight_reorders();
    mx_scope *s = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : amp, amp != MX_F32, true) {
      loss = mx_cross_entropy(cnn_forward(&m, x), y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
    }
    cr_assert(loss, "%s", mx_last_error());
    OK(mx_backward(loss, NULL, false));
    OK(mx_optimizer_step(opt));
    mx_scope_end(s);
  }
  all = mx__dnnl_conv_reorders() - all;
  weights = mx__dnnl_conv_weight_reorders() - weights;
  cr_expect_gt(weights, 0, "the step's new weights were reordered"); /* the counter tells them apart */
  mx_optimizer_free(opt);
  mx_generator_free(gen);
  mx_scope_end(scope);
  return all - weights;
}

Test(channels_last_conv, a_float32_step_reorders_no_activation) {
  if (!mx__dnnl_native(MX_F32)) cr_skip_test("oneDNN is not built in");
  skip_float32_under_valgrind();
  cr_expect_gt(activation_reorders(false, MX_F32), 0, "a row-major step reorders its activations");
  uint64_t reorders = activation_reorders(true, MX_F32);
  cr_expect_eq(reorders, 0, "a channels-last float32 step reordered %llu activations", (unsigned long long)reorders);
}

Test(channels_last_conv, a_bfloat16_step_reorders_no_activation) {
  if (!mx__dnnl_native(MX_BF16)) cr_skip_test("oneDNN has no native bfloat16 kernels here");
  cr_expect_gt(activation_reorders(false, MX_BF16), 0, "a row-major step reorders its activations");
  uint64_t reorders = activation_reorders(true, MX_BF16);
  cr_expect_eq(reorders, 0, "a channels-last bfloat16 step reordered %llu activations", (unsigned long long)reorders);
}
