/* Reductions and scans on CUDA, with the CPU's rules (kernels/cpu/reduce.c): floats
 * accumulate in double and integers in int64; max and min let NaN win and
 * keep the first extremum's index (row-major in the reduced sub-space).
 *
 * One block per output element: each thread reduces a contiguous chunk of
 * the reduced sub-space in order, then the block combines the threads'
 * partials. The combination compares indices, not positions, so a max or
 * min picks exactly the element the CPU's sequential walk picks; a float
 * sum adds in another order than the CPU's, in double.
 *
 * A scan runs the CPU's own line scan (kernels/scan_line.h), a thread per
 * line: the same bits as the CPU. Each line is walked in order by one
 * thread, so a scan of few long lines leaves most of the GPU idle; the
 * lines of a scan along a dim other than the last are neighbours in
 * memory, and their loads coalesce. */
#include "kernels/cuda/common.cuh"
#include "kernels/reduce_plan.h"
#include "kernels/scan_line.h"

#define REDUCE_THREADS 128

/* A partial result over some elements of one output's sub-space. */
struct partial {
  double value; /* floats, and the comparisons of every dtype */
  int64_t ivalue;
  int64_t index; /* max/min: the chosen element's position */
  bool flag;     /* all/any */
  bool empty;    /* no element yet */
};

__device__ static partial empty_partial(int code) {
  partial p;
  p.value = p.ivalue = code == MX_RED_PROD ? 1 : 0;
  p.index = 0;
  p.flag = code == MX_RED_ALL;
  p.empty = true;
  return p;
}

/* Element k (value v, its int64 when the dtype is int64) folded into p, in
 * the CPU's reduce_one's terms. */
__device__ static void fold(int code, partial *p, double v, int64_t iv, bool integer, int64_t k) {
  switch (code) {
  case MX_RED_SUM:
    if (integer) p->ivalue = mx_wrap_add(p->ivalue, iv);
    else p->value += v;
    break;
  case MX_RED_PROD:
    if (integer) p->ivalue = mx_wrap_mul(p->ivalue, iv);
    else p->value *= v;
    break;
  case MX_RED_MAX:
  case MX_RED_MIN:
    if (p->empty || (!isnan(p->value) && (isnan(v) || (code == MX_RED_MAX ? v > p->value : v < p->value)))) {
      p->value = v;
      p->ivalue = iv;
      p->index = k;
    }
    break;
  case MX_RED_ALL: p->flag = p->flag && v != 0; break;
  case MX_RED_ANY: p->flag = p->flag || v != 0; break;
  }
  p->empty = false;
}

/* a and b over disjoint elements. For max/min: NaN wins, then the larger
 * (smaller) value, and among equals the lower index: what a walk in index
 * order keeps, whichever partial holds the lower indices. */
__device__ static partial combine(int code, partial a, partial b) {
  if (a.empty) return b;
  if (b.empty) return a;
  switch (code) {
  case MX_RED_SUM: a.value += b.value, a.ivalue = mx_wrap_add(a.ivalue, b.ivalue); break;
  case MX_RED_PROD: a.value *= b.value, a.ivalue = mx_wrap_mul(a.ivalue, b.ivalue); break;
  case MX_RED_MAX:
  case MX_RED_MIN: {
    bool a_nan = isnan(a.value), b_nan = isnan(b.value);
    bool take_b;
    if (a_nan || b_nan) take_b = b_nan && (!a_nan || b.index < a.index);
    else if (a.value == b.value) take_b = b.index < a.index;
    else take_b = code == MX_RED_MAX ? b.value > a.value : b.value < a.value;
    if (take_b) a = b;
    break;
  }
  case MX_RED_ALL: a.flag = a.flag && b.flag; break;
  case MX_RED_ANY: a.flag = a.flag || b.flag; break;
  }
  return a;
}

