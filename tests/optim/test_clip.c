/* Gradient clipping against PyTorch 1.13 (tests/fixtures/clip_fixtures.txt): the total norm of order 2, 1, inf
 * and 3 and the clipped gradients in float32, float64, bfloat16 and mixes, clip by value, non-finite norms and
 * their error, the optimizer forms, and the argument errors. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../ops/fixture_io.h"
#include "tests/common/expect_error.h"

#define CL_FIXTURES MX_FIXTURES_DIR "/clip_fixtures.txt"
#define CL_MAX_PARAMS 4

typedef struct {
  char id[48];
  bool by_norm;
  double norm_type, max_norm, clip_value, total;
  int n;
  bool has_grad[CL_MAX_PARAMS];
  fx_tensor grad[CL_MAX_PARAMS], clipped[CL_MAX_PARAMS];
} cl_case;

static bool header(void *arg, const char *line) {
  cl_case *c = arg;
  char kind[16];
  memset(c, 0, sizeof *c);
  if (sscanf(line, "case %47s %15s", c->id, kind) != 2) return false;
  c->by_norm = !strcmp(kind, "norm");
  if (c->by_norm) return sscanf(line, "case %*s norm %lf %lf", &c->norm_type, &c->max_norm) == 2;
  return !strcmp(kind, "value") && sscanf(line, "case %*s value %lf", &c->clip_value) == 1;
}

static bool body(void *arg, char *line) {
  cl_case *c = arg;
  char *save = NULL, *tag = strtok_r(line, " ", &save);
  if (!tag) return false;
  if (!strcmp(tag, "total")) {
    char *tok = strtok_r(NULL, " ", &save);
    if (tok) c->total = strtod(tok, NULL);
    return tok != NULL;
  }
  char *tok = strtok_r(NULL, " ", &save);
  int k = tok ? atoi(tok) : -1;
  if (k < 0 || k >= CL_MAX_PARAMS) return false;
  unsigned dtypes = FX_DTYPE(MX_F32) | FX_DTYPE(MX_F64) | FX_DTYPE(MX_BF16);
  if (!strcmp(tag, "clipped")) return fx_parse_tensor(&save, &c->clipped[k], dtypes);
  if (k != c->n) return false;
  c->n++;
  c->has_grad[k] = !strcmp(tag, "grad");
  if (c->has_grad[k]) return fx_parse_tensor(&save, &c->grad[k], dtypes);
  if (strcmp(tag, "nograd") != 0) return false;
  char *dtype = strtok_r(NULL, " ", &save), *ndim = strtok_r(NULL, " ", &save);
  if (!dtype || !ndim) return false;
  c->grad[k].dtype = !strcmp(dtype, "f64") ? MX_F64 : !strcmp(dtype, "bf16") ? MX_BF16 : MX_F32;
  c->grad[k].shape.ndim = atoi(ndim);
  for (int d = 0; d < c->grad[k].shape.ndim; d++) {
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    c->grad[k].shape.d[d] = atoll(tok);
  }
  return true;
}

static void case_free(cl_case *c) {
  for (int k = 0; k < CL_MAX_PARAMS; k++) {
    free(c->grad[k].v);
    free(c->clipped[k].v);
  }
}

/* The case's parameters (zeros, requiring grad) with its gradients, outside any scope. */
static void make_params(const cl_case *c, mx_tensor **params) {
  for (int k = 0; k < c->n; k++) {
    const fx_tensor *g = &c->grad[k];
    params[k] = mx_zeros(g->shape, g->dtype, MX_CPU);
    cr_assert_not_null(params[k], "%s", mx_last_error());
    cr_assert_eq(mx_set_requires_grad(params[k], true), MX_OK, "%s", mx_last_error());
    if (!c->has_grad[k]) continue;
    mx_scope *s = mx_scope_begin(); /* the gradient of sum(p * g) is g */
    mx_tensor *gt = mx_to_dtype(mx_from_data(g->v, g->shape, MX_F64, MX_CPU), g->dtype);
    cr_assert_eq(mx_backward(mx_sum(mx_mul(params[k], gt), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s",
                 mx_last_error());
    mx_scope_end(s);
  }
}

static void release_params(const cl_case *c, mx_tensor **params) {
  for (int k = 0; k < c->n; k++) mx_release(params[k]);
}

static double eps_of(mx_dtype dtype) { return dtype == MX_F64 ? 0x1p-52 : dtype == MX_F32 ? 0x1p-23 : 0x1p-7; }

static mx_dtype widest(const cl_case *c) {
  mx_dtype dtype = MX_BF16;
  for (int k = 0; k < c->n; k++)
    if (c->has_grad[k] && (c->grad[k].dtype == MX_F64 || (c->grad[k].dtype == MX_F32 && dtype != MX_F64)))
      dtype = c->grad[k].dtype;
  return dtype;
}

/* The total norm's relative tolerance: its summation order is not PyTorch's, n elements long, in the norm's
 * dtype (bfloat16 norms accumulate in float32 and may round one unit apart). */
static double total_rtol(const cl_case *c) {
  int64_t n = 0;
  for (int k = 0; k < c->n; k++) n += c->has_grad[k] ? c->grad[k].n : 0;
  mx_dtype dtype = widest(c);
  return dtype == MX_BF16 ? eps_of(MX_BF16) : (double)(n + 2) * eps_of(dtype);
}

static bool close_to(double got, double want, double rtol) {
  if (isnan(want)) return isnan(got);
  if (isinf(want)) return got == want;
  return fabs(got - want) <= rtol * fabs(want);
}

/* The clipped gradients: exact when nothing was scaled (coefficient 1) or by value, else within the total's
 * tolerance (the coefficient carries it) plus a unit of the gradient's dtype. */
static void expect_clipped(const cl_case *c, mx_tensor **params, const char *how) {
  bool exact = !c->by_norm || !(c->max_norm < c->total);
  for (int k = 0; k < c->n; k++) {
    mx_tensor *grad = mx_grad_of(params[k]);
    if (!c->has_grad[k]) {
      cr_expect_null(grad, "%s%s: parameter %d has a gradient now", c->id, how, k);
      continue;
    }
    cr_assert_not_null(grad);
    cr_expect_eq(mx_dtype_of(grad), c->clipped[k].dtype);
    double rtol = exact ? 0 : total_rtol(c) + eps_of(c->clipped[k].dtype);
    mx_scope *s = mx_scope_begin();
    double *got = malloc(sizeof *got * (size_t)(c->clipped[k].n ? c->clipped[k].n : 1));
    cr_assert_eq(mx_to_host(mx_to_dtype(grad, MX_F64), got, sizeof *got * (size_t)c->clipped[k].n), MX_OK, "%s",
                 mx_last_error());
    for (int64_t i = 0; i < c->clipped[k].n; i++)
      cr_expect(close_to(got[i], c->clipped[k].v[i], rtol), "%s%s: gradient %d element %lld is %.17g, PyTorch's %.17g",
                c->id, how, k, (long long)i, got[i], c->clipped[k].v[i]);
    free(got);
    mx_scope_end(s);
  }
}

static struct criterion_test_params all_cases(void) {
  size_t n;
  int *ids = fx_case_ids(fx_count_cases(CL_FIXTURES), &n); /* -1 for a missing file: the test reports it */
  return cr_make_param_array(int, ids, n);
}

static void load(int k, cl_case *c) {
  cr_assert_geq(k, 0, "cannot read %s (run tests/fixtures/make_schedule_fixtures.py)", CL_FIXTURES);
  cr_assert(fx_load_case(CL_FIXTURES, k, c, header, body), "case %d of %s does not parse", k, CL_FIXTURES);
}

ParameterizedTestParameters(clip, matches_pytorch) { return all_cases(); }

/* Each case through the list form and through the optimizer form (an SGD over the same parameters). */
ParameterizedTest(int *k, clip, matches_pytorch) {
  cl_case c;
  load(*k, &c);
  mx_tensor *params[CL_MAX_PARAMS];
  for (int form = 0; form < 2; form++) {
    make_params(&c, params);
    mx_optimizer *opt = form ? mx_sgd_new(c.n, params, NULL) : NULL;
    cr_assert(!form || opt, "%s", mx_last_error());
    if (c.by_norm) {
      double total = -1;
      mx_status status = form ? mx_clip_grad_norm_optimizer(opt, c.max_norm, c.norm_type, false, &total)
                              : mx_clip_grad_norm(c.n, params, c.max_norm, c.norm_type, false, &total);
      cr_assert_eq(status, MX_OK, "%s: %s", c.id, mx_last_error());
      cr_expect(close_to(total, c.total, total_rtol(&c)), "%s: the total norm is %.17g, PyTorch's %.17g", c.id, total,
                c.total);
    } else {
      mx_status status =
          form ? mx_clip_grad_value_optimizer(opt, c.clip_value) : mx_clip_grad_value(c.n, params, c.clip_value);
      cr_assert_eq(status, MX_OK, "%s: %s", c.id, mx_last_error());
    }
    expect_clipped(&c, params, form ? " (optimizer)" : "");
    mx_optimizer_free(opt);
    release_params(&c, params);
  }
  case_free(&c);
}

/* The gradients and their dtypes, as bytes. */
static size_t grad_bytes(mx_tensor *const *params, int n, unsigned char *out) {
  size_t at = 0;
  for (int k = 0; k < n; k++) {
    mx_tensor *g = mx_grad_of(params[k]);
    if (!g) continue;
    size_t bytes = (size_t)mx_numel(g) * mx_dtype_size(mx_dtype_of(g));
    cr_assert_eq(mx_to_host(g, out + at, bytes), MX_OK, "%s", mx_last_error());
    at += bytes;
  }
  return at;
}

static int find_case(const char *id, cl_case *c) {
  int n = fx_count_cases(CL_FIXTURES);
  for (int k = 0; k < n; k++) {
    load(k, c);
    if (!strcmp(c->id, id)) return k;
    case_free(c);
  }
  cr_assert_fail("%s has no case %s", CL_FIXTURES, id);
  return -1;
}

/* With error_if_nonfinite an inf or NaN total is an error that leaves the gradients alone (and still reports the
 * total); without it the gradients are scaled by it, as the fixtures show. */
Test(clip, nonfinite_norm_is_an_error_when_asked) {
  const char *ids[] = {"norm2_f32_inf", "norm1_f32_nan"};
  const char *messages[] = {
      "mx_clip_grad_norm: the total norm of order 2 for the gradients is non-finite (inf), so it cannot be clipped; "
      "to scale them by it anyway, pass error_if_nonfinite = false",
      "mx_clip_grad_norm_optimizer: the total norm of order 1 for the gradients is non-finite (nan), so it cannot be "
      "clipped; to scale them by it anyway, pass error_if_nonfinite = false"};
  for (int i = 0; i < 2; i++) {
    cl_case c;
    find_case(ids[i], &c);
    mx_tensor *params[CL_MAX_PARAMS];
    make_params(&c, params);
    mx_optimizer *opt = mx_sgd_new(c.n, params, NULL);
    unsigned char before[4096], after[4096];
    size_t n = grad_bytes(params, c.n, before);
    double total = 0;
    mx_clear_error();
    mx_status status = i == 0 ? mx_clip_grad_norm(c.n, params, c.max_norm, c.norm_type, true, &total)
                              : mx_clip_grad_norm_optimizer(opt, c.max_norm, c.norm_type, true, &total);
    cr_expect_eq(status, MX_STATE_ERROR);
    cr_expect_str_eq(mx_last_error(), messages[i]);
    cr_expect(close_to(total, c.total, 0), "%s: the total is %g", c.id, total);
    cr_expect_eq(grad_bytes(params, c.n, after), n);
    cr_expect(!memcmp(before, after, n), "%s: the error changed the gradients", c.id);
    mx_clear_error();
    mx_optimizer_free(opt);
    release_params(&c, params);
    case_free(&c);
  }
}

/* Without total_norm_out nothing is read back; the gradients are clipped all the same. */
Test(clip, total_norm_out_may_be_null) {
  cl_case c;
  find_case("norm2_f32_clips", &c);
  mx_tensor *params[CL_MAX_PARAMS];
  make_params(&c, params);
  cr_assert_eq(mx_clip_grad_norm(c.n, params, c.max_norm, c.norm_type, false, NULL), MX_OK, "%s", mx_last_error());
  expect_clipped(&c, params, " (no total_norm_out)");
  release_params(&c, params);
  case_free(&c);
}

/* Clipping records nothing, even under grad mode with gradients that require grad (create_graph's). */
Test(clip, records_no_graph) {
  mx_tensor *p = mx_full(MX_SHAPE(3), 2.0, MX_F32, MX_CPU);
  cr_assert_eq(mx_set_requires_grad(p, true), MX_OK, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  cr_assert_eq(mx_backward(mx_sum(mx_mul(p, p), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
  double total;
  cr_assert_eq(mx_clip_grad_norm(1, &p, 1.0, 2.0, false, &total), MX_OK, "%s", mx_last_error());
  cr_expect_float_eq(total, sqrt(48.0), 1e-6);
  cr_expect_null(mx_grad_fn_name(mx_grad_of(p)));
  cr_expect_float_eq(mx_at(mx_grad_of(p), MX_SHAPE(0)), 4 / (sqrt(48.0) + 1e-6), 1e-6);
  mx_release(p);
}

Test(clip, argument_errors) {
  mx_tensor *p = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  mx_tensor *params[2] = {p, NULL};
  double total;
  EXPECT_STATUS_ERROR(mx_clip_grad_norm(1, NULL, 1, 2, false, &total), "mx_clip_grad_norm: argument 'params' is NULL");
  EXPECT_STATUS_ERROR(mx_clip_grad_norm(2, params, 1, 2, false, &total),
                      "mx_clip_grad_norm: argument 'params[1]' is NULL");
  EXPECT_STATUS_ERROR(mx_clip_grad_norm(-1, params, 1, 2, false, &total), "mx_clip_grad_norm: n is -1 (must be >= 0)");
  EXPECT_STATUS_ERROR(mx_clip_grad_norm(1, params, 1, NAN, false, &total), "mx_clip_grad_norm: invalid norm_type nan");
  EXPECT_STATUS_ERROR(mx_clip_grad_value(2, params, 1), "mx_clip_grad_value: argument 'params[1]' is NULL");
  EXPECT_STATUS_ERROR(mx_clip_grad_norm_optimizer(NULL, 1, 2, false, &total),
                      "mx_clip_grad_norm_optimizer: argument 'opt' is NULL");
  EXPECT_STATUS_ERROR(mx_clip_grad_value_optimizer(NULL, 1), "mx_clip_grad_value_optimizer: argument 'opt' is NULL");
  /* no parameters, or none with a gradient: nothing to do, a total of 0 */
  total = -1;
  cr_expect_eq(mx_clip_grad_norm(0, NULL, 1, 2, true, &total), MX_OK, "%s", mx_last_error());
  cr_expect_eq(total, 0);
  cr_expect_eq(mx_clip_grad_value(1, params, 1), MX_OK, "%s", mx_last_error());
  mx_release(p);
}
