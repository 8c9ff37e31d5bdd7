/* Host-run CUDA kernels against the CPU backend (tests/gpu/host_grid.h):
 * the block reductions (reduce, batch norm's channel sums) over simulated
 * shared memory, scans, sorts, softmax, cross_entropy, batch norm's affine
 * and combine, pooling, the direct convolution kernels and the integer matmul, on random
 * shapes. */
#include <math.h>
#include <string.h>

#include "kernels/conv_check.h"
#include "kernels/cuda/conv_cudnn.h"
#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;

/* cuDNN cannot run here: it declines every case, so the direct kernels
 * (kernels/cuda/conv.cu) run them all. */
mx_status mx__cudnn_conv(mx_conv_kind, const mx_kview *, const mx_kview *, const mx_kview *, const mx_conv_params *,
                         bool *declined) {
  *declined = true;
  return MX_OK;
}

static layout any_layout(rng &r, bool input) { return (layout)r.range(0, input ? LAYOUT_COUNT - 1 : BROADCAST - 1); }

/* in's shape with size 1 along the dims of mask. */
static void reduced_shape(const host_tensor &in, uint32_t mask, int64_t *shape) {
  for (int d = 0; d < in.v.ndim; d++) shape[d] = mask & (1u << d) ? 1 : in.v.shape[d];
}

void test_reduce_scan_sort(rng &r) {
  for (int round = 0; round < rounds(30); round++)
    for (mx_dtype dtype : every_dtype) {
      pick_grid_cap(r);
      int ndim = (int)r.range(1, 4);
      int64_t shape[4], out_shape[4];
      /* long reduced runs now and then: more elements than the block's threads */
      random_shape(r, ndim, r.range(0, 3) ? 9 : 40, 12, shape);
      uint32_t mask = (uint32_t)r.range(1, (1 << ndim) - 1);
      int code = (int)r.range(MX_RED_SUM, MX_RED_ANY);
      bool exact_sums = r.range(0, 1);
      host_tensor in = make_tensor(dtype, ndim, shape, any_layout(r, true), r);
      fill_values(in, exact_sums ? SMALL_INT : AWKWARD, r);
      reduced_shape(in, mask, out_shape);
      bool integer = !mx_dtype_floating(dtype);
      mx_dtype out_dtype = code == MX_RED_ALL || code == MX_RED_ANY                 ? MX_BOOL
                           : (code == MX_RED_SUM || code == MX_RED_PROD) && integer ? MX_I64
                                                                                    : dtype;
      bool with_index = code == MX_RED_MAX || code == MX_RED_MIN, with_out = !with_index || r.range(0, 3);
      describe("reduce %d of %s, %d dims, mask %#x, %s values", code, mx_dtype_name(dtype), ndim, mask,
               exact_sums ? "small integer" : "awkward");
      host_tensor a = make_tensor(out_dtype, ndim, out_shape, any_layout(r, false), r), b = a;
      host_tensor ia = make_tensor(MX_I64, ndim, out_shape, any_layout(r, false), r), ib = ia;
      mx_status sa = cpu.reduce(code, with_out ? &a.v : NULL, with_index ? &ia.v : NULL, &in.v, mask);
      mx_status sb = mx__cuda_reduce(code, with_out ? &b.v : NULL, with_index ? &ib.v : NULL, &in.v, mask);
      check_status(sa, sb, "reduce");
      /* a float sum or product adds in another order: exact only on small integers, else within
       rounding of the magnitudes added (up to 1e5 each) */
      bool reordered = !integer && !exact_sums && (code == MX_RED_SUM || code == MX_RED_PROD);
      same_values(a, b, reordered ? ulps(MX_F64, 1024) + ulps(out_dtype, 1) : 0, 1e6, "reduce");
      same_values(ia, ib, 0, 0, "reduce indices");

      int dim = (int)r.range(0, ndim - 1);
      bool reverse = r.range(0, 1);
      code = (int)r.range(MX_RED_SUM, MX_RED_PROD);
      out_dtype = integer ? MX_I64 : dtype;
      describe("scan %d of %s along %d of %d dims%s", code, mx_dtype_name(dtype), dim, ndim,
               reverse ? ", reversed" : "");
      a = make_tensor(out_dtype, ndim, shape, any_layout(r, false), r);
      b = a;
      check_status(cpu.scan(code, &a.v, &in.v, dim, reverse), mx__cuda_scan(code, &b.v, &in.v, dim, reverse), "scan");
      same_values(a, b, 0, 0, "scan");

      bool descending = r.range(0, 1);
      describe("sort of %s along %d of %d dims%s", mx_dtype_name(dtype), dim, ndim, descending ? ", descending" : "");
      fill_values(in, r.range(0, 1) ? SMALL_INT : AWKWARD, r); /* ties, and NaN */
      a = make_tensor(dtype, ndim, shape, any_layout(r, false), r);
      b = a;
      ia = make_tensor(MX_I64, ndim, shape, any_layout(r, false), r);
      ib = ia;
      check_status(cpu.sort(&a.v, &ia.v, &in.v, dim, descending), mx__cuda_sort(&b.v, &ib.v, &in.v, dim, descending),
                   "sort");
      same_values(a, b, 0, 0, "sort values");
      same_values(ia, ib, 0, 0, "sort indices");
    }
}

