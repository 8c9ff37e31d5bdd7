/* A float32 convolution on CUDA under cuDNN's settings (kernels/base.h:
 * mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic,
 * mx_set_cudnn_benchmark), forward and backward, against the CPU's exact
 * float32. Skips without a GPU. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"
#include "kernels/base_internal.h"

#define XS MX_SHAPE(4, 16, 12, 12)
#define WS MX_SHAPE(32, 16, 3, 3) /* sums of 144 terms an output, 288 an input gradient, 576 a weight gradient */

/* y = conv2d(x, w, b) (3x3, padding 1) and the gradients of sum(y * s). */
typedef struct {
  mx_tensor *t[4]; /* y, dx, dw, db */
} conv_results;
static const char *const names[4] = {"output", "dx", "dw", "db"};

static conv_results conv_step(const mx_tensor *x, const mx_tensor *w, const mx_tensor *b, const mx_tensor *s,
                              mx_device device) {
  const mx_tensor *in[4] = {x, w, b, s};
  mx_tensor *on[4];
  for (int i = 0; i < 4; i++) {
    on[i] = device == MX_CUDA ? to_cuda(in[i]) : mx_clone(in[i]);
    cr_assert_not_null(on[i], "%s", mx_last_error());
    if (i < 3) cr_assert_eq(mx_set_requires_grad(on[i], true), MX_OK, "%s", mx_last_error());
  }
  conv_results r;
  r.t[0] = mx_conv2d(on[0], on[1], on[2], MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1);
  cr_assert_not_null(r.t[0], "%s: %s", mx_device_name(device), mx_last_error());
  cr_assert_eq(mx_backward(r.t[0], on[3], false), MX_OK, "%s: %s", mx_device_name(device), mx_last_error());
  for (int i = 0; i < 3; i++) r.t[i + 1] = mx_grad_of(on[i]);
  return r;
}

typedef struct {
  mx_tensor *x, *w, *b, *s;
} conv_inputs;

static conv_inputs random_inputs(uint64_t seed) {
  mx_generator *g = mx_generator_new(seed);
  conv_inputs in = {mx_randn(XS, MX_F32, MX_CPU, g), mx_randn(WS, MX_F32, MX_CPU, g),
                    mx_randn(MX_SHAPE(32), MX_F32, MX_CPU, g), mx_randn(MX_SHAPE(4, 32, 12, 12), MX_F32, MX_CPU, g)};
  mx_generator_free(g);
  return in;
}

/* The same step on the inputs' magnitudes: each result's sum of the
 * magnitudes of its terms, sum |x_i w_i| (and |b|), since every term of
 * the convolution and of its gradients is a product of two inputs. */
static conv_results magnitudes(const conv_inputs *in) {
  return conv_step(mx_abs(in->x), mx_abs(in->w), mx_abs(in->b), mx_abs(in->s), MX_CPU);
}

/* How many elements of gpu differ from cpu by more than rel * mag, mag the
 * sum of their terms' magnitudes; the first written to why, the largest
 * difference as a fraction of mag to *worst. */
static size_t beyond(const mx_tensor *cpu, const mx_tensor *gpu, const mx_tensor *mag, double rel, double *worst,
                     char *why, size_t why_size) {
  assert_same_geometry(cpu, gpu, "beyond");
  size_t bytes;
  float *c = host_copy(cpu, &bytes), *g = host_copy(gpu, &bytes), *m = host_copy(mag, &bytes);
  size_t n = 0;
  why[0] = '\0';
  *worst = 0;
  for (size_t i = 0; i < bytes / sizeof *c; i++) {
    double d = fabs((double)g[i] - c[i]);
    if (m[i] > 0 && d / m[i] > *worst) *worst = d / m[i];
    if (d <= rel * m[i]) continue;
    if (!n++)
      snprintf(why, why_size, "[%zu]: %.9g on CUDA, %.9g on the CPU, terms' magnitudes %.6g", i, g[i], c[i], m[i]);
  }
  free(c), free(g), free(m);
  return n;
}

/* TF32 rounds each float32 input of a product to a 10-bit mantissa: at
 * worst (truncation) a relative error of 2^-10 each, 2^-9 (2e-3) for the
 * product, so a result is within 2^-9 of the sum of its terms' magnitudes
 * of exact, doubled here (2^-8) for an engine that rounds an operand twice
 * (a reordered or transformed TF32 copy); cuDNN's transform-based
 * algorithms (FFT, Winograd) run in float32, far inside it. Both sides'
 * float32 sums of at most 576 terms add at most 576 * 2^-24 (3.4e-5) each
 * of the same. Terms of about 1 in sums of about 1: the usual ~1e-2 of
 * TF32, against float32's 1e-5; a wrong result is off by about its size. */
