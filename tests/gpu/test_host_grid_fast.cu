/* Host-run CUDA kernels against the CPU backend (tests/gpu/host_grid.h):
 * the typed fast paths of convert, unary and binary (kernels/cuda/typed_element.cuh),
 * which take float32, bfloat16 and float16 operands that flatten to
 * contiguous 1-d, or one broadcast element. The values are raw bit patterns
 * with every awkward one mixed in: NaN payloads (quiet and signalling),
 * infinities, signed zeros, subnormals, rounding ties and overflow edges. */
#include <string.h>

#include "kernels/elementwise.h"
#include "tests/gpu/host_grid.h"

static const mx_backend &cpu = mx__cpu_backend;
static const mx_dtype fast_dtypes[3] = {MX_F32, MX_BF16, MX_F16};

/* The awkward values of each dtype, as bits. */
static const uint32_t f32_edges[] = {
    0x7fc00000, 0xffc00001, 0x7f800001, 0xff9abcde, 0x7fa5a5a5, /* NaNs: quiet, signalling, payloads */
    0x7f800000, 0xff800000, 0x00000000, 0x80000000,             /* infinities, zeros */
    0x00000001, 0x807fffff, 0x00400000,                         /* subnormals */
    0x3f808000, 0x3f818000, 0x3f808001, 0xbf817fff,             /* bfloat16 ties to even, either side */
    0x7f7fffff, 0x7f7f8000, 0xff7f7fff,                         /* bfloat16 overflow to inf, and not */
    0x477ff000, 0x477fefff, 0xc77ff000,                         /* float16: 65520 is inf, below is 65504 */
    0x33000000, 0x33000001, 0x38800000, 0x387fe000, 0x3a802000, /* float16 subnormal edges and ties */
    0x3f801000, 0x3f803000,                                     /* float16 normal ties */
};
static const uint16_t bf16_edges[] = {0x7fc0, 0x7f81, 0xff81, 0x7fa5, 0xffff, 0x7f80, 0xff80, 0x0000,
                                      0x8000, 0x0001, 0x807f, 0x3f80, 0x477f, 0x4780, 0x3380, 0x3300};
static const uint16_t f16_edges[] = {0x7e00, 0x7c01, 0xfd55, 0x7dff, 0x7c00, 0xfc00, 0x0000,
                                     0x8000, 0x0001, 0x83ff, 0x0400, 0x7bff, 0x3c00, 0x3c01};

/* Every slot of t's buffer: half awkward values, half raw bits. */
static void fill_bits(host_tensor &t, rng &r) {
  int64_t n = t.slots();
  for (int64_t i = 0; i < n; i++) {
    bool edge = r.range(0, 1);
    uint64_t bits = r.next();
    if (t.v.dtype == MX_F32)
      ((uint32_t *)t.store.data())[i] = edge ? f32_edges[r.range(0, sizeof f32_edges / 4 - 1)] : (uint32_t)bits;
    else if (t.v.dtype == MX_BF16)
      ((uint16_t *)t.store.data())[i] = edge ? bf16_edges[r.range(0, sizeof bf16_edges / 2 - 1)] : (uint16_t)bits;
    else
      ((uint16_t *)t.store.data())[i] = edge ? f16_edges[r.range(0, sizeof f16_edges / 2 - 1)] : (uint16_t)bits;
  }
}

/* A float NaN's bits with the quiet bit set (the top bit of the mantissa);
 * any other value's unchanged. */
static uint64_t quieted(uint64_t bits, mx_dtype dtype) {
  int mantissa = dtype == MX_F32 ? 23 : dtype == MX_F16 ? 10 : 7;
  int exponent = dtype == MX_F16 ? 5 : 8;
  uint64_t exp_mask = ((1ull << exponent) - 1) << mantissa, man_mask = (1ull << mantissa) - 1;
  bool nan = (bits & exp_mask) == exp_mask && (bits & man_mask) != 0;
  return nan ? bits | 1ull << (mantissa - 1) : bits;
}

/* cpu's and grid's buffers bit for bit, NaN payloads included, except that
 * a signalling NaN may come out quiet on either side: the CPU's own paths
 * differ there (its dense rows keep one, its strided path's trip through
 * double quiets it), so the fast paths are held to the payload. */
