/* What every CUDA kernel file shares: the backend's stream, element access
 * on strided views, 32-bit division by invariant integers and typed float
 * storage for the fast kernels, and the launchers: grid-stride elementwise,
 * one functor per thread, block reductions through shared memory. The kernel bodies are
 * MX_HD functors, so that with MX_CUDA_HOST_GRID defined (the host-run tests,
 * tests/gpu/test_host_grid.cu) the same bodies run on the CPU over a
 * simulated grid (kernels/cuda/host_grid.h) instead of the GPU. */
#ifndef MX_KERNELS_CUDA_COMMON_CUH
#define MX_KERNELS_CUDA_COMMON_CUH

#include <cuda_runtime.h>
#include <initializer_list>
#include <type_traits>

#include "kernels/backend.h"
#include "kernels/base_internal.h"
#include "kernels/cuda/check.h"
#include "kernels/math.h"

/* The bytes a kernel's arguments may take, which bound how many tensors a
 * multi-tensor launch (PyTorch's multi_tensor_apply way: the list travels
 * in the arguments) can carry: 32,764 since CUDA 12.1 on Volta and later,
 * 4 KiB before. Taken from CUDA 13 on: its drivers all have it and it
 * builds for nothing older than Turing, where a CUDA 12 program may meet a
 * driver from before 12.1 (PyTorch gates it at CUDA 13 the same way). */
#if __CUDACC_VER_MAJOR__ >= 13
#define MX_CUDA_PARAM_BYTES 32764
#else
#define MX_CUDA_PARAM_BYTES 4096
#endif

/* Tensors per launch of the multi-tensor kernels (amp.cu's unscale, optim.cu's
 * steps): as many of each one's entries as fit beside its fixed part. Each
 * file's static_assert checks the whole argument against MX_CUDA_PARAM_BYTES. */
#define MX_CUDA_UNSCALE_PER_LAUNCH ((int)((MX_CUDA_PARAM_BYTES - 128) / (sizeof(mx_kview) + sizeof(int64_t))))
#define MX_CUDA_OPTIM_PER_LAUNCH                                                                                      \
  ((int)((MX_CUDA_PARAM_BYTES - 512) / (sizeof(mx_optim_item) + sizeof(int64_t) + sizeof(void *) + sizeof(mx_dtype))))

/* The stream every allocation, copy and kernel goes on, and the grid size
 * cap of the grid-stride loops (set up by the backend's initialisation). */
cudaStream_t mx__cuda_stream(void);
int mx__cuda_max_blocks(void);
/* cuBLAS's handle, bound to that stream. */
cublasHandle_t mx__cuda_blas(void);

/* The kernel files' entry points, which backend.cu puts in the vtable
 * (kernels/backend.h says what each computes). */
mx_status mx__cuda_fill(const mx_kview *out, double value);
mx_status mx__cuda_convert(const mx_kview *out, const mx_kview *src);
mx_status mx__cuda_random(const mx_kview *out, const mx_rand_params *params);
mx_status mx__cuda_bernoulli(const mx_kview *out, const mx_kview *p, const mx_rand_params *params);
mx_status mx__cuda_unary(int code, const mx_kview *out, const mx_kview *in, double a, double b);
mx_status mx__cuda_binary(int code, const mx_kview *out, const mx_kview *x, const mx_kview *y, double alpha);
mx_status mx__cuda_where(const mx_kview *out, const mx_kview *cond, const mx_kview *x, const mx_kview *y);
mx_status mx__cuda_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask);
mx_status mx__cuda_scan(int code, const mx_kview *out, const mx_kview *in, int dim, bool reverse);
mx_status mx__cuda_sort(const mx_kview *values, const mx_kview *indices, const mx_kview *in, int dim, bool descending);
mx_status mx__cuda_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b);
/* a @ b + bias (relu: relu of it) through cuBLASLt's BIAS (RELU_BIAS) epilogue; MX_NOT_SUPPORTED, no error set,
 * where it declines. */