void test_softmax(rng &r) {
  for (int round = 0; round < rounds(20); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      int ndim = (int)r.range(1, 4), dim = (int)r.range(0, ndim - 1);
      int64_t shape[4];
      random_shape(r, ndim, 12, 12, shape);
      bool log_softmax = r.range(0, 1);
      describe("%s of %s along %d of %d dims", log_softmax ? "log_softmax" : "softmax", mx_dtype_name(dtype), dim,
               ndim);
      host_tensor x = make_tensor(dtype, ndim, shape, any_layout(r, true), r);
      fill_values(x, r.range(0, 3) ? POSITIVE : AWKWARD, r);
      host_tensor a = make_tensor(dtype, ndim, shape, any_layout(r, false), r), b = a;
      check_status(cpu.softmax(&a.v, &x.v, dim, log_softmax), mx__cuda_softmax(&b.v, &x.v, dim, log_softmax),
                   "softmax");
      /* the CPU's float32 lines take a vectorised float exp, within 2 ulp */
      same_values(a, b, dtype == MX_F32 ? ulps(MX_F32, 8) : 0, dtype == MX_F32 ? 1e-30 : 0, "softmax");
    }
}

/* cross_entropy over class indices, forward (rows and each reduction) and backward, with ignored rows. The CPU's
 * float32 rows take a vectorised float exp: within a few ulp, absolutely where the loss lse - x[t] or the
 * gradient p - 1 cancels (the floors); every other dtype runs the same rows, bit for bit. The sum and mean add
 * the rows' float64 losses in another order (CUDA: a block's tree; sometimes past its 256 threads): within
 * float64's rounding of the sum of those non-negative losses, then one rounding to the dtype. */
void test_cross_entropy(rng &r) {
  for (int round = 0; round < rounds(20); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      int64_t shape[2] = {r.range(0, 3) ? r.range(0, 12) : r.range(250, 700), r.range(1, 12)};
      int64_t ignore_index = r.range(0, 1) ? -100 : r.range(0, shape[1] - 1);
      int reduction = (int)r.range(0, 2); /* none, mean, sum */
      describe("cross_entropy of %s (%lld, %lld), reduction %d, ignore_index %lld", mx_dtype_name(dtype),
               (long long)shape[0], (long long)shape[1], reduction, (long long)ignore_index);
      host_tensor x = make_tensor(dtype, 2, shape, any_layout(r, true), r);
      fill_values(x, r.range(0, 3) ? POSITIVE : AWKWARD, r);
      host_tensor target = make_tensor(MX_I64, 1, shape, r.range(0, 1) ? CONTIGUOUS : GAPPED, r);
      for (int64_t i = 0; i < shape[0]; i++)
        ((int64_t *)target.v.data)[i * target.v.strides[0]] = r.range(0, 3) ? r.range(0, shape[1] - 1) : ignore_index;
      int64_t none_shape[1] = {shape[0]};
      host_tensor a = make_tensor(dtype, reduction ? 0 : 1, none_shape, any_layout(r, false), r), b = a;
      const mx_kview *out_a = reduction ? &a.v : NULL, *out_b = reduction ? &b.v : NULL;
      const mx_kview *rows_a = reduction ? NULL : &a.v, *rows_b = reduction ? NULL : &b.v;
      check_status(cpu.cross_entropy(out_a, rows_a, &x.v, &target.v, ignore_index, reduction == 1),
                   mx__cuda_cross_entropy(out_b, rows_b, &x.v, &target.v, ignore_index, reduction == 1),
                   "cross_entropy");
      bool f32 = dtype == MX_F32;
      double rel = f32 ? ulps(MX_F32, 8) : reduction ? ulps(dtype, 1) + ulps(MX_F64, (double)shape[0]) : 0;
      same_values(a, b, rel, f32 ? 64 : 0, "cross_entropy");

      host_tensor grad = make_tensor(dtype, reduction ? 0 : 1, none_shape, CONTIGUOUS, r);
      fill_values(grad, POSITIVE, r);
      host_tensor da = make_tensor(dtype, 2, shape, any_layout(r, false), r), db = da;
      check_status(cpu.cross_entropy_backward(&da.v, &grad.v, &x.v, &target.v, ignore_index, reduction == 1),
                   mx__cuda_cross_entropy_backward(&db.v, &grad.v, &x.v, &target.v, ignore_index, reduction == 1),
                   "cross_entropy_backward");
      same_values(da, db, f32 ? ulps(MX_F32, 8) : 0, f32 ? 4 : 0, "cross_entropy_backward");
    }
}

