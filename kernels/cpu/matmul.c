/* Batched matrix products on the CPU. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/backend.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/gemm16.h"
#include "kernels/cpu/matmul.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/via_f32.h"
#include "kernels/elementwise.h"
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

/* --- float16 through float32 ------------------------------------------------ */

/* A thread's part of out, what it reads of a and b, and the float32 copies
 * of all three (or, packed, mx__cpu_gemm16's workspace) in one block from
 * the CPU's block cache. */
typedef struct {
  mx_kview out, a, b;
  const float *bias; /* float32, from out's first column: NULL, or added to the sums before the rounding */
  bool packed;
  float *staging;
  mx_status status;
  char why[256]; /* the error, when status is not MX_OK */
} matmul_share;

/* Staging parts start on a 64-byte line. */
static int64_t lines_of(int64_t floats) { return (floats + 15) / 16 * 16; }

static int64_t staging_numel(const matmul_share *s) {
  if (s->packed) return mx__cpu_gemm16_workspace(&s->out, &s->a);
  return lines_of(mx__kview_numel(&s->a)) + lines_of(mx__kview_numel(&s->b)) + mx__kview_numel(&s->out);
}

/* v with dim d cut to [lo, hi). */
static mx_kview slice(const mx_kview *v, int d, int64_t lo, int64_t hi) {
  mx_kview s = *v;
  s.data = (char *)v->data + lo * v->strides[d] * (int64_t)mx_dtype_size(v->dtype);
  s.shape[d] = hi - lo;
  return s;
}

/* Above this many elements, the operand every share would convert whole
 * (2 MiB in f32) no longer stays in a core's L2 cache. */
#define SHARED_OPERAND_MAX ((int64_t)1 << 19)

/* How many shares, and along which dim of out: one share per thread, over
 * batches when there are enough to go round, else over rows when a is the
 * larger operand (every thread then converts all of b), else over columns
 * (every thread converts all of a). Equal operands go over columns when our
 * own GEMM takes them (packed): its tiles are 6 rows, which a power of two
 * of rows pads (128 to 132), and 16 or 64 columns, which it does not. One
 * share for products too small to pay for a parallel region, and for those
 * whose shared operand outgrows the L2 cache: converting it once on all
 * threads and running one GEMM across them then beats converting it on
 * each, as 1024^3 and 2048^3 measured (bench/NOTES.md, round 10). */
static int share_count(const mx_kview *out, const mx_kview *a, const mx_kview *b, bool packed, int *dim) {
  int threads = mx__cpu_threads_here();
  int64_t na = mx__kview_numel(a), nb = mx__kview_numel(b);
  *dim = out->shape[0] >= threads ? 0 : na > nb || (na == nb && !packed) ? 1 : 2;
  if (threads < 2 || mx__kview_numel(out) * a->shape[2] < MX_PARALLEL_MIN_ELEMENTS) return 1;
  int64_t shared = *dim == 1 ? nb : na;
  if (*dim > 0 && shared > SHARED_OPERAND_MAX) return 1;
  return out->shape[*dim] < threads ? (int)out->shape[*dim] : threads;
}

/* v with its matrix dims swapped. */
static mx_kview transposed(const mx_kview *v) {
  mx_kview t = *v;
  t.shape[1] = v->shape[2], t.shape[2] = v->shape[1];
  t.strides[1] = v->strides[2], t.strides[2] = v->strides[1];
  return t;
}

/* A dense float32 copy of v at data, in v's order: a column-major operand
 * (a transposed one) stays column-major, which oneDNN reads as well, where a
 * row-major copy would walk it with a stride. */
static mx_kview stage(float *data, const mx_kview *v) {
  bool column_major = v->strides[1] == 1 && v->strides[2] != 1 && v->shape[1] > 1;
  mx_kview src = column_major ? transposed(v) : *v;
  mx_kview dense = mx__cpu_dense_f32_view(data, &src);
  mx__cpu_backend.convert(&dense, &src);
  return column_major ? transposed(&dense) : dense;
}

static void share_run(matmul_share *s) {
  if (s->packed) {
    mx__cpu_gemm16(&s->out, &s->a, &s->b, s->bias, s->staging);
    s->status = MX_OK;
    return;
  }
  float *fa = s->staging, *fb = fa + lines_of(mx__kview_numel(&s->a)), *fo = fb + lines_of(mx__kview_numel(&s->b));
  mx_kview va = stage(fa, &s->a), vb = stage(fb, &s->b), vo = mx__cpu_dense_f32_view(fo, &s->out);
  s->status = mx__dnnl_matmul(&vo, &va, &vb);
  if (mx__dnnl_declined(s->status)) s->status = mx__cpu_matmul_reference(&vo, &va, &vb);
  int64_t rows = s->out.shape[0] * s->out.shape[1], cols = s->out.shape[2];
  for (int64_t i = 0; i < rows && s->bias && s->status == MX_OK; i++)
    for (int64_t j = 0; j < cols; j++) fo[i * cols + j] += s->bias[j];
  if (s->status == MX_OK) mx__cpu_store_f32(&s->out, fo);
  else snprintf(s->why, sizeof s->why, "%s", mx_last_error()); /* this thread's error, not the caller's */
}

