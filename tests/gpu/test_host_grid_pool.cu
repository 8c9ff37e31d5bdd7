/* Host-run pooling kernels against the CPU backend (tests/gpu/host_grid.h):
 * the fast kernels of kernels/cuda/pool.cu (1-d and 2-d pooling of dense
 * tensors, typed by dtype), forward on any window, backward on windows
 * that do not overlap, on the geometries the CNNs use (2x2 and 3x3 windows
 * of their own stride), with padding, odd sizes whose last rows and columns
 * no window covers, and the overlapping and dilated windows whose backward
 * falls back to the general kernel; every float dtype, contiguous and
 * channels-last, both index encodings, max_pool_relu, and values with NaNs,
 * ties and signed zeros. Bit for bit. */
#include <string.h>

#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;

/* A window of kernel k, stride s, padding p and dilation d along one dim. */
struct window {
  int64_t k, s, p, d;
};

/* The windows along each pooled dim: the CNNs' 2x2/2 most often, then
 * 3x3/3, padded ones, strides above the kernel, overlapping and dilated. */
static window pick_window(rng &r) {
  static const window windows[] = {{2, 2, 0, 1}, {2, 2, 0, 1}, {3, 3, 0, 1}, {3, 3, 1, 1}, {2, 2, 1, 1},
                                   {2, 3, 0, 1}, {1, 1, 0, 1}, {1, 2, 0, 1}, {3, 2, 1, 1}, {2, 1, 0, 1},
                                   {2, 2, 0, 2}, {3, 4, 1, 2}};
  return windows[r.range(0, (int64_t)(sizeof windows / sizeof windows[0]) - 1)];
}

/* Pooling of `spatial` dims of in (its window along each from pick_window,
 * the same one along both now and then), and the output's shape; false
 * where an output dim would be empty. */
static bool planar_params(rng &r, int spatial, const int64_t *in, int64_t *out, mx_pool_params *p) {
  memset(p, 0, sizeof *p);
  p->spatial = spatial;
  p->count_include_pad = r.range(0, 1);
  p->relu = r.range(0, 1);
  out[0] = in[0], out[1] = in[1];
  window same = pick_window(r);
  bool square = r.range(0, 1);
  for (int i = 0; i < spatial; i++) {
    window w = square ? same : pick_window(r);
    p->kernel[i] = w.k, p->stride[i] = w.s, p->padding[i] = w.p, p->dilation[i] = w.d;
    int64_t span = w.d * (w.k - 1) + 1, size = in[2 + i] + 2 * w.p;
    if (size < span) return false;
    out[2 + i] = (size - span) / w.s + 1;
  }
  return true;
}

void test_pool_planar(rng &r) {
  for (int round = 0; round < rounds(40); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      int spatial = r.range(0, 3) ? 2 : 1;
      int64_t in_shape[4], out_shape[4];
      random_shape(r, 2 + spatial, 9, 0, in_shape);
      if (r.range(0, 3) == 0) in_shape[1] = r.range(30, 70); /* channels-last rows longer than a warp */
      mx_pool_params p;
      if (!planar_params(r, spatial, in_shape, out_shape, &p)) continue;
      int nd = 2 + spatial;
      mx_dtype index_dtype = r.range(0, 1) ? MX_U8 : MX_I64;
      layout how = spatial == 2 && r.range(0, 1) ? CHANNELS_LAST : CONTIGUOUS; /* every operand alike, as the ops do */
      describe("planar max_pool%s of %s (%lld x %lld), kernel %lld x %lld, stride %lld x %lld, padding %lld x %lld, "
               "dilation %lld x %lld, %s indices, layout %d",
               p.relu ? "_relu" : "", mx_dtype_name(dtype), (long long)in_shape[nd - 2], (long long)in_shape[nd - 1],
               (long long)p.kernel[0], (long long)p.kernel[spatial - 1], (long long)p.stride[0],
               (long long)p.stride[spatial - 1], (long long)p.padding[0], (long long)p.padding[spatial - 1],
               (long long)p.dilation[0], (long long)p.dilation[spatial - 1], mx_dtype_name(index_dtype), how);
      host_tensor x = make_tensor(dtype, nd, in_shape, how, r);
      fill_values(x, r.range(0, 1) ? SMALL_INT : AWKWARD, r); /* small integers: many ties */
      host_tensor a = make_tensor(dtype, nd, out_shape, how, r), b = a;
      host_tensor ia = make_tensor(index_dtype, nd, out_shape, how, r), ib = ia;
      check_status(cpu.max_pool(&a.v, &ia.v, &x.v, &p), mx__cuda_max_pool(&b.v, &ib.v, &x.v, &p), "max_pool");
      same_values(a, b, 0, 0, "max_pool");
      same_values(ia, ib, 0, 0, "max_pool indices");

      host_tensor dy = make_tensor(dtype, nd, out_shape, how, r);
      fill_values(dy, AWKWARD, r); /* -0 and NaN: the backward's 0 + dy */
      host_tensor da = make_tensor(dtype, nd, in_shape, how, r);
      fill_values(da, AWKWARD, r); /* what no window covers must be written, not left as it was */
      host_tensor db = da;
      check_status(cpu.max_pool_backward(&da.v, &dy.v, &ia.v, &p), mx__cuda_max_pool_backward(&db.v, &dy.v, &ia.v, &p),
                   "max_pool_backward");
      same_values(da, db, 0, 0, "max_pool_backward");

      p.relu = false;
      describe("planar avg_pool of %s, padding %s, layout %d", mx_dtype_name(dtype),
               p.count_include_pad ? "counted" : "not counted", how);
      check_status(cpu.avg_pool(&a.v, &x.v, &p), mx__cuda_avg_pool(&b.v, &x.v, &p), "avg_pool");
      same_values(a, b, 0, 0, "avg_pool");
      fill_values(da, AWKWARD, r);
      db = da;
      check_status(cpu.avg_pool_backward(&da.v, &dy.v, &p), mx__cuda_avg_pool_backward(&db.v, &dy.v, &p),
                   "avg_pool_backward");
      same_values(da, db, 0, 0, "avg_pool_backward");
    }
}
