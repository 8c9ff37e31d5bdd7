/* The CPU convolution kernels (kernels/cpu/conv.h): oneDNN against the plain
 * loops, float16/bfloat16 against float32, and both against PyTorch
 * (tests/fixtures/conv_fixtures.txt, written by make_conv_fixtures.py). */
#include <criterion/criterion.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/cpu/conv.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/dnnl.h"
#include "mx_config.h"

#ifndef MX_FIXTURES_DIR
#define MX_FIXTURES_DIR "tests/fixtures"
#endif

/* --- tensors for the tests ------------------------------------------------------- */

typedef struct {
  mx_kview v;
  void *buf;
} tens;

static tens tens_new(mx_dtype dt, int ndim, const int64_t *shape) {
  tens t;
  memset(&t, 0, sizeof t);
  t.v.dtype = dt;
  t.v.ndim = ndim;
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; d--) {
    t.v.shape[d] = shape[d];
    t.v.strides[d] = n;
    n *= shape[d];
  }
  t.buf = calloc((size_t)(n ? n : 1), mx_dtype_size(dt));
  cr_assert(t.buf);
  t.v.data = t.buf;
  return t;
}

static void tens_free(tens *t) { free(t->buf); }

static int64_t numel(const mx_kview *v) {
  int64_t n = 1;
  for (int d = 0; d < v->ndim; d++) n *= v->shape[d];
  return n;
}

/* The element at row-major index i of a strided view. */
static void *elem(const mx_kview *v, int64_t i) {
  int64_t off = 0;
  for (int d = v->ndim - 1; d >= 0; d--) {
    off += i % v->shape[d] * v->strides[d];
    i /= v->shape[d];
  }
  return (char *)v->data + off * (int64_t)mx_dtype_size(v->dtype);
}

static double get(const mx_kview *v, int64_t i) { return mx_element_load(elem(v, i), v->dtype); }
static void set(const mx_kview *v, int64_t i, double x) { mx_element_store(elem(v, i), v->dtype, x); }

static void fill(const mx_kview *v, double x) {
  for (int64_t i = 0; i < numel(v); i++) set(v, i, x);
}

static uint64_t rng_state;
static double uniform(void) { /* [-1, 1) */
  rng_state ^= rng_state << 13;
  rng_state ^= rng_state >> 7;
  rng_state ^= rng_state << 17;
  return (double)(rng_state >> 11) * 0x1p-52 - 1.0;
}

static void fill_random(const mx_kview *v) {
  for (int64_t i = 0; i < numel(v); i++) set(v, i, uniform());
}

/* A copy of v's values in another dtype (contiguous). */
static tens tens_convert(const mx_kview *v, mx_dtype dt) {
  tens t = tens_new(dt, v->ndim, v->shape);
  for (int64_t i = 0; i < numel(v); i++) set(&t.v, i, get(v, i));
  return t;
}

static tens tens_abs(const mx_kview *v) {
  tens t = tens_new(MX_F64, v->ndim, v->shape);
  for (int64_t i = 0; i < numel(v); i++) set(&t.v, i, fabs(get(v, i)));
  return t;
}

/* --- cases --------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  int spatial;
  int64_t N, C_in, C_out, groups;
  int64_t in[3], k[3], stride[3], pad[3], dil[3];
  int64_t extra[3]; /* dx larger than the forward formula needs (output_padding) */
} conv_case;

