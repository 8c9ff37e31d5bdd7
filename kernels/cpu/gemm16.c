/* A float32 GEMM for 16-bit operands that converts a and b while it packs
 * them.
 *
 * The layout is BLIS's, cut down to one thread: for each KC-row panel of
 * b, a's KC columns are converted into MR-row micro-panels (pack_a); b is
 * converted a panel of KC rows by NR columns at a time into a buffer that
 * stays in L1 while every MR-row tile of a runs against it (from dense rows
 * or, for a transposed operand, dense columns: pack_a_columns and
 * pack_b_columns read those, so no staging copy is made); each tile of
 * out stays in vector accumulators for the panel's KC rows. The last panel
 * rounds each tile straight into out; earlier ones (K > KC) keep their sums
 * in a float32 buffer the next adds to. Edges are padded: a with zero rows
 * up to a multiple of MR, a row's last panel with zero columns up to a
 * whole vector, and only out's own rows and columns are written. The panel
 * and its tiles are written once for both vector ISAs (gemm16_panel.inc):
 * AVX-512's 6 x 64 tiles and 128-row panels measured best of 4-12 rows by
 * 32 or 64 columns and 64-256 rows (bench/NOTES.md, round 11); AVX2's are
 * BLIS's Haswell shape, 6 x 16 (round 12). */
#include "kernels/cpu/gemm16.h"

#include <string.h>

#include "kernels/cpu/convert.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>

#include "kernels/cpu/transpose8.h"

enum {
  MR = 6,       /* rows of a tile */
  KC = 128,     /* rows of b in a panel: 32 KiB at AVX-512's width, leaving room in L1 for a's tile */
  NR_MAX = 64,  /* columns of the widest panel */
  PAD = 16,     /* the float32 sums' rows are padded to a multiple of the widest vector */
};

/* Where a tile's last panel rounds its sums to: out's 16-bit rows from the
 * tile's first, ld apart, of which rows and cols are out's own (a tile
 * may reach past both); bias: the float32 bias of the tile's first column
 * on (readable as far as the tile reaches), added before the rounding, or
 * NULL. */
typedef struct {
  uint16_t *data;
  int64_t ld, rows, cols;
  mx_dtype dtype;
  const float *bias;
} out16;

/* AVX-512: 16 floats a register, tiles of 6 x 4 zmm (24 accumulators). */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) __m512 widen_avx512(const uint16_t *src,
                                                                                                     mx_dtype dtype) {
  __m256i h = _mm256_loadu_si256((const __m256i *)src);
  if (dtype == MX_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16)); /* bfloat16 is a float's top half */
}
/* v rounded to 16 bfloat16 values at p: mx__bf16_nearest (kernels/cpu/convert.h)
 * in vectors, without its NaN test, which a NaN here cannot need: it comes
 * from bfloat16 operands or is the default NaN, so it is quiet and its low
 * 16 bits are zero, which the rounding leaves as they are. */
__attribute__((target("avx512f"))) static inline __attribute__((always_inline)) void store_bf16_avx512(uint16_t *p,
                                                                                                      __m512 v) {
  __m512i x = _mm512_castps_si512(v);
  __m512i odd = _mm512_and_si512(_mm512_srli_epi32(x, 16), _mm512_set1_epi32(1));
  __m512i rounded = _mm512_add_epi32(x, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), odd));
  _mm256_storeu_si256((__m256i *)p, _mm512_cvtepi32_epi16(_mm512_srli_epi32(rounded, 16)));
}
/* A transposed b's panel, for both ISAs (below the two panels). */
__attribute__((target("avx2,fma,f16c"))) static void pack_b_columns(const mx_kview *b, int64_t k0, int64_t kc,
                                                                     int64_t j, int64_t width, float *bp);
#define P_NAME avx512
#define P_TARGET "avx512f"
#define P_VEC __m512
#define P_W 16
#define P_NV 4
#define P_ZERO _mm512_setzero_ps
#define P_LOAD _mm512_load_ps
#define P_LOADU _mm512_loadu_ps
#define P_STORE _mm512_store_ps
#define P_STOREU _mm512_storeu_ps
#define P_SET1 _mm512_set1_ps
#define P_FMA _mm512_fmadd_ps
#define P_ADD _mm512_add_ps
#define P_WIDEN widen_avx512
#define P_STORE_F16(p, v) _mm256_storeu_si256((__m256i *)(p), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
#define P_STORE_BF16 store_bf16_avx512
#include "kernels/cpu/gemm16_panel.inc"

