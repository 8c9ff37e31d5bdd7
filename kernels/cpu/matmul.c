/* Batched matrix products on the CPU. */
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/via_f32.h"
#include "kernels/math.h"

/* out[b,i,:] += a[b,i,k] * b[b,k,:], accumulated in double for f64 and in
 * float otherwise. Views are (B, M, K), (B, K, N), (B, M, N). */
mx_status mx__cpu_matmul_reference(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  int64_t B = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
  bool dbl = out->dtype == MX_F64;
  size_t as = mx_dtype_size(a->dtype), bs = mx_dtype_size(b->dtype), os = mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(B * M * N * K)
  for (int64_t bm = 0; bm < B * M; bm++) {
    int64_t bi = bm / M, i = bm % M;
    double acc_d[256];
    float acc_f[256];
    for (int64_t j0 = 0; j0 < N; j0 += 256) {
      int64_t jn = N - j0 < 256 ? N - j0 : 256;
      for (int64_t j = 0; j < jn; j++) acc_d[j] = 0, acc_f[j] = 0;
      for (int64_t k = 0; k < K; k++) {
        const char *pa = (const char *)a->data + (bi * a->strides[0] + i * a->strides[1] + k * a->strides[2]) * (int64_t)as;
        double av = mx_element_load(pa, a->dtype);
        const char *pb = (const char *)b->data + (bi * b->strides[0] + k * b->strides[1] + j0 * b->strides[2]) * (int64_t)bs;
        for (int64_t j = 0; j < jn; j++, pb += b->strides[2] * (int64_t)bs) {
          if (dbl) acc_d[j] += av * mx_element_load(pb, b->dtype);
          else acc_f[j] += (float)av * (float)mx_element_load(pb, b->dtype);
        }
      }
      char *po = (char *)out->data + (bi * out->strides[0] + i * out->strides[1] + j0 * out->strides[2]) * (int64_t)os;
      for (int64_t j = 0; j < jn; j++, po += out->strides[2] * (int64_t)os)
        mx_element_store(po, out->dtype, dbl ? acc_d[j] : acc_f[j]);
    }
  }
  return MX_OK;
}

/* float16 as the GPU does it: f32 products and sums, one rounding at the end. */
static mx_status matmul_via_f32(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  float *fa = mx__cpu_dense_f32(a), *fb = mx__cpu_dense_f32(b);
  float *fo = mx__cpu_f32_alloc(mx__kview_numel(out));
  mx_status status = MX_OK;
  if (!fa || !fb || !fo) {
    status = mx__error(MX_OUT_OF_MEMORY, "mx_matmul: out of memory converting %s operands", mx_dtype_name(a->dtype));
  } else {
    mx_kview va = mx__cpu_dense_f32_view(fa, a), vb = mx__cpu_dense_f32_view(fb, b);
    mx_kview vo = mx__cpu_dense_f32_view(fo, out);
    status = mx__dnnl_matmul(&vo, &va, &vb);
    if (status == MX_NOT_BUILT) status = mx__cpu_matmul_reference(&vo, &va, &vb);
    if (status == MX_OK) mx__cpu_store_f32(out, fo);
  }
  mx__cpu_f32_free(fa, mx__kview_numel(a)), mx__cpu_f32_free(fb, mx__kview_numel(b));
  mx__cpu_f32_free(fo, mx__kview_numel(out));
  return status;
}

mx_status mx__cpu_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  if (mx__kview_numel(out) == 0) return MX_OK;
  if (a->shape[2] == 0) { /* an empty sum: zeros */
    memset(out->data, 0, (size_t)mx__kview_numel(out) * mx_dtype_size(out->dtype));
    return MX_OK;
  }
  switch (out->dtype) {
  case MX_F32:
  case MX_BF16: {
    mx_status status = mx__dnnl_matmul(out, a, b);
    if (status != MX_NOT_BUILT) return status;
    return out->dtype == MX_F32 ? mx__cpu_matmul_reference(out, a, b) : matmul_via_f32(out, a, b);
  }
  case MX_F16: return matmul_via_f32(out, a, b);
  default: return mx__cpu_matmul_reference(out, a, b);
  }
}