#define F32_REL (2 * 576 * 0x1p-24)
#define TF32_REL (0x1p-8 + F32_REL)

Test(gpu_cudnn_settings, tf32_allowed_matches_the_cpu_within_tf32_rounding) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs in = random_inputs(3201);
  conv_results cpu = conv_step(in.x, in.w, in.b, in.s, MX_CPU), mag = magnitudes(&in);
  mx_set_cudnn_allow_tf32(true);
  conv_results gpu = conv_step(in.x, in.w, in.b, in.s, MX_CUDA);
  mx_set_cudnn_allow_tf32(false);
  cr_expect_not(mx_cudnn_allow_tf32(), "restored");
  for (int i = 0; i < 4; i++) {
    char why[256];
    double worst;
    size_t n = beyond(cpu.t[i], gpu.t[i], mag.t[i], TF32_REL, &worst, why, sizeof why);
    cr_expect_eq(n, 0, "TF32 allowed, %s: %zu elements differ; the first, %s", names[i], n, why);
    /* about 1e-4 or more where cuDNN chose a TF32 engine, about 1e-7 where it kept float32 */
    cr_log_info("TF32 allowed, %s: largest difference %.2g of the terms' magnitudes", names[i], worst);
  }
  mx_scope_end(scope);
}

/* Non-deterministic algorithms only order the float32 sums otherwise:
 * within float32's bound above (F32_REL of the terms' magnitudes; a fixed
 * 1e-5 of the result is too tight for sums of 576 terms of about 1, whose
 * rounding the H200 showed reaching 1e-5). */
Test(gpu_cudnn_settings, nondeterministic_matches_the_cpu_within_float32_rounding) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs in = random_inputs(3202);
  conv_results cpu = conv_step(in.x, in.w, in.b, in.s, MX_CPU), mag = magnitudes(&in);
  mx_set_cudnn_deterministic(false);
  conv_results gpu = conv_step(in.x, in.w, in.b, in.s, MX_CUDA);
  mx_set_cudnn_deterministic(true);
  cr_expect(mx_cudnn_deterministic(), "restored");
  for (int i = 0; i < 4; i++) {
    char why[256];
    double worst;
    size_t n = beyond(cpu.t[i], gpu.t[i], mag.t[i], F32_REL, &worst, why, sizeof why);
    cr_expect_eq(n, 0, "non-deterministic, %s: %zu elements differ; the first, %s", names[i], n, why);
  }
  mx_scope_end(scope);
}

/* Where float32's algorithms end and TF32's begin, in the largest
 * difference from the CPU over the terms' magnitudes on these inputs.
 * Float32: about 1e-7 for the direct and implicit-GEMM algorithms (the H200
 * showed 6e-8); up to 2.4e-6 for the transform-based ones (FFT, Winograd),
 * which benchmarking may choose: the H100 showed it under compute-sanitizer,
 * whose slowed timings changed the choice. TF32: inputs rounded to a 10-bit
 * mantissa give at least 6.8e-5 on these shapes (20 draws, simulated in
 * float64 by tests/gpu/tf32_error.py). 2^-16 (1.5e-5) lies between, a factor of 4 or more from each. */
#define NOT_TF32 0x1p-16

/* The step on CUDA twice under the settings in force, against the CPU:
 * exact float32 (within float32's bound, and below TF32's size), and the
 * same bits both times; each of its six convolutions (forward and both
 * backwards, twice) run by cuDNN, none declined to the direct kernels. */
static void expect_exact_and_repeated(const conv_inputs *in, const char *label) {
  conv_results cpu = conv_step(in->x, in->w, in->b, in->s, MX_CPU), mag = magnitudes(in);
  int64_t ran[2], declined[2];
  mx__cudnn_counts(&ran[0], &declined[0]);
  conv_results first = conv_step(in->x, in->w, in->b, in->s, MX_CUDA);
  conv_results again = conv_step(in->x, in->w, in->b, in->s, MX_CUDA);
  mx__cudnn_counts(&ran[1], &declined[1]);
  cr_expect_eq(ran[1] - ran[0], 6, "%s: cuDNN ran %lld of the six convolutions", label, (long long)(ran[1] - ran[0]));
  cr_expect_eq(declined[1] - declined[0], 0, "%s: cuDNN declined %lld", label, (long long)(declined[1] - declined[0]));
  for (int i = 0; i < 4; i++) {
    char why[256];
    double worst;
    size_t n = beyond(cpu.t[i], first.t[i], mag.t[i], F32_REL, &worst, why, sizeof why);
    cr_expect_eq(n, 0, "%s, %s: %zu elements differ from the CPU; the first, %s", label, names[i], n, why);
    cr_expect_lt(worst, NOT_TF32, "%s, %s: largest difference %.2g of the terms' magnitudes: TF32's size", label,
                 names[i], worst);
    assert_identical(mx_to_device(first.t[i], MX_CPU), again.t[i], names[i]);
  }
}