/* AVX2 with FMA and F16C: 8 floats a register, tiles of 6 x 2 ymm (12
 * accumulators of 16 registers). */
#define AVX2_TARGET "avx2,fma,f16c"
__attribute__((target(AVX2_TARGET))) static inline __attribute__((always_inline)) __m256 widen_avx2(const uint16_t *src,
                                                                                                    mx_dtype dtype) {
  __m128i h = _mm_loadu_si128((const __m128i *)src);
  if (dtype == MX_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}
/* v rounded to 8 bfloat16 values at p, as store_bf16_avx512. */
__attribute__((target(AVX2_TARGET))) static inline __attribute__((always_inline)) void store_bf16_avx2(uint16_t *p,
                                                                                                       __m256 v) {
  __m256i x = _mm256_castps_si256(v);
  __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
  __m256i top = _mm256_srli_epi32(_mm256_add_epi32(x, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), odd)), 16);
  _mm_storeu_si128((__m128i *)p, _mm_packus_epi32(_mm256_castsi256_si128(top), _mm256_extracti128_si256(top, 1)));
}
#define P_NAME avx2
#define P_TARGET AVX2_TARGET
#define P_VEC __m256
#define P_W 8
#define P_NV 2
#define P_ZERO _mm256_setzero_ps
#define P_LOAD _mm256_load_ps
#define P_LOADU _mm256_loadu_ps
#define P_STORE _mm256_store_ps
#define P_STOREU _mm256_storeu_ps
#define P_SET1 _mm256_set1_ps
#define P_FMA _mm256_fmadd_ps
#define P_ADD _mm256_add_ps
#define P_WIDEN widen_avx2
#define P_STORE_F16(p, v) _mm_storeu_si128((__m128i *)(p), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT))
#define P_STORE_BF16 store_bf16_avx2
#include "kernels/cpu/gemm16_panel.inc"

/* Columns [k, k + n) (n <= 8) of MR rows of a widened into the micro-panel
 * columns ap[k..k + n)[MR]; a NULL row reads as zeros. The 8 x 8 block
 * is transposed in registers; each store writes 8 floats where the column
 * has MR, the extra ones overwritten by the next store, or landing in the
 * workspace's slack after the last. Inlined twice: with whole blocks
 * (every row there, n = 8, dtype a constant) it runs without a test. */
__attribute__((target(AVX2_TARGET))) static inline __attribute__((always_inline)) void pack_block(
    const uint16_t *const row[MR], int64_t k, int64_t n, mx_dtype dtype, bool whole, float *ap) {
  __m256 v[8];
#pragma GCC unroll 8
  for (int r = 0; r < 8; r++) {
    uint16_t edge[8] = {0};
    if (r >= MR || (!whole && !row[r])) {
      v[r] = _mm256_setzero_ps();
      continue;
    }
    const uint16_t *src = row[r] + k;
    if (!whole && n < 8) src = memcpy(edge, src, (size_t)n * sizeof *src);
    v[r] = widen_avx2(src, dtype);
  }
  mx__transpose8_avx2(v);
#pragma GCC unroll 8
  for (int64_t c = 0; c < n; c++) _mm256_storeu_ps(ap + (k + c) * MR, v[c]);
}

/* Columns [k0, k0 + kc) of a's rows (one batch, 16-bit, rows dense),
 * converted into MR-row micro-panels ap[Mp / MR][kc][MR], zeros past row M,
 * so that a tile reads one stream (BLIS's packed A): read in place, its MR
 * rows were MR streams, and the AVX2 tiles ran at 0.7-0.8 of oneDNN's f32
 * GEMM (bench/NOTES.md, round 12). Whole 8-column blocks of whole tiles
 * take the path without tests: 4.8% of a 256^3 product's time, from 6.3%
 * (round 13). Both ISAs use it: AVX-512 CPUs have AVX2 too. */
