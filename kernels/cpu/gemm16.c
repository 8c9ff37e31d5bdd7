/* A float32 GEMM for 16-bit operands that converts b while it packs it.
 *
 * The layout is BLIS's, cut down to one thread: a is converted to dense
 * float32 rows and read in place; b is converted a panel of KC rows by NR
 * columns at a time into a buffer that stays in L1 while every MR-row tile
 * of a runs against it; each tile of out stays in zmm accumulators for
 * the panel's KC rows. Edges are padded: a with zero rows up to a multiple
 * of MR, a row's last panel with zero columns up to a multiple of 16; out
 * goes through a float32 buffer of the padded size and is rounded once at
 * the end. 6 x 64 tiles and 128-row panels measured best of 4-12 rows by
 * 32 or 64 columns and 64-256 rows (bench/NOTES.md, round 11). */
#include "kernels/cpu/gemm16.h"

#include <string.h>

#include "kernels/backend.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

enum {
  MR = 6,   /* rows of a tile */
  NV = 4,   /* zmm across a tile: MR * NV = 24 accumulators, NV registers for b */
  NR = 64,  /* columns of a tile: NV * 16 */
  KC = 128, /* rows of b in a panel: 32 KiB, which leaves room in L1 for a's tile */
};

#define AVX512 __attribute__((target("avx512f")))

/* c[MR x 16 nv] (row stride ldc) = (or, with add, +=) a[MR x kc] (row
 * stride lda) @ the panel bp[kc][16 nv]. Inlined with nv a constant. */
AVX512 static inline __attribute__((always_inline)) void tile(int nv, int64_t kc, const float *a, int64_t lda,
                                                              const float *bp, float *c, int64_t ldc, bool add) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) acc[r][v] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; k++) {
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) bv[v] = _mm512_load_ps(bp + (k * nv + v) * 16);
#pragma GCC unroll 8
    for (int r = 0; r < MR; r++) {
      __m512 ar = _mm512_set1_ps(a[r * lda + k]);
#pragma GCC unroll 4
      for (int v = 0; v < nv; v++) acc[r][v] = _mm512_fmadd_ps(ar, bv[v], acc[r][v]);
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; r++)
#pragma GCC unroll 4
    for (int v = 0; v < nv; v++) {
      float *cv = c + r * ldc + 16 * v;
      if (add) acc[r][v] = _mm512_add_ps(acc[r][v], _mm512_loadu_ps(cv));
      _mm512_storeu_ps(cv, acc[r][v]);
    }
}

/* Every tile of a panel 16 nv columns wide: full panels take nv = NV, the
 * last one of a row of out as few as cover it. */
AVX512 static void panel_tiles(int nv, int64_t Mp, int64_t kc, const float *a, int64_t lda, const float *bp, float *c,
                               int64_t ldc, bool add) {
  for (int64_t i = 0; i < Mp; i += MR, a += MR * lda, c += MR * ldc) {
    switch (nv) {
    case 1: tile(1, kc, a, lda, bp, c, ldc, add); break;
    case 2: tile(2, kc, a, lda, bp, c, ldc, add); break;
    case 3: tile(3, kc, a, lda, bp, c, ldc, add); break;
    default: tile(NV, kc, a, lda, bp, c, ldc, add); break;
    }
  }
}

