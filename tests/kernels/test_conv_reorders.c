/* The convolutions' operand reorders (kernels/cpu/dnnl_conv.c): a steady-state
 * training step of a small CNN runs no more of them than the count reached
 * by keeping reordered operands, and a kept operand never outlives the data
 * it was reordered from (in-place writes, writes through mx_data_ptr). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "kernels/cpu/dnnl.h"
#include "mx_config.h"

#define OK(expr) cr_assert_eq((expr), MX_OK, "%s: %s", #expr, mx_last_error())

/* The demo's CNN (examples/train/models.c) at a small size: 8x8 images. */
static mx_module *small_cnn(mx_generator *gen) {
  return mx_sequential_new(
      8, (mx_module *[]){mx_conv2d_new(1, 16, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_DIMS(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
                         mx_conv2d_new(16, 32, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, true, gen),
                         mx_relu_new(), mx_max_pool2d_new(MX_DIMS(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT),
                         mx_flatten_new(1, -1), mx_linear_new(32 * 2 * 2, 10, true, gen)});
}

/* The reorders of the third of three training steps (Adam, as the bench's
 * CNN step), under autocast to amp unless it is float32. */
static uint64_t steady_step_reorders(mx_dtype amp) {
  mx_generator *gen = mx_generator_new(7);
  mx_module *net = small_cnn(gen);
  cr_assert(net, "%s", mx_last_error());
  int n = mx_module_num_parameters(net);
  mx_tensor *params[16];
  cr_assert_leq(n, 16);
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_adam_opts o = mx_adam_defaults();
  mx_optimizer *opt = mx_adam_new(n, params, &o);
  mx_tensor *x = mx_randn(MX_SHAPE(4, 1, 8, 8), MX_F32, MX_CPU, gen);
  mx_tensor *y = mx_randint(0, 10, MX_SHAPE(4), MX_I64, MX_CPU, gen);
  cr_assert(opt && x && y, "%s", mx_last_error());
  uint64_t before = 0;
  for (int step = 0; step < 3; step++) {
    if (step == 2) before = mx__dnnl_conv_reorders();
    mx_scope *s = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, amp == MX_F32 ? MX_AUTOCAST_DEFAULT_DTYPE : amp, amp != MX_F32, true) {
      loss = mx_cross_entropy(mx_module_forward(net, x), y, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
    }
    cr_assert(loss, "%s", mx_last_error());
    OK(mx_backward(loss, NULL, false));
    OK(mx_optimizer_step(opt));
    mx_scope_end(s);
  }
  uint64_t reorders = mx__dnnl_conv_reorders() - before;
  mx_release(x);
  mx_release(y);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_generator_free(gen);
  return reorders;
}

/* Without kept operands the float32 step ran 13 reorders (bench/NOTES.md):
 * the second convolution's input is reordered once for the forward and the
 * weight's gradient, its output gradient once for both gradients. */
Test(conv_reorders, a_float32_step_reorders_each_activation_once) {
  if (!mx__dnnl_native(MX_F32)) cr_skip_test("oneDNN is not built in");
  uint64_t reorders = steady_step_reorders(MX_F32);
  /* oneDNN's AVX2 kernels (a CPU without AVX-512, or valgrind, which hides
   * it) want one more operand in a blocked layout than its AVX-512 ones */
  uint64_t bound = __builtin_cpu_supports("avx512f") ? 11 : 12;
  cr_expect_leq(reorders, bound, "a steady-state float32 step ran %llu reorders", (unsigned long long)reorders);
}

Test(conv_reorders, a_bfloat16_step_reorders_each_activation_once) {
  if (!mx__dnnl_native(MX_BF16)) cr_skip_test("oneDNN has no native bfloat16 kernels here");
  uint64_t reorders = steady_step_reorders(MX_BF16);
  cr_expect_leq(reorders, 11, "a steady-state bfloat16 step ran %llu reorders",
                (unsigned long long)reorders);
}

/* A kept activation goes once the weight's gradient, its last reader, has
 * read it: after forward the input's copy is held, after backward nothing. */
Test(conv_reorders, kept_activations_go_with_their_last_reader) {
  if (!mx__dnnl_native(MX_F32)) cr_skip_test("oneDNN is not built in");
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 32, 6, 6), MX_F32, MX_CPU, gen);
  mx_tensor *w = mx_randn(MX_SHAPE(32, 32, 3, 3), MX_F32, MX_CPU, gen);
  cr_assert(x && w, "%s", mx_last_error());
  OK(mx_set_requires_grad(x, true));
  OK(mx_set_requires_grad(w, true));
  size_t before = mx__dnnl_conv_kept_activation_bytes();
  mx_tensor *y = mx_conv2d(x, w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  cr_assert(y, "%s", mx_last_error());
  size_t after_forward = mx__dnnl_conv_kept_activation_bytes();
  mx_tensor *loss = mx_sum(mx_mul(y, y), MX_ALL_DIMS, false);
  cr_assert(loss, "%s", mx_last_error());
  OK(mx_backward(loss, NULL, false));
  /* the row-major input went into oneDNN's blocks for the forward: its copy waits for the weight's gradient */
  cr_expect_gt(after_forward, before, "the forward kept no copy of x");
  cr_expect_eq(mx__dnnl_conv_kept_activation_bytes(), before, "%zu bytes of activations outlived the backward",
               mx__dnnl_conv_kept_activation_bytes() - before);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

/* conv2d(x, w) next to the same on a fresh copy of w (another storage: nothing kept). */
static void expect_as_fresh(const mx_tensor *x, const mx_tensor *w, const char *when) {
  mx_tensor *fresh = mx_clone(w);
  mx_tensor *a = mx_conv2d(x, w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  mx_tensor *b = mx_conv2d(x, fresh, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  cr_assert(a && b, "%s", mx_last_error());
  const float *pa = mx_data_ptr(a), *pb = mx_data_ptr(b);
  cr_expect_eq(memcmp(pa, pb, (size_t)mx_numel(a) * sizeof *pa), 0, "%s: the convolution read a stale weight", when);
  mx_release(fresh);
  mx_release(a);
  mx_release(b);
}

Test(conv_reorders, a_kept_weight_follows_its_writes) {
  if (!mx__dnnl_native(MX_F32)) cr_skip_test("oneDNN is not built in");
  mx_generator *gen = mx_generator_new(3);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 32, 6, 6), MX_F32, MX_CPU, gen);
  mx_tensor *w = mx_randn(MX_SHAPE(32, 32, 3, 3), MX_F32, MX_CPU, gen);
  cr_assert(x && w, "%s", mx_last_error());
  /* the first call keeps w reordered, the second reads it */
  mx_release(mx_conv2d(x, w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1));
  uint64_t before = mx__dnnl_conv_reorders();
  mx_tensor *again = mx_conv2d(x, w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  /* x and the output still reorder (x's kept copy may have given way: the activations' budget) */
  cr_expect_leq(mx__dnnl_conv_reorders() - before, 2, "the kept weight was reordered again");
  mx_release(again);
  expect_as_fresh(x, w, "unchanged");
  OK(mx_mul_scalar_(w, -0.5)); /* an in-place op: a new version */
  expect_as_fresh(x, w, "after an in-place op");
  float *raw = mx_data_ptr(w); /* a write the version does not see */
  for (int i = 0; i < 32 * 9; i++) raw[i] = (float)i / 7.0f;
  expect_as_fresh(x, w, "after a write through mx_data_ptr");
  raw[1] = 3.0f;
  expect_as_fresh(x, w, "after a second write through mx_data_ptr");
  mx_release(x);
  mx_release(w);
  mx_generator_free(gen);
}