__global__ void reduce_kernel(int code, mx_reduce_plan p, mx_kview in, mx_kview out, bool has_out, mx_kview index,
                              bool has_index) {
  __shared__ partial parts[REDUCE_THREADS];
  bool integer = !mx_dtype_floating(in.dtype);
  int64_t chunk = (p.inner_numel + blockDim.x - 1) / blockDim.x;
  for (int64_t o = blockIdx.x; o < p.outputs; o += gridDim.x) {
    int64_t in_off = mx_strided_offset(o, p.n_outer, p.outer_shape, p.outer_in);
    partial mine = empty_partial(code);
    int64_t k0 = threadIdx.x * chunk, k1 = k0 + chunk < p.inner_numel ? k0 + chunk : p.inner_numel;
    for (int64_t k = k0; k < k1; k++) {
      const char *ptr = (const char *)in.data +
                        (in_off + mx_strided_offset(k, p.n_inner, p.inner_shape, p.inner_in)) * dtype_bytes(in.dtype);
      double v = mx_element_load(ptr, in.dtype);
      int64_t iv = in.dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v;
      fold(code, &mine, v, iv, integer, k);
    }
    parts[threadIdx.x] = mine;
    __syncthreads();
    for (unsigned half = blockDim.x / 2; half > 0; half /= 2) {
      if (threadIdx.x < half) parts[threadIdx.x] = combine(code, parts[threadIdx.x], parts[threadIdx.x + half]);
      __syncthreads();
    }
    if (threadIdx.x == 0) {
      partial r = parts[0];
      if (has_index)
        *((int64_t *)index.data + mx_strided_offset(o, p.n_outer, p.outer_shape, p.outer_idx)) = r.index;
      if (has_out) {
        char *dst = (char *)out.data + mx_strided_offset(o, p.n_outer, p.outer_shape, p.outer_out) *
                                           dtype_bytes(out.dtype);
        bool sum_or_prod = code == MX_RED_SUM || code == MX_RED_PROD;
        if (code == MX_RED_ALL || code == MX_RED_ANY) *(bool *)dst = r.flag;
        else if (out.dtype == MX_I64 && ((integer && sum_or_prod) || in.dtype == MX_I64)) *(int64_t *)dst = r.ivalue;
        else if (integer && sum_or_prod) mx_element_store(dst, out.dtype, (double)r.ivalue);
        else mx_element_store(dst, out.dtype, r.value);
      }
    }
    __syncthreads(); /* parts is reused for the next output */
  }
}

mx_status mx__cuda_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask) {
  if (code < MX_RED_SUM || code > MX_RED_ANY)
    return mx__error(MX_INVALID_ARGUMENT, "cuda reduce: unknown code %d", code);
  mx_reduce_plan p = mx_reduce_plan_of(out, index, in, mask);
  if (p.outputs == 0) return MX_OK;
  /* the smallest power of two of at least 32 threads that covers the sub-space */
  unsigned threads = 32;
  while (threads < REDUCE_THREADS && threads < p.inner_numel) threads *= 2;
  int64_t blocks = p.outputs < mx__cuda_max_blocks() ? p.outputs : mx__cuda_max_blocks();
  mx_kview none;
  memset(&none, 0, sizeof none);
  reduce_kernel<<<(unsigned)blocks, threads, 0, mx__cuda_stream()>>>(code, p, *in, out ? *out : none, out != NULL,
                                                                    index ? *index : none, index != NULL);
  MX_CUDA_CHECK_LAUNCH("launch of kernel reduce");
  return MX_OK;
}

/* --- scans ------------------------------------------------------------------------ */

struct scan_op {
  int code, dim;
  bool reverse;
  mx_kview out, in;
  int64_t in_size, out_size;
  __device__ void operator()(int64_t line) const {
    mx_scan_line(code, &out, &in, in_size, out_size, dim, reverse, line);
  }
};

mx_status mx__cuda_scan(int code, const mx_kview *out, const mx_kview *in, int dim, bool reverse) {
  if (code != MX_RED_SUM && code != MX_RED_PROD) return mx__error(MX_INVALID_ARGUMENT, "cuda scan: unknown code %d", code);
  scan_op op;
  op.code = code;
  op.dim = dim;
  op.reverse = reverse;
  op.out = *out;
  op.in = *in;
  op.in_size = dtype_bytes(in->dtype);
  op.out_size = dtype_bytes(out->dtype);
  return launch_elementwise("launch of kernel scan", mx_scan_lines(in, dim), op);
}
