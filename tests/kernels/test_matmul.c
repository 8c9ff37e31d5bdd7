/* The CPU matmul kernels (kernels/cpu/matmul.h, kernels/cpu/dnnl.h): oneDNN
 * against the plain loops on contiguous, transposed, strided and
 * batch-broadcast operands in float32 and bfloat16; float16 split into
 * per-thread shares; our own 16-bit GEMM on its own; the cached primitives
 * on several threads at once; and a thread's oneDNN state freed when it
 * exits. */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/gemm16.h"
#include "kernels/cpu/matmul.h"
#include "mx_config.h"

#ifdef _OPENMP
#include <omp.h>
#endif

/* --- operands ------------------------------------------------------------------------ */

/* How an operand's (B, R, C) lies in memory. */
typedef enum {
  LAY_CONTIG,      /* (B, R, C) row-major */
  LAY_TRANS,       /* (B, C, R) row-major: each matrix transposed */
  LAY_BCAST,       /* one (R, C) matrix, batch stride 0 */
  LAY_BCAST_TRANS, /* one (C, R) matrix, batch stride 0 */
  LAY_WINDOW,      /* rows 1.. and columns 2.. of a (B, R+1, C+3) buffer: leading dimension C+3 */
  LAY_ODD,         /* every stride unusual: (B, R, C) at (R*C*7+5, 3*C+1, 3) */
} layout;

static const char *layout_name[] = {"contig", "trans", "bcast", "bcast-trans", "window", "odd"};

typedef struct {
  mx_kview v;
  void *buf;
  int64_t buf_elems;
} operand;

static operand operand_new(mx_dtype dt, int64_t B, int64_t R, int64_t C, layout lay) {
  operand o;
  memset(&o, 0, sizeof o);
  o.v.dtype = dt;
  o.v.ndim = 3;
  o.v.shape[0] = B, o.v.shape[1] = R, o.v.shape[2] = C;
  int64_t off = 0, *s = o.v.strides;
  switch (lay) {
  case LAY_CONTIG: s[0] = R * C, s[1] = C, s[2] = 1, o.buf_elems = B * R * C; break;
  case LAY_TRANS: s[0] = R * C, s[1] = 1, s[2] = R, o.buf_elems = B * R * C; break;
  case LAY_BCAST: s[0] = 0, s[1] = C, s[2] = 1, o.buf_elems = R * C; break;
  case LAY_BCAST_TRANS: s[0] = 0, s[1] = 1, s[2] = R, o.buf_elems = R * C; break;
  case LAY_WINDOW:
    s[0] = (R + 1) * (C + 3), s[1] = C + 3, s[2] = 1, o.buf_elems = B * (R + 1) * (C + 3);
    off = (C + 3) + 2;
    break;
  case LAY_ODD:
    s[0] = R * C * 7 + 5, s[1] = 3 * C + 1, s[2] = 3, o.buf_elems = B * s[0];
    break;
  }
  size_t es = mx_dtype_size(dt);
  o.buf = malloc((size_t)o.buf_elems * es);
  cr_assert(o.buf);
  for (int64_t i = 0; i < o.buf_elems; i++) mx_element_store((char *)o.buf + i * (int64_t)es, dt, 7.0); /* sentinels */
  o.v.data = (char *)o.buf + off * (int64_t)es;
  return o;
}

static void operand_free(operand *o) { free(o->buf); }

static int64_t numel(const mx_kview *v) { return v->shape[0] * v->shape[1] * v->shape[2]; }

static void *elem(const mx_kview *v, int64_t i) {
  int64_t c = i % v->shape[2], r = i / v->shape[2] % v->shape[1], b = i / (v->shape[1] * v->shape[2]);
  return (char *)v->data + (b * v->strides[0] + r * v->strides[1] + c * v->strides[2]) * (int64_t)mx_dtype_size(v->dtype);
}

static double get(const mx_kview *v, int64_t i) { return mx_element_load(elem(v, i), v->dtype); }
static void set(const mx_kview *v, int64_t i, double x) { mx_element_store(elem(v, i), v->dtype, x); }