/* A contiguous (C) vector of the (C) vectors' dtype for data of dtype. */
static host_tensor channel_vector(mx_dtype dtype, int64_t channels, value_kind kind, rng &r) {
  host_tensor t = make_tensor(dtype == MX_F64 ? MX_F64 : MX_F32, 1, &channels, CONTIGUOUS, r);
  fill_values(t, kind, r);
  return t;
}

/* channel_sums (with b, both centres and a mask) and channel_moments of data of `shape`, compared with the CPU's:
 * exact on small integers; on positive values within a few float32 roundings of the sum of the terms' magnitudes
 * (up to 16 each), as the CPU adds in float32 within blocks of 512 values. */
static void check_channel_stats(mx_dtype dtype, int ndim, const int64_t *shape, value_kind kind, rng &r) {
  int64_t channels = shape[1];
  bool exact = kind == SMALL_INT;
  host_tensor x = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), g = make_tensor(dtype, ndim, shape, CONTIGUOUS, r);
  host_tensor mask = make_tensor(dtype, ndim, shape, CONTIGUOUS, r);
  fill_values(x, kind, r);
  fill_values(g, kind, r);
  fill_values(mask, SMALL_INT, r); /* relu's backward zeroes about half of a */
  host_tensor center = channel_vector(dtype, channels, SMALL_INT, r),
              gcenter = channel_vector(dtype, channels, SMALL_INT, r);
  double rel = exact ? 0 : ulps(MX_F32, 8), floor = 16.0 * (double)(x.numel() / channels);
  for (int masked = 0; masked < 2; masked++) {
    host_tensor sum_a = channel_vector(dtype, channels, AWKWARD, r), sum_b = sum_a;
    host_tensor dot_a = channel_vector(dtype, channels, AWKWARD, r), dot_b = dot_a;
    check_status(cpu.channel_sums(&sum_a.v, &dot_a.v, &g.v, &x.v, &gcenter.v, &center.v, masked ? &mask.v : NULL),
                 mx__cuda_channel_sums(&sum_b.v, &dot_b.v, &g.v, &x.v, &gcenter.v, &center.v,
                                       masked ? &mask.v : NULL),
                 "channel_sums");
    same_values(sum_a, sum_b, rel, floor, "channel_sums sum");
    same_values(dot_a, dot_b, rel, floor, "channel_sums dot");
  }
  host_tensor mean_a = channel_vector(dtype, channels, AWKWARD, r), mean_b = mean_a;
  host_tensor var_a = channel_vector(dtype, channels, AWKWARD, r), var_b = var_a;
  check_status(cpu.channel_moments(&mean_a.v, &var_a.v, &x.v), mx__cuda_channel_moments(&mean_b.v, &var_b.v, &x.v),
               "channel_moments");
  same_values(mean_a, mean_b, rel, floor, "channel_moments mean");
  same_values(var_a, var_b, rel, floor, "channel_moments var");
}

/* Batch norm's statistics over long channels, without a grid cap: many runs a channel, more than the finish's
 * 256 threads now and then (each thread then adds several partials), in planes shorter and longer than a
 * block's stride (the walk crossing planes once or several times a step), 1 channel, and channels-last
 * (plane 1) with channel counts around and past the 32 of a tile, not only multiples of it. */