static const conv_case cases[] = {
    {"1d stride 2 pad 1", 1, 2, 4, 6, 1, {17}, {3}, {2}, {1}, {1}, {1}},
    {"1d dilation 2 groups 2", 1, 3, 4, 6, 2, {16}, {3}, {1}, {2}, {2}, {0}},
    {"2d stride 2 pad 1", 2, 2, 6, 8, 1, {11, 9}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 0}},
    {"2d dilation 2 pad 2 groups 2", 2, 2, 6, 4, 2, {10, 12}, {3, 3}, {1, 1}, {2, 2}, {2, 2}, {0, 0}},
    {"2d depthwise", 2, 2, 8, 8, 8, {9, 9}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
    {"2d depthwise x2 stride 2", 2, 2, 4, 8, 4, {10, 10}, {3, 3}, {2, 2}, {1, 1}, {1, 1}, {1, 1}},
    {"2d mixed", 2, 1, 3, 5, 1, {9, 11}, {3, 2}, {2, 1}, {0, 1}, {1, 2}, {1, 0}},
    {"2d even input stride 2 no pad", 2, 2, 3, 4, 1, {8, 8}, {3, 3}, {2, 2}, {0, 0}, {1, 1}, {0, 0}},
    {"2d 1x1 channels 32", 2, 2, 32, 48, 1, {6, 5}, {1, 1}, {1, 1}, {0, 0}, {1, 1}, {0, 0}},
    {"2d 3x3 channels 32 pad 1", 2, 2, 32, 32, 1, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
    {"3d stride 2 pad 1 dil 2 groups 2", 3, 2, 4, 4, 2, {6, 7, 8}, {3, 3, 3}, {2, 2, 2}, {1, 1, 1}, {1, 2, 1},
     {1, 0, 1}},
    {"3d depthwise", 3, 1, 4, 4, 4, {5, 6, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
    /* 16 channels in and out, 1-d and 3-d: bf16 activations through mixgrad's transpose into
     * oneDNN's channel blocks (2-d: the channels-32 cases), spatial sizes not a multiple of 8 */
    {"1d channels 16", 1, 2, 16, 32, 1, {19}, {3}, {1}, {1}, {1}, {0}},
    {"3d channels 16", 3, 2, 16, 16, 1, {3, 4, 5}, {3, 3, 3}, {1, 1, 1}, {1, 1, 1}, {1, 1, 1}, {0, 0, 0}},
    /* Winograd: float32 from 16 input channels (the channels-32 case too), bfloat16 from 64 and 8x8 outputs */
    {"2d 3x3 channels 64 pad 1", 2, 2, 64, 8, 1, {8, 8}, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {0, 0}},
};
#define NCASES (sizeof cases / sizeof *cases)

static mx_conv_params params_of(const conv_case *c) {
  mx_conv_params p;
  memset(&p, 0, sizeof p);
  p.spatial = c->spatial;
  p.groups = c->groups;
  for (int d = 0; d < 3; d++) {
    p.stride[d] = d < c->spatial ? c->stride[d] : 1;
    p.padding[d] = d < c->spatial ? c->pad[d] : 0;
    p.dilation[d] = d < c->spatial ? c->dil[d] : 1;
  }
  return p;
}

typedef struct {
  int64_t x[5], w[5], y[5], dx[5];
  int nd;
} case_shapes;

static case_shapes shapes_of(const conv_case *c) {
  case_shapes s;
  memset(&s, 0, sizeof s);
  s.nd = 2 + c->spatial;
  s.x[0] = s.y[0] = s.dx[0] = c->N;
  s.x[1] = s.dx[1] = c->C_in;
  s.y[1] = c->C_out;
  s.w[0] = c->C_out;
  s.w[1] = c->C_in / c->groups;
  for (int d = 0; d < c->spatial; d++) {
    s.x[2 + d] = c->in[d];
    s.dx[2 + d] = c->in[d] + c->extra[d];
    s.w[2 + d] = c->k[d];
    s.y[2 + d] = (c->in[d] + 2 * c->pad[d] - c->dil[d] * (c->k[d] - 1) - 1) / c->stride[d] + 1;
  }
  return s;
}

/* The length of each output's sum (an upper bound for backward data). */
static int64_t reduction_length(const conv_case *c, mx_conv_kind kind, const case_shapes *s) {
  int64_t taps = 1, outs = 1;
  for (int d = 0; d < c->spatial; d++) taps *= c->k[d], outs *= s->y[2 + d];
  switch (kind) {
  case MX_CONV_FORWARD: return c->C_in / c->groups * taps;
  case MX_CONV_BACKWARD_DATA: return c->C_out / c->groups * taps;
  default: return c->N * outs;
  }
}

static const char *kind_str(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? "forward" : kind == MX_CONV_BACKWARD_DATA ? "backward data" : "backward weight";
}

/* Runs kind with the operands in their forward roles (x, w, y): the output is
 * y, x or w. which: 0 the dispatcher, 1 the reference, 2 oneDNN directly. */
static mx_status run_kind(int which, mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                          const mx_conv_params *p) {
  switch (kind) {
  case MX_CONV_FORWARD:
    return which == 0   ? mx__cpu_conv_forward(y, x, w, NULL, p)
           : which == 1 ? mx__cpu_conv_forward_reference(y, x, w, NULL, p)
                        : mx__dnnl_conv_forward(y, x, w, NULL, p);
  case MX_CONV_BACKWARD_DATA:
    return which == 0   ? mx__cpu_conv_backward_data(x, y, w, p)
           : which == 1 ? mx__cpu_conv_backward_data_reference(x, y, w, p)
                        : mx__dnnl_conv_backward_data(x, y, w, p);
  default:
    return which == 0   ? mx__cpu_conv_backward_weight(w, y, x, p)
           : which == 1 ? mx__cpu_conv_backward_weight_reference(w, y, x, p)
                        : mx__dnnl_conv_backward_weight(w, y, x, p);
  }
}

/* The operands of one case and kind: t[0] x (or dx), t[1] w (or dw), t[2] y
 * (or dy), in dtype; the inputs random (rounded to dtype), the output NaN. */
static void make_operands(tens *t, const conv_case *c, mx_conv_kind kind, mx_dtype dt) {
  case_shapes s = shapes_of(c);
  t[0] = tens_new(dt, s.nd, kind == MX_CONV_BACKWARD_DATA ? s.dx : s.x);
  t[1] = tens_new(dt, s.nd, s.w);
  t[2] = tens_new(dt, s.nd, s.y);
  int out = kind == MX_CONV_FORWARD ? 2 : kind == MX_CONV_BACKWARD_DATA ? 0 : 1;
  for (int r = 0; r < 3; r++)
    if (r == out) fill(&t[r].v, NAN);
    else fill_random(&t[r].v);
}

static int output_index(mx_conv_kind kind) {
  return kind == MX_CONV_FORWARD ? 2 : kind == MX_CONV_BACKWARD_DATA ? 0 : 1;
}

/* The float64 result on t's values, and on their absolute values (the bound
 * of each sum's terms). */
static void exact_and_bound(tens *t, mx_conv_kind kind, const mx_conv_params *p, tens *exact, tens *bound) {
  int out = output_index(kind);
  tens e[3], b[3];
  for (int r = 0; r < 3; r++) {
    e[r] = tens_convert(&t[r].v, MX_F64);
    b[r] = r == out ? tens_new(MX_F64, t[r].v.ndim, t[r].v.shape) : tens_abs(&t[r].v);
  }
  cr_assert_eq(run_kind(1, kind, &e[0].v, &e[1].v, &e[2].v, p), MX_OK, "%s", mx_last_error());
  cr_assert_eq(run_kind(1, kind, &b[0].v, &b[1].v, &b[2].v, p), MX_OK, "%s", mx_last_error());
  *exact = e[out];
  *bound = b[out];
  for (int r = 0; r < 3; r++)
    if (r != out) tens_free(&e[r]), tens_free(&b[r]);
}

/* Counts the elements of got outside |got - want| <= rel*|want| + abs_k*bound;
 * reports the first few. NaN always fails. */
static int compare(const char *what, const mx_kview *got, const mx_kview *want, const mx_kview *bound, double rel,
                   double abs_k) {
  int bad = 0;
  for (int64_t i = 0; i < numel(want); i++) {
    double g = get(got, i), w = get(want, i), b = bound ? get(bound, i) : 0;
    double tol = rel * fabs(w) + abs_k * b;
    if (!(fabs(g - w) <= tol) && ++bad <= 5)
      cr_log_error("%s: element %lld: got %.9g, want %.9g (tolerance %.3g)", what, (long long)i, g, w, tol);
  }
  return bad;
}

/* --- (a) oneDNN against the plain loops, float32 ------------------------------------- */

Test(conv, onednn_matches_reference_f32) {
  for (size_t ci = 0; ci < NCASES; ci++) {
    const conv_case *c = &cases[ci];
    mx_conv_params p = params_of(c);
    case_shapes s = shapes_of(c);
    for (int k = 0; k < 3; k++) {
      mx_conv_kind kind = (mx_conv_kind)k;
      rng_state = 0x9e3779b97f4a7c15ull + ci * 3 + (uint64_t)k;
      tens t[3], ref[3], disp[3];
      make_operands(t, c, kind, MX_F32);
      int out = output_index(kind);
      for (int r = 0; r < 3; r++) {
        ref[r] = tens_convert(&t[r].v, MX_F32);
        disp[r] = tens_convert(&t[r].v, MX_F32);
      }
      mx_status st = run_kind(2, kind, &t[0].v, &t[1].v, &t[2].v, &p);
      if (MX_HAVE_DNNL) cr_expect_eq(st, MX_OK, "%s %s: oneDNN gave %s: %s", c->name, kind_str(kind), mx_status_str(st),
                                     mx_last_error());
      else cr_expect_eq(st, MX_NOT_BUILT);
      if (st != MX_OK) fill(&t[out].v, 0);
      cr_assert_eq(run_kind(1, kind, &ref[0].v, &ref[1].v, &ref[2].v, &p), MX_OK, "%s", mx_last_error());
      cr_assert_eq(run_kind(0, kind, &disp[0].v, &disp[1].v, &disp[2].v, &p), MX_OK, "%s", mx_last_error());
      tens exact, bound;
      exact_and_bound(t, kind, &p, &exact, &bound);
      /* each float32 sum of R products is within (R+1) u sum|terms| of the
       * exact one, whatever its order: two of them within twice that */
      double u = 0x1p-24, R = (double)reduction_length(c, kind, &s);
      char what[200];
      snprintf(what, sizeof what, "%s %s: oneDNN vs loops", c->name, kind_str(kind));
      if (st == MX_OK) cr_expect_eq(compare(what, &t[out].v, &ref[out].v, &bound.v, 0, 2 * (R + 1) * u), 0, "%s", what);
      snprintf(what, sizeof what, "%s %s: loops f32 vs f64", c->name, kind_str(kind));
      cr_expect_eq(compare(what, &ref[out].v, &exact.v, &bound.v, 0, (R + 1) * u), 0, "%s", what);
      snprintf(what, sizeof what, "%s %s: dispatcher vs oneDNN", c->name, kind_str(kind));
      if (st == MX_OK) cr_expect_eq(compare(what, &disp[out].v, &t[out].v, NULL, 0, 0), 0, "%s", what);
      for (int r = 0; r < 3; r++) tens_free(&t[r]), tens_free(&ref[r]), tens_free(&disp[r]);
      tens_free(&exact), tens_free(&bound);
    }
  }
}

/* Views that are not contiguous: x in channels-last memory, w transposed in
 * memory, y a window of a larger buffer whose other elements must stay. */
Test(conv, strided_views_f32_and_f64) {
  const conv_case *c = &cases[2]; /* 2d stride 2 pad 1 */
  mx_conv_params p = params_of(c);
  case_shapes s = shapes_of(c);
  mx_dtype dts[2] = {MX_F32, MX_F64};
  for (int di = 0; di < 2; di++)
    for (int k = 0; k < 3; k++) {
      mx_conv_kind kind = (mx_conv_kind)k;
      int out = output_index(kind);
      rng_state = 12345 + (uint64_t)k;
      tens dense[3];
      make_operands(dense, c, kind, dts[di]);
      /* strided copies: x/dx as NHWC, w as (kh, kw, ci, co), y/dy inside a
       * (N, C+2, H+1, W+3) buffer */
      const int64_t *sh[3] = {kind == MX_CONV_BACKWARD_DATA ? s.dx : s.x, s.w, s.y};
      int64_t big[4] = {sh[2][0], sh[2][1] + 2, sh[2][2] + 1, sh[2][3] + 3};
      tens bx = tens_new(dts[di], 4, sh[0]), bw = tens_new(dts[di], 4, sh[1]), by = tens_new(dts[di], 4, big);
      mx_kview v[3] = {bx.v, bw.v, by.v};
      v[0].strides[1] = 1, v[0].strides[3] = sh[0][1], v[0].strides[2] = sh[0][1] * sh[0][3],
      v[0].strides[0] = sh[0][1] * sh[0][2] * sh[0][3];
      v[1].strides[0] = 1, v[1].strides[1] = sh[1][0], v[1].strides[3] = sh[1][0] * sh[1][1],
      v[1].strides[2] = sh[1][0] * sh[1][1] * sh[1][3];
      for (int d = 0; d < 4; d++) v[2].shape[d] = sh[2][d];
      v[2].data = (char *)by.buf + (by.v.strides[1] + 3) * (int64_t)mx_dtype_size(dts[di]); /* channel 1, column 3 */
      fill(&by.v, 7.0);                                                                        /* sentinels */
      for (int r = 0; r < 3; r++)
        for (int64_t i = 0; i < numel(&dense[r].v); i++) set(&v[r], i, get(&dense[r].v, i));
      cr_assert_eq(run_kind(0, kind, &v[0], &v[1], &v[2], &p), MX_OK, "%s", mx_last_error());
      cr_assert_eq(run_kind(1, kind, &dense[0].v, &dense[1].v, &dense[2].v, &p), MX_OK, "%s", mx_last_error());
      tens exact, bound;
      exact_and_bound(dense, kind, &p, &exact, &bound);
      double R = (double)reduction_length(c, kind, &s), u = dts[di] == MX_F64 ? 0x1p-53 : 0x1p-24;
      char what[200];
      snprintf(what, sizeof what, "strided %s %s", mx_dtype_name(dts[di]), kind_str(kind));
      cr_expect_eq(compare(what, &v[out], &dense[out].v, &bound.v, 0, 2 * (R + 1) * u), 0, "%s", what);
      if (out == 2) { /* the elements of y's buffer outside the view are untouched */
        int64_t inside = 0, sevens = 0;
        for (int64_t i = 0; i < numel(&by.v); i++) sevens += get(&by.v, i) == 7.0;
        for (int64_t i = 0; i < numel(&v[2]); i++) inside += get(&v[2], i) == 7.0;
        cr_expect_eq(sevens - inside, numel(&by.v) - numel(&v[2]), "%s: wrote outside the output view", what);
      }
      for (int r = 0; r < 3; r++) tens_free(&dense[r]);
      tens_free(&bx), tens_free(&bw), tens_free(&by), tens_free(&exact), tens_free(&bound);
    }
}

/* --- (b) bfloat16 and float16 against float32 ------------------------------------------ */

static void check_16bit(mx_dtype dt) {
  /* unit roundoff of the format, and half its smallest subnormal */
  double u16 = dt == MX_BF16 ? 0x1p-8 : 0x1p-11, tiny = dt == MX_BF16 ? 0x1p-134 : 0x1p-25;
  int no_kernel = 0; /* cases where oneDNN has no bfloat16 kernel on this CPU (or is not built in) */
  for (size_t ci = 0; ci < NCASES; ci++) {
    const conv_case *c = &cases[ci];
    mx_conv_params p = params_of(c);
    case_shapes s = shapes_of(c);
    for (int k = 0; k < 3; k++) {
      mx_conv_kind kind = (mx_conv_kind)k;
      int out = output_index(kind);
      rng_state = 777 + ci * 3 + (uint64_t)k;
      tens t[3];
      make_operands(t, c, kind, dt); /* the inputs exactly representable in dt */
      tens exact, bound;
      exact_and_bound(t, kind, &p, &exact, &bound);
      if (dt == MX_BF16) { /* oneDNN's own bf16 kernel, where it has one */
        tens d[3];
        for (int r = 0; r < 3; r++) d[r] = tens_convert(&t[r].v, dt);
        mx_status st = run_kind(2, kind, &d[0].v, &d[1].v, &d[2].v, &p);
        cr_expect(st == MX_OK || mx__dnnl_declined(st), "%s", mx_last_error());
        if (mx__dnnl_declined(st)) no_kernel++; /* no kernel on this CPU, or a build without oneDNN */
        if (st == MX_OK) {
          double R = (double)reduction_length(c, kind, &s), e = (R + 1) * 0x1p-24;
          char what[200];
          snprintf(what, sizeof what, "%s %s: oneDNN bfloat16", c->name, kind_str(kind));
          int bad = 0;
          for (int64_t i = 0; i < numel(&exact.v); i++) {
            double g = get(&d[out].v, i), w = get(&exact.v, i), eb = e * get(&bound.v, i);
            double tol = u16 * (fabs(w) + eb) + eb + tiny;
            if (!(fabs(g - w) <= tol) && ++bad <= 5)
              cr_log_error("%s: element %lld: got %.9g, want %.9g (tolerance %.3g)", what, (long long)i, g, w, tol);
          }
          cr_expect_eq(bad, 0, "%s", what);
        }
        for (int r = 0; r < 3; r++) tens_free(&d[r]);
      }
      cr_assert_eq(run_kind(0, kind, &t[0].v, &t[1].v, &t[2].v, &p), MX_OK, "%s", mx_last_error());
      double R = (double)reduction_length(c, kind, &s), e = (R + 1) * 0x1p-24;
      char what[200];
      snprintf(what, sizeof what, "%s %s %s", c->name, kind_str(kind), mx_dtype_name(dt));
      int bad = 0;
      for (int64_t i = 0; i < numel(&exact.v); i++) {
        /* one rounding of a float32 sum: within u16 of (exact +- e) */
        double g = get(&t[out].v, i), w = get(&exact.v, i), eb = e * get(&bound.v, i);
        double tol = u16 * (fabs(w) + eb) + eb + tiny;
        if (!(fabs(g - w) <= tol) && ++bad <= 5)
          cr_log_error("%s: element %lld: got %.9g, want %.9g (tolerance %.3g)", what, (long long)i, g, w, tol);
      }
      cr_expect_eq(bad, 0, "%s", what);
      /* and the reference entry point for 16-bit operands agrees */
      tens r16[3];
      for (int r = 0; r < 3; r++) r16[r] = tens_convert(&t[r].v, dt);
      fill(&r16[out].v, NAN);
      cr_assert_eq(run_kind(1, kind, &r16[0].v, &r16[1].v, &r16[2].v, &p), MX_OK, "%s", mx_last_error());
      bad = 0;
      for (int64_t i = 0; i < numel(&exact.v); i++) {
        double g = get(&r16[out].v, i), w = get(&exact.v, i), eb = e * get(&bound.v, i);
        double tol = u16 * (fabs(w) + eb) + eb + tiny;
        if (!(fabs(g - w) <= tol) && ++bad <= 5)
          cr_log_error("%s (loops): element %lld: got %.9g, want %.9g", what, (long long)i, g, w);
      }
      cr_expect_eq(bad, 0, "%s (loops)", what);
      for (int r = 0; r < 3; r++) tens_free(&t[r]), tens_free(&r16[r]);
      tens_free(&exact), tens_free(&bound);
    }
  }
  if (no_kernel)
    cr_log_info("no oneDNN bfloat16 kernel (on this CPU, or in this build) for %d of %d cases", no_kernel,
                (int)(3 * NCASES));
}

Test(conv, bf16_within_rounding_of_f32) { check_16bit(MX_BF16); }
Test(conv, f16_within_rounding_of_f32) { check_16bit(MX_F16); }

/* --- (c) the forward's bias ------------------------------------------------------------------ */

/* y = conv(x, w) + bias in every dtype, through the dispatcher, the loops
 * and oneDNN: within the same bounds as without one, the bias being one more
 * term of each float32 sum (and the 16-bit results rounded once, after it). */
static void check_bias(mx_dtype dt) {
  double u = dt == MX_F64 ? 0x1p-53 : 0x1p-24, u16 = dt == MX_BF16 ? 0x1p-8 : dt == MX_F16 ? 0x1p-11 : 0;
  double tiny = dt == MX_BF16 ? 0x1p-134 : dt == MX_F16 ? 0x1p-25 : 0;
  for (size_t ci = 0; ci < NCASES; ci++) {
    const conv_case *c = &cases[ci];
    mx_conv_params p = params_of(c);
    case_shapes s = shapes_of(c);
    rng_state = 4242 + ci;
    tens t[3], bias = tens_new(dt, 1, (int64_t[]){c->C_out});
    make_operands(t, c, MX_CONV_FORWARD, dt);
    fill_random(&bias.v);
    tens e[4] = {tens_convert(&t[0].v, MX_F64), tens_convert(&t[1].v, MX_F64), tens_new(MX_F64, s.nd, s.y),
                 tens_convert(&bias.v, MX_F64)};
    tens b[4] = {tens_abs(&t[0].v), tens_abs(&t[1].v), tens_new(MX_F64, s.nd, s.y), tens_abs(&bias.v)};
    cr_assert_eq(mx__cpu_conv_forward_reference(&e[2].v, &e[0].v, &e[1].v, &e[3].v, &p), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx__cpu_conv_forward_reference(&b[2].v, &b[0].v, &b[1].v, &b[3].v, &p), MX_OK, "%s", mx_last_error());
    double eu = ((double)reduction_length(c, MX_CONV_FORWARD, &s) + 2) * u;
    for (int which = 0; which < 3; which++) {
      fill(&t[2].v, NAN);
      mx_status st = which == 0   ? mx__cpu_conv_forward(&t[2].v, &t[0].v, &t[1].v, &bias.v, &p)
                     : which == 1 ? mx__cpu_conv_forward_reference(&t[2].v, &t[0].v, &t[1].v, &bias.v, &p)
                                  : mx__dnnl_conv_forward(&t[2].v, &t[0].v, &t[1].v, &bias.v, &p);
      if (st == (MX_HAVE_DNNL ? MX_NOT_SUPPORTED : MX_NOT_BUILT) && which == 2) continue; /* oneDNN: f32, bf16 */
      cr_assert_eq(st, MX_OK, "%s", mx_last_error());
      char what[200];
      snprintf(what, sizeof what, "%s %s with bias (%s)", c->name, mx_dtype_name(dt),
               which == 0 ? "dispatcher" : which == 1 ? "loops" : "oneDNN");
      int bad = 0;
      for (int64_t i = 0; i < numel(&e[2].v); i++) {
        double g = get(&t[2].v, i), w = get(&e[2].v, i), eb = eu * get(&b[2].v, i);
        double tol = u16 * (fabs(w) + eb) + eb + tiny;
        if (!(fabs(g - w) <= tol) && ++bad <= 5)
          cr_log_error("%s: element %lld: got %.9g, want %.9g (tolerance %.3g)", what, (long long)i, g, w, tol);
      }
      cr_expect_eq(bad, 0, "%s", what);
    }
    for (int r = 0; r < 4; r++) tens_free(&e[r]), tens_free(&b[r]);
    for (int r = 0; r < 3; r++) tens_free(&t[r]);
    tens_free(&bias);
  }
}

Test(conv, bias_f32) { check_bias(MX_F32); }
Test(conv, bias_f64) { check_bias(MX_F64); }
Test(conv, bias_bf16) { check_bias(MX_BF16); }
Test(conv, bias_f16) { check_bias(MX_F16); }

/* A bias that is not one contiguous element per output channel of the
 * operands' dtype is refused, naming what it is. */
Test(conv, bias_errors) {
  const conv_case *c = &cases[2];
  mx_conv_params p = params_of(c);
  tens t[3], wrong_size = tens_new(MX_F32, 1, (int64_t[]){c->C_out + 1}),
             wrong_dtype = tens_new(MX_F64, 1, (int64_t[]){c->C_out});
  make_operands(t, c, MX_CONV_FORWARD, MX_F32);
  cr_expect_eq(mx__cpu_conv_forward(&t[2].v, &t[0].v, &t[1].v, &wrong_size.v, &p), MX_SHAPE_ERROR);
  cr_expect(strstr(mx_last_error(), "bias of 1 dims, 9 elements") != NULL, "%s", mx_last_error());
  cr_expect_eq(mx__cpu_conv_forward(&t[2].v, &t[0].v, &t[1].v, &wrong_dtype.v, &p), MX_DTYPE_ERROR);
  cr_expect(strstr(mx_last_error(), "a float64 bias for float32 operands") != NULL, "%s", mx_last_error());
  for (int r = 0; r < 3; r++) tens_free(&t[r]);
  tens_free(&wrong_size), tens_free(&wrong_dtype);
}

/* --- edges ---------------------------------------------------------------------------------- */

/* dx larger than the forward formula by more than the stride (output_padding
 * below the dilation): oneDNN cannot express it, the loops answer. */
Test(conv, backward_data_output_padding_beyond_stride) {
  conv_case c = {"1d dil 2 extra 1", 1, 2, 3, 4, 1, {9}, {3}, {1}, {0}, {2}, {1}};
  mx_conv_params p = params_of(&c);
  tens t[3], ref[3];
  rng_state = 99;
  make_operands(t, &c, MX_CONV_BACKWARD_DATA, MX_F32);
  for (int r = 0; r < 3; r++) ref[r] = tens_convert(&t[r].v, MX_F64);
  cr_assert_eq(mx__cpu_conv_backward_data(&t[0].v, &t[2].v, &t[1].v, &p), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx__cpu_conv_backward_data_reference(&ref[0].v, &ref[2].v, &ref[1].v, &p), MX_OK);
  /* dx's last position (9) no tap reaches (o + 2k = 9 needs o >= 5): zero */
  cr_expect_eq(get(&t[0].v, 9), 0.0);
  cr_expect_neq(get(&t[0].v, 8), 0.0);
  cr_expect_eq(compare("output padding", &t[0].v, &ref[0].v, NULL, 1e-5, 0), 0);
  for (int r = 0; r < 3; r++) tens_free(&t[r]), tens_free(&ref[r]);
}

/* Empty sums give zeros; empty outputs are fine. */
Test(conv, empty_operands) {
  mx_conv_params p = {.spatial = 2, .stride = {1, 1, 1}, .padding = {0, 0, 0}, .dilation = {1, 1, 1}, .groups = 1};
  mx_dtype dts[3] = {MX_F32, MX_BF16, MX_F64};
  for (int di = 0; di < 3; di++) {
    /* no input channels: y = 0 */
    int64_t xs[4] = {2, 0, 5, 5}, ws[4] = {3, 0, 3, 3}, ys[4] = {2, 3, 3, 3};
    tens x = tens_new(dts[di], 4, xs), w = tens_new(dts[di], 4, ws), y = tens_new(dts[di], 4, ys);
    fill(&y.v, NAN);
    cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &p), MX_OK, "%s", mx_last_error());
    for (int64_t i = 0; i < numel(&y.v); i++) cr_expect_eq(get(&y.v, i), 0.0);
    tens_free(&x), tens_free(&w), tens_free(&y);
    /* no batch: dw = 0, y empty */
    int64_t xs2[4] = {0, 2, 5, 5}, ws2[4] = {3, 2, 3, 3}, ys2[4] = {0, 3, 3, 3};
    x = tens_new(dts[di], 4, xs2), w = tens_new(dts[di], 4, ws2), y = tens_new(dts[di], 4, ys2);
    fill(&w.v, NAN);
    cr_expect_eq(mx__cpu_conv_backward_weight(&w.v, &y.v, &x.v, &p), MX_OK, "%s", mx_last_error());
    for (int64_t i = 0; i < numel(&w.v); i++) cr_expect_eq(get(&w.v, i), 0.0);
    cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &p), MX_OK, "%s", mx_last_error());
    tens_free(&x), tens_free(&w), tens_free(&y);
  }
}

