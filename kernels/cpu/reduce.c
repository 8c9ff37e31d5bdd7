/* Reductions and scans on the CPU.
 *
 * A reduction walks, for each output element, the sub-space of reduced
 * dims in row-major order: floats accumulate in double, integers in int64,
 * so float16/bfloat16 sums lose nothing to their 16-bit storage. */
#include <math.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/reduce.h"

typedef struct {
  int n_outer, n_inner;
  int64_t outer_shape[MX_MAX_DIMS], outer_in[MX_MAX_DIMS], outer_out[MX_MAX_DIMS], outer_idx[MX_MAX_DIMS];
  int64_t inner_shape[MX_MAX_DIMS], inner_in[MX_MAX_DIMS];
  int64_t inner_numel;
} reduce_plan;

static reduce_plan plan_of(const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask) {
  reduce_plan p = {0};
  p.inner_numel = 1;
  for (int d = 0; d < in->ndim; d++) {
    if (mask & (1u << d)) {
      p.inner_shape[p.n_inner] = in->shape[d];
      p.inner_in[p.n_inner++] = in->strides[d];
      p.inner_numel *= in->shape[d];
    } else {
      p.outer_shape[p.n_outer] = in->shape[d];
      p.outer_in[p.n_outer] = in->strides[d];
      p.outer_out[p.n_outer] = out ? out->strides[d] : 0;
      p.outer_idx[p.n_outer++] = index ? index->strides[d] : 0;
    }
  }
  return p;
}

typedef struct {
  double value; /* floats, and the comparisons of every dtype */
  int64_t ivalue;
  int64_t index;
  bool flag;
} accumulator;

static bool is_int(mx_dtype t) { return !mx_dtype_is_floating(t); }

static void reduce_one(int code, const mx_kview *in, const reduce_plan *p, const char *base, accumulator *acc) {
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
      if (integer) acc->ivalue += in->dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v;
      else acc->value += v;
      break;
    case MX_RED_PROD:
      if (integer) acc->ivalue *= in->dtype == MX_I64 ? *(const int64_t *)ptr : (int64_t)v;
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
    for (int d = p->n_inner - 1; d >= 0; d--) { /* advance the reduced multi-index */
      offset += p->inner_in[d];
      if (++counter[d] < p->inner_shape[d]) break;
      offset -= p->inner_in[d] * p->inner_shape[d];
      counter[d] = 0;
    }
  }
}

mx_status mx__cpu_reduce(int code, const mx_kview *out, const mx_kview *index, const mx_kview *in, uint32_t mask) {
  reduce_plan p = plan_of(out, index, in, mask);
  int64_t n_out = 1;
  for (int d = 0; d < p.n_outer; d++) n_out *= p.outer_shape[d];
  size_t in_size = mx_dtype_size(in->dtype);
  size_t out_size = out ? mx_dtype_size(out->dtype) : 0;
  MX_PARALLEL_FOR(n_out * p.inner_numel)
  for (int64_t o = 0; o < n_out; o++) {
    int64_t in_off = 0, out_off = 0, idx_off = 0, rest = o;
    for (int d = p.n_outer - 1; d >= 0; d--) {
      int64_t i = rest % p.outer_shape[d];
      rest /= p.outer_shape[d];
      in_off += i * p.outer_in[d];
      out_off += i * p.outer_out[d];
      idx_off += i * p.outer_idx[d];
    }
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
  int64_t len = in->shape[dim];
  int64_t lines = len ? mx__kview_numel(in) / len : 0;
  size_t in_size = mx_dtype_size(in->dtype), out_size = mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(lines * len)
  for (int64_t line = 0; line < lines; line++) {
    int64_t in_off = 0, out_off = 0, rest = line;
    for (int d = in->ndim - 1; d >= 0; d--) {
      if (d == dim) continue;
      int64_t i = rest % in->shape[d];
      rest /= in->shape[d];
      in_off += i * in->strides[d];
      out_off += i * out->strides[d];
    }
    double acc = code == MX_RED_PROD ? 1 : 0;
    int64_t iacc = code == MX_RED_PROD ? 1 : 0;
    for (int64_t s = 0; s < len; s++) {
      int64_t k = reverse ? len - 1 - s : s;
      const char *src = (const char *)in->data + (in_off + k * in->strides[dim]) * (int64_t)in_size;
      char *dst = (char *)out->data + (out_off + k * out->strides[dim]) * (int64_t)out_size;
      if (out->dtype == MX_I64) {
        int64_t v = in->dtype == MX_I64 ? *(const int64_t *)src : (int64_t)mx_element_load(src, in->dtype);
        iacc = code == MX_RED_PROD ? iacc * v : iacc + v;
        *(int64_t *)dst = iacc;
      } else {
        double v = mx_element_load(src, in->dtype);
        acc = code == MX_RED_PROD ? acc * v : acc + v;
        mx_element_store(dst, out->dtype, acc);
      }
    }
  }
  return MX_OK;
}