/* 16 float16 or bfloat16 values as floats (bfloat16 is a float's top half). */
AVX512 static inline __attribute__((always_inline)) __m512 widen16(const uint16_t *src, mx_dtype dtype) {
  __m256i h = _mm256_loadu_si256((const __m256i *)src);
  if (dtype == MX_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* Rows [k0, k0 + kc) and columns [j, j + 16 nv) of b (one batch, (K, N),
 * its rows dense) into the panel bp[kc][16 nv], zeros past column N. A
 * loop for each dtype, so that the test is made once, not per row. */
AVX512 static void pack_b(const mx_kview *b, int64_t k0, int64_t kc, int64_t j, int nv, float *bp) {
  int64_t cols = b->shape[2] - j, width = 16 * nv;
  const uint16_t *src = (const uint16_t *)b->data + k0 * b->strides[1] + j;
  if (cols < width) {
    for (int64_t k = 0; k < kc; k++, src += b->strides[1], bp += width) {
      uint16_t edge[NR] = {0};
      memcpy(edge, src, (size_t)cols * sizeof *src);
      for (int v = 0; v < nv; v++) _mm512_store_ps(bp + 16 * v, widen16(edge + 16 * v, b->dtype));
    }
  } else if (b->dtype == MX_F16) {
    for (int64_t k = 0; k < kc; k++, src += b->strides[1], bp += width)
      for (int v = 0; v < nv; v++) _mm512_store_ps(bp + 16 * v, widen16(src + 16 * v, MX_F16));
  } else {
    for (int64_t k = 0; k < kc; k++, src += b->strides[1], bp += width)
      for (int v = 0; v < nv; v++) _mm512_store_ps(bp + 16 * v, widen16(src + 16 * v, MX_BF16));
  }
}

/* v's matrix i (dim 0); a broadcast view has batch stride 0. */
static mx_kview batch(const mx_kview *v, int64_t i) {
  mx_kview s = *v;
  s.data = (char *)v->data + i * v->strides[0] * (int64_t)mx_dtype_size(v->dtype);
  s.shape[0] = 1;
  return s;
}

/* A (1, rows, cols) float32 view of data whose rows are ld apart. */
static mx_kview f32_rows(float *data, int64_t rows, int64_t cols, int64_t ld) {
  mx_kview v = {.data = data, .dtype = MX_F32, .ndim = 3};
  v.shape[0] = 1, v.shape[1] = rows, v.shape[2] = cols;
  v.strides[0] = rows * ld, v.strides[1] = ld, v.strides[2] = 1;
  return v;
}

static int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/* The workspace: a's rows, b's panel, out's tiles, each a whole number of
 * 64-byte lines. */
typedef struct {
  int64_t a, b, c;
} workspace_parts;

static workspace_parts parts_of(const mx_kview *out, const mx_kview *a) {
  int64_t Mp = round_up(out->shape[1], MR), Np = round_up(out->shape[2], 16), K = a->shape[2];
  return (workspace_parts){round_up(Mp * K, 16), KC * NR, Mp * Np};
}

bool mx__cpu_gemm16_takes(const mx_kview *a, const mx_kview *b) {
  return (b->dtype == MX_F16 || b->dtype == MX_BF16) && (b->strides[2] == 1 || b->shape[2] == 1) &&
         (a->strides[2] == 1 || a->shape[2] == 1) && __builtin_cpu_supports("avx512f");
}

int64_t mx__cpu_gemm16_workspace(const mx_kview *out, const mx_kview *a) {
  workspace_parts p = parts_of(out, a);
  return p.a + p.b + p.c;
}

void mx__cpu_gemm16(const mx_kview *out, const mx_kview *a, const mx_kview *b, float *workspace) {
  int64_t M = out->shape[1], N = out->shape[2], K = a->shape[2];
  int64_t Mp = round_up(M, MR), Np = round_up(N, 16);
  workspace_parts p = parts_of(out, a);
  float *af = workspace, *bp = af + p.a, *cf = bp + p.b;
  memset(af + M * K, 0, (size_t)((Mp - M) * K) * sizeof *af); /* the padding rows */
  mx_kview a_rows = f32_rows(af, M, K, K), c_rows = f32_rows(cf, M, N, Np);
  for (int64_t bi = 0; bi < out->shape[0]; bi++) {
    mx_kview ab = batch(a, bi), bb = batch(b, bi), ob = batch(out, bi);
    mx__cpu_backend.convert(&a_rows, &ab);
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      int64_t kc = K - k0 < KC ? K - k0 : KC;
      for (int64_t j = 0; j < N; j += NR) {
        int nv = N - j >= NR ? NV : (int)((N - j + 15) / 16);
        pack_b(&bb, k0, kc, j, nv, bp);
        panel_tiles(nv, Mp, kc, af + k0, K, bp, cf + j, Np, k0 > 0);
      }
    }
    mx__cpu_backend.convert(&ob, &c_rows);
  }
}

#else

bool mx__cpu_gemm16_takes(const mx_kview *a, const mx_kview *b) {
  (void)a, (void)b;
  return false;
}

int64_t mx__cpu_gemm16_workspace(const mx_kview *out, const mx_kview *a) {
  (void)out, (void)a;
  return 0;
}

void mx__cpu_gemm16(const mx_kview *out, const mx_kview *a, const mx_kview *b, float *workspace) {
  (void)out, (void)a, (void)b, (void)workspace;
}

#endif