Test(conv, shape_and_dtype_errors) {
  mx_conv_params p = {.spatial = 2, .stride = {1, 1, 1}, .padding = {1, 1, 0}, .dilation = {1, 1, 1}, .groups = 1};
  int64_t xs[4] = {1, 2, 5, 5}, ws[4] = {3, 2, 3, 3}, ys[4] = {1, 3, 5, 5}, bad_ys[4] = {1, 3, 4, 5};
  tens x = tens_new(MX_F32, 4, xs), w = tens_new(MX_F32, 4, ws), y = tens_new(MX_F32, 4, ys);
  tens yb = tens_new(MX_F32, 4, bad_ys), yd = tens_new(MX_F64, 4, ys), xi = tens_new(MX_I32, 4, xs);
  mx_clear_error();
  cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &p), MX_OK);
  cr_expect_eq(mx__cpu_conv_forward(&yb.v, &x.v, &w.v, NULL, &p), MX_SHAPE_ERROR);
  cr_expect(strstr(mx_last_error(), "mx_conv:") != NULL, "%s", mx_last_error());
  cr_expect_eq(mx__cpu_conv_forward(&yd.v, &x.v, &w.v, NULL, &p), MX_DTYPE_ERROR);
  cr_expect_eq(mx__cpu_conv_backward_weight(&w.v, &y.v, &xi.v, &p), MX_DTYPE_ERROR);
  mx_conv_params g = p;
  g.groups = 2; /* 3 output channels do not split in 2 */
  cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &g), MX_SHAPE_ERROR);
  mx_conv_params s3 = p;
  s3.spatial = 3;
  cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &s3), MX_SHAPE_ERROR);
  mx_conv_params z = p;
  z.stride[0] = 0;
  cr_expect_eq(mx__cpu_conv_forward(&y.v, &x.v, &w.v, NULL, &z), MX_INVALID_ARGUMENT);
  /* dx smaller than dy needs */
  int64_t small[4] = {1, 2, 4, 5};
  tens dxs = tens_new(MX_F32, 4, small);
  cr_expect_eq(mx__cpu_conv_backward_data(&dxs.v, &y.v, &w.v, &p), MX_SHAPE_ERROR);
  tens_free(&x), tens_free(&w), tens_free(&y), tens_free(&yb), tens_free(&yd), tens_free(&xi), tens_free(&dxs);
}

