/* Reductions and scans on the CPU.
 *
 * A reduction walks, for each output element, the sub-space of reduced
 * dims in row-major order: floats accumulate in double, integers in int64,
 * so float16/bfloat16 sums lose nothing to their 16-bit storage. Float sums
 * over dense runs take a faster path (dense_sum below) that still
 * accumulates in double, in a different but fixed order. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"
#include "kernels/reduce_plan.h"
#include "kernels/scan_line.h"

typedef struct {
  double value; /* floats, and the comparisons of every dtype */
  int64_t ivalue;
  int64_t index;
  bool flag;
} accumulator;

/* Steps the multi-index counter over the first n reduced dims (row-major)
 * and offset with it. */
static void advance(const mx_reduce_plan *p, int n, int64_t *counter, int64_t *offset) {
  for (int d = n - 1; d >= 0; d--) {
    *offset += p->inner_in[d];
    if (++counter[d] < p->inner_shape[d]) return;
    *offset -= p->inner_in[d] * p->inner_shape[d];
    counter[d] = 0;
  }
}

/* The offsets of output o (row-major over the kept dims) in in, out and index. */
static void outer_offsets(const mx_reduce_plan *p, int64_t o, int64_t *in_off, int64_t *out_off, int64_t *idx_off) {
  *in_off = *out_off = *idx_off = 0;
  for (int d = p->n_outer - 1; d >= 0; d--) {
    int64_t i = o % p->outer_shape[d];
    o /= p->outer_shape[d];
    *in_off += i * p->outer_in[d];
    *out_off += i * p->outer_out[d];
    *idx_off += i * p->outer_idx[d];
  }
}

static bool is_int(mx_dtype t) { return !mx_dtype_is_floating(t); }

static void reduce_one(int code, const mx_kview *in, const mx_reduce_plan *p, const char *base, accumulator *acc) {
  size_t size = mx_dtype_size(in->dtype);
  bool integer = is_int(in->dtype);
  int64_t counter[MX_MAX_DIMS] = {0};
  int64_t offset = 0;
  *acc = (accumulator){.value = code == MX_RED_PROD ? 1 : 0, .ivalue = code == MX_RED_PROD ? 1 : 0,
                       .flag = code == MX_RED_ALL, .index = 0};
  bool first = true;
  for (int64_t k = 0; k < p->inner_numel; k++) {
    const char *ptr = base + offset * (int64_t)size;
    double v = mx_element_load(ptr, in->dtype);
    switch (code) {
    case MX_RED_SUM:
      if (integer) acc->ivalue = mx_wrap_add(acc->ivalue, in->dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v);
      else acc->value += v;
      break;
    case MX_RED_PROD:
      if (integer) acc->ivalue = mx_wrap_mul(acc->ivalue, in->dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v);
      else acc->value *= v;
      break;
    case MX_RED_MAX:
    case MX_RED_MIN: {
      /* NaN wins and stays; the first extremum's index is kept */
      bool better = first || (!isnan(acc->value) && (isnan(v) || (code == MX_RED_MAX ? v > acc->value : v < acc->value)));
      if (better) {
        acc->value = v;
        acc->index = k;
        if (in->dtype == MX_I64) acc->ivalue = *(const int64_t *)ptr;
      }
      break;
    }
    case MX_RED_ALL: acc->flag = acc->flag && v != 0; break;
    case MX_RED_ANY: acc->flag = acc->flag || v != 0; break;
    }
    first = false;
    advance(p, p->n_inner, counter, &offset);
  }
}


/* --- float sums over dense runs ------------------------------------------- */

/* LANES: partial sums per run; BLOCK: outputs per row pass and f16
 * conversion buffer; CHUNK: elements one thread sums of a long reduction;
 * AHEAD runs of at most AHEAD_BYTES each are requested ahead of a strided sum. */
enum { LANES = 8, BLOCK = 256, CHUNK = 1 << 16, AHEAD = 4, AHEAD_BYTES = 4096 };

static double load_f32(float v) { return v; }
static double load_f64(double v) { return v; }

/* The sum of n contiguous elements in double: LANES independent partial
 * sums let the compiler vectorise without reassociating one accumulator. */
