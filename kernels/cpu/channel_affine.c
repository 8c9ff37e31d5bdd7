/* y = x * scale[c] + shift[c] over a contiguous (N, C, *) tensor, one plane
 * of one channel at a time: what batch norm's mul, add and cast did in three
 * passes, in one. The arithmetic is theirs, so the bits are too: float32
 * (float64 for float64), the product rounded, then the sum, then the store
 * into y's dtype; no FMA (C11 mode does not contract). */
#include "kernels/cpu/channel_affine.h"

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"

enum { BLOCK = 512 };

static void plane_f32(float *y, const float *x, int64_t n, float s, float b) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * s + b;
}

static void plane_f64(double *y, const double *x, int64_t n, double s, double b) {
  for (int64_t i = 0; i < n; i++) y[i] = x[i] * s + b;
}

/* 16-bit planes go through float32 blocks: widened, computed, rounded back. */
static void plane_16(uint16_t *y, const uint16_t *x, int64_t n, float s, float b, bool bf16) {
  float block[BLOCK];
  for (int64_t i = 0; i < n; i += BLOCK) {
    int64_t m = n - i < BLOCK ? n - i : BLOCK;
    if (bf16) mx__bf16_to_f32_n(x + i, block, m);
    else mx__f16_to_f32_n(x + i, block, m);
    plane_f32(block, block, m, s, b);
    if (bf16) mx__f32_to_bf16_n(block, y + i, m);
    else mx__f32_to_f16_n(block, y + i, m);
  }
}

mx_status mx__cpu_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *scale, const mx_kview *shift) {
  int64_t channels = x->shape[1], planes = x->shape[0] * channels;
  int64_t n = planes ? mx__kview_numel(x) / planes : 0;
  size_t size = mx_dtype_size(x->dtype);
  MX_PARALLEL_FOR(planes * n)
  for (int64_t p = 0; p < planes; p++) {
    int64_t c = p % channels;
    const char *xp = (const char *)x->data + p * n * (int64_t)size;
    char *yp = (char *)y->data + p * n * (int64_t)size;
    if (x->dtype == MX_F64)
      plane_f64((double *)yp, (const double *)xp, n, ((const double *)scale->data)[c], ((const double *)shift->data)[c]);
    else if (x->dtype == MX_F32)
      plane_f32((float *)yp, (const float *)xp, n, ((const float *)scale->data)[c], ((const float *)shift->data)[c]);
    else
      plane_16((uint16_t *)yp, (const uint16_t *)xp, n, ((const float *)scale->data)[c], ((const float *)shift->data)[c],
               x->dtype == MX_BF16);
  }
  return MX_OK;
}