mx_status mx__cuda_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu);
mx_status mx__cuda_softmax(const mx_kview *out, const mx_kview *x, int dim, bool log_softmax);
mx_status mx__cuda_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                 int64_t ignore_index, bool mean);
mx_status mx__cuda_cross_entropy_backward(const mx_kview *dx, const mx_kview *grad, const mx_kview *x,
                                          const mx_kview *target, int64_t ignore_index, bool mean);
mx_status mx__cuda_gather(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
mx_status mx__cuda_scatter(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, bool accumulate);
mx_status mx__cuda_index_select(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim);
mx_status mx__cuda_index_add(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, double alpha,
                             bool accumulate);
mx_status mx__cuda_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                const mx_conv_params *p);
mx_status mx__cuda_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                      const mx_conv_params *p);
mx_status mx__cuda_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                        const mx_conv_params *p);
mx_status mx__cuda_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                             const mx_kview *x, const mx_conv_params *p);
mx_status mx__cuda_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                                  const mx_kview *shift, const mx_kview *mask, bool relu);
mx_status mx__cuda_channel_sums(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                                const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask);
mx_status mx__cuda_channel_moments(const mx_kview *mean, const mx_kview *var, const mx_kview *x);
mx_status mx__cuda_channel_combine(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                                   const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                                   const mx_kview *a_mask);
mx_status mx__cuda_batch_norm_vectors(mx_bn_vectors_formula formula, const mx_bn_vectors *v);
mx_status mx__cuda_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x, const mx_pool_params *p);
mx_status mx__cuda_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                     const mx_pool_params *p);
mx_status mx__cuda_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *p);
mx_status mx__cuda_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *p);
mx_status mx__cuda_amp_unscale(int n, const mx_kview *grads, const float *scale, float *found_inf, int64_t *stats);
mx_status mx__cuda_amp_update_scale(float *scale, int32_t *growth_tracker, const float *found_inf,
                                    const mx_amp_update_params *p, int64_t *counters, const mx_amp_clear *clear);
mx_status mx__cuda_amp_histogram(const mx_kview *x, int64_t *hist);
mx_status mx__cuda_amp_unscale_histogram(int n, const mx_kview *grads, const float *scale, float *found_inf,
                                         int64_t *stats, int64_t *hist);
mx_status mx__cuda_sgd_step(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                            const float *grad_scale);
mx_status mx__cuda_adam_step(int n, const mx_optim_item *items, const mx_adam_hparams *h, const float *found_inf,
                             const float *grad_scale);

/* --- element access on the device ---------------------------------------------- */

/* Bytes per element (the same table as mx_dtype_size, usable on the device). */
MX_HD static inline int64_t dtype_bytes(mx_dtype dtype) {
  switch (dtype) {
#define MX__DTYPE_BYTES(name, ctype, size, str)                                                                        \
  case MX_##name:                                                                                                      \
    return size;
    MX_DTYPE_MAP(MX__DTYPE_BYTES)
#undef MX__DTYPE_BYTES
  default:
    return 0;
  }
}

/* The raw bits of one element of `bytes` bytes (1, 2, 4 or 8; views are
 * aligned to their element size), held in the low bytes of a uint64_t. */
MX_HD static inline uint64_t load_bits(const void *src, int64_t bytes) {
  switch (bytes) {
  case 1:
    return *(const uint8_t *)src;
  case 2:
    return *(const uint16_t *)src;
  case 4:
    return *(const uint32_t *)src;
  default:
    return *(const uint64_t *)src;
  }
}

MX_HD static inline void store_bits(void *dst, int64_t bytes, uint64_t bits) {
  switch (bytes) {
  case 1:
    *(uint8_t *)dst = (uint8_t)bits;
    break;
  case 2:
    *(uint16_t *)dst = (uint16_t)bits;
    break;
  case 4:
    *(uint32_t *)dst = (uint32_t)bits;
    break;
  default:
    *(uint64_t *)dst = bits;
    break;
  }
}