#define MX__SUM_RUN(qualifiers, name, type, load)                 \
  qualifiers double name(const type *x, int64_t n) {              \
    double acc[LANES] = {0};                                      \
    int64_t i = 0;                                                \
    for (; i + LANES <= n; i += LANES)                            \
      for (int j = 0; j < LANES; j++) acc[j] += load(x[i + j]);   \
    for (; i < n; i++) acc[0] += load(x[i]);                      \
    double s = 0;                                                 \
    for (int j = 0; j < LANES; j++) s += acc[j];                  \
    return s;                                                     \
  }
MX__SUM_RUN(static, sum_f64, double, load_f64)

/* float32 runs (a bias's gradient, bfloat16 blocks) also in wider vectors:
 * the baseline build's SSE2 widens two floats at a time. The lanes fix the
 * order of the additions, so every clone gives the baseline's bits. */
#if defined(__x86_64__) && defined(__GNUC__)
MX__SUM_RUN(static inline __attribute__((always_inline)), sum_f32_body, float, load_f32)
__attribute__((target("avx512f"))) static double sum_f32_avx512(const float *x, int64_t n) { return sum_f32_body(x, n); }
__attribute__((target("avx2"))) static double sum_f32_avx2(const float *x, int64_t n) { return sum_f32_body(x, n); }

static double sum_f32(const float *x, int64_t n) {
  if (__builtin_cpu_supports("avx512f")) return sum_f32_avx512(x, n);
  if (__builtin_cpu_supports("avx2")) return sum_f32_avx2(x, n);
  return sum_f32_body(x, n);
}
#else
MX__SUM_RUN(static, sum_f32, float, load_f32)
#endif

/* The 16-bit floats go through float32 in blocks, widened by the bulk
 * conversions (vectorised; element by element they are not). */
static double sum_16(const uint16_t *x, int64_t n, bool bf16) {
  float buf[BLOCK];
  double s = 0;
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t m = n - i < BLOCK ? n - i : BLOCK;
    if (bf16) mx__bf16_to_f32_n(x + i, buf, m);
    else mx__f16_to_f32_n(x + i, buf, m);
    s += sum_f32(buf, m);
  }
  return s;
}

static double sum_run(const void *x, int64_t n, mx_dtype t) {
  switch (t) {
  case MX_F32: return sum_f32(x, n);
  case MX_F64: return sum_f64(x, n);
  default: return sum_16(x, n, t == MX_BF16);
  }
}

/* acc[j] += x[j] for j < n <= BLOCK: a row added into the outputs'
 * accumulators, vectorised along the kept dim. */
static void add_row(double *acc, const void *x, int64_t n, mx_dtype t) {
  switch (t) {
  case MX_F32:
    for (int64_t j = 0; j < n; j++) acc[j] += ((const float *)x)[j];
    break;
  case MX_F64:
    for (int64_t j = 0; j < n; j++) acc[j] += ((const double *)x)[j];
    break;
  case MX_BF16:
    for (int64_t j = 0; j < n; j++) acc[j] += mx_bf16_to_f32(((const uint16_t *)x)[j]);
    break;
  default: {
    float buf[BLOCK];
    mx__f16_to_f32_n(x, buf, n);
    for (int64_t j = 0; j < n; j++) acc[j] += buf[j];
  }
  }
}

/* in and out without their size-1 dims, and with neighbouring dims of one
 * kind (both reduced or both kept) merged where contiguous, so that runs are
 * as long as they can be. Returns the mask of the merged dims. */
static uint32_t merge_dims(const mx_kview *in, const mx_kview *out, uint32_t mask, mx_kview *min, mx_kview *mout) {
  *min = *in, *mout = *out;
  min->ndim = mout->ndim = 0;
  uint32_t merged = 0;
  for (int d = 0; d < in->ndim; d++) {
    if (in->shape[d] == 1) continue;
    bool reduced = mask & (1u << d);
    int k = min->ndim;
    if (k > 0 && reduced == (bool)(merged & (1u << (k - 1))) &&
        min->strides[k - 1] == in->strides[d] * in->shape[d] &&
        (reduced || mout->strides[k - 1] == out->strides[d] * in->shape[d])) {
      min->shape[k - 1] *= in->shape[d];
      mout->shape[k - 1] = reduced ? 1 : min->shape[k - 1];
      min->strides[k - 1] = in->strides[d];
      mout->strides[k - 1] = out->strides[d];
      continue;
    }
    min->shape[k] = in->shape[d];
    mout->shape[k] = reduced ? 1 : in->shape[d];
    min->strides[k] = in->strides[d];
    mout->strides[k] = out->strides[d];
    merged |= (uint32_t)reduced << k;
    min->ndim = mout->ndim = k + 1;
  }
  return merged;
}

