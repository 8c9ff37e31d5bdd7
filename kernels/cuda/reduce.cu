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

MX_HD static partial empty_partial(int code) {
  partial p;
  p.value = p.ivalue = code == MX_RED_PROD ? 1 : 0;
  p.index = 0;
  p.flag = code == MX_RED_ALL;
  p.empty = true;
  return p;
}

/* Element k (value v, its int64 when the dtype is int64) folded into p, in
 * the CPU's reduce_one's terms. */
MX_HD static void fold(int code, partial *p, double v, int64_t iv, bool integer, int64_t k) {
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
MX_HD static partial combine(int code, partial a, partial b) {
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

/* One item per output element (common.cuh's launch_block_reduce): each thread
 * folds a contiguous chunk of the reduced sub-space in order. */
struct reduce_body {
  typedef ::partial partial;
  int code;
  mx_reduce_plan p;
  mx_kview in, out, index;
  bool has_out, has_index;
  int64_t items;
  MX_HD partial thread_partial(int64_t o, int64_t thread, int64_t threads) const {
    bool integer = !mx_dtype_floating(in.dtype);
    int64_t chunk = (p.inner_numel + threads - 1) / threads;
    int64_t in_off = mx_strided_offset(o, p.n_outer, p.outer_shape, p.outer_in);
    partial mine = empty_partial(code);
    int64_t k0 = thread * chunk, k1 = k0 + chunk < p.inner_numel ? k0 + chunk : p.inner_numel;
    for (int64_t k = k0; k < k1; k++) {
      const char *ptr = (const char *)in.data +
                        (in_off + mx_strided_offset(k, p.n_inner, p.inner_shape, p.inner_in)) * dtype_bytes(in.dtype);
      double v = mx_element_load(ptr, in.dtype);
      int64_t iv = in.dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v;
      fold(code, &mine, v, iv, integer, k);
    }
    return mine;
  }
  MX_HD partial combine(partial a, partial b) const { return ::combine(code, a, b); }
  MX_HD void finish(int64_t o, partial r) const {
    bool integer = !mx_dtype_floating(in.dtype);
    if (has_index) *((int64_t *)index.data + mx_strided_offset(o, p.n_outer, p.outer_shape, p.outer_idx)) = r.index;
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
};

mx_status mx__cuda_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask) {
  if (code < MX_RED_SUM || code > MX_RED_ANY)
    return mx__error(MX_INVALID_ARGUMENT, "cuda reduce: unknown code %d", code);
  mx_reduce_plan p = mx_reduce_plan_of(out, index, in, mask);
  if (p.outputs == 0) return MX_OK;
  /* the smallest power of two of at least 32 threads that covers the sub-space */
  unsigned threads = 32;
  while (threads < REDUCE_THREADS && threads < p.inner_numel) threads *= 2;
  int64_t blocks = p.outputs < mx__cuda_max_blocks() ? p.outputs : mx__cuda_max_blocks();
  reduce_body body;
  memset(&body, 0, sizeof body);
  body.code = code;
  body.p = p;
  body.in = *in;
  if (out) body.out = *out;
  if (index) body.index = *index;
  body.has_out = out != NULL;
  body.has_index = index != NULL;
  body.items = p.outputs;
  return launch_block_reduce<REDUCE_THREADS>("launch of kernel reduce", blocks, threads, body);
}

/* --- scans ------------------------------------------------------------------------ */

struct scan_op {
  int code, dim;
  bool reverse;
  mx_kview out, in;
  int64_t in_size, out_size;
  MX_HD void operator()(int64_t line) const {
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