/* float16 as the GPU does it: f32 products and sums, one rounding at the end.
 *
 * Each thread converts what its share of out reads and multiplies it on its
 * own: oneDNN called inside a parallel region runs on the calling thread.
 * What a thread converts stays in its core's cache. Converting on all
 * threads and then running one GEMM across them left that GEMM reading the
 * other core's writes: 256^3 ran at 81-86% of the f32 GEMM called in turns
 * with it, against 85-88% this way, and 128^3 took 3x as long
 * (bench/NOTES.md, round 6). A share that runs on one thread takes our own
 * GEMM where the CPU and b's layout allow, which converts b as it packs
 * it (bench/NOTES.md, round 11); one share across the threads stays with
 * oneDNN, which uses them all. The shares' blocks are taken here, before
 * the region, in share order: taken by the threads inside it, a block
 * could go to the other thread on the next call and have to move between
 * the cores' caches first (round 11). */
static mx_status matmul_via_f32(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias) {
  bool takes = mx__cpu_gemm16_takes(a, b);
  int d, n = share_count(out, a, b, takes, &d);
  bool packed = (n > 1 || mx__cpu_threads_here() < 2) && takes;
  matmul_share *shares = calloc((size_t)n, sizeof *shares);
  /* the bias in float32, zeros past out's columns as far as a tile reads (gemm16.h): up to 15 floats past the
   * last column of a share of columns, from the share's own first, wherever that starts */
  int64_t bias_numel = bias ? lines_of(out->shape[2]) + 16 : 0;
  float *bias32 = bias ? mx__cpu_f32_alloc(bias_numel) : NULL;
  if (!shares || (bias && !bias32)) {
    free(shares);
    if (bias32) mx__cpu_f32_free(bias32, bias_numel);
    return mx__error(MX_OUT_OF_MEMORY, "mx_matmul: out of memory splitting a %s product", mx_dtype_name(a->dtype));
  }
  if (bias32) {
    mx_kview dense = mx__cpu_dense_f32_view(bias32, bias);
    mx__cpu_backend.convert(&dense, bias);
    memset(bias32 + out->shape[2], 0, sizeof(float) * (size_t)(bias_numel - out->shape[2]));
  }
  mx_status status = MX_OK;
  for (int i = 0; i < n && status == MX_OK; i++) {
    int64_t lo = out->shape[d] * i / n, hi = out->shape[d] * (i + 1) / n;
    matmul_share *s = &shares[i];
    s->out = slice(out, d, lo, hi);
    s->a = d < 2 ? slice(a, d, lo, hi) : *a;
    s->b = d != 1 ? slice(b, d, lo, hi) : *b;
    s->bias = bias32 ? bias32 + (d == 2 ? lo : 0) : NULL;
    s->packed = packed;
    if (!(s->staging = mx__cpu_f32_alloc(staging_numel(s))))
      status = mx__error(MX_OUT_OF_MEMORY, "mx_matmul: out of memory converting %s operands", mx_dtype_name(a->dtype));
  }
  if (status == MX_OK && n == 1) {
    share_run(&shares[0]); /* outside a region, so oneDNN uses every thread */
  } else if (status == MX_OK) {
    MX_PARALLEL_REGION(n)
    for (int i = mx__cpu_thread_index(); i < n; i += mx__cpu_team_size()) share_run(&shares[i]);
  }
  for (int i = 0; i < n && status == MX_OK; i++)
    if (shares[i].status != MX_OK) status = mx__error(shares[i].status, "%s", shares[i].why);
  /* freed in reverse: the block cache is last in, first out, so the next
   * product of these shapes gives each share (and thread) the same block */
  for (int i = n - 1; i >= 0; i--)
    if (shares[i].staging) mx__cpu_f32_free(shares[i].staging, staging_numel(&shares[i]));
  if (bias32) mx__cpu_f32_free(bias32, bias_numel);
  free(shares);
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
    if (!mx__dnnl_declined(status)) return status;
    return out->dtype == MX_F32 ? mx__cpu_matmul_reference(out, a, b) : matmul_via_f32(out, a, b, NULL);
  }
  case MX_F16: return matmul_via_f32(out, a, b, NULL);
  default: return mx__cpu_matmul_reference(out, a, b);
  }
}

/* oneDNN's kernel, else for 16 bits the product on float32 copies with the
 * bias added before the rounding and relu on the rounded values (the same
 * bits as on the sums); float32 and float64 decline to matmul and add,
 * which round once too. */
mx_status mx__cpu_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu) {
  mx_status status = mx__dnnl_linear(out, a, b, bias, relu);
  if (!mx__dnnl_declined(status)) return status;
  if (out->dtype != MX_F16 && out->dtype != MX_BF16) return MX_NOT_SUPPORTED;
  status = matmul_via_f32(out, a, b, bias);
  if (status == MX_OK && relu) status = mx__cpu_backend.unary(MX_UN_RELU, out, out, 0, 0);
  return status;
}