static void test_batch_norm_long(rng &r) {
  bool quick = rounds(4) < 4;
  int64_t cases[][4] = {
      {4, 1, 300, 500},                      /* 1 channel of 600000 values: 292 runs */
      {64, 3, 28, 28},                       /* planes of 784 */
      {200, 5, 5, 7},                        /* planes of 35: a step of 256 crosses 7 */
      {20000, 45, 0, 0},                     /* channels-last: 2 tiles, the second 13 wide, 312 runs */
      {30000, 1, 0, 0},                      /* 1 channel, plane 1 */
      {700, 130, 0, 0},                      /* 5 tiles */
      {3000, 31, 0, 0},                      /* just below the tiles */
      {33, 1024, 0, 0},                      /* many channels, few rows */
  };
  int saved_cap = host_grid_cap;
  host_grid_cap = 65535;
  for (auto &shape : cases) {
    int ndim = shape[2] ? 4 : 2;
    int64_t s[4] = {shape[0], shape[1], shape[2], shape[3]};
    if (quick && s[0] >= 1000) s[0] /= 8; /* fewer runs, the same paths */
    mx_dtype dtype = float_dtypes[r.range(0, 3)];
    value_kind kind = r.range(0, 1) ? SMALL_INT : POSITIVE;
    describe("channel_sums and _moments of %s, long channels: shape (%lld, %lld%s), %s values", mx_dtype_name(dtype),
             (long long)s[0], (long long)s[1], ndim > 2 ? ", ..." : "", kind == SMALL_INT ? "small integer" : "positive");
    check_channel_stats(dtype, ndim, s, kind, r);
  }
  host_grid_cap = saved_cap;
}

