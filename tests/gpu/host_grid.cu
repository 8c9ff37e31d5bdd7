/* The host-run kernel tests' shared part (tests/gpu/host_grid.h) and their
 * main: each group of cases on seeded random shapes, exit status 1 on any
 * failure. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda/graph.h"
#include "tests/gpu/host_grid.h"

const mx_dtype every_dtype[8] = {MX_F32, MX_F64, MX_F16, MX_BF16, MX_I64, MX_I32, MX_U8, MX_BOOL};
const mx_dtype float_dtypes[4] = {MX_F32, MX_F64, MX_F16, MX_BF16};

int host_grid_cap = 65535;
int64_t host_grid_index32_limit = INT32_MAX;

/* The launchers' grid cap: host_grid_cap, which the cases vary. */
int mx__cuda_max_blocks(void) { return host_grid_cap; }

/* matmul.cu's cuBLAS path names them; the tests take its reference kernel
 * only (integer dtypes), which runs on the host grid. */
cudaStream_t mx__cuda_stream(void) { return NULL; }
cublasHandle_t mx__cuda_blas(void) { return NULL; }

/* indexing.cu asks before it reads its bad-index slot back: nothing is
 * captured here */
bool mx__cuda_capturing(void) { return false; }

uint64_t rng::next() {
  uint64_t z = (state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

int64_t rng::range(int64_t lo, int64_t hi) { return lo + (int64_t)(next() % (uint64_t)(hi - lo + 1)); }

double rng::unit() { return (double)(next() >> 11) * 0x1p-53; }

void pick_grid_cap(rng &r) {
  static const int caps[] = {1, 2, 3, 7, 65535};
  host_grid_cap = caps[r.range(0, 4)];
}

void random_shape(rng &r, int ndim, int64_t max_size, int zero_odds, int64_t *shape) {
  for (int d = 0; d < ndim; d++) shape[d] = r.range(1, max_size);
  if (ndim > 0 && zero_odds > 0 && r.range(1, zero_odds) == 1) shape[r.range(0, ndim - 1)] = 0;
}

host_tensor make_tensor(mx_dtype dtype, int ndim, const int64_t *shape, layout how, rng &r) {
  host_tensor t;
  t.v.dtype = dtype;
  t.v.ndim = ndim;
  int64_t row_major = 1, col_major = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t.v.shape[d] = shape[d];
    t.v.strides[d] = row_major;
    row_major *= shape[d] > 0 ? shape[d] : 1;
  }
  if (how == PERMUTED)
    for (int d = 0; d < ndim; d++) t.v.strides[d] = col_major, col_major *= shape[d] > 0 ? shape[d] : 1;
  if (how == CHANNELS_LAST && ndim == 4) {
    int64_t dims[4] = {shape[0], shape[1], shape[2], shape[3]};
    mx__channels_last_strides(dims, t.v.strides);
  }
  if (how == GAPPED) {
    t.start = 1;
    for (int d = 0; d < ndim; d++) t.v.strides[d] *= 2;
  }
  if (how == BROADCAST)
    for (int d = 0; d < ndim; d++)
      if (r.range(0, 1)) t.v.strides[d] = 0;
  int64_t span = 1;
  for (int d = 0; d < ndim; d++) span += (shape[d] > 0 ? shape[d] - 1 : 0) * t.v.strides[d];
  int64_t bytes = (t.start + span + 1) * dtype_bytes(dtype);
  t.store.assign((size_t)(bytes + 7) / 8, 0);
  t.rebase();
  return t;
}

double awkward_value(rng &r) {
  switch (r.range(0, 15)) {
  case 0: return NAN;
  case 1: return r.range(0, 1) ? INFINITY : -INFINITY;
  case 2: return r.range(0, 1) ? 0.0 : -0.0;
  case 3: return (r.range(0, 1) ? 1 : -1) * 3e-8 * r.unit();                /* float16 subnormal, or zero */
  case 4: return (r.range(0, 1) ? 1 : -1) * (65504.0 + 16 * r.range(0, 2)); /* float16's overflow edge */
  case 5: return 1.0 + 0x1p-11 * (double)r.range(0, 3);                     /* float16 ties */
  case 6: return (double)r.range(-300, 300);
  default: return (r.range(0, 1) ? 1 : -1) * pow(10.0, -4 + 9 * r.unit());
  }
}

void fill_values(host_tensor &t, value_kind kind, rng &r) {
  int64_t n = t.slots(), bytes = dtype_bytes(t.v.dtype);
  char *base = (char *)t.store.data();
  for (int64_t i = 0; i < n; i++) {
    char *p = base + i * bytes;
    if (t.v.dtype == MX_BOOL) {
      *(bool *)p = r.range(0, 1);
    } else if (t.v.dtype == MX_I64 && kind == AWKWARD) {
      int64_t edges[] = {INT64_MIN, INT64_MAX, 0, -1};
      *(int64_t *)p = r.range(0, 7) == 0 ? edges[r.range(0, 3)] : r.range(-1000000, 1000000);
    } else if (!mx_dtype_floating(t.v.dtype) && kind == AWKWARD) {
      mx_element_store(p, t.v.dtype, (double)r.range(-300, 300));
    } else {
      double v = kind == SMALL_INT ? (double)r.range(-2, 2) : kind == POSITIVE ? 0.01 + 4 * r.unit() : awkward_value(r);
      mx_element_store(p, t.v.dtype, v);
    }
  }
}

static char case_text[512];
static int failure_count, comparisons;
bool errors_expected;

void describe(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(case_text, sizeof case_text, fmt, ap);
  va_end(ap);
}

bool check(bool ok, const char *fmt, ...) {
  if (ok) return true;
  if (failure_count++ < 40) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "FAIL [%s, grid cap %d]: ", case_text, host_grid_cap);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
  }
  return false;
}

