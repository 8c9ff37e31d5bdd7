/* Dense float32 staging copies, converted by the CPU backend's own convert
 * kernel (bulk F16C where the CPU has it, threads for large tensors). */
#include "kernels/cpu/via_f32.h"

#include "kernels/backend.h"
#include "kernels/cpu/host_cache.h"

float *mx__cpu_f32_alloc(int64_t n) { return mx__host_cache_alloc(sizeof(float) * (size_t)(n ? n : 1)); }

void mx__cpu_f32_free(float *buf, int64_t n) { mx__host_cache_free(buf, sizeof(float) * (size_t)(n ? n : 1)); }

mx_kview mx__cpu_dense_f32_view(float *data, const mx_kview *like) {
  mx_kview v = *like;
  v.data = data;
  v.dtype = MX_F32;
  int64_t stride = 1;
  for (int d = like->ndim - 1; d >= 0; d--) {
    v.strides[d] = stride;
    stride *= like->shape[d];
  }
  return v;
}

float *mx__cpu_dense_f32(const mx_kview *v) {
  float *data = mx__cpu_f32_alloc(mx__kview_numel(v));
  if (!data) return NULL;
  mx_kview dense = mx__cpu_dense_f32_view(data, v);
  mx__cpu_backend.convert(&dense, v);
  return data;
}

void mx__cpu_store_f32(const mx_kview *out, const float *src) {
  mx_kview dense = mx__cpu_dense_f32_view((float *)src, out);
  mx__cpu_backend.convert(out, &dense);
}