/* --- threads: the cached primitives run on several threads at once ------------------------- */

typedef struct {
  const conv_case *c;
  tens t[3];
  const mx_kview *want, *bound; /* the loops' result; its terms' magnitudes summed */
  double abs_k;                  /* the bound's factor: onednn_matches_reference_f32's */
  int bad;
  mx_conv_kind kind;
} thread_job;

static void *thread_main(void *arg) {
  thread_job *j = arg;
  mx_conv_params p = params_of(j->c);
  int out = output_index(j->kind);
  for (int it = 0; it < 10; it++) {
    fill(&j->t[out].v, NAN);
    if (run_kind(0, j->kind, &j->t[0].v, &j->t[1].v, &j->t[2].v, &p) != MX_OK) j->bad++;
    for (int64_t i = 0; i < numel(j->want); i++)
      if (!(fabs(get(&j->t[out].v, i) - get(j->want, i)) <= j->abs_k * get(j->bound, i))) {
        j->bad++;
        break;
      }
  }
  return NULL;
}

Test(conv, concurrent_threads_share_primitives) {
  enum { T = 6 };
  thread_job jobs[T];
  tens want[T], exact[T], bound[T];
  for (int i = 0; i < T; i++) {
    thread_job *j = &jobs[i];
    j->c = &cases[i % 2 ? 9 : 2];
    j->kind = (mx_conv_kind)(i % 3);
    j->bad = 0;
    rng_state = 4242 + (uint64_t)i;
    make_operands(j->t, j->c, j->kind, MX_F32);
    int out = output_index(j->kind);
    tens r[3];
    for (int k = 0; k < 3; k++) r[k] = tens_convert(&j->t[k].v, MX_F32);
    mx_conv_params p = params_of(j->c);
    cr_assert_eq(run_kind(1, j->kind, &r[0].v, &r[1].v, &r[2].v, &p), MX_OK);
    want[i] = r[out];
    for (int k = 0; k < 3; k++)
      if (k != out) tens_free(&r[k]);
    j->want = &want[i].v;
    exact_and_bound(j->t, j->kind, &p, &exact[i], &bound[i]);
    case_shapes s = shapes_of(j->c);
    j->bound = &bound[i].v;
    j->abs_k = 2 * ((double)reduction_length(j->c, j->kind, &s) + 1) * 0x1p-24;
  }
  pthread_t th[T];
  for (int i = 0; i < T; i++) cr_assert_eq(pthread_create(&th[i], NULL, thread_main, &jobs[i]), 0);
  for (int i = 0; i < T; i++) pthread_join(th[i], NULL);
  for (int i = 0; i < T; i++) {
    cr_expect_eq(jobs[i].bad, 0, "thread %d (%s %s) got wrong results", i, jobs[i].c->name, kind_str(jobs[i].kind));
    for (int k = 0; k < 3; k++) tens_free(&jobs[i].t[k]);
    tens_free(&want[i]), tens_free(&exact[i]), tens_free(&bound[i]);
  }
}