static bool same_bits(const host_tensor &cpu, const host_tensor &grid, const char *what) {
  int64_t n = cpu.slots(), bytes = dtype_bytes(cpu.v.dtype);
  for (int64_t i = 0; i < n; i++) {
    uint64_t a = load_bits((const char *)cpu.store.data() + i * bytes, bytes);
    uint64_t b = load_bits((const char *)grid.store.data() + i * bytes, bytes);
    if (quieted(a, cpu.v.dtype) != quieted(b, cpu.v.dtype))
      return check(false, "%s: slot %lld of %lld (%s): CPU bits %#llx, host grid %#llx", what,
                   (long long)(i - cpu.start), (long long)n, mx_dtype_name(cpu.v.dtype), (unsigned long long)a,
                   (unsigned long long)b);
  }
  return true;
}

/* The shapes and layouts that flatten to contiguous 1-d: 0 to 4 dims
 * row-major, or 4 dims channels-last on every operand. */
struct dense_case {
  int ndim;
  int64_t shape[4];
  layout how;
};

static dense_case pick_case(rng &r) {
  dense_case c;
  c.ndim = (int)r.range(0, 4);
  random_shape(r, c.ndim, c.ndim == 1 ? 3000 : 9, 10, c.shape);
  c.how = c.ndim == 4 && r.range(0, 1) ? CHANNELS_LAST : CONTIGUOUS;
  return c;
}

/* An input of the case; one time in four a single element broadcast over it. */
static host_tensor dense_input(mx_dtype dtype, const dense_case &c, rng &r) {
  host_tensor t = make_tensor(dtype, c.ndim, c.shape, c.how, r);
  if (r.range(0, 3) == 0)
    for (int d = 0; d < c.ndim; d++) t.v.strides[d] = 0;
  fill_bits(t, r);
  return t;
}

void test_fast_paths(rng &r) {
  for (int round = 0; round < rounds(16); round++) {
    for (mx_dtype out_dtype : fast_dtypes)
      for (mx_dtype src_dtype : fast_dtypes) {
        pick_grid_cap(r);
        dense_case c = pick_case(r);
        describe("fast convert %s to %s, %d dims, layout %d", mx_dtype_name(src_dtype), mx_dtype_name(out_dtype),
                 c.ndim, c.how);
        host_tensor src = dense_input(src_dtype, c, r);
        host_tensor a = make_tensor(out_dtype, c.ndim, c.shape, c.how, r), b;
        fill_bits(a, r);
        b = a;
        check_status(cpu.convert(&a.v, &src.v), mx__cuda_convert(&b.v, &src.v), "convert");
        same_bits(a, b, "convert");
      }
    /* NaN payloads through arithmetic depend on the operand order the
     * compiler picks, so the elementwise ops match NaN with any NaN */
    for (mx_dtype dtype : fast_dtypes) {
      for (int code = 0; code < MX_UN_COUNT; code++) {
        pick_grid_cap(r);
        dense_case c = pick_case(r);
        describe("fast unary %d on %s, %d dims, layout %d", code, mx_dtype_name(dtype), c.ndim, c.how);
        host_tensor in = dense_input(dtype, c, r), a = make_tensor(dtype, c.ndim, c.shape, c.how, r), b;
        fill_bits(a, r);
        b = a;
        double lo = r.range(-3, 3) + 0.5 * r.range(0, 1), hi = lo + r.range(0, 4);
        check_status(cpu.unary(code, &a.v, &in.v, lo, hi), mx__cuda_unary(code, &b.v, &in.v, lo, hi), "unary");
        same_values(a, b, 0, 0, "unary");
      }
      for (int code = 0; code < MX_BIN_EQ; code++) {
        pick_grid_cap(r);
        dense_case c = pick_case(r);
        describe("fast binary %d on %s, %d dims, layout %d", code, mx_dtype_name(dtype), c.ndim, c.how);
        host_tensor x = dense_input(dtype, c, r), y = dense_input(dtype, c, r);
        host_tensor a = make_tensor(dtype, c.ndim, c.shape, c.how, r), b;
        fill_bits(a, r);
        b = a;
        double alpha = r.range(-2, 2) + 0.25 * r.range(0, 3);
        check_status(cpu.binary(code, &a.v, &x.v, &y.v, alpha), mx__cuda_binary(code, &b.v, &x.v, &y.v, alpha),
                     "binary");
        same_values(a, b, 0, 0, "binary");
      }
    }
  }
}