/* The address of the element with row-major linear index i of a view. */
MX_HD static inline char *element(const mx_kview &v, int64_t i) {
  return (char *)v.data + mx_strided_offset(i, v.ndim, v.shape, v.strides) * dtype_bytes(v.dtype);
}

/* A contiguous view as 1-d [numel] with stride 1: the same elements in the
 * same row-major order, one division per element instead of one per dim. */
static inline mx_kview flatten_if_contiguous(const mx_kview *v) {
  mx_kview f = *v;
  if (v->ndim > 1 && mx__kview_is_contiguous(v)) {
    f.ndim = 1;
    f.shape[0] = mx__kview_numel(v);
    f.strides[0] = 1;
  }
  return f;
}

/* A view whose elements fill one run of memory, row-major or channels-last,
 * as 1-d [numel] with stride 1: the same elements, in memory order rather
 * than the view's. Only for passes where each element's result depends on
 * nothing but its value (unscale, histograms): channels-last weights and
 * their gradients (mx_module_to_channels_last) take the dense path. */
static inline mx_kview flatten_if_dense(const mx_kview *v) {
  if (v->ndim == 4 && !mx__kview_is_contiguous(v) && mx__kview_is_channels_last(v)) {
    mx_kview f = *v;
    f.ndim = 1;
    f.shape[0] = mx__kview_numel(v);
    f.strides[0] = 1;
    return f;
  }
  return flatten_if_contiguous(v);
}

/* An elementwise kernel's operands (one shape; broadcast ones with stride
 * 0) as it indexes them, PyTorch's TensorIterator way: dims of size 1
 * dropped, the rest put in the first operand's (the output's) memory order,
 * largest stride first, then neighbouring dims merged wherever every
 * operand lies contiguous across them. Element i is the same logical
 * element in all, and neighbouring threads write neighbouring bytes of the
 * output whatever its layout: a channels-last copy of a row-major tensor
 * (cuDNN's KRSC filters) writes whole sectors instead of one value each.
 * Operands sharing one layout become 1-d: no division per element. */
static inline void flatten_operands(std::initializer_list<const mx_kview *> in, mx_kview *out) {
  const mx_kview *first = *in.begin();
  int order[MX_MAX_DIMS], ndim = 0; /* the kept dims, outermost first */
  for (int d = 0; d < first->ndim; d++)
    if (first->shape[d] != 1) order[ndim++] = d;
  for (int k = 1; k < ndim; k++) /* insertion sort: stable, strides descending */
    for (int j = k; j > 0 && first->strides[order[j - 1]] < first->strides[order[j]]; j--) {
      int d = order[j];
      order[j] = order[j - 1], order[j - 1] = d;
    }
  /* merge position k into k - 1 where every operand steps across them as one dim */
  bool merge[MX_MAX_DIMS] = {false};
  for (int k = 1; k < ndim; k++) {
    merge[k] = true;
    for (const mx_kview *v : in)
      merge[k] = merge[k] && v->strides[order[k - 1]] == v->strides[order[k]] * v->shape[order[k]];
  }
  for (const mx_kview *v : in) {
    *out = *v;
    out->ndim = 0;
    for (int k = 0; k < ndim; k++) {
      int64_t size = v->shape[order[k]], stride = v->strides[order[k]];
      if (merge[k]) {
        out->shape[out->ndim - 1] *= size;
        out->strides[out->ndim - 1] = stride;
      } else {
        out->shape[out->ndim] = size;
        out->strides[out->ndim++] = stride;
      }
    }
    out++;
  }
}

/* Which tensor of a multi-tensor chunk holds flat index i: the t with
 * start[t] <= i < start[t + 1], start being the n + 1 prefix sums of the
 * tensors' sizes. */