/* Requests the first `bytes` (at most AHEAD_BYTES) at x into the caches. */
static void prefetch(const char *x, int64_t bytes) {
  if (bytes > AHEAD_BYTES) bytes = AHEAD_BYTES;
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(x + b);
}

/* The sum of elements [k0, k1) (row-major) of the reduced sub-space at
 * base, whose last dim is a dense run. Runs of one output lie far apart
 * (a channel's H*W values, C*H*W from the next image's), and a run of a
 * few hundred floats ends before the hardware prefetcher has caught on:
 * once the tensor is out of the caches, each run started with a miss to
 * memory (8 GB/s at batch 512; 17-19 with the requests). So the walk
 * requests the run AHEAD runs on while it sums this one; the additions are
 * unchanged. */
static double sum_runs(const mx_reduce_plan *p, const char *base, mx_dtype t, int64_t k0, int64_t k1) {
  int64_t size = (int64_t)mx_dtype_size(t);
  int n = p->n_inner - 1; /* the dims walking from run to run */
  int64_t len = p->inner_shape[n], j = k0 % len, rest = k0 / len;
  int64_t counter[MX_MAX_DIMS] = {0}, offset = 0;
  for (int d = n - 1; d >= 0; d--) {
    counter[d] = rest % p->inner_shape[d];
    rest /= p->inner_shape[d];
    offset += counter[d] * p->inner_in[d];
  }
  int64_t runs = (k1 - k0 + j + len - 1) / len, ahead_counter[MX_MAX_DIMS], ahead_offset = offset;
  memcpy(ahead_counter, counter, sizeof counter);
  for (int64_t r = 0; r < AHEAD && r < runs; r++) advance(p, n, ahead_counter, &ahead_offset);
  double s = 0;
  for (int64_t k = k0, r = 0; k < k1; j = 0, r++) {
    if (r + AHEAD < runs) {
      prefetch(base + ahead_offset * size, len * size);
      advance(p, n, ahead_counter, &ahead_offset);
    }
    int64_t m = len - j < k1 - k ? len - j : k1 - k;
    s += sum_run(base + (offset + j) * size, m, t);
    k += m;
    advance(p, n, counter, &offset);
  }
  return s;
}

/* Sums whose reduced elements come in runs (per channel of NCHW over
 * (0, 2, 3): N runs of H*W; a last-dim or full sum: one run). Long
 * reductions are split into CHUNKs summed in parallel, then added in chunk
 * order, so the result does not depend on the thread count. */
static void sum_over_runs(const mx_reduce_plan *p, const mx_kview *out, const mx_kview *in) {
  int64_t n_out = p->outputs, chunks = (p->inner_numel + CHUNK - 1) / CHUNK;
  int64_t in_size = (int64_t)mx_dtype_size(in->dtype), out_size = (int64_t)mx_dtype_size(out->dtype);
  double *partial = chunks > 1 ? malloc(sizeof(double) * (size_t)(n_out * chunks)) : NULL;
  if (!partial) chunks = 1; /* then a whole output per thread */
  MX_PARALLEL_FOR(n_out * p->inner_numel)
  for (int64_t item = 0; item < n_out * chunks; item++) {
    int64_t c = item % chunks, in_off, out_off, idx_off;
    outer_offsets(p, item / chunks, &in_off, &out_off, &idx_off);
    int64_t k1 = c == chunks - 1 ? p->inner_numel : (c + 1) * CHUNK;
    double s = sum_runs(p, (const char *)in->data + in_off * in_size, in->dtype, c * CHUNK, k1);
    if (partial) partial[item] = s;
    else mx_element_store((char *)out->data + out_off * out_size, out->dtype, s);
  }
  if (!partial) return;
  for (int64_t o = 0; o < n_out; o++) {
    double s = 0;
    for (int64_t c = 0; c < chunks; c++) s += partial[o * chunks + c];
    int64_t in_off, out_off, idx_off;
    outer_offsets(p, o, &in_off, &out_off, &idx_off);
    mx_element_store((char *)out->data + out_off * out_size, out->dtype, s);
  }
  free(partial);
}

/* Sums whose last kept dim is dense in in and out (column sums of an
 * (N, C) matrix over dim 0): each reduced position adds a row of up to
 * BLOCK elements into as many accumulators. */