/* Where oneDNN's Winograd runs (kernels/cpu/dnnl_conv.c, winograd_fits): a 3x3 filter at stride 1, float32 from 16
 * input channels, bfloat16 (converted to float32) from 64 with 8x8 outputs or more, on a CPU with AVX-512 (oneDNN's
 * only Winograd); never a strided, 1x1 or few-channel one. Its results are held to direct's bounds in
 * onednn_matches_reference_f32 (they stay within 9 u of the terms' magnitudes there; direct within 3) and in the
 * bfloat16 tests. */
Test(conv, winograd_runs_on_3x3_stride_1_with_enough_channels) {
  if (!MX_HAVE_DNNL) cr_skip_test("built without oneDNN");
  bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
  static const struct {
    int index;
    mx_dtype dtype;
    bool winograd;
  } runs[] = {{9, MX_F32, true},   {14, MX_F32, true},  {2, MX_F32, false},
              {8, MX_F32, false},  {4, MX_F32, false},  {9, MX_BF16, false}, {14, MX_BF16, true}};
  for (size_t i = 0; i < sizeof runs / sizeof *runs; i++) {
    const conv_case *c = &cases[runs[i].index];
    if (runs[i].dtype == MX_BF16 && !mx__dnnl_native(MX_BF16)) continue;
    mx_conv_params p = params_of(c);
    for (int k = 0; k < 3; k++) {
      tens t[3];
      make_operands(t, c, (mx_conv_kind)k, runs[i].dtype);
      uint64_t before = mx__dnnl_conv_winograd_runs();
      cr_assert_eq(run_kind(0, (mx_conv_kind)k, &t[0].v, &t[1].v, &t[2].v, &p), MX_OK, "%s", mx_last_error());
      uint64_t want = avx512 && runs[i].winograd, got = mx__dnnl_conv_winograd_runs() - before;
      cr_expect_eq(got, want, "%s %s (%s): %llu Winograd runs, want %llu", c->name, kind_str((mx_conv_kind)k),
                   mx_dtype_name(runs[i].dtype), (unsigned long long)got, (unsigned long long)want);
      for (int r = 0; r < 3; r++) tens_free(&t[r]);
    }
  }
}