MX_HD static inline int chunk_tensor_of(const int64_t *start, int n, int64_t i) {
  int lo = 0, hi = n - 1;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (start[mid] <= i)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/* --- 32-bit indexing and typed storage: the elementwise fast paths ------------------ */

/* n / d for n < 2^31 by a multiply-high, an add and a shift (Granlund and
 * Montgomery's division by invariant integers, as PyTorch's IntDivider),
 * d (>= 1) known on the host: a 64-bit division is a long software routine
 * on the GPU, dozens of instructions, where this is three. */
struct divider {
  uint32_t d, magic, shift;
  MX_HD uint32_t quotient(uint32_t n) const {
#ifdef __CUDA_ARCH__
    uint32_t high = __umulhi(n, magic);
#else
    uint32_t high = (uint32_t)(((uint64_t)n * magic) >> 32);
#endif
    return (high + n) >> shift; /* no overflow: high <= n < 2^31 */
  }
};

static inline divider divider_of(int64_t d) {
  divider q = {(uint32_t)d, 0, 0};
  while ((1ull << q.shift) < (uint64_t)d) q.shift++;
  q.magic = (uint32_t)(((1ull << 32) * ((1ull << q.shift) - (uint64_t)d)) / (uint64_t)d + 1);
  return q;
}

/* A float dtype's storage and the type its values are computed in: float
 * for the 16-bit ones and float32 (every such value is exact there), double
 * for float64. store rounds as mx_element_store does (a NaN made quiet) and
 * store_relu as mx_element_store_relu (relu on the value as stored): given
 * a compute value r they store what those store given (double)r, since
 * (float)(double)r is r. A kernel templated on the dtype loads and stores
 * its values directly, without mx_element_load's switch per element. */
/* float16 conversions: on the device the hardware's cvt (no flush to zero:
 * this build passes no -ftz) for every value but NaN, kernels/math.h's
 * code otherwise. IEEE 754 defines one result for each value, so the bits
 * are math.h's; its code widens a zero or subnormal on another branch than
 * its neighbours, which a warp of ReLU's outputs takes both ways. A NaN
 * keeps math.h's code, which keeps its payload as the CPU's F16C does. */
MX_HD static inline float f16_to_f32(uint16_t h) {
#ifdef __CUDA_ARCH__
  if ((h & 0x7c00u) != 0x7c00u) { /* neither inf nor NaN */
    float f;
    asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"((unsigned short)h));
    return f;
  }
#endif
  return mx_f16_to_f32(h);
}

MX_HD static inline uint16_t f32_to_f16(float f) {
#ifdef __CUDA_ARCH__
  if ((mx_f32_bits(f) & 0x7fffffffu) <= 0x7f800000u) { /* not NaN */
    unsigned short h;
    asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f));
    return h;
  }
#endif
  return mx_f32_to_f16(f);
}

template <mx_dtype D> struct float_value;
template <> struct float_value<MX_F32> {
  typedef float storage, compute;
  MX_HD static float load(float v) { return v; }
  MX_HD static float store(float v) { return v; }
  MX_HD static float store_relu(float v) { return mx_relu_f32(v); }
};
template <> struct float_value<MX_F64> {
  typedef double storage, compute;
  MX_HD static double load(double v) { return v; }
  MX_HD static double store(double v) { return v; }
  MX_HD static double store_relu(double v) { return mx_relu_f64(v); }
};
template <> struct float_value<MX_BF16> {
  typedef uint16_t storage;
  typedef float compute;
  MX_HD static float load(uint16_t v) { return mx_bf16_to_f32(v); }
  MX_HD static uint16_t store(float v) { return mx_f32_to_bf16(v); }
  MX_HD static uint16_t store_relu(float v) { return mx_relu_half_bits(mx_f32_to_bf16(v), true); }
};
template <> struct float_value<MX_F16> {
  typedef uint16_t storage;
  typedef float compute;
  MX_HD static float load(uint16_t v) { return f16_to_f32(v); }
  MX_HD static uint16_t store(float v) { return f32_to_f16(v); }
  MX_HD static uint16_t store_relu(float v) { return mx_relu_half_bits(f32_to_f16(v), false); }
};

