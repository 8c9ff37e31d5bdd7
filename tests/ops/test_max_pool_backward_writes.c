/* The CPU's max-pool backward kernel on a dx handed over full of NaN: every element comes back right (the gradient
 * at each window's max, +0 elsewhere), uncovered last rows and columns included, in float32, bfloat16 and float16.
 * Channels-last windows that tile the image (kernel = stride, no padding) are written without a zero-fill pass
 * first, so this is what checks they reach every element; row-major planes are zero-filled, then scattered. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "kernels/backend.h"
#include "kernels/cpu/pool.h"
#include "tensor/tensor_impl.h"

/* t's values in row-major order as float64, malloc'ed. */
static double *values_of(const mx_tensor *t) {
  mx_tensor *d = mx_contiguous(mx_to_dtype(t, MX_F64));
  size_t n = (size_t)mx_numel(d);
  double *v = malloc(sizeof(double) * (n ? n : 1));
  cr_assert(v && mx_to_host(d, v, sizeof(double) * n) == MX_OK, "%s", mx_last_error());
  mx_release(d);
  return v;
}

static mx_tensor *in_layout(mx_tensor *t, bool channels_last) { return channels_last ? mx_to_channels_last(t) : t; }

/* (N, C, H, W) pooled by k x k windows with stride k, in dtype dt and the layout asked: the kernel's dx, started
 * as NaN everywhere, against the scatter done here into zeros. */
static void check(int64_t N, int64_t C, int64_t H, int64_t W, int64_t k, mx_dtype dt, bool channels_last) {
  mx_scope *scope = mx_scope_begin();
  mx_generator *gen = mx_generator_new(17);
  int64_t OH = (H - k) / k + 1, OW = (W - k) / k + 1;
  mx_pool_params p = {.spatial = 2, .kernel = {k, k}, .stride = {k, k}, .dilation = {1, 1}};
  mx_tensor *x = in_layout(mx_to_dtype(mx_randn(MX_SHAPE(N, C, H, W), MX_F32, MX_CPU, gen), dt), channels_last);
  mx_tensor *y = in_layout(mx_zeros(MX_SHAPE(N, C, OH, OW), dt, MX_CPU), channels_last);
  mx_tensor *offsets = in_layout(mx_zeros(MX_SHAPE(N, C, OH, OW), MX_U8, MX_CPU), channels_last);
  /* the gradient, with -0 and NaN among its values */
  double *gv = values_of(mx_randn(MX_SHAPE(N, C, OH, OW), MX_F64, MX_CPU, gen));
  for (int64_t i = 0; i < N * C * OH * OW; i++)
    if (i % 5 == 2) gv[i] = i % 2 ? -0.0 : NAN;
  mx_tensor *dy = in_layout(mx_to_dtype(mx_from_data(gv, MX_SHAPE(N, C, OH, OW), MX_F64, MX_CPU), dt), channels_last);
  mx_tensor *dx = in_layout(mx_full(MX_SHAPE(N, C, H, W), NAN, dt, MX_CPU), channels_last);
  cr_assert(x && y && offsets && dy && dx, "%s", mx_last_error());
  cr_assert_eq(mx_is_channels_last(dx) && !mx_is_contiguous(dx), channels_last);
  mx_kview xv = mx__kview_of(x), yv = mx__kview_of(y), ov = mx__kview_of(offsets);
  mx_kview gv_view = mx__kview_of(dy), dv = mx__kview_of(dx);
  cr_assert_eq(mx__cpu_max_pool(&yv, &ov, &xv, &p), MX_OK);
  cr_assert_eq(mx__cpu_max_pool_backward(&dv, &gv_view, &ov, &p), MX_OK);
  double *got = values_of(dx), *g = values_of(dy), *offset = values_of(offsets);
  double *want = calloc((size_t)(N * C * H * W), sizeof(double));
  cr_assert(want);
  for (int64_t plane = 0, o = 0; plane < N * C; plane++)
    for (int64_t oh = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++, o++) {
        int64_t r = (int64_t)offset[o], h = oh * k + r / k, w = ow * k + r % k;
        want[(plane * H + h) * W + w] = 0.0 + g[o];
      }
  for (int64_t i = 0; i < N * C * H * W; i++)
    cr_assert(isnan(want[i]) ? isnan(got[i]) : got[i] == want[i] && signbit(got[i]) == signbit(want[i]),
              "(%lld, %lld, %lld, %lld) k %lld %s %s: element %lld is %g, expected %g", (long long)N, (long long)C,
              (long long)H, (long long)W, (long long)k, mx_dtype_name(dt),
              channels_last ? "channels-last" : "row-major",
              (long long)i, got[i], want[i]);
  free(want);
  free(got);
  free(g);
  free(gv);
  free(offset);
  mx_generator_free(gen);
  mx_scope_end(scope);
}

Test(max_pool_backward, two_by_two_windows_overwrite_every_element_row_major) {
  mx_dtype dtypes[3] = {MX_F32, MX_BF16, MX_F16};
  for (int d = 0; d < 3; d++) {
    check(2, 3, 6, 8, 2, dtypes[d], false);
    check(2, 3, 7, 5, 2, dtypes[d], false); /* an odd last row and column no window covers */
  }
}

Test(max_pool_backward, tiles_write_every_element_channels_last) {
  mx_dtype dtypes[3] = {MX_F32, MX_BF16, MX_F16};
  for (int d = 0; d < 3; d++) {
    check(2, 70, 6, 8, 2, dtypes[d], true);
    check(2, 5, 7, 5, 2, dtypes[d], true);
  }
  check(1, 70, 8, 10, 3, MX_F32, true); /* 3x3 tiles, two rows and a column uncovered */
  check(1, 3, 9, 7, 3, MX_BF16, true);
}