/* --- (c) PyTorch ---------------------------------------------------------------------------- */

typedef struct {
  char name[64], kind[16];
  mx_conv_params p;
  tens t[6]; /* x w y gy gx gw (conv) or x w y (transpose) */
  int count;
} fixture;

static bool read_tensor(FILE *f, tens *t, char *name) {
  int nd;
  if (fscanf(f, " tensor %31s %d", name, &nd) != 2 || nd < 1 || nd > 5) return false;
  int64_t shape[5];
  for (int d = 0; d < nd; d++) {
    long long v;
    if (fscanf(f, "%lld", &v) != 1) return false;
    shape[d] = v;
  }
  *t = tens_new(MX_F64, nd, shape);
  double *data = t->buf;
  for (int64_t i = 0; i < numel(&t->v); i++)
    if (fscanf(f, "%lf", &data[i]) != 1) return false;
  return true;
}

/* Reads the next case; false at the end of the file. */
static bool read_fixture(FILE *f, fixture *fx) {
  memset(fx, 0, sizeof *fx);
  int c;
  while ((c = fgetc(f)) == '#' || c == '\n' || c == ' ')
    if (c == '#')
      while ((c = fgetc(f)) != '\n' && c != EOF) {
      }
  if (c == EOF) return false;
  ungetc(c, f);
  if (fscanf(f, " case %63s %15s spatial %d", fx->name, fx->kind, &fx->p.spatial) != 3) return false;
  int s = fx->p.spatial;
  cr_assert(s >= 1 && s <= 3);
  const char *keys[4] = {"stride", "padding", "dilation", "output_padding"};
  int64_t *vals[4] = {fx->p.stride, fx->p.padding, fx->p.dilation, NULL};
  int64_t outpad[3];
  vals[3] = outpad;
  for (int k = 0; k < 4; k++) {
    char key[32];
    cr_assert_eq(fscanf(f, " %31s", key), 1);
    cr_assert_str_eq(key, keys[k]);
    for (int d = 0; d < s; d++) {
      long long v;
      cr_assert_eq(fscanf(f, "%lld", &v), 1);
      vals[k][d] = v;
    }
  }
  long long g;
  cr_assert_eq(fscanf(f, " groups %lld", &g), 1);
  fx->p.groups = g;
  int want = strcmp(fx->kind, "conv") == 0 ? 6 : 3;
  const char *names[6] = {"x", "w", "y", "gy", "gx", "gw"};
  for (int i = 0; i < want; i++) {
    char name[32];
    cr_assert(read_tensor(f, &fx->t[i], name), "%s: unreadable tensor %d", fx->name, i);
    cr_assert_str_eq(name, names[i]);
  }
  fx->count = want;
  char end[16];
  cr_assert_eq(fscanf(f, " %15s", end), 1);
  cr_assert_str_eq(end, "end");
  return true;
}