void test_batch_norm(rng &r) {
  for (int round = 0; round < rounds(24); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      /* every other round (N, C) data, batch norm's channels-last view (plane 1): from 32 channels on the
         reductions read tiles of 32 channels, up to a few hundred, not only multiples of 32, with rows enough for
         several runs of a tile */
      bool rows_by_channels = round % 2 == 0;
      int ndim = rows_by_channels ? 2 : (int)r.range(2, 4);
      int64_t shape[4];
      random_shape(r, ndim, 7, 0, shape);
      shape[0] = r.range(1, 40); /* channels of up to 40 * 49 values: several runs each */
      if (rows_by_channels) {
        shape[0] = r.range(1, 300);
        shape[1] = r.range(0, 3) ? r.range(1, 300) : r.range(28, 36); /* around the tiles' threshold now and then */
      }
      bool exact = r.range(0, 1);
      host_tensor x = make_tensor(dtype, ndim, shape, CONTIGUOUS, r),
                  g = make_tensor(dtype, ndim, shape, CONTIGUOUS, r);
      fill_values(x, exact ? SMALL_INT : AWKWARD, r);
      fill_values(g, exact ? SMALL_INT : POSITIVE, r);
      int64_t channels = shape[1];
      host_tensor center = channel_vector(dtype, channels, SMALL_INT, r),
                  scale = channel_vector(dtype, channels, POSITIVE, r);
      host_tensor shift = channel_vector(dtype, channels, AWKWARD, r),
                  gcenter = channel_vector(dtype, channels, SMALL_INT, r);
      bool centered = r.range(0, 1);
      /* relu fused in: on the output, and (its backward) on the input through a mask of awkward values, which
       hold +-0, negatives and NaN */
      bool relu = r.range(0, 1), masked = r.range(0, 1), tiny = r.range(0, 2) == 0;
      /* now and then outputs within rounding of 0 (a tiny scale, no shift), which 16-bit dtypes round to +-0 or
       their subnormals: relu must see them as stored, -0 kept */
      for (int64_t c = 0; tiny && c < channels; c++) {
        double small = dtype == MX_F64 ? 1e-300 : dtype == MX_F16 ? 1e-30 : 1e-45;
        mx_element_store((char *)scale.v.data + c * dtype_bytes(scale.v.dtype), scale.v.dtype, small);
        mx_element_store((char *)shift.v.data + c * dtype_bytes(shift.v.dtype), shift.v.dtype, 0.0);
      }
      host_tensor mask = make_tensor(dtype, ndim, shape, CONTIGUOUS, r);
      fill_values(mask, AWKWARD, r);
      describe("channel_affine, _sums, _moments and _combine of %s, shape (%lld, %lld%s), %s values%s%s%s",
               mx_dtype_name(dtype), (long long)shape[0], (long long)shape[1], ndim > 2 ? ", ..." : "",
               exact ? "small integer" : "awkward", relu ? ", relu" : "", masked ? ", masked" : "",
               tiny ? ", tiny scale" : "");
      host_tensor a = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), b = a;
      check_status(
          cpu.channel_affine(&a.v, &x.v, centered ? &center.v : NULL, &scale.v, &shift.v, masked ? &mask.v : NULL,
                             relu),
          mx__cuda_channel_affine(&b.v, &x.v, centered ? &center.v : NULL, &scale.v, &shift.v,
                                  masked ? &mask.v : NULL, relu),
          "channel_affine");
      same_values(a, b, 0, 0, "channel_affine");

      host_tensor sum_a = channel_vector(dtype, channels, AWKWARD, r), sum_b = sum_a;
      host_tensor dot_a = channel_vector(dtype, channels, AWKWARD, r), dot_b = dot_a;
      bool want_sum = r.range(0, 3), want_dot = !want_sum || r.range(0, 1);
      check_status(cpu.channel_sums(want_sum ? &sum_a.v : NULL, want_dot ? &dot_a.v : NULL, &x.v,
                                    want_dot ? &g.v : NULL, centered ? &center.v : NULL, &gcenter.v,
                                    masked ? &mask.v : NULL),
                   mx__cuda_channel_sums(want_sum ? &sum_b.v : NULL, want_dot ? &dot_b.v : NULL, &x.v,
                                         want_dot ? &g.v : NULL, centered ? &center.v : NULL, &gcenter.v,
                                         masked ? &mask.v : NULL),
                   "channel_sums");
      /* the runs add in another order than the CPU: exact on small integers; on awkward values, whose large
       * terms cancel, within the CPU's float32 runs of up to 512 values (the tight bound on realistic data is
       * test_host_grid_reduce's long and tiled cases and tests/gpu/test_gpu_bn_stats.c) */
      double rel = exact ? 0 : ulps(MX_F64, 1024) + ulps(MX_F32, 512);
      same_values(sum_a, sum_b, rel, 1e6, "channel_sums sum");
      same_values(dot_a, dot_b, rel, 1e6, "channel_sums dot");

      /* the statistics in one pass: sums in double of the same shifted values and squares, in another order */
      host_tensor mean_a = channel_vector(dtype, channels, AWKWARD, r), mean_b = mean_a;
      host_tensor var_a = channel_vector(dtype, channels, AWKWARD, r), var_b = var_a;
      check_status(cpu.channel_moments(&mean_a.v, &var_a.v, &x.v), mx__cuda_channel_moments(&mean_b.v, &var_b.v, &x.v),
                   "channel_moments");
      same_values(mean_a, mean_b, rel, 1e6, "channel_moments mean");
      same_values(var_a, var_b, rel, 1e6, "channel_moments var");

      /* batch norm's input gradient in one pass: a (through the mask) and b with four vectors, the CPU's order of
         rounding, so the same bits */
      host_tensor center_b = channel_vector(dtype, channels, AWKWARD, r), scale_b = channel_vector(dtype, channels,
                                                                                                   POSITIVE, r);
      host_tensor combined_a = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), combined_b = combined_a;
      check_status(cpu.channel_combine(&combined_a.v, &g.v, &x.v, &scale.v, &center_b.v, &scale_b.v, &shift.v,
                                       masked ? &mask.v : NULL),
                   mx__cuda_channel_combine(&combined_b.v, &g.v, &x.v, &scale.v, &center_b.v, &scale_b.v, &shift.v,
                                            masked ? &mask.v : NULL),
                   "channel_combine");
      same_values(combined_a, combined_b, 0, 0, "channel_combine");
    }
  test_batch_norm_long(r);
}

/* Pooling's parameters for `spatial` dims of in, and the output's shape. */
static mx_pool_params pool_params(rng &r, int spatial, const int64_t *in, int64_t *out) {
  mx_pool_params p;
  memset(&p, 0, sizeof p);
  p.spatial = spatial;
  p.count_include_pad = r.range(0, 1);
  out[0] = in[0], out[1] = in[1];
  for (int i = 0; i < spatial; i++) {
    p.kernel[i] = r.range(1, 3), p.stride[i] = r.range(1, 3), p.dilation[i] = r.range(1, 2);
    p.padding[i] = r.range(0, p.kernel[i] / 2);
    int64_t span = p.dilation[i] * (p.kernel[i] - 1) + 1;
    int64_t size = in[2 + i] + 2 * p.padding[i];
    out[2 + i] = size >= span ? (size - span) / p.stride[i] + 1 : 0;
  }
  return p;
}