bool check_status(mx_status cpu, mx_status grid, const char *what) {
  return check(cpu == grid && (cpu == MX_OK || errors_expected), "%s: the CPU gave %s, the host grid %s (%s)", what,
               mx_status_str(cpu), mx_status_str(grid), mx_last_error());
}

double ulps(mx_dtype dtype, double n) {
  switch (dtype) {
  case MX_F64: return n * 0x1p-52;
  case MX_F16: return n * 0x1p-10;
  case MX_BF16: return n * 0x1p-7;
  default: return n * 0x1p-23;
  }
}

bool same_values(const host_tensor &cpu, const host_tensor &grid, double rel, double floor, const char *what) {
  comparisons++;
  if (!check(cpu.store.size() == grid.store.size(), "%s: buffers of %zu and %zu words", what, cpu.store.size(),
             grid.store.size()))
    return false;
  int64_t n = cpu.slots(), bytes = dtype_bytes(cpu.v.dtype);
  const char *a = (const char *)cpu.store.data(), *b = (const char *)grid.store.data();
  bool floating = mx_dtype_floating(cpu.v.dtype);
  for (int64_t i = 0; i < n; i++) {
    const char *pa = a + i * bytes, *pb = b + i * bytes;
    if (!memcmp(pa, pb, (size_t)bytes)) continue;
    double x = mx_element_load(pa, cpu.v.dtype), y = mx_element_load(pb, cpu.v.dtype);
    if (floating && isnan(x) && isnan(y)) continue;
    double scale = fmax(fmax(fabs(x), fabs(y)), floor);
    if (floating && rel > 0 && !isnan(x) && !isnan(y) && !isinf(x) && !isinf(y) && fabs(x - y) <= rel * scale) continue;
    return check(false, "%s: slot %lld of %lld (%s) differs: CPU %.17g, host grid %.17g", what,
                 (long long)(i - cpu.start), (long long)n, mx_dtype_name(cpu.v.dtype), x, y);
  }
  return true;
}

int rounds(int full) {
  const char *q = getenv("MX_TEST_QUICK");
  bool quick = q && *q && strcmp(q, "0") != 0;
  return quick ? (full + 3) / 4 : full;
}

int failures(void) { return failure_count; }

int main(void) {
  rng r = {20261126};
  test_fill_convert_random(r);
  test_elementwise(r);
  test_indexing(r);
  test_amp(r);
  test_optim(r);
  test_reduce_scan_sort(r);
  test_softmax(r);
  test_batch_norm(r);
  test_batch_norm_vectors(r);
  test_pool(r);
  test_pool_planar(r);
  test_conv_matmul(r);
  test_batch_norm_elementwise(r);
  test_fast_paths(r);
  test_cross_entropy(r); /* last: the earlier groups keep their random cases */
  if (failure_count)
    fprintf(stderr, "%d failures\n", failure_count);
  else
    printf("host-run CUDA kernels: %d results agree with the CPU backend's\n", comparisons);
  return failure_count ? 1 : 0;
}