/* --- atomics: one thread at a time on the host grid, so plain there ------------------ */

MX_HD static inline void atomic_add_i64(int64_t *p, int64_t v) {
#ifdef __CUDA_ARCH__
  atomicAdd((unsigned long long *)p, (unsigned long long)v);
#else
  *p += v;
#endif
}

/* *p = v; returns the old value. */
MX_HD static inline int atomic_exchange_int(int *p, int v) {
#ifdef __CUDA_ARCH__
  return atomicExch(p, v);
#else
  int old = *p;
  *p = v;
  return old;
#endif
}

/* A 32-bit counter in shared memory. */
MX_HD static inline void atomic_add_u32(unsigned *p, unsigned v) {
#ifdef __CUDA_ARCH__
  atomicAdd(p, v);
#else
  *p += v;
#endif
}

/* --- the launchers ------------------------------------------------------------------ */

#define THREADS_PER_BLOCK 256

/* One thread's place in its grid (1-d grids and blocks). */
struct grid_pos {
  int64_t block, thread, blocks, threads;
};

/* op(i) for this thread's linear indices i in [0, n), grid-stride. */
template <class Op> MX_HD static inline void grid_stride(const grid_pos &at, int64_t n, const Op &op) {
  int64_t step = at.threads * at.blocks;
  for (int64_t i = at.block * at.threads + at.thread; i < n; i += step) op(i);
}

/* The blocks of THREADS_PER_BLOCK threads that cover n, at most the cap. */
static inline int64_t grid_blocks(int64_t n) {
  int64_t blocks = (n + THREADS_PER_BLOCK - 1) / THREADS_PER_BLOCK;
  return blocks > mx__cuda_max_blocks() ? mx__cuda_max_blocks() : blocks;
}

/* A block reduction's body, for launch_block_reduce below:
 *   typedef ... partial;                         what a thread accumulates
 *   int64_t items;                               one block reduces one item at a time
 *   partial thread_partial(item, thread, threads) const;   the thread's own part of the item
 *   partial combine(partial a, partial b) const; a (lower threads) with b
 *   void finish(item, partial all) const;        stores the item's result
 * The threads' partials are combined by a tree in shared memory: at each
 * step thread t < half combines its slot with slot t + half.
 * With LANES > 1 (a power of two, at most the block's threads) the tree
 * stops at half == LANES, so it combines only threads of the same lane
 * (thread % LANES), and each lane's partial is stored by
 *   void finish(item, unsigned lane, partial all) const;
 * a body that gives each lane its own output (one per channel of a tile of
 * neighbouring channels) has neighbouring threads read neighbouring values. */

/* A block-counting body, for launch_block_counts below: each block's
 * threads count into the block's shared memory, then add the counts to
 * global memory, in three phases between barriers:
 *   typedef ... shared;                               the block's counters
 *   void clear(shared &s, const grid_pos &at) const;  zeroes this thread's share of s
 *   void count(shared &s, const grid_pos &at) const;  this thread's elements (atomic_add_u32 into s)
 *   void publish(const shared &s, const grid_pos &at) const;  this thread's share of s into global memory */

/* The block reduction's store of lane `lane`'s partial (see above). */
template <unsigned LANES, class Body>
MX_HD static inline void finish_lane(const Body &body, int64_t item, unsigned lane, const typename Body::partial &all) {
  static_assert(LANES > 0 && (LANES & (LANES - 1)) == 0, "a block reduction's lanes are a power of two");
  if constexpr (LANES == 1)
    body.finish(item, all);
  else
    body.finish(item, lane, all);
}

#ifdef MX_CUDA_HOST_GRID
#include "kernels/cuda/host_grid.h"
#else

/* Whether an elementwise kernel over n elements may index them in 32 bits
 * (divider's n < 2^31). */
static inline bool index32_fits(int64_t n) { return n <= INT32_MAX; }