void test_pool(rng &r) {
  for (int round = 0; round < rounds(25); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      int spatial = (int)r.range(1, 3);
      int64_t in_shape[5], out_shape[5];
      random_shape(r, 2 + spatial, 8, 0, in_shape);
      for (int i = 0; i < spatial; i++) in_shape[2 + i] += 2;
      mx_pool_params p = pool_params(r, spatial, in_shape, out_shape);
      bool empty = false;
      for (int i = 0; i < 2 + spatial; i++) empty |= out_shape[i] == 0;
      if (empty) continue;
      int nd = 2 + spatial;
      mx_dtype index_dtype = r.range(0, 1) ? MX_U8 : MX_I64;
      layout how = spatial == 2 && r.range(0, 1) ? CHANNELS_LAST : CONTIGUOUS; /* every operand alike, as the ops do */
      describe("max_pool of %s, %d spatial dims, %s indices, layout %d", mx_dtype_name(dtype), spatial,
               mx_dtype_name(index_dtype), how);
      host_tensor x = make_tensor(dtype, nd, in_shape, how, r);
      fill_values(x, r.range(0, 1) ? SMALL_INT : AWKWARD, r);
      host_tensor a = make_tensor(dtype, nd, out_shape, how, r), b = a;
      host_tensor ia = make_tensor(index_dtype, nd, out_shape, how, r), ib = ia;
      check_status(cpu.max_pool(&a.v, &ia.v, &x.v, &p), mx__cuda_max_pool(&b.v, &ib.v, &x.v, &p), "max_pool");
      same_values(a, b, 0, 0, "max_pool");
      same_values(ia, ib, 0, 0, "max_pool indices");

      host_tensor dy = make_tensor(dtype, nd, out_shape, how, r);
      fill_values(dy, r.range(0, 1) ? SMALL_INT : AWKWARD, r); /* awkward: overlapping windows' sums round */
      host_tensor da = make_tensor(dtype, nd, in_shape, how, r), db = da;
      check_status(cpu.max_pool_backward(&da.v, &dy.v, &ia.v, &p), mx__cuda_max_pool_backward(&db.v, &dy.v, &ia.v, &p),
                   "max_pool_backward");
      same_values(da, db, 0, 0, "max_pool_backward");

      describe("avg_pool of %s, %d spatial dims, padding %s", mx_dtype_name(dtype), spatial,
               p.count_include_pad ? "counted" : "not counted");
      check_status(cpu.avg_pool(&a.v, &x.v, &p), mx__cuda_avg_pool(&b.v, &x.v, &p), "avg_pool");
      same_values(a, b, 0, 0, "avg_pool");
      fill_values(dy, AWKWARD, r);
      check_status(cpu.avg_pool_backward(&da.v, &dy.v, &p), mx__cuda_avg_pool_backward(&db.v, &dy.v, &p),
                   "avg_pool_backward");
      same_values(da, db, 0, 0, "avg_pool_backward");
    }
}

