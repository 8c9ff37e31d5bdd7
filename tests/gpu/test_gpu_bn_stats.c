/* Batch norm's per-channel statistics (the backends' channel_sums and channel_moments) on CUDA against the CPU's at
 * ResNet-9's sizes, where each channel has hundreds of runs, channels-last data is read in tiles of 32 channels and
 * the finish adds many partials a channel; and the same bits on every run. Skips without a GPU. */
#include <criterion/criterion.h>
#include <stdio.h>

#include "compare.h"
#include "tensor/tensor_impl.h" /* the kernels are called through the backends */

typedef struct {
  mx_shape shape; /* batch norm's view of the data: (N, C, ...) contiguous, or (N H W, C) for channels-last */
  mx_dtype dtype;
} stats_case;

static const stats_case cases[] = {
    {{2, {65536, 128}}, MX_BF16},    /* (64, 128, 32, 32) channels-last */
    {{2, {1024, 512}}, MX_BF16},     /* (64, 512, 4, 4) channels-last */
    {{4, {128, 32, 28, 28}}, MX_F32}, /* contiguous (N, C, H, W) */
    {{2, {200000, 45}}, MX_F16},     /* two tiles, the second 13 channels wide */
    {{3, {4, 1, 300000}}, MX_F32},   /* one channel of 1.2 million values */
    {{2, {5000, 3}}, MX_F64},        /* channels-last below a tile */
};

/* On both devices: x and g of the case's shape and dtype (standard normal values), g's centre per channel. */
typedef struct {
  device_pair x, g, center;
} stats_inputs;

static stats_inputs inputs(const stats_case *c, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_dtype stats = c->dtype == MX_F64 ? MX_F64 : MX_F32;
  mx_tensor *x = mx_to_dtype(mx_randn(c->shape, MX_F64, MX_CPU, gen), c->dtype);
  mx_tensor *g = mx_to_dtype(mx_randn(c->shape, MX_F64, MX_CPU, gen), c->dtype);
  mx_tensor *center = mx_to_dtype(mx_randn(MX_SHAPE(c->shape.d[1]), MX_F64, MX_CPU, gen), stats);
  mx_generator_free(gen);
  cr_assert(x && g && center, "%s", mx_last_error());
  return (stats_inputs){{x, to_cuda(x)}, {g, to_cuda(g)}, {center, to_cuda(center)}};
}

/* sum and dot (channel_sums of g, and of g (x - center)) and mean and var (channel_moments of x) on one device. */
static void statistics(const stats_case *c, const stats_inputs *in, bool gpu, mx_tensor **out) {
  const mx_backend *be = mx__backend(gpu ? MX_CUDA : MX_CPU);
  mx_dtype stats = c->dtype == MX_F64 ? MX_F64 : MX_F32;
  mx_kview v[4];
  for (int i = 0; i < 4; i++) {
    out[i] = mx_zeros(MX_SHAPE(c->shape.d[1]), stats, gpu ? MX_CUDA : MX_CPU);
    cr_assert_not_null(out[i], "%s", mx_last_error());
    v[i] = mx__kview_of(out[i]);
  }
  mx_kview x = mx__kview_of(gpu ? in->x.gpu : in->x.cpu), g = mx__kview_of(gpu ? in->g.gpu : in->g.cpu);
  mx_kview center = mx__kview_of(gpu ? in->center.gpu : in->center.cpu);
  cr_assert_eq(be->channel_sums(&v[0], &v[1], &g, &x, NULL, &center, NULL), MX_OK, "%s", mx_last_error());
  cr_assert_eq(be->channel_moments(&v[2], &v[3], &x), MX_OK, "%s", mx_last_error());
}

/* Within a few float32 roundings of the sum of the terms' magnitudes (the CPU adds in float32 within blocks of
 * 512 values; a run's partial left out or counted twice moves a sum by about the square root of its values); a
 * second CUDA run gives the same bits. */
Test(gpu, batch_norm_statistics_match_cpu_at_scale) {
  require_gpu();
  const char *names[4] = {"sum", "dot", "mean", "var"};
  for (int k = 0; k < COUNT(cases); k++) {
    const stats_case *c = &cases[k];
    mx_scope *scope = mx_scope_begin();
    stats_inputs in = inputs(c, 4100 + (uint64_t)k);
    int64_t count = 1; /* values a channel */
    for (int d = 0; d < c->shape.ndim; d++) count *= d == 1 ? 1 : c->shape.d[d];
    mx_tensor *cpu[4], *gpu[4], *again[4];
    statistics(c, &in, false, cpu);
    statistics(c, &in, true, gpu);
    statistics(c, &in, true, again);
    for (int i = 0; i < 4; i++) {
      char why[256], what[96];
      /* sums over count values of magnitude about 1 (dot: about 2), means and variances of about 1 */
      double floor = i < 2 ? 4.0 * (double)count : 4.0;
      size_t n = differences(cpu[i], gpu[i], 0x1p-20, floor, why, sizeof why);
      cr_expect_eq(n, 0, "case %d (%s), %s: %zu channels differ; the first, %s", k, mx_dtype_name(c->dtype),
                   names[i], n, why);
      snprintf(what, sizeof what, "case %d, %s, run to run", k, names[i]);
      assert_identical(mx_to_device(gpu[i], MX_CPU), again[i], what);
    }
    mx_scope_end(scope);
  }
}