__device__ static inline grid_pos device_pos() {
  grid_pos at = {blockIdx.x, threadIdx.x, gridDim.x, blockDim.x};
  return at;
}

/* op carries its views (mx_kview) by value in the kernel's argument. */
template <class Op> __global__ void elementwise_kernel(int64_t n, Op op) { grid_stride(device_pos(), n, op); }

/* op(i) for every linear index i in [0, n). */
template <class Op> static inline mx_status launch_elementwise(const char *what, int64_t n, Op op) {
  if (n <= 0) return MX_OK; /* an empty grid is an invalid configuration */
  elementwise_kernel<<<(unsigned)grid_blocks(n), THREADS_PER_BLOCK, 0, mx__cuda_stream()>>>(n, op);
  MX_CUDA_CHECK_LAUNCH(what);
  return MX_OK;
}

/* The body stays in the parameter space (__grid_constant__: no per-thread
 * copy of a large body, such as a multi-tensor chunk, for the indexing). */
template <class Body> __global__ void thread_kernel(const __grid_constant__ Body body) { body(device_pos()); }

/* body(pos) on each thread of blocks x threads. */
template <class Body>
static inline mx_status launch_threads(const char *what, int64_t blocks, int64_t threads, const Body &body) {
  thread_kernel<<<(unsigned)blocks, (unsigned)threads, 0, mx__cuda_stream()>>>(body);
  MX_CUDA_CHECK_LAUNCH(what);
  return MX_OK;
}

/* Block b reduces items b, b + blocks, ...; threads a power of two of at
 * most MAX_THREADS and at least LANES. */