__attribute__((target(AVX2_TARGET))) static void pack_a_rows(const mx_kview *a, int64_t k0, int64_t kc, float *ap) {
  _Static_assert(MR <= 8, "a micro-panel's column must fit one AVX2 register");
  int64_t M = a->shape[1];
  for (int64_t i = 0; i < M; i += MR, ap += MR * kc) {
    const uint16_t *row[MR];
    for (int r = 0; r < MR; r++)
      row[r] = i + r < M ? (const uint16_t *)a->data + (i + r) * a->strides[1] + k0 : NULL;
    int64_t k = 0;
    if (i + MR <= M && a->dtype == MX_F16)
      for (; k + 8 <= kc; k += 8) pack_block(row, k, 8, MX_F16, true, ap);
    else if (i + MR <= M)
      for (; k + 8 <= kc; k += 8) pack_block(row, k, 8, MX_BF16, true, ap);
    for (; k < kc; k += 8) pack_block(row, k, kc - k < 8 ? kc - k : 8, a->dtype, false, ap);
  }
}

/* pack_a for an a with dense columns (a transposed operand, such as the
 * output gradient in a weight's gradient): a micro-panel's column is MR
 * consecutive values of one of a's columns, widened 8 at a time; the 2
 * past MR are overwritten by the next column's store, or land in the
 * workspace's slack after the last. Rows past M read as zeros, and a read
 * never passes row M. */
__attribute__((target(AVX2_TARGET))) static void pack_a_columns(const mx_kview *a, int64_t k0, int64_t kc,
                                                                 float *ap) {
  int64_t M = a->shape[1];
  for (int64_t i = 0; i < M; i += MR, ap += MR * kc) {
    int64_t rows = M - i < MR ? M - i : MR;
    const uint16_t *src = (const uint16_t *)a->data + i * a->strides[1] + k0 * a->strides[2];
    for (int64_t k = 0; k < kc; k++, src += a->strides[2]) {
      uint16_t edge[8] = {0};
      const uint16_t *p = i + 8 <= M ? src : memcpy(edge, src, (size_t)rows * sizeof *src);
      _mm256_storeu_ps(ap + k * MR, widen_avx2(p, a->dtype));
    }
  }
}

/* a's KC-column micro-panels from its dense rows or, where they are not
 * dense (mx__cpu_gemm16_takes: then its columns are), its dense columns. */
static void pack_a(const mx_kview *a, int64_t k0, int64_t kc, float *ap) {
  if (a->strides[2] == 1 || a->shape[2] == 1) pack_a_rows(a, k0, kc, ap);
  else pack_a_columns(a, k0, kc, ap);
}

/* Rows [k0, k0 + kc) and columns [j, j + width) of a b with dense columns
 * (a transposed operand, such as a linear layer's weight in its forward)
 * into the panel bp[kc][width], zeros past column N: 8 columns of 8 rows
 * at a time, widened and transposed in registers as pack_a_rows's blocks. */
__attribute__((target(AVX2_TARGET))) static void pack_b_columns(const mx_kview *b, int64_t k0, int64_t kc,
                                                                 int64_t j, int64_t width, float *bp) {
  int64_t N = b->shape[2];
  for (int64_t c0 = 0; c0 < width; c0 += 8) {
    const uint16_t *col[8];
    for (int c = 0; c < 8; c++)
      col[c] = j + c0 + c < N ? (const uint16_t *)b->data + (j + c0 + c) * b->strides[2] + k0 * b->strides[1] : NULL;
    for (int64_t k = 0; k < kc; k += 8) {
      int64_t n = kc - k < 8 ? kc - k : 8;
      __m256 v[8];
#pragma GCC unroll 8
      for (int c = 0; c < 8; c++) {
        uint16_t edge[8] = {0};
        const uint16_t *src = col[c] ? col[c] + k : edge;
        if (col[c] && n < 8) src = memcpy(edge, src, (size_t)n * sizeof *src);
        v[c] = widen_avx2(src, b->dtype);
      }
      mx__transpose8_avx2(v);
      for (int64_t r = 0; r < n; r++) _mm256_storeu_ps(bp + (k + r) * width + c0, v[r]);
    }
  }
}

