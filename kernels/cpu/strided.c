/* Row iteration over strided views, with dimension merging and OpenMP. */
#include "kernels/cpu/strided.h"

#include "kernels/cpu/parallel.h"

typedef struct {
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  int64_t stride[2][MX_MAX_DIMS]; /* in bytes */
} merged_dims;

/* Drops size-1 dims and merges neighbours that are contiguous in both views. */
static merged_dims merge_dims(const mx_kview *out, const mx_kview *in) {
  merged_dims m = {0};
  size_t osize = mx_dtype_size(out->dtype), isize = in ? mx_dtype_size(in->dtype) : 0;
  for (int d = 0; d < out->ndim; d++) {
    if (out->shape[d] == 1) continue;
    int64_t os = out->strides[d] * (int64_t)osize, is = in ? in->strides[d] * (int64_t)isize : 0;
    if (m.ndim > 0) {
      int last = m.ndim - 1;
      if (m.stride[0][last] == os * out->shape[d] && m.stride[1][last] == is * out->shape[d]) {
        m.shape[last] *= out->shape[d];
        m.stride[0][last] = os;
        m.stride[1][last] = is;
        continue;
      }
    }
    m.shape[m.ndim] = out->shape[d];
    m.stride[0][m.ndim] = os;
    m.stride[1][m.ndim] = is;
    m.ndim++;
  }
  if (m.ndim == 0) { /* a single element */
    m.ndim = 1;
    m.shape[0] = 1;
  }
  return m;
}

void mx__cpu_foreach_row(const mx_kview *out, const mx_kview *in, mx__row_fn fn, void *ctx) {
  int64_t numel = mx__kview_numel(out);
  if (numel == 0) return;
  merged_dims m = merge_dims(out, in);
  int inner = m.ndim - 1;
  int64_t row_len = m.shape[inner];
  int64_t rows = numel / row_len;
  /* Long rows are split into chunks so a single contiguous row still uses
   * every thread. */
  int64_t chunk = row_len;
  if (rows == 1 && row_len >= 2 * MX_PARALLEL_MIN_ELEMENTS) chunk = MX_PARALLEL_MIN_ELEMENTS;
  int64_t chunks_per_row = (row_len + chunk - 1) / chunk;
  int64_t tasks = rows * chunks_per_row;
  MX_PARALLEL_FOR(numel)
  for (int64_t t = 0; t < tasks; t++) {
    int64_t r = t / chunks_per_row, c = t % chunks_per_row;
    int64_t out_off = 0, in_off = 0, rest = r;
    for (int d = inner - 1; d >= 0; d--) {
      int64_t i = rest % m.shape[d];
      rest /= m.shape[d];
      out_off += i * m.stride[0][d];
      in_off += i * m.stride[1][d];
    }
    int64_t start = c * chunk;
    int64_t n = row_len - start < chunk ? row_len - start : chunk;
    mx__row row = {
        .out = (char *)out->data + out_off + start * m.stride[0][inner],
        .in = in ? (const char *)in->data + in_off + start * m.stride[1][inner] : NULL,
        .out_step = m.stride[0][inner],
        .in_step = m.stride[1][inner],
        .n = n,
        .first = r * row_len + start,
    };
    fn(&row, ctx);
  }
}