static uint64_t rng_state;
static double uniform(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

/* Random values, rounded to the dtype (a broadcast matrix is written B times:
 * the last write stays, the same for every batch). */
static void fill_random(const mx_kview *v) {
  for (int64_t i = 0; i < numel(v); i++) set(v, i, uniform());
}

/* A contiguous copy of v's values in dt, optionally of their absolute values. */
static operand copy_as(const mx_kview *v, mx_dtype dt, bool absolute) {
  operand o = operand_new(dt, v->shape[0], v->shape[1], v->shape[2], LAY_CONTIG);
  for (int64_t i = 0; i < numel(v); i++) set(&o.v, i, absolute ? fabs(get(v, i)) : get(v, i));
  return o;
}

/* --- one product, checked ------------------------------------------------------------ */

typedef struct {
  int64_t B, M, K, N;
  layout a, b, out; /* out: LAY_CONTIG or LAY_WINDOW */
} mm_case;

static const mm_case cases[] = {
    {3, 5, 7, 4, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},
    {2, 17, 300, 9, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},
    {4, 64, 128, 48, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},
    {3, 6, 11, 5, LAY_TRANS, LAY_CONTIG, LAY_CONTIG},
    {3, 6, 11, 5, LAY_CONTIG, LAY_TRANS, LAY_CONTIG},
    {2, 33, 65, 17, LAY_TRANS, LAY_TRANS, LAY_CONTIG},
    {4, 8, 16, 12, LAY_BCAST, LAY_CONTIG, LAY_CONTIG},
    {4, 8, 16, 12, LAY_CONTIG, LAY_BCAST, LAY_CONTIG},
    {5, 9, 40, 7, LAY_TRANS, LAY_BCAST_TRANS, LAY_CONTIG},
    {3, 10, 24, 6, LAY_BCAST_TRANS, LAY_TRANS, LAY_CONTIG},
    {2, 7, 13, 9, LAY_WINDOW, LAY_WINDOW, LAY_WINDOW},
    {2, 7, 13, 9, LAY_ODD, LAY_CONTIG, LAY_CONTIG},
    {3, 1, 20, 6, LAY_ODD, LAY_TRANS, LAY_CONTIG},   /* a row vector with a non-unit stride */
    {3, 6, 20, 1, LAY_CONTIG, LAY_ODD, LAY_CONTIG},  /* a column vector likewise */
    {1, 1, 50, 1, LAY_TRANS, LAY_TRANS, LAY_WINDOW}, /* a dot product */
};
#define NCASES (sizeof cases / sizeof *cases)

static void case_name(char *buf, size_t n, const mm_case *c, mx_dtype dt) {
  snprintf(buf, n, "%s (%lld,%lld,%lld)@(%lld,%lld,%lld) a %s, b %s, out %s", mx_dtype_name(dt), (long long)c->B,
           (long long)c->M, (long long)c->K, (long long)c->B, (long long)c->K, (long long)c->N, layout_name[c->a],
           layout_name[c->b], layout_name[c->out]);
}

/* The float64 product of a and b, and of their absolute values (the bound of
 * each sum's terms). */
static void exact_and_bound(const mx_kview *a, const mx_kview *b, operand *exact, operand *bound) {
  operand ea = copy_as(a, MX_F64, false), eb = copy_as(b, MX_F64, false);
  operand aa = copy_as(a, MX_F64, true), ab = copy_as(b, MX_F64, true);
  *exact = operand_new(MX_F64, a->shape[0], a->shape[1], b->shape[2], LAY_CONTIG);
  *bound = operand_new(MX_F64, a->shape[0], a->shape[1], b->shape[2], LAY_CONTIG);
  cr_assert_eq(mx__cpu_matmul_reference(&exact->v, &ea.v, &eb.v), MX_OK);
  cr_assert_eq(mx__cpu_matmul_reference(&bound->v, &aa.v, &ab.v), MX_OK);
  operand_free(&ea), operand_free(&eb), operand_free(&aa), operand_free(&ab);
}

/* The largest error a dt result may have from the exact one: one float32
 * sum of K products is within (K+1) u32 sum|terms| of it, whatever its
 * order; bfloat16 and float16 then round that once (u16 relative, or half
 * the smallest subnormal). */
static double tolerance(mx_dtype dt, int64_t K, double exact, double bound) {
  double e = (double)(K + 1) * 0x1p-24 * bound;
  if (dt == MX_BF16) return 0x1p-8 * (fabs(exact) + e) + e + 0x1p-134;
  if (dt == MX_F16) return 0x1p-11 * (fabs(exact) + e) + e + 0x1p-25;
  return e;
}

/* Counts the elements where |got - want| > k * tolerance; reports a few. */
static int compare(const char *what, const mx_kview *got, const mx_kview *want, const operand *exact,
                   const operand *bound, mx_dtype dt, int64_t K, double k) {
  int bad = 0;
  for (int64_t i = 0; i < numel(got); i++) {
    double g = get(got, i), w = get(want, i), tol = k * tolerance(dt, K, get(&exact->v, i), get(&bound->v, i));
    if (!(fabs(g - w) <= tol) && ++bad <= 5)
      cr_log_error("%s: element %lld: got %.9g, want %.9g (tolerance %.3g)", what, (long long)i, g, w, tol);
  }
  return bad;
}

/* Every element of out's buffer outside its view still holds the sentinel 7. */
static void expect_nothing_outside(const operand *out, const char *what) {
  int64_t sevens = 0, inside = 0;
  size_t es = mx_dtype_size(out->v.dtype);
  for (int64_t i = 0; i < out->buf_elems; i++)
    sevens += mx_element_load((char *)out->buf + i * (int64_t)es, out->v.dtype) == 7.0;
  for (int64_t i = 0; i < numel(&out->v); i++) inside += get(&out->v, i) == 7.0;
  cr_expect_eq(sevens - inside, out->buf_elems - numel(&out->v), "%s: wrote outside the output view", what);
}

/* oneDNN, the dispatcher and the loops on one case; false when oneDNN has no
 * kernel for it (bfloat16 on an old CPU). */
static bool check_case(const mm_case *c, mx_dtype dt) {
  char what[300];
  case_name(what, sizeof what, c, dt);
  operand a = operand_new(dt, c->B, c->M, c->K, c->a), b = operand_new(dt, c->B, c->K, c->N, c->b);
  operand out = operand_new(dt, c->B, c->M, c->N, c->out);
  operand ref = operand_new(dt, c->B, c->M, c->N, LAY_CONTIG), disp = operand_new(dt, c->B, c->M, c->N, LAY_CONTIG);
  fill_random(&a.v), fill_random(&b.v);
  for (int64_t i = 0; i < numel(&out.v); i++) set(&out.v, i, NAN);

  mx_status st = mx__dnnl_matmul(&out.v, &a.v, &b.v);
  if (!MX_HAVE_DNNL) cr_expect_eq(st, MX_NOT_BUILT, "%s", what);
  else if (dt == MX_F32) cr_expect_eq(st, MX_OK, "%s: oneDNN gave %s: %s", what, mx_status_str(st), mx_last_error());
  else cr_expect(st == MX_OK || st == MX_NOT_SUPPORTED, "%s: oneDNN gave %s: %s", what, mx_status_str(st), mx_last_error());
  cr_assert_eq(mx__cpu_matmul_reference(&ref.v, &a.v, &b.v), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx__cpu_matmul(&disp.v, &a.v, &b.v), MX_OK, "%s: %s", what, mx_last_error());

  operand exact, bound;
  exact_and_bound(&a.v, &b.v, &exact, &bound);
  char w2[400];
  snprintf(w2, sizeof w2, "%s: loops vs float64", what);
  cr_expect_eq(compare(w2, &ref.v, &exact.v, &exact, &bound, dt, c->K, 1), 0, "%s", w2);
  snprintf(w2, sizeof w2, "%s: dispatcher vs loops", what);
  cr_expect_eq(compare(w2, &disp.v, &ref.v, &exact, &bound, dt, c->K, 2), 0, "%s", w2);
  if (st == MX_OK) {
    snprintf(w2, sizeof w2, "%s: oneDNN vs loops", what);
    cr_expect_eq(compare(w2, &out.v, &ref.v, &exact, &bound, dt, c->K, 2), 0, "%s", w2);
    snprintf(w2, sizeof w2, "%s: oneDNN vs float64", what);
    cr_expect_eq(compare(w2, &out.v, &exact.v, &exact, &bound, dt, c->K, 1), 0, "%s", w2);
    expect_nothing_outside(&out, what);
  }
  operand_free(&a), operand_free(&b), operand_free(&out), operand_free(&ref), operand_free(&disp);
  operand_free(&exact), operand_free(&bound);
  return st == MX_OK;
}

Test(matmul, onednn_matches_reference_f32) {
  for (size_t i = 0; i < NCASES; i++) {
    rng_state = 0x9e3779b97f4a7c15ull + i;
    check_case(&cases[i], MX_F32);
  }
}

Test(matmul, onednn_matches_reference_bf16) {
  int no_kernel = 0;
  for (size_t i = 0; i < NCASES; i++) {
    rng_state = 0x5851f42d4c957f2dull + i;
    no_kernel += !check_case(&cases[i], MX_BF16);
  }
  if (no_kernel && MX_HAVE_DNNL)
    cr_log_info("oneDNN has no bfloat16 matmul on this CPU for %d of %d cases", no_kernel, (int)NCASES);
}

#if MX_HAVE_DNNL && defined(__x86_64__)
/* oneDNN takes bfloat16 only where the CPU has bf16 dot products (it
 * emulates them elsewhere, slower than float32; kernels/cpu/dnnl_common.h).
 * GCC's own cpuid reading is the independent answer. Wrong under
 * ONEDNN_MAX_CPU_ISA set below avx512_core_bf16, which nothing here sets. */
Test(matmul, onednn_takes_bf16_only_with_bf16_dot_products) {
  cr_expect(mx__dnnl_runs(MX_F32));
  cr_expect(!mx__dnnl_runs(MX_F16));
  cr_expect(!mx__dnnl_runs(MX_F64));
  bool dot = __builtin_cpu_supports("avx512bf16");
  cr_expect_eq(mx__dnnl_runs(MX_BF16), dot, "oneDNN %s bf16 natively, cpuid says the CPU %s bf16 dot products",
               mx__dnnl_runs(MX_BF16) ? "runs" : "does not run", dot ? "has" : "lacks");
}
#endif

/* The same shape again hits the cache and gives the same numbers. */
Test(matmul, cached_primitive_reused) {
  const mm_case *c = &cases[5];
  rng_state = 31;
  operand a = operand_new(MX_F32, c->B, c->M, c->K, c->a), b = operand_new(MX_F32, c->B, c->K, c->N, c->b);
  operand o1 = operand_new(MX_F32, c->B, c->M, c->N, LAY_CONTIG), o2 = operand_new(MX_F32, c->B, c->M, c->N, LAY_CONTIG);
  fill_random(&a.v), fill_random(&b.v);
  mx_status s1 = mx__dnnl_matmul(&o1.v, &a.v, &b.v), s2 = mx__dnnl_matmul(&o2.v, &a.v, &b.v);
  cr_expect_eq(s1, s2);
  if (s1 == MX_OK) cr_expect_eq(memcmp(o1.buf, o2.buf, (size_t)numel(&o1.v) * sizeof(float)), 0);
  operand_free(&a), operand_free(&b), operand_free(&o1), operand_free(&o2);
}

/* Each thread keeps the memory objects of the primitives it ran and points
 * them at every call's operands (kernels/cpu/dnnl_common.h). check_case runs
 * each shape twice on other buffers (oneDNN, then the dispatcher), and 40
 * shapes of three or four objects each turn the thread's 32 kept objects
 * over, so the second round makes them again for buffers of the same shape. */
Test(matmul, kept_memories_follow_the_operands) {
  for (int round = 0; round < 2; round++)
    for (int i = 0; i < 40; i++) {
      mm_case c = {1, 3 + i, 5, 4, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG};
      rng_state = 1000u * (uint64_t)round + (uint64_t)i + 1;
      check_case(&c, MX_F32);
    }
}

/* --- float16: each thread a share ----------------------------------------------------- */

/* float16 runs through float32 with each thread converting and multiplying
 * its own share of out: a run of batches, rows (a the larger operand) or
 * columns (b the larger); or in one share across the threads when the
 * operand every share would convert is over 2^19 elements. Three threads,
 * so shares come out uneven too, whatever the machine's cores. */
static const mm_case f16_cases[] = {
    {1, 96, 80, 40, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},    /* rows */
    {1, 65, 70, 33, LAY_ODD, LAY_TRANS, LAY_WINDOW},        /* rows, strided a, transposed b */
    {1, 3, 4000, 3, LAY_TRANS, LAY_CONTIG, LAY_CONTIG},     /* three rows for three threads */
    {1, 40, 80, 96, LAY_CONTIG, LAY_TRANS, LAY_CONTIG},     /* columns of a transposed b */
    {1, 48, 64, 48, LAY_CONTIG, LAY_CONTIG, LAY_WINDOW},    /* equal operands: columns for our GEMM, else rows */
    {1, 33, 70, 65, LAY_TRANS, LAY_WINDOW, LAY_WINDOW},     /* columns, windowed b and out */
    {1, 2, 9000, 5, LAY_CONTIG, LAY_ODD, LAY_CONTIG},       /* five columns, odd strides */
    {4, 20, 64, 30, LAY_BCAST, LAY_CONTIG, LAY_CONTIG},     /* batches, a broadcast */
    {5, 50, 64, 30, LAY_CONTIG, LAY_BCAST_TRANS, LAY_WINDOW}, /* batches, b broadcast and transposed */
    {1, 9, 60000, 9, LAY_CONTIG, LAY_TRANS, LAY_WINDOW},    /* one share: rows would each convert b, 540000 */
    {1, 8, 70000, 9, LAY_TRANS, LAY_CONTIG, LAY_CONTIG},    /* one share: columns would each convert a, 560000 */
};

static void use_three_threads(void) { cr_assert_eq(mx_set_num_threads(3), MX_OK); }

Test(matmul, f16_shares_match_reference) {
  use_three_threads();
  for (size_t i = 0; i < sizeof f16_cases / sizeof *f16_cases; i++) {
    rng_state = 0x2545f4914f6cdd1dull + i;
    check_case(&f16_cases[i], MX_F16);
  }
  for (size_t i = 0; i < NCASES; i++) { /* the shared cases: most too small to split, two by batches */
    rng_state = 0x14057b7ef767814full + i;
    check_case(&cases[i], MX_F16);
  }
}

/* A share runs oneDNN inside a parallel region, on one thread. A float32
 * primitive of the share's shape made outside a region first (for all the
 * threads) must still give the whole share there. */
Test(matmul, f16_share_after_a_float32_product_of_its_shape) {
  use_three_threads();
  mm_case share = {1, 32, 80, 40, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG};
  rng_state = 5;
  check_case(&share, MX_F32);
  check_case(&f16_cases[0], MX_F16); /* 96 rows: three shares of 32 */
}

/* A linear split over its columns runs gemm16 on each share with the bias from the share's first column, which
 * its tiles read up to 15 floats past the share's last: the MLP's last layer at a batch of 10 (10 x 512 by the
 * transposed 512 x 10 weight, 3 shares of 3 or 4 columns) must find them inside the bias's buffer. ASan caught
 * the reads past it in the MNIST demo; here they would be caught as well. */
Test(matmul, f16_shares_of_columns_read_the_bias_inside_it) {
  use_three_threads();
  mm_case c = {1, 10, 512, 10, LAY_CONTIG, LAY_TRANS, LAY_CONTIG};
  char what[300];
  case_name(what, sizeof what, &c, MX_F16);
  operand a = operand_new(MX_F16, 1, c.M, c.K, c.a), b = operand_new(MX_F16, 1, c.K, c.N, c.b);
  operand out = operand_new(MX_F16, 1, c.M, c.N, c.out), bias = operand_new(MX_F16, 1, 1, c.N, LAY_CONTIG);
  rng_state = 11;
  fill_random(&a.v), fill_random(&b.v), fill_random(&bias.v);
  mx_kview bias_v = {.data = bias.v.data, .dtype = MX_F16, .ndim = 1, .shape = {c.N}, .strides = {1}};
  cr_assert_eq(mx__cpu_linear(&out.v, &a.v, &b.v, &bias_v, false), MX_OK, "%s", mx_last_error());
  operand exact, bound;
  exact_and_bound(&a.v, &b.v, &exact, &bound);
  for (int64_t i = 0; i < c.M * c.N; i++) {
    double v = get(&bias.v, i % c.N);
    ((double *)exact.v.data)[i] += v;
    ((double *)bound.v.data)[i] += fabs(v);
  }
  cr_expect_eq(compare(what, &out.v, &exact.v, &exact, &bound, MX_F16, c.K, 1), 0, "%s with a bias", what);
  operand_free(&a), operand_free(&b), operand_free(&out), operand_free(&bias), operand_free(&exact),
      operand_free(&bound);
}

/* --- our own 16-bit GEMM (kernels/cpu/gemm16.c) ----------------------------------------- */

/* Its tiles are 6 rows by 64 columns (AVX-512) or 16 (AVX2) and its panels
 * 128 rows of b, so these take partial tiles, panels and vectors at every
 * edge. */
static const mm_case gemm16_cases[] = {
    {1, 5, 7, 3, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},      /* less than one tile */
    {2, 37, 300, 45, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},  /* panels of 128, 128 and 44 rows */
    {3, 12, 128, 64, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},  /* whole tiles, one whole panel */
    {2, 13, 129, 200, LAY_WINDOW, LAY_WINDOW, LAY_WINDOW}, /* 200 columns: 64, 64, 64 and 8; AVX2 12 x 16 and 8 */
    {4, 8, 40, 17, LAY_BCAST, LAY_CONTIG, LAY_CONTIG},     /* a broadcast */
    {4, 8, 40, 97, LAY_CONTIG, LAY_BCAST, LAY_CONTIG},     /* b broadcast; 97 columns: 64 and 33; AVX2 6 x 16 and 1 */
    {1, 1, 50, 1, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},     /* a dot product */
    /* transposed operands, packed from their dense columns: a linear layer's weight (b) in its forward, the output
     * gradient (a) in its weight's gradient; partial tiles, panels, 8-row and 8-column blocks at every edge */
    {2, 37, 300, 45, LAY_CONTIG, LAY_TRANS, LAY_CONTIG},
    {2, 37, 300, 45, LAY_TRANS, LAY_CONTIG, LAY_CONTIG},
    {1, 13, 129, 200, LAY_TRANS, LAY_TRANS, LAY_WINDOW},
    {3, 12, 128, 64, LAY_BCAST_TRANS, LAY_BCAST_TRANS, LAY_CONTIG},
    {1, 6, 8, 8, LAY_TRANS, LAY_TRANS, LAY_CONTIG},        /* one whole tile and block: reads end at the buffers' ends */
    {1, 7, 9, 3, LAY_TRANS, LAY_TRANS, LAY_CONTIG},
    {1, 1, 50, 1, LAY_TRANS, LAY_TRANS, LAY_CONTIG},
};

/* Whether this CPU runs our GEMM: AVX-512, or AVX2 with FMA and F16C. */
static bool gemm16_here(void) {
#if defined(__x86_64__) && defined(__GNUC__)
  return __builtin_cpu_supports("avx512f") ||
         (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c"));
#else
  return false;
#endif
}

/* mx__cpu_gemm16 on out, a, b and bias (or NULL) with a workspace of its
 * size, NaN-filled as the last product might have left it. */
static void run_gemm16(const operand *out, const operand *a, const operand *b, const float *bias) {
  int64_t floats = mx__cpu_gemm16_workspace(&out->v, &a->v);
  float *workspace = aligned_alloc(64, (size_t)(floats + 15) / 16 * 64);
  cr_assert(workspace);
  for (int64_t i = 0; i < floats; i++) workspace[i] = NAN;
  mx__cpu_gemm16(&out->v, &a->v, &b->v, bias, workspace);
  free(workspace);
}

/* One case through mx__cpu_gemm16 alone, with a bias of quarters from -3/4
 * to 3/4 (exact in 16 bits) when with_bias, zeros past the columns as its
 * contract asks; returns the elements out of tolerance against the float64
 * product plus the bias. */
static int check_gemm16(const mm_case *c, mx_dtype dt, bool with_bias) {
  char what[300];
  case_name(what, sizeof what, c, dt);
  operand a = operand_new(dt, c->B, c->M, c->K, c->a), b = operand_new(dt, c->B, c->K, c->N, c->b);
  operand out = operand_new(dt, c->B, c->M, c->N, c->out);
  fill_random(&a.v), fill_random(&b.v);
  cr_assert(mx__cpu_gemm16_takes(&a.v, &b.v), "%s: not taken", what);
  float *bias = with_bias ? calloc((size_t)(c->N + 15) / 16 * 16, sizeof(float)) : NULL;
  for (int64_t j = 0; bias && j < c->N; j++) bias[j] = (float)(j % 7 - 3) / 4;
  run_gemm16(&out, &a, &b, bias);
  operand exact, bound;
  exact_and_bound(&a.v, &b.v, &exact, &bound);
  for (int64_t i = 0; bias && i < c->B * c->M * c->N; i++) {
    ((double *)exact.v.data)[i] += bias[i % c->N];
    ((double *)bound.v.data)[i] += fabs(bias[i % c->N]);
  }
  free(bias);
  int bad = compare(what, &out.v, &exact.v, &exact, &bound, dt, c->K, 1);
  expect_nothing_outside(&out, what);
  operand_free(&a), operand_free(&b), operand_free(&out), operand_free(&exact), operand_free(&bound);
  return bad;
}

Test(matmul, gemm16_matches_float64) {
  operand a = operand_new(MX_F16, 1, 4, 4, LAY_CONTIG), b = operand_new(MX_F16, 1, 4, 4, LAY_CONTIG);
  operand at = operand_new(MX_F16, 1, 4, 4, LAY_TRANS), bt = operand_new(MX_F16, 1, 4, 4, LAY_TRANS);
  operand odd = operand_new(MX_F16, 1, 4, 4, LAY_ODD), b32 = operand_new(MX_F32, 1, 4, 4, LAY_CONTIG);
  bool vectors = gemm16_here();
  cr_expect_eq(mx__cpu_gemm16_takes(&a.v, &b.v), vectors, "takes dense rows %s AVX-512 or AVX2",
               vectors ? "with" : "without");
  cr_expect_eq(mx__cpu_gemm16_takes(&at.v, &bt.v), vectors, "and dense columns");
  cr_expect(!mx__cpu_gemm16_takes(&odd.v, &b.v), "neither rows nor columns dense stays with oneDNN");
  cr_expect(!mx__cpu_gemm16_takes(&a.v, &odd.v), "as a b too");
  cr_expect(!mx__cpu_gemm16_takes(&a.v, &b32.v), "float32 stays with oneDNN");
  cr_expect(!mx__cpu_gemm16_takes(&b32.v, &b.v), "so does a float32 a");
  operand_free(&a), operand_free(&b), operand_free(&at), operand_free(&bt), operand_free(&odd), operand_free(&b32);
  if (!vectors) cr_skip_test("neither AVX-512 nor AVX2 with FMA and F16C here: the GEMM is not used");
  static const mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (size_t d = 0; d < 2; d++)
    for (size_t i = 0; i < sizeof gemm16_cases / sizeof *gemm16_cases; i++) {
      rng_state = 0x5851f42d4c957f2dull + i;
      cr_expect_eq(check_gemm16(&gemm16_cases[i], dtypes[d], false), 0);
      cr_expect_eq(check_gemm16(&gemm16_cases[i], dtypes[d], true), 0, "with a bias");
    }
}

/* A value of magnitude 2^[-span, span), never zero: a zero product would
 * be -0 in float32 but +0 from the GEMM's sum, which starts at +0. */
static double wide_random(int span) {
  double x = uniform();
  return ldexp(x == 0 ? 1 : x, (int)(uniform() * span));
}

/* Each sum of a K = 1 product is one product of two 16-bit values, exact
 * in float32 (rounded once where it leaves float32's range), so the GEMM's
 * out must be bit for bit what the conversions make of it: ties to even,
 * overflow to infinity, subnormals, quiet NaNs. 13 x 70 ends in partial
 * tiles and vectors on both ISAs. */
Test(matmul, gemm16_rounds_as_the_conversions) {
  if (!gemm16_here()) cr_skip_test("neither AVX-512 nor AVX2 with FMA and F16C here: the GEMM is not used");
  static const mx_dtype dtypes[] = {MX_F16, MX_BF16};
  for (size_t d = 0; d < 2; d++) {
    mx_dtype dt = dtypes[d];
    int span = dt == MX_F16 ? 12 : 72; /* products from subnormal to past the largest finite value */
    operand a = operand_new(dt, 2, 13, 1, LAY_CONTIG), b = operand_new(dt, 2, 1, 70, LAY_CONTIG);
    operand out = operand_new(dt, 2, 13, 70, LAY_WINDOW);
    rng_state = 0x9e3779b97f4a7c15ull + d;
    for (int64_t i = 0; i < numel(&a.v); i++) set(&a.v, i, wide_random(span));
    for (int64_t i = 0; i < numel(&b.v); i++) set(&b.v, i, wide_random(span));
    set(&a.v, 3, NAN), set(&a.v, 4, INFINITY), set(&b.v, 5, -INFINITY);
    run_gemm16(&out, &a, &b, NULL);
    int bad = 0;
    for (int64_t i = 0; i < numel(&out.v); i++) {
      int64_t bi = i / (13 * 70), r = i / 70 % 13, c = i % 70;
      float product = (float)get(&a.v, bi * 13 + r) * (float)get(&b.v, bi * 70 + c);
      uint16_t want, got = *(const uint16_t *)elem(&out.v, i);
      if (dt == MX_F16) mx__f32_to_f16_n(&product, &want, 1);
      else mx__f32_to_bf16_n(&product, &want, 1);
      if (got != want && bad++ < 5)
        cr_log_error("%s [%lld,%lld,%lld]: %a rounds to 0x%04x, the GEMM wrote 0x%04x", mx_dtype_name(dt),
                     (long long)bi, (long long)r, (long long)c, product, want, got);
    }
    cr_expect_eq(bad, 0, "%s: %d of %lld elements rounded differently", mx_dtype_name(dt), bad,
                 (long long)numel(&out.v));
    expect_nothing_outside(&out, mx_dtype_name(dt));
    operand_free(&a), operand_free(&b), operand_free(&out);
  }
}

/* --- threads ------------------------------------------------------------------------- */

#define NTHREADS 4
#define NSHARED 3
static const mm_case shared_cases[NSHARED] = {
    {4, 64, 128, 48, LAY_CONTIG, LAY_CONTIG, LAY_CONTIG},
    {5, 9, 40, 7, LAY_TRANS, LAY_BCAST_TRANS, LAY_CONTIG},
    {2, 33, 65, 17, LAY_TRANS, LAY_TRANS, LAY_CONTIG},
};

typedef struct {
  operand a[NSHARED][2], b[NSHARED][2], exact[NSHARED][2], bound[NSHARED][2]; /* [case][f32, bf16] */
} shared_inputs;

typedef struct {
  const shared_inputs *in;
  int index, bad, failed;
} thread_job;

static const mx_dtype thread_dtypes[2] = {MX_F32, MX_BF16};

static void *thread_main(void *arg) {
  thread_job *j = arg;
  for (int it = 0; it < 20; it++)
    for (int ci = 0; ci < NSHARED; ci++)
      for (int di = 0; di < 2; di++) {
        const mm_case *c = &shared_cases[ci];
        mx_dtype dt = thread_dtypes[di];
        operand out = operand_new(dt, c->B, c->M, c->N, LAY_CONTIG);
        mx_status st = mx__cpu_matmul(&out.v, &j->in->a[ci][di].v, &j->in->b[ci][di].v);
        if (st != MX_OK) {
          j->failed++;
        } else {
          for (int64_t i = 0; i < numel(&out.v); i++) {
            double w = get(&j->in->exact[ci][di].v, i);
            if (!(fabs(get(&out.v, i) - w) <= tolerance(dt, c->K, w, get(&j->in->bound[ci][di].v, i)))) {
              j->bad++;
              break;
            }
          }
        }
        operand_free(&out);
      }
  return NULL;
}

Test(matmul, concurrent_threads_share_primitives) {
  shared_inputs in;
  for (int ci = 0; ci < NSHARED; ci++)
    for (int di = 0; di < 2; di++) {
      const mm_case *c = &shared_cases[ci];
      rng_state = 1000 + (uint64_t)(ci * 2 + di);
      in.a[ci][di] = operand_new(thread_dtypes[di], c->B, c->M, c->K, c->a);
      in.b[ci][di] = operand_new(thread_dtypes[di], c->B, c->K, c->N, c->b);
      fill_random(&in.a[ci][di].v), fill_random(&in.b[ci][di].v);
      exact_and_bound(&in.a[ci][di].v, &in.b[ci][di].v, &in.exact[ci][di], &in.bound[ci][di]);
    }
  thread_job jobs[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    jobs[i] = (thread_job){&in, i, 0, 0};
    cr_assert_eq(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    cr_expect_eq(jobs[i].failed, 0, "thread %d: %d products failed", i, jobs[i].failed);
    cr_expect_eq(jobs[i].bad, 0, "thread %d: %d products wrong", i, jobs[i].bad);
  }
  for (int ci = 0; ci < NSHARED; ci++)
    for (int di = 0; di < 2; di++) {
      operand_free(&in.a[ci][di]), operand_free(&in.b[ci][di]);
      operand_free(&in.exact[ci][di]), operand_free(&in.bound[ci][di]);
    }
}

/* A thread that did a oneDNN matmul leaves nothing behind when it exits (its
 * stream and workspace are freed; valgrind and LSan check the rest). */
typedef struct {
  int alive_inside;
  mx_status status;
} exit_job;

static void *exit_main(void *arg) {
  exit_job *j = arg;
  const mm_case *c = &cases[2];
  operand a = operand_new(MX_F32, c->B, c->M, c->K, c->a), b = operand_new(MX_F32, c->B, c->K, c->N, c->b);
  operand out = operand_new(MX_F32, c->B, c->M, c->N, LAY_CONTIG);
  for (int64_t i = 0; i < numel(&a.v); i++) set(&a.v, i, 0.5);
  for (int64_t i = 0; i < numel(&b.v); i++) set(&b.v, i, 0.25);
  j->status = mx__dnnl_matmul(&out.v, &a.v, &b.v);
  if (j->status == MX_OK && get(&out.v, 0) != 0.125 * (double)c->K) j->status = MX_BACKEND_ERROR;
#if MX_HAVE_DNNL
  j->alive_inside = mx__dnnl_threads_alive();
#endif
  operand_free(&a), operand_free(&b), operand_free(&out);
  return NULL;
}

Test(matmul, thread_exit_frees_its_state) {
#if MX_HAVE_DNNL
  int before = mx__dnnl_threads_alive();
#endif
  for (int round = 0; round < 3; round++) {
    exit_job j = {0, MX_OK};
    pthread_t th;
    cr_assert_eq(pthread_create(&th, NULL, exit_main, &j), 0);
    pthread_join(th, NULL);
    if (!MX_HAVE_DNNL) {
      cr_expect_eq(j.status, MX_NOT_BUILT);
      continue;
    }
    cr_expect_eq(j.status, MX_OK, "round %d: %s", round, mx_status_str(j.status));
#if MX_HAVE_DNNL
    cr_expect_eq(j.alive_inside, before + 1, "round %d: the thread's state was not made", round);
    cr_expect_eq(mx__dnnl_threads_alive(), before, "round %d: the thread's state outlived it", round);
#endif
  }
}

/* More shapes than the cache holds, on several threads at once: entries are
 * evicted (never one a thread is running) and made again. Small integers
 * make every result exact. */
#define EVICT_SHAPES 50

static void *evict_main(void *arg) {
  thread_job *j = arg;
  int64_t first = 1 + (int64_t)j->index * EVICT_SHAPES;
  for (int pass = 0; pass < 2; pass++)
    for (int64_t M = first; M < first + EVICT_SHAPES; M++) {
      operand a = operand_new(MX_F32, 2, M, 4, LAY_CONTIG), b = operand_new(MX_F32, 2, 4, 3, LAY_TRANS);
      operand o = operand_new(MX_F32, 2, M, 3, LAY_CONTIG), r = operand_new(MX_F32, 2, M, 3, LAY_CONTIG);
      for (int64_t i = 0; i < numel(&a.v); i++) set(&a.v, i, (double)(i % 5) - 2);
      for (int64_t i = 0; i < numel(&b.v); i++) set(&b.v, i, (double)(i % 3) - 1);
      mx_status st = mx__dnnl_matmul(&o.v, &a.v, &b.v);
      if (st != (MX_HAVE_DNNL ? MX_OK : MX_NOT_BUILT)) j->failed++;
      if (st == MX_OK && mx__cpu_matmul_reference(&r.v, &a.v, &b.v) == MX_OK &&
          memcmp(o.buf, r.buf, sizeof(float) * (size_t)numel(&o.v)))
        j->bad++;
      operand_free(&a), operand_free(&b), operand_free(&o), operand_free(&r);
    }
  return NULL;
}

Test(matmul, cache_eviction_under_threads) {
  thread_job jobs[NTHREADS];
  pthread_t th[NTHREADS];
  for (int i = 0; i < NTHREADS; i++) {
    jobs[i] = (thread_job){NULL, i, 0, 0};
    cr_assert_eq(pthread_create(&th[i], NULL, evict_main, &jobs[i]), 0);
  }
  for (int i = 0; i < NTHREADS; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < NTHREADS; i++) {
    cr_expect_eq(jobs[i].failed, 0, "thread %d: %d products failed", i, jobs[i].failed);
    cr_expect_eq(jobs[i].bad, 0, "thread %d: %d products wrong", i, jobs[i].bad);
  }
}

/* --- edges ----------------------------------------------------------------------------- */

/* oneDNN declines: "not built" without it, "not supported" (here) with it. */
#define DECLINED (MX_HAVE_DNNL ? MX_NOT_SUPPORTED : MX_NOT_BUILT)

/* float64 and float16 are not oneDNN's; mixed dtypes neither. */
Test(matmul, declined_for_other_dtypes) {
  operand a = operand_new(MX_F64, 1, 2, 3, LAY_CONTIG), b = operand_new(MX_F64, 1, 3, 2, LAY_CONTIG);
  operand o = operand_new(MX_F64, 1, 2, 2, LAY_CONTIG);
  cr_expect_eq(mx__dnnl_matmul(&o.v, &a.v, &b.v), DECLINED);
  operand h = operand_new(MX_F16, 1, 2, 2, LAY_CONTIG);
  cr_expect_eq(mx__dnnl_matmul(&h.v, &a.v, &b.v), DECLINED);
  operand af = operand_new(MX_F32, 1, 2, 3, LAY_CONTIG), of = operand_new(MX_F32, 1, 2, 2, LAY_CONTIG);
  cr_expect_eq(mx__dnnl_matmul(&of.v, &af.v, &b.v), DECLINED);
  operand_free(&a), operand_free(&b), operand_free(&o), operand_free(&h), operand_free(&af), operand_free(&of);
}

/* Both inputs broadcast over the output's batch: oneDNN cannot, the loops do. */
Test(matmul, both_inputs_broadcast) {
  rng_state = 77;
  operand a = operand_new(MX_F32, 3, 4, 5, LAY_BCAST), b = operand_new(MX_F32, 3, 5, 6, LAY_BCAST);
  operand o = operand_new(MX_F32, 3, 4, 6, LAY_CONTIG), r = operand_new(MX_F32, 3, 4, 6, LAY_CONTIG);
  fill_random(&a.v), fill_random(&b.v);
  cr_expect_eq(mx__dnnl_matmul(&o.v, &a.v, &b.v), DECLINED);
  cr_assert_eq(mx__cpu_matmul(&o.v, &a.v, &b.v), MX_OK);
  cr_assert_eq(mx__cpu_matmul_reference(&r.v, &a.v, &b.v), MX_OK);
  cr_expect_eq(memcmp(o.buf, r.buf, sizeof(float) * 72), 0);
  operand_free(&a), operand_free(&b), operand_free(&o), operand_free(&r);
}
