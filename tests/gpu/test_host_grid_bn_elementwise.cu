/* Host-run CUDA channel_affine and channel_combine (kernels/cuda/batch_norm.cu) against the CPU's, bit for bit,
 * through both of their kernels: the typed 32-bit ones (what test_batch_norm runs too) and the general ones, which
 * take more than 2^31 elements on a GPU and here any size, with index32_fits' bound lowered; and common.cuh's
 * divider, which the typed kernels find the channel with, on the quotients up to 2^31 that no tensor here reaches. */
#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;

/* divider_of(d).quotient(n) against n / d for divisors and dividends at the edges (powers of two and their
 * neighbours, the largest) and random ones, n < 2^31. */
static void test_divider(rng &r) {
  std::vector<int64_t> ds = {1, 2, 3, 5, 7, 31, 32, 33, 49, 64, 127, 128, 255, 1000, 1024, 3072, 65535, 65536, 65537,
                             (1 << 20) + 1, (1 << 30) - 1, 1 << 30, (1 << 30) + 1, INT32_MAX - 1, INT32_MAX};
  for (int k = 0; k < rounds(64); k++) ds.push_back(r.range(1, k % 2 ? 4096 : INT32_MAX));
  for (int64_t d : ds) {
    divider q = divider_of(d);
    std::vector<int64_t> ns = {0, 1, d - 1, d, d + 1, 2 * d - 1, 2 * d, INT32_MAX - 1, INT32_MAX};
    for (int k = 0; k < rounds(64); k++) ns.push_back(r.range(0, k % 2 ? 4 * d : INT32_MAX));
    for (int64_t n : ns) {
      if (n > INT32_MAX) continue;
      uint32_t got = q.quotient((uint32_t)n);
      if (!check(got == n / d, "divider: %lld / %lld gives %u, not %lld", (long long)n, (long long)d, got,
                 (long long)(n / d)))
        return;
    }
  }
}

static host_tensor channel_vector(mx_dtype dtype, int64_t channels, value_kind kind, rng &r) {
  host_tensor t = make_tensor(dtype == MX_F64 ? MX_F64 : MX_F32, 1, &channels, CONTIGUOUS, r);
  fill_values(t, kind, r);
  return t;
}

/* Channels-last's (N H W, C) rows (plane 1) and contiguous (N, C, *) tensors, channel counts and planes that are
 * not powers of two, one channel, one plane of one value. */
static void test_affine_combine(rng &r) {
  static const int64_t shapes[][4] = {{2, 3, 5, 7}, {3, 1, 4, 9}, {5, 7, 1, 1}, {1, 6, 11, 0}, {300, 33, 0, 0},
                                      {97, 1, 0, 0}, {2, 129, 3, 0}, {1000, 3, 0, 0}};
  for (int round = 0; round < rounds(8); round++)
    for (auto &s : shapes)
      for (mx_dtype dtype : float_dtypes) {
        int ndim = s[3] ? 4 : s[2] ? 3 : 2;
        int64_t shape[4] = {s[0], s[1], s[2], s[3]};
        bool general = r.range(0, 1), relu = r.range(0, 1), masked = r.range(0, 1), centered = r.range(0, 1);
        pick_grid_cap(r);
        host_grid_index32_limit = general ? 0 : INT32_MAX;
        describe("channel_affine and _combine of %s, shape (%lld, %lld, ...), %s kernels%s%s%s", mx_dtype_name(dtype),
                 (long long)shape[0], (long long)shape[1], general ? "general" : "typed", relu ? ", relu" : "",
                 masked ? ", masked" : "", centered ? ", centered" : "");
        host_tensor x = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), g = x, mask = x;
        fill_values(x, AWKWARD, r);
        fill_values(g, AWKWARD, r);
        fill_values(mask, AWKWARD, r);
        int64_t channels = shape[1];
        host_tensor center = channel_vector(dtype, channels, AWKWARD, r), scale = channel_vector(dtype, channels,
                                                                                                AWKWARD, r);
        host_tensor shift = channel_vector(dtype, channels, AWKWARD, r), scale_b = channel_vector(dtype, channels,
                                                                                                  POSITIVE, r);
        host_tensor a = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), b = a;
        check_status(cpu.channel_affine(&a.v, &x.v, centered ? &center.v : NULL, &scale.v, &shift.v,
                                        masked ? &mask.v : NULL, relu),
                     mx__cuda_channel_affine(&b.v, &x.v, centered ? &center.v : NULL, &scale.v, &shift.v,
                                             masked ? &mask.v : NULL, relu),
                     "channel_affine");
        same_values(a, b, 0, 0, "channel_affine");
        host_tensor c = make_tensor(dtype, ndim, shape, CONTIGUOUS, r), d = c;
        check_status(cpu.channel_combine(&c.v, &g.v, &x.v, &scale.v, &center.v, &scale_b.v, &shift.v,
                                         masked ? &mask.v : NULL),
                     mx__cuda_channel_combine(&d.v, &g.v, &x.v, &scale.v, &center.v, &scale_b.v, &shift.v,
                                              masked ? &mask.v : NULL),
                     "channel_combine");
        same_values(c, d, 0, 0, "channel_combine");
      }
  host_grid_index32_limit = INT32_MAX;
}

void test_batch_norm_elementwise(rng &r) {
  test_divider(r);
  test_affine_combine(r);
}