/* Benchmarking times every algorithm and keeps the fastest deterministic
 * one in exact float32; the second run of the geometry takes the choice
 * the first remembered. */
Test(gpu_cudnn_settings, benchmarking_matches_the_cpu_and_repeats_its_bits) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs in = random_inputs(3204);
  mx_set_cudnn_benchmark(true);
  expect_exact_and_repeated(&in, "benchmarking");
  mx_set_cudnn_benchmark(false);
  cr_expect_not(mx_cudnn_benchmark(), "restored");
  mx_scope_end(scope);
}

/* The defaults, restored after the two settings were changed: exact
 * float32 again, and deterministic, so two runs give the same bits. */
Test(gpu_cudnn_settings, the_defaults_restored_repeat_their_bits) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs in = random_inputs(3203);
  mx_set_cudnn_allow_tf32(true);
  mx_set_cudnn_deterministic(false);
  (void)conv_step(in.x, in.w, in.b, in.s, MX_CUDA); /* remembers algorithms for this geometry under both */
  mx_set_cudnn_allow_tf32(false);
  mx_set_cudnn_deterministic(true);
  expect_exact_and_repeated(&in, "defaults");
  mx_scope_end(scope);
}

/* A case's plan (its descriptors and algorithm, kept from its first call)
 * serves it again after another case's was made, on new operands: exact
 * float32 and the same bits twice, as at its first call. The other case:
 * 16 output channels over the same input, so other dims in the filter's and
 * the output's descriptors (and sums within F32_REL's 576 terms). */
Test(gpu_cudnn_settings, a_kept_plan_serves_its_case_after_another_on_new_operands) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs first = random_inputs(3205), again = random_inputs(3206);
  expect_exact_and_repeated(&first, "the first operands");
  mx_generator *g = mx_generator_new(3207);
  conv_inputs narrower = {first.x, mx_randn(MX_SHAPE(16, 16, 3, 3), MX_F32, MX_CPU, g),
                          mx_randn(MX_SHAPE(16), MX_F32, MX_CPU, g),
                          mx_randn(MX_SHAPE(4, 16, 12, 12), MX_F32, MX_CPU, g)};
  mx_generator_free(g);
  expect_exact_and_repeated(&narrower, "16 output channels");
  expect_exact_and_repeated(&again, "new operands, after the other case");
  mx_scope_end(scope);
}

/* Past the table's 256 plans (kernels/cuda/conv_cudnn.cu) a new case takes
 * the place of the one kept longest ago: 90 more geometries (x 4 wide and 1
 * to 90 long, three cases each: forward and both backwards) push out the
 * first case's three plans, whose descriptors are destroyed; the case is
 * then planned afresh and still exact, the same bits twice. */
Test(gpu_cudnn_settings, a_full_plan_table_replaces_its_oldest_plans) {
  require_gpu();
  mx_scope *scope = mx_scope_begin();
  conv_inputs first = random_inputs(3208);
  expect_exact_and_repeated(&first, "before the table fills");
  mx_generator *g = mx_generator_new(3209);
  mx_tensor *w = mx_randn(MX_SHAPE(2, 2, 3, 3), MX_F32, MX_CPU, g), *b = mx_randn(MX_SHAPE(2), MX_F32, MX_CPU, g);
  for (int64_t len = 1; len <= 90; len++) {
    mx_scope *each = mx_scope_begin();
    conv_results r = conv_step(mx_randn(MX_SHAPE(1, 2, 4, len), MX_F32, MX_CPU, g), w, b,
                               mx_randn(MX_SHAPE(1, 2, 4, len), MX_F32, MX_CPU, g), MX_CUDA);
    cr_assert(r.t[0] && r.t[2], "length %lld: %s", (long long)len, mx_last_error());
    mx_scope_end(each);
  }
  mx_generator_free(g);
  expect_exact_and_repeated(&first, "after 270 other cases");
  mx_scope_end(scope);
}
