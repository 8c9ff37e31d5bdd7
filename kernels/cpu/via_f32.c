/* Dense float32 staging copies, converted by the CPU backend's own convert
 * kernel (bulk F16C where the CPU has it, threads for large tensors), or,
 * for a channels-last operand, a transposed tile at a time. */
#include "kernels/cpu/via_f32.h"

#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/host_cache.h"
#include "kernels/cpu/parallel.h"

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

/* Whether v (float16, bfloat16 or float32) is channels-last, (N, C, spatial...) with each sample a dense
 * (pixels, C) block: the row-major copy is then a transpose of each sample, which channels_last_copy makes a tile
 * at a time; the convert kernel would walk one side with a stride, an element at a time. */
static bool channels_last_samples(const mx_kview *v, int64_t *pixels) {
  if (v->ndim < 3 || v->strides[1] != 1 || !(v->dtype == MX_F16 || v->dtype == MX_BF16 || v->dtype == MX_F32))
    return false;
  int64_t stride = v->shape[1];
  for (int d = v->ndim - 1; d >= 2; d--) {
    if (v->shape[d] != 1 && v->strides[d] != stride) return false;
    stride *= v->shape[d];
  }
  *pixels = stride / v->shape[1];
  return v->shape[1] > 1 && *pixels > 1;
}

enum { TILE = 64 };

/* dst[j][i] = src[i][j] for i < rows, j < cols (row strides in floats): 8 x 8 blocks through AVX registers where
 * the CPU has AVX2, the edges and other CPUs one element at a time. */
#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "kernels/cpu/transpose8.h"

__attribute__((target("avx2"))) static void transpose_avx2(const float *src, int64_t src_ld, float *dst,
                                                           int64_t dst_ld, int64_t rows, int64_t cols) {
  int64_t i = 0;
  for (; i + 8 <= rows; i += 8) {
    int64_t j = 0;
    for (; j + 8 <= cols; j += 8) {
      __m256 v[8];
      for (int k = 0; k < 8; k++) v[k] = _mm256_loadu_ps(src + (i + k) * src_ld + j);
      mx__transpose8_avx2(v);
      for (int k = 0; k < 8; k++) _mm256_storeu_ps(dst + (j + k) * dst_ld + i, v[k]);
    }
    for (; j < cols; j++)
      for (int k = 0; k < 8; k++) dst[j * dst_ld + i + k] = src[(i + k) * src_ld + j];
  }
  for (; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) dst[j * dst_ld + i] = src[i * src_ld + j];
}
#endif

static void transpose(const float *src, int64_t src_ld, float *dst, int64_t dst_ld, int64_t rows, int64_t cols) {
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2")) {
    transpose_avx2(src, src_ld, dst, dst_ld, rows, cols);
    return;
  }
#endif
  for (int64_t i = 0; i < rows; i++)
    for (int64_t j = 0; j < cols; j++) dst[j * dst_ld + i] = src[i * src_ld + j];
}

/* Between one sample of a channels-last v, its (P, C) block at x, and the row-major float32 (C, P) block f, a
 * TILE x TILE tile at a time through a float32 tile: rows of x widened into it and its columns written as rows of f
 * (to_f32), or the reverse, its rows narrowed into x. The row conversions are the convert kernel's (the same bits). */
static void channels_last_copy(char *x, mx_dtype dtype, float *f, int64_t P, int64_t C, bool to_f32) {
  float tile[TILE][TILE];
  size_t bytes = mx_dtype_size(dtype);
  for (int64_t p0 = 0; p0 < P; p0 += TILE)
    for (int64_t c0 = 0; c0 < C; c0 += TILE) {
      int64_t np = P - p0 < TILE ? P - p0 : TILE, nc = C - c0 < TILE ? C - c0 : TILE;
      if (to_f32) {
        for (int64_t p = 0; p < np; p++) {
          const char *row = x + ((p0 + p) * C + c0) * (int64_t)bytes;
          if (dtype == MX_F32) memcpy(tile[p], row, sizeof(float) * (size_t)nc);
          else if (dtype == MX_F16) mx__f16_to_f32_n((const uint16_t *)row, tile[p], nc);
          else mx__bf16_to_f32_n((const uint16_t *)row, tile[p], nc);
        }
        transpose(tile[0], TILE, f + c0 * P + p0, P, np, nc);
        continue;
      }
      transpose(f + c0 * P + p0, P, tile[0], TILE, nc, np);
      for (int64_t p = 0; p < np; p++) {
        char *row = x + ((p0 + p) * C + c0) * (int64_t)bytes;
        if (dtype == MX_F32) memcpy(row, tile[p], sizeof(float) * (size_t)nc);
        else if (dtype == MX_F16) mx__f32_to_f16_n(tile[p], (uint16_t *)row, nc);
        else mx__f32_to_bf16_n(tile[p], (uint16_t *)row, nc);
      }
    }
}

/* channels_last_copy over v's samples, in parallel. */
static void channels_last_samples_copy(const mx_kview *v, float *f, int64_t P, bool to_f32) {
  int64_t N = v->shape[0], C = v->shape[1];
  size_t bytes = mx_dtype_size(v->dtype);
  MX_PARALLEL_FOR(mx__kview_numel(v))
  for (int64_t n = 0; n < N; n++)
    channels_last_copy((char *)v->data + n * v->strides[0] * (int64_t)bytes, v->dtype, f + n * C * P, P, C, to_f32);
}

float *mx__cpu_dense_f32(const mx_kview *v) {
  float *data = mx__cpu_f32_alloc(mx__kview_numel(v));
  if (!data) return NULL;
  int64_t pixels;
  if (channels_last_samples(v, &pixels)) {
    channels_last_samples_copy(v, data, pixels, true);
    return data;
  }
  mx_kview dense = mx__cpu_dense_f32_view(data, v);
  mx__cpu_backend.convert(&dense, v);
  return data;
}

void mx__cpu_store_f32(const mx_kview *out, const float *src) {
  int64_t pixels;
  if (channels_last_samples(out, &pixels)) {
    channels_last_samples_copy(out, (float *)src, pixels, false);
    return;
  }
  mx_kview dense = mx__cpu_dense_f32_view((float *)src, out);
  mx__cpu_backend.convert(out, &dense);
}