template <unsigned MAX_THREADS, unsigned LANES, class Body> __global__ void block_reduce_kernel(Body body) {
  __shared__ typename Body::partial parts[MAX_THREADS];
  for (int64_t item = blockIdx.x; item < body.items; item += gridDim.x) {
    parts[threadIdx.x] = body.thread_partial(item, threadIdx.x, blockDim.x);
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half >= LANES; half /= 2) {
      if (threadIdx.x < half) parts[threadIdx.x] = body.combine(parts[threadIdx.x], parts[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x < LANES) finish_lane<LANES>(body, item, threadIdx.x, parts[threadIdx.x]);
    __syncthreads(); /* parts is reused for the next item */
  }
}

template <unsigned MAX_THREADS, unsigned LANES = 1, class Body>
static inline mx_status launch_block_reduce(const char *what, int64_t blocks, unsigned threads, const Body &body) {
  static_assert(LANES <= MAX_THREADS, "a block reduction has at least one thread a lane");
  block_reduce_kernel<MAX_THREADS, LANES><<<(unsigned)blocks, threads, 0, mx__cuda_stream()>>>(body);
  MX_CUDA_CHECK_LAUNCH(what);
  return MX_OK;
}

template <class Body> __global__ void block_counts_kernel(const __grid_constant__ Body body) {
  __shared__ typename Body::shared s;
  grid_pos at = device_pos();
  body.clear(s, at);
  __syncthreads();
  body.count(s, at);
  __syncthreads();
  body.publish(s, at);
}

template <class Body>
static inline mx_status launch_block_counts(const char *what, int64_t blocks, int64_t threads, const Body &body) {
  block_counts_kernel<<<(unsigned)blocks, (unsigned)threads, 0, mx__cuda_stream()>>>(body);
  MX_CUDA_CHECK_LAUNCH(what);
  return MX_OK;
}

/* --- scratch memory from the stream's pool -------------------------------------------- */

static inline mx_status scratch_alloc(void **p, size_t bytes) {
  return MX_CUDA_STATUS(cudaMallocAsync(p, bytes, mx__cuda_stream()));
}

static inline mx_status scratch_free(void *p) { return MX_CUDA_STATUS(cudaFreeAsync(p, mx__cuda_stream())); }

static inline mx_status scratch_zero(void *p, size_t bytes) {
  return MX_CUDA_STATUS(cudaMemsetAsync(p, 0, bytes, mx__cuda_stream()));
}

/* Copies bytes of scratch to host memory, waiting for the stream. */
static inline mx_status scratch_read(void *host, const void *p, size_t bytes) {
  mx_status status = MX_CUDA_STATUS(cudaMemcpyAsync(host, p, bytes, cudaMemcpyDeviceToHost, mx__cuda_stream()));
  return status == MX_OK ? MX_CUDA_STATUS(cudaStreamSynchronize(mx__cuda_stream())) : status;
}

#endif

/* --- elementwise ops with several loads in flight a thread ------------------------- */

/* Elements a thread of an unrolled launch takes. One 2-byte load in flight
 * a thread leaves memory latency, not bandwidth, as the bound: the H100
 * profile of ResNet-9 showed batch norm's 16-bit elementwise kernels slower
 * than their float32 twins, which move twice the bytes. */
#define UNROLL 4

/* An op that splits its element's work in two, so that a thread issues the
 * loads of UNROLL elements before it stores any (the stores might alias
 * the loads, so the compiler cannot hoist them itself):
 *   typedef ... loaded;                                  what an element reads
 *   MX_HD loaded load(int64_t i) const;
 *   MX_HD void store(int64_t i, const loaded &v) const;  computes and stores element i
 * Group g takes elements THREADS_PER_BLOCK apart in a tile of
 * THREADS_PER_BLOCK * UNROLL, so that a warp's k-th loads read neighbouring
 * elements (PyTorch's unrolled_elementwise_kernel). */
template <class Op> struct unrolled_op {
  Op op;
  int64_t n;
  MX_HD void operator()(int64_t g) const {
    int64_t first = g / THREADS_PER_BLOCK * (THREADS_PER_BLOCK * UNROLL) + g % THREADS_PER_BLOCK;
    typename Op::loaded v[UNROLL] = {};
    for (int k = 0; k < UNROLL; k++)
      if (first + k * THREADS_PER_BLOCK < n) v[k] = op.load(first + k * THREADS_PER_BLOCK);
    for (int k = 0; k < UNROLL; k++)
      if (first + k * THREADS_PER_BLOCK < n) op.store(first + k * THREADS_PER_BLOCK, v[k]);
  }
};

template <class Op> static inline mx_status launch_unrolled(const char *what, int64_t n, const Op &op) {
  int64_t tiles = (n + THREADS_PER_BLOCK * UNROLL - 1) / (THREADS_PER_BLOCK * UNROLL);
  unrolled_op<Op> u = {op, n};
  return launch_elementwise(what, tiles * THREADS_PER_BLOCK, u);
}

/* An op with a `loaded` type goes unrolled, any other one element a thread. */
template <class Op, class = void> struct splits_loads : std::false_type {};
template <class Op> struct splits_loads<Op, std::void_t<typename Op::loaded>> : std::true_type {};

template <class Op> static inline mx_status launch_op(const char *what, int64_t n, const Op &op) {
  if constexpr (splits_loads<Op>::value) return launch_unrolled(what, n, op);
  else return launch_elementwise(what, n, op);
}

/* Op<dtype> over n elements, each field set by init(op) (a generic lambda,
 * so one body serves every dtype's storage type); dtype a float one. */
template <template <mx_dtype> class Op, class Init>
static mx_status launch_typed(const char *what, mx_dtype dtype, int64_t n, const Init &init) {
  switch (dtype) {
  case MX_F32: {
    Op<MX_F32> op;
    init(op);
    return launch_op(what, n, op);
  }
  case MX_F64: {
    Op<MX_F64> op;
    init(op);
    return launch_op(what, n, op);
  }
  case MX_BF16: {
    Op<MX_BF16> op;
    init(op);
    return launch_op(what, n, op);
  }
  default: {
    Op<MX_F16> op;
    init(op);
    return launch_op(what, n, op);
  }
  }
}

#endif