static void sum_over_rows(const mx_reduce_plan *p, const mx_kview *out, const mx_kview *in) {
  int64_t n_out = p->outputs, width = p->outer_shape[p->n_outer - 1], blocks = (width + BLOCK - 1) / BLOCK;
  int64_t in_size = (int64_t)mx_dtype_size(in->dtype), out_size = (int64_t)mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(n_out * p->inner_numel)
  for (int64_t item = 0; item < n_out / width * blocks; item++) {
    int64_t b = item % blocks, n = width - b * BLOCK < BLOCK ? width - b * BLOCK : BLOCK;
    int64_t in_off, out_off, idx_off;
    outer_offsets(p, item / blocks * width + b * BLOCK, &in_off, &out_off, &idx_off);
    double acc[BLOCK] = {0};
    int64_t counter[MX_MAX_DIMS] = {0}, offset = 0;
    for (int64_t r = 0; r < p->inner_numel; r++) {
      add_row(acc, (const char *)in->data + (in_off + offset) * in_size, n, in->dtype);
      advance(p, p->n_inner, counter, &offset);
    }
    for (int64_t j = 0; j < n; j++) mx_element_store((char *)out->data + (out_off + j) * out_size, out->dtype, acc[j]);
  }
}

/* The fast paths of floating sums; false (nothing done) where neither the
 * reduced sub-space nor the last kept dim is made of dense runs. */
static bool dense_sum(const mx_kview *out, const mx_kview *in, uint32_t mask) {
  mx_dtype t = in->dtype;
  if (out->dtype != t || (t != MX_F32 && t != MX_F64 && t != MX_BF16 && t != MX_F16) || mx__kview_numel(in) == 0)
    return false;
  mx_kview min, mout;
  uint32_t merged = merge_dims(in, out, mask, &min, &mout);
  mx_reduce_plan p = mx_reduce_plan_of(&mout, NULL, &min, merged);
  if (p.n_inner > 0 && p.inner_in[p.n_inner - 1] == 1) sum_over_runs(&p, out, in);
  else if (p.n_outer > 0 && p.outer_in[p.n_outer - 1] == 1 && p.outer_out[p.n_outer - 1] == 1) sum_over_rows(&p, out, in);
  else return false;
  return true;
}

mx_status mx__cpu_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask) {
  if (code == MX_RED_SUM && out && !index && dense_sum(out, in, mask)) return MX_OK;
  mx_reduce_plan p = mx_reduce_plan_of(out, index, in, mask);
  int64_t n_out = p.outputs;
  size_t in_size = mx_dtype_size(in->dtype);
  size_t out_size = out ? mx_dtype_size(out->dtype) : 0;
  MX_PARALLEL_FOR(n_out * p.inner_numel)
  for (int64_t o = 0; o < n_out; o++) {
    int64_t in_off, out_off, idx_off;
    outer_offsets(&p, o, &in_off, &out_off, &idx_off);
    accumulator acc;
    reduce_one(code, in, &p, (const char *)in->data + in_off * (int64_t)in_size, &acc);
    if (index) ((int64_t *)index->data)[idx_off] = acc.index;
    if (!out) continue;
    char *dst = (char *)out->data + out_off * (int64_t)out_size;
    if (code == MX_RED_ALL || code == MX_RED_ANY) *(bool *)dst = acc.flag;
    else if (out->dtype == MX_I64 && is_int(in->dtype) && (code == MX_RED_SUM || code == MX_RED_PROD)) *(int64_t *)dst = acc.ivalue;
    else if (out->dtype == MX_I64 && in->dtype == MX_I64) *(int64_t *)dst = acc.ivalue;
    else if (is_int(in->dtype) && (code == MX_RED_SUM || code == MX_RED_PROD)) mx_element_store(dst, out->dtype, (double)acc.ivalue);
    else mx_element_store(dst, out->dtype, acc.value);
  }
  return MX_OK;
}

mx_status mx__cpu_scan(int code, const mx_kview *out, const mx_kview *in, int dim, bool reverse) {
  int64_t lines = mx_scan_lines(in, dim);
  int64_t in_size = (int64_t)mx_dtype_size(in->dtype), out_size = (int64_t)mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(lines * in->shape[dim])
  for (int64_t line = 0; line < lines; line++) mx_scan_line(code, out, in, in_size, out_size, dim, reverse, line);
  return MX_OK;
}