/* The ISA this CPU runs the GEMM with: its vector width, the vectors
 * across a tile and its panel function; NULL where it has neither. */
typedef struct {
  int width, nv;
  void (*panel)(const mx_kview *b, int64_t k0, int64_t kc, int64_t j, int nv, float *bp, int64_t Mp, const float *ap,
                float *c, int64_t ldc, bool add, const out16 *o);
} vector_isa;

static const vector_isa *isa_here(void) {
  static const vector_isa avx512 = {16, 4, panel_avx512}, avx2 = {8, 2, panel_avx2};
  if (__builtin_cpu_supports("avx512f")) return &avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && mx__cpu_has_f16c()) return &avx2;
  return NULL;
}

/* v's matrix i (dim 0); a broadcast view has batch stride 0. */
static mx_kview batch(const mx_kview *v, int64_t i) {
  mx_kview s = *v;
  s.data = (char *)v->data + i * v->strides[0] * (int64_t)mx_dtype_size(v->dtype);
  s.shape[0] = 1;
  return s;
}

static int64_t round_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/* The workspace: a's micro-panels for one panel of rows of b (with 8
 * floats of slack, see pack_a), b's panel and, where K takes more than one
 * panel, the float32 sums of out's tiles, each a whole number of 64-byte
 * lines. */
typedef struct {
  int64_t a, b, c;
} workspace_parts;

static workspace_parts parts_of(const mx_kview *out, int64_t K) {
  int64_t Mp = round_up(out->shape[1], MR), Np = round_up(out->shape[2], PAD);
  return (workspace_parts){round_up(Mp * KC + 8, 16), KC * NR_MAX, K > KC ? Mp * Np : 0};
}

/* Whether v's matrix has dense rows or dense columns (a dim of 1 is dense either way). */
static bool dense_rows_or_columns(const mx_kview *v) {
  return v->strides[2] == 1 || v->shape[2] == 1 || v->strides[1] == 1 || v->shape[1] == 1;
}

bool mx__cpu_gemm16_takes(const mx_kview *a, const mx_kview *b) {
  return (b->dtype == MX_F16 || b->dtype == MX_BF16) && a->dtype == b->dtype && dense_rows_or_columns(a) &&
         dense_rows_or_columns(b) && isa_here();
}

int64_t mx__cpu_gemm16_workspace(const mx_kview *out, const mx_kview *a) {
  workspace_parts p = parts_of(out, a->shape[2]);
  return p.a + p.b + p.c;
}

void mx__cpu_gemm16(const mx_kview *out, const mx_kview *a, const mx_kview *b, const float *bias, float *workspace) {
  int64_t M = out->shape[1], N = out->shape[2], K = a->shape[2];
  int64_t Mp = round_up(M, MR), Np = round_up(N, PAD);
  const vector_isa *isa = isa_here();
  int nr = isa->width * isa->nv;
  workspace_parts p = parts_of(out, K);
  float *ap = workspace, *bp = ap + p.a, *cf = p.c ? bp + p.b : NULL;
  for (int64_t bi = 0; bi < out->shape[0]; bi++) {
    mx_kview ab = batch(a, bi), bb = batch(b, bi), ob = batch(out, bi);
    for (int64_t k0 = 0; k0 < K; k0 += KC) {
      int64_t kc = K - k0 < KC ? K - k0 : KC;
      pack_a(&ab, k0, kc, ap);
      for (int64_t j = 0; j < N; j += nr) {
        int nv = N - j >= nr ? isa->nv : (int)((N - j + isa->width - 1) / isa->width);
        out16 o = {(uint16_t *)ob.data + j, ob.strides[1], M, N - j, ob.dtype, bias ? bias + j : NULL};
        isa->panel(&bb, k0, kc, j, nv, bp, Mp, ap, cf ? cf + j : NULL, Np, k0 > 0, k0 + kc == K ? &o : NULL);
      }
    }
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

void mx__cpu_gemm16(const mx_kview *out, const mx_kview *a, const mx_kview *b, const float *bias, float *workspace) {
  (void)out, (void)a, (void)b, (void)bias, (void)workspace;
}

#endif