void test_conv_matmul(rng &r) {
  for (int round = 0; round < rounds(16); round++)
    for (mx_dtype dtype : float_dtypes) {
      pick_grid_cap(r);
      mx_conv_params p;
      memset(&p, 0, sizeof p);
      p.spatial = (int)r.range(1, 2);
      p.groups = r.range(1, 2);
      int nd = 2 + p.spatial;
      int64_t xs[5], ws[5], ys[5];
      xs[0] = ys[0] = r.range(1, 3);
      xs[1] = p.groups * r.range(1, 3);
      ws[0] = ys[1] = p.groups * r.range(1, 3);
      ws[1] = xs[1] / p.groups;
      bool empty = false;
      for (int i = 0; i < p.spatial; i++) {
        p.stride[i] = r.range(1, 2), p.padding[i] = r.range(0, 1), p.dilation[i] = r.range(1, 2);
        ws[2 + i] = r.range(1, 3);
        xs[2 + i] = r.range(1, 8);
        int64_t span = p.dilation[i] * (ws[2 + i] - 1) + 1, size = xs[2 + i] + 2 * p.padding[i];
        ys[2 + i] = size >= span ? (size - span) / p.stride[i] + 1 : 0;
        empty |= ys[2 + i] == 0;
      }
      if (empty) continue;
      describe("conv of %s, %d spatial dims, %lld groups", mx_dtype_name(dtype), p.spatial, (long long)p.groups);
      host_tensor x = make_tensor(dtype, nd, xs, CONTIGUOUS, r), w = make_tensor(dtype, nd, ws, CONTIGUOUS, r);
      host_tensor dy = make_tensor(dtype, nd, ys, CONTIGUOUS, r), bias = make_tensor(dtype, 1, &ys[1], CONTIGUOUS, r);
      fill_values(x, SMALL_INT, r);
      fill_values(w, SMALL_INT, r);
      fill_values(dy, SMALL_INT, r);
      fill_values(bias, SMALL_INT, r);
      bool with_bias = r.range(0, 1);
      host_tensor a = make_tensor(dtype, nd, ys, CONTIGUOUS, r), b = a;
      check_status(cpu.conv_forward(&a.v, &x.v, &w.v, with_bias ? &bias.v : NULL, &p),
                   mx__cuda_conv_forward(&b.v, &x.v, &w.v, with_bias ? &bias.v : NULL, &p), "conv_forward");
      same_values(a, b, 0, 0, "conv_forward");
      a = make_tensor(dtype, nd, xs, CONTIGUOUS, r), b = a;
      check_status(cpu.conv_backward_data(&a.v, &dy.v, &w.v, &p), mx__cuda_conv_backward_data(&b.v, &dy.v, &w.v, &p),
                   "conv_backward_data");
      same_values(a, b, 0, 0, "conv_backward_data");
      a = make_tensor(dtype, nd, ws, CONTIGUOUS, r), b = a;
      check_status(cpu.conv_backward_weight(&a.v, &dy.v, &x.v, &p),
                   mx__cuda_conv_backward_weight(&b.v, &dy.v, &x.v, &p), "conv_backward_weight");
      same_values(a, b, 0, 0, "conv_backward_weight");
      /* the weight's and the bias's gradients in one call (small integers: every sum exact), dy in any
       * layout: the bias's sum takes another kernel for a dy neither contiguous nor channels-last */
      host_tensor dy_any = make_tensor(dtype, nd, ys, any_layout(r, true), r);
      fill_values(dy_any, SMALL_INT, r);
      host_tensor db_a = make_tensor(dtype, 1, &ys[1], CONTIGUOUS, r), db_b = db_a;
      a = make_tensor(dtype, nd, ws, CONTIGUOUS, r), b = a;
      check_status(cpu.conv_backward_weight_bias(&a.v, &db_a.v, &dy_any.v, &x.v, &p),
                   mx__cuda_conv_backward_weight_bias(&b.v, &db_b.v, &dy_any.v, &x.v, &p),
                   "conv_backward_weight_bias");
      same_values(a, b, 0, 0, "conv_backward_weight_bias: dw");
      same_values(db_a, db_b, 0, 0, "conv_backward_weight_bias: db");
    }
  /* integer matmuls run the reference kernel (floats go to cuBLAS) */
  static const mx_dtype int_dtypes[] = {MX_I64, MX_I32, MX_U8};
  for (int round = 0; round < rounds(20); round++)
    for (mx_dtype dtype : int_dtypes) {
      pick_grid_cap(r);
      int64_t B = r.range(1, 3), M = r.range(1, 9), N = r.range(1, 9), K = r.range(1, 12);
      int64_t as[3] = {B, M, K}, bs[3] = {B, K, N}, os[3] = {B, M, N};
      describe("matmul of %s, (%lld, %lld, %lld) @ (%lld, %lld, %lld)", mx_dtype_name(dtype), (long long)B,
               (long long)M, (long long)K, (long long)B, (long long)K, (long long)N);
      host_tensor x = make_tensor(dtype, 3, as, any_layout(r, true), r),
                  y = make_tensor(dtype, 3, bs, any_layout(r, true), r);
      fill_values(x, SMALL_INT, r);
      fill_values(y, SMALL_INT, r);
      host_tensor a = make_tensor(dtype, 3, os, CONTIGUOUS, r), b = a;
      check_status(cpu.matmul(&a.v, &x.v, &y.v), mx__cuda_matmul(&b.v, &x.v, &y.v), "matmul");
      same_values(a, b, 0, 0, "matmul");
    }
}