/* |got - want| <= tol * max(|want|, 1e-3 * max|want|) elementwise. */
static int compare_rel(const char *what, const mx_kview *got, const mx_kview *want, double tol) {
  double m = 0;
  for (int64_t i = 0; i < numel(want); i++) m = fmax(m, fabs(get(want, i)));
  int bad = 0;
  for (int64_t i = 0; i < numel(want); i++) {
    double g = get(got, i), w = get(want, i);
    if (!(fabs(g - w) <= tol * fmax(fabs(w), 1e-3 * m)) && ++bad <= 5)
      cr_log_error("%s: element %lld: got %.17g, want %.17g", what, (long long)i, g, w);
  }
  return bad;
}

/* Runs the fixture's convolutions in dtype (the loops when reference) and
 * compares to PyTorch within tol. */
static void check_fixture(const fixture *fx, mx_dtype dt, bool reference, double tol) {
  int which = reference ? 1 : 0;
  const char *how = reference ? "loops" : "dispatch";
  char what[200];
  tens in[6];
  for (int i = 0; i < fx->count; i++) in[i] = tens_convert(&fx->t[i].v, dt);
  if (!strcmp(fx->kind, "conv")) {
    /* y = conv(x, w); gx from gy and w; gw from gy and x */
    tens y = tens_new(dt, in[2].v.ndim, in[2].v.shape), gx = tens_new(dt, in[0].v.ndim, in[0].v.shape),
         gw = tens_new(dt, in[1].v.ndim, in[1].v.shape);
    fill(&y.v, NAN), fill(&gx.v, NAN), fill(&gw.v, NAN);
    cr_assert_eq(run_kind(which, MX_CONV_FORWARD, &in[0].v, &in[1].v, &y.v, &fx->p), MX_OK, "%s", mx_last_error());
    cr_assert_eq(run_kind(which, MX_CONV_BACKWARD_DATA, &gx.v, &in[1].v, &in[3].v, &fx->p), MX_OK, "%s",
                 mx_last_error());
    cr_assert_eq(run_kind(which, MX_CONV_BACKWARD_WEIGHT, &in[0].v, &gw.v, &in[3].v, &fx->p), MX_OK, "%s",
                 mx_last_error());
    snprintf(what, sizeof what, "%s %s %s y", fx->name, mx_dtype_name(dt), how);
    cr_expect_eq(compare_rel(what, &y.v, &fx->t[2].v, tol), 0, "%s", what);
    snprintf(what, sizeof what, "%s %s %s grad x", fx->name, mx_dtype_name(dt), how);
    cr_expect_eq(compare_rel(what, &gx.v, &fx->t[4].v, tol), 0, "%s", what);
    snprintf(what, sizeof what, "%s %s %s grad w", fx->name, mx_dtype_name(dt), how);
    cr_expect_eq(compare_rel(what, &gw.v, &fx->t[5].v, tol), 0, "%s", what);
    tens_free(&y), tens_free(&gx), tens_free(&gw);
  } else {
    /* the transposed convolution: dx (y's shape) from dy = x and w */
    tens y = tens_new(dt, in[2].v.ndim, in[2].v.shape);
    fill(&y.v, NAN);
    cr_assert_eq(run_kind(which, MX_CONV_BACKWARD_DATA, &y.v, &in[1].v, &in[0].v, &fx->p), MX_OK, "%s",
                 mx_last_error());
    snprintf(what, sizeof what, "%s %s %s", fx->name, mx_dtype_name(dt), how);
    cr_expect_eq(compare_rel(what, &y.v, &fx->t[2].v, tol), 0, "%s", what);
    tens_free(&y);
  }
  for (int i = 0; i < fx->count; i++) tens_free(&in[i]);
}

Test(conv, matches_pytorch_fixtures) {
  const char *dir = getenv("MX_FIXTURES_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/conv_fixtures.txt", dir && *dir ? dir : MX_FIXTURES_DIR);
  FILE *f = fopen(path, "r");
  cr_assert(f, "cannot open %s (regenerate it with tests/fixtures/make_conv_fixtures.py)", path);
  fixture fx;
  int n = 0;
  while (read_fixture(f, &fx)) {
    n++;
    check_fixture(&fx, MX_F64, true, 1e-12);
    check_fixture(&fx, MX_F64, false, 1e-12);
    check_fixture(&fx, MX_F32, false, 1e-5);
    check_fixture(&fx, MX_F32, true, 1e-5);
    for (int i = 0; i < fx.count; i++) tens_free(&fx.t[i]);
  }
  fclose(f);
  cr_expect_geq(n, 13, "read %d cases from %s", n, path);
}
