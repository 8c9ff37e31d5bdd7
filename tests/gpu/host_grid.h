/* What the host-run CUDA kernel tests share (tests/gpu/test_host_grid*.cu):
 * the kernel files are built into the test with MX_CUDA_HOST_GRID, so their
 * entry points run the very kernel bodies on the CPU over a simulated grid
 * (kernels/cuda/host_grid.h), and each result is compared with the CPU
 * backend's on the same inputs. Views live in host buffers of their own.
 *
 * Covered, through the CUDA entry points (host set-up, chunking into
 * launches, grid-stride loops under grid caps of 1 to 7 blocks and none,
 * tails, strides, broadcasts, empty views): fill, convert, random,
 * bernoulli (fill.cu); unary, binary, where (elementwise.cu), and the
 * typed fast paths of convert, unary and binary (bit patterns); gather,
 * index_select, scatter(_add), index_add/index_copy with their bad-index
 * report (indexing.cu); amp_unscale over several 20-gradient launches and
 * amp_update_scale (amp.cu); amp_histogram and amp_unscale_histogram,
 * whose blocks count in a simulated shared memory (amp_hist.cu); sgd_step
 * and adam_step over several 11-parameter launches, with their step counts
 * (optim.cu); reduce, as a block reduction over a simulated shared memory,
 * and scan (reduce.cu); sort; softmax; channel_affine and channel_combine
 * (their typed 32-bit kernels, and their general ones under a lowered
 * 32-bit bound) and channel_sums, whose per-run partials are a block
 * reduction, with and without the fused relu and relu-backward mask, and
 * channel_moments (batch_norm.cu);
 * batch_norm_vectors (batch_norm_vectors.cu); max and
 * average pooling and their backward kernels (pool.cu); the direct
 * convolution kernels, forward and both backward (conv.cu, cuDNN made to
 * decline); the integer matmul's reference kernel (matmul.cu); cross_entropy
 * and its backward (cross_entropy.cu). Bit for bit
 * with the CPU backend, except float sums that add in another order
 * (reduce, channel_sums on awkward values) and float32 softmax and
 * cross_entropy (the CPU's vectorised exp), within rounding.
 *
 * Not covered: what only a GPU runs — cuBLAS/cuBLASLt matmuls (every float
 * dtype), cuDNN convolutions (conv_cudnn.cu), memory, copies and
 * initialisation (backend.cu), the matmul's empty-K memset; and of the
 * kernels the device-only parts: the __global__ wrappers, real atomics
 * (plain read-modify-writes on the host, where one thread runs at a time),
 * __syncthreads (a block's threads run one after another between barriers,
 * so a missing barrier or a race cannot show here: compute-sanitizer's
 * racecheck on a GPU covers that), launch limits and stream order. */
#ifndef MX_TESTS_GPU_HOST_GRID_H
#define MX_TESTS_GPU_HOST_GRID_H

#include <stdint.h>

#include <vector>

#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"

/* splitmix64: a seeded, reproducible stream. */
struct rng {
  uint64_t state;
  uint64_t next();
  int64_t range(int64_t lo, int64_t hi); /* uniform in [lo, hi] */
  double unit();                         /* uniform in [0, 1) */
};

/* How a view lays its elements out in its buffer. */
enum layout {
  CONTIGUOUS, /* row-major */
  PERMUTED,   /* column-major: every dim strided */
  GAPPED,     /* row-major with every stride doubled, starting one element in */
  CHANNELS_LAST, /* 4 dims: (N, C, H, W) laid out (N, H, W, C); row-major otherwise */
  BROADCAST,  /* row-major with some dims of stride 0 (inputs only) */
  LAYOUT_COUNT
};

/* What values a buffer is filled with. */
enum value_kind {
  AWKWARD,   /* scales from 1e-4 to 1e5, NaN, infinities, signed zeros, subnormals, ties */
  SMALL_INT, /* integers in [-2, 2]: sums and products exact in any order */
  POSITIVE,  /* in (0.01, 4) */
};

/* A view on a zeroed buffer of its own; copies get their own buffer. */
struct host_tensor {
  std::vector<uint64_t> store;
  int64_t start = 0; /* element 0's position in the buffer, in elements */
  mx_kview v;
  host_tensor() : v() {}
  host_tensor(const host_tensor &o) : store(o.store), start(o.start), v(o.v) { rebase(); }
  host_tensor &operator=(const host_tensor &o) {
    store = o.store, start = o.start, v = o.v;
    rebase();
    return *this;
  }
  void rebase() { v.data = (char *)store.data() + start * dtype_bytes(v.dtype); }
  int64_t slots() const { return (int64_t)(store.size() * 8) / dtype_bytes(v.dtype); } /* elements the buffer holds */
  int64_t numel() const { return mx__kview_numel(&v); }
};

host_tensor make_tensor(mx_dtype dtype, int ndim, const int64_t *shape, layout how, rng &r);
/* Every slot of t's buffer (gaps included) filled with values of the kind. */
void fill_values(host_tensor &t, value_kind kind, rng &r);
/* ndim dims of 1 to max_size, a 0 among them with 1 chance in zero_odds. */
void random_shape(rng &r, int ndim, int64_t max_size, int zero_odds, int64_t *shape);
/* One of the awkward values. */
double awkward_value(rng &r);

/* The grid cap the launches see (mx__cuda_max_blocks): small caps make the
 * grid-stride loops wrap; a random one of 1, 2, 3, 7 blocks or no cap. */
extern int host_grid_cap;
void pick_grid_cap(rng &r);
/* Elementwise kernels index in 32 bits up to this many elements (common.cuh's index32_fits): INT32_MAX, or lower
 * for a case that runs their general kernels. */
extern int64_t host_grid_index32_limit;

/* What the current case is (printed with its failures), printf-style. */
void describe(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Counts a failure and prints it with the case when !ok. */
bool check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The status of both runs: equal, and MX_OK unless errors_expected. */
extern bool errors_expected;
bool check_status(mx_status cpu, mx_status grid, const char *what);
/* cpu's and grid's buffers, slot by slot: the same bits (NaN matching any
 * NaN), or with rel > 0 within rel of the larger magnitude (or of floor). */
bool same_values(const host_tensor &cpu, const host_tensor &grid, double rel, double floor, const char *what);
/* rel for a few units in the last place of a float dtype. */
double ulps(mx_dtype dtype, double n);

/* MX_TEST_QUICK set (the sanitizer and valgrind runs): fewer cases. */
int rounds(int full);
int failures(void);

extern const mx_dtype every_dtype[8];
extern const mx_dtype float_dtypes[4];

/* The test files' cases. */
void test_fill_convert_random(rng &r);
void test_fast_paths(rng &r);
void test_elementwise(rng &r);
void test_indexing(rng &r);
void test_amp(rng &r);
void test_optim(rng &r);
void test_reduce_scan_sort(rng &r);
void test_softmax(rng &r);
void test_cross_entropy(rng &r);
void test_batch_norm(rng &r);
void test_batch_norm_vectors(rng &r);
void test_pool(rng &r);
void test_pool_planar(rng &r);
void test_conv_matmul(rng &r);
void test_batch_norm_elementwise(rng &r);

#endif
