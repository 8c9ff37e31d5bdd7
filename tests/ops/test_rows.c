/* Every elementwise row of ops/ops.def, checked from the row alone, so a new row needs no test of its own: its
 * forward in float32, float16, bfloat16 and float64 against a float64 reference computed here from the row's
 * expression in kernels/elementwise.def, within a bound derived from the dtypes' epsilons; gradcheck and
 * gradgradcheck (float64 finite differences) where it has a formula; and its autocast policy, applied in float16
 * and bfloat16 regions (the dtype of the result and its bits, against the op run on inputs cast by hand). The
 * inputs come from the row's domain, the parameters are ROW_PARAMS. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <tgmath.h>

#include "kernels/elementwise.h"
#include "kernels/math.h"
#include "op_cases.h"
#include "op_checks.h"

/* The values of the parameters a row does not fix (leaky_relu's slope, clamp's bounds, softplus's beta and
 * threshold): negative and positive, so that clamp keeps half of [-2, 2] and softplus takes both branches. */
static const double ROW_PARAMS[2] = {-0.75, 1.25};

typedef void (*any_fn)(void);

typedef struct {
  const char *name;
  int arity, code;
  op_domain domain[2];
  const char *params;
  bool formula; /* differentiable: gradcheck and gradgradcheck */
  any_fn fn;
} row;

#define DIFFERENTIABLE_FORMULA true
#define DIFFERENTIABLE_NONE false
static const row rows[] = {
#define MX_UNARY(E, name, policy, save, grad, domain, params, doc) \
  {#name, 1, MX_UN_##E, {DOM_##domain, DOM_ANY}, params, DIFFERENTIABLE_##grad, (any_fn)mx_##name},
#define MX_BINARY(E, name, policy, save, grad, domain_a, domain_b, params, doc) \
  {#name, 2, MX_BIN_##E, {DOM_##domain_a, DOM_##domain_b}, params, DIFFERENTIABLE_##grad, (any_fn)mx_##name},
#define MX_OP(...)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};
#define N_ROWS (int)(sizeof rows / sizeof *rows)

/* The kernel's scalar arguments for the row (a and b; alpha for add and sub), and how many the caller passes. */
static int row_params(const row *r, double out[2]) {
  int passed = 0, k = 0;
  out[0] = r->arity == 2 ? 1 : 0, out[1] = 0; /* what the kernel gets without arguments */
  for (const char *p = r->params; *p && k < 2; k++) {
    size_t len = strcspn(p, ",");
    const char *eq = memchr(p, '=', len);
    out[k] = eq ? strtod(eq + 1, NULL) : ROW_PARAMS[passed++];
    p += len + (p[len] == ',');
  }
  return passed;
}

/* The row's public function on in[], with ROW_PARAMS for the parameters it takes. */
static mx_tensor *call_row(const row *r, mx_tensor *const *in) {
  double a[2];
  int passed = row_params(r, a);
  if (r->arity == 1) {
    switch (passed) {
    case 0: return ((mx_tensor * (*)(const mx_tensor *)) r->fn)(in[0]);
    case 1: return ((mx_tensor * (*)(const mx_tensor *, double)) r->fn)(in[0], a[0]);
    default: return ((mx_tensor * (*)(const mx_tensor *, double, double)) r->fn)(in[0], a[0], a[1]);
    }
  }
  switch (passed) {
  case 0: return ((mx_tensor * (*)(const mx_tensor *, const mx_tensor *)) r->fn)(in[0], in[1]);
  default: return ((mx_tensor * (*)(const mx_tensor *, const mx_tensor *, double)) r->fn)(in[0], in[1], a[0]);
  }
}

static mx_tensor *row_fn(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  return call_row(ctx, in);
}

/* --- the float64 reference: the rows' expressions of kernels/elementwise.def, computed in double ------------- */

static double unary_reference(int code, double x, double a, double b) {
  typedef double T;
  (void)a, (void)b;
  switch (code) {
#define MX_UNARY_FN(code, expr) \
  case MX_UN_##code: return (expr);
#include "kernels/elementwise.def"
  }
  cr_assert_fail("unary code %d has no expression", code);
  return NAN;
}

static double binary_reference(int code, double x, double y, double a) {
  typedef double T;
  (void)a;
  switch (code) {
#define MX_BINARY_FN(code, expr) \
  case MX_BIN_##code: return (expr);
#define MX_COMPARE_FN(code, expr) \
  case MX_BIN_##code: return (expr);
#include "kernels/elementwise.def"
  }
  cr_assert_fail("binary code %d has no expression", code);
  return NAN;
}

/* --- inputs -------------------------------------------------------------------------------------------------- */

/* The row's inputs as float64, (rows, cols) and, for a binary row, (cols) broadcast against it, from a generator
 * seeded by the row. */
#define FORWARD_ROWS 8
#define FORWARD_COLS 16
static void row_inputs_of(const row *r, int k, int64_t n_rows, int64_t n_cols, mx_tensor **in) {
  mx_generator *gen = mx_generator_new(20261126u + (uint64_t)k);
  in[0] = op_case_input(MX_SHAPE(n_rows, n_cols), r->domain[0], gen);
  in[1] = r->arity == 2 ? op_case_input(MX_SHAPE(n_cols), r->domain[1], gen) : NULL;
  mx_generator_free(gen);
  for (int i = 0; i < r->arity; i++) cr_assert_not_null(in[i], "%s: input %d: %s", r->name, i, mx_last_error());
}

/* Forward and autocast take (8, 16), gradients (2, 3). */
static void row_inputs(const row *r, int k, mx_tensor **in) { row_inputs_of(r, k, FORWARD_ROWS, FORWARD_COLS, in); }

static void cast_all(const row *r, mx_tensor *const *in, mx_dtype dtype, mx_tensor **out) {
  for (int i = 0; i < r->arity; i++) {
    out[i] = mx_to_dtype(in[i], dtype);
    cr_assert_not_null(out[i], "%s: %s", r->name, mx_last_error());
  }
}

static int row_ids[256];

static int all_rows(void) {
  for (int k = 0; k < N_ROWS; k++) row_ids[k] = k;
  return N_ROWS;
}

/* --- forward ------------------------------------------------------------------------------------------------- */

static double ulp(mx_dtype dtype, double v) {
  int mantissa = dtype == MX_F16 ? 10 : dtype == MX_BF16 ? 7 : dtype == MX_F32 ? 23 : 52;
  int min_exp = dtype == MX_F16 ? -14 : dtype == MX_F64 ? -1022 : -126; /* below it, subnormal spacing */
  int e = v == 0 || !isfinite(v) ? min_exp : ilogb(v);
  return ldexp(1, (e < min_exp ? min_exp : e) - mantissa);
}

/* The bound on |result - reference|: the kernel computes in float32 (float64 for float64) and rounds once to the
 * dtype, so half an ulp of the dtype, plus ROW_ULPS units of the compute type's epsilon on the scale of the
 * computation: the result or the inputs, whichever is larger (1 + erf(x) in gelu cancels to a result far smaller
 * than the terms of its sum). float32 results are within 1 of those units today, float64 ones equal. */
#define ROW_ULPS 4
static double bound(mx_dtype dtype, double want, double scale) {
  double eps = dtype == MX_F64 ? ldexp(1, -52) : ldexp(1, -23);
  double rounding = dtype == MX_F16 || dtype == MX_BF16 ? ulp(dtype, want) / 2 : 0;
  return rounding + ROW_ULPS * eps * fmax(fabs(want), scale);
}

ParameterizedTestParameters(ops_rows, forward) { return OP_PARAMS(row_ids, (size_t)all_rows()); }

ParameterizedTest(int *k, ops_rows, forward) {
  const row *r = &rows[*k];
  const mx_dtype dtypes[] = {MX_F32, MX_F16, MX_BF16, MX_F64};
  double p[2];
  row_params(r, p);
  for (int d = 0; d < 4; d++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *in64[2], *in[2];
    row_inputs(r, *k, in64);
    cast_all(r, in64, dtypes[d], in);
    mx_tensor *out = call_row(r, in);
    cr_assert_not_null(out, "%s on %s: %s", r->name, mx_dtype_name(dtypes[d]), mx_last_error());
    double *x = op_host_values(in[0]), *y = r->arity == 2 ? op_host_values(in[1]) : NULL, *got = op_host_values(out);
    const int n = FORWARD_ROWS * FORWARD_COLS;
    cr_assert_eq(mx_numel(out), n, "%s: %lld elements", r->name, (long long)mx_numel(out));
    for (int i = 0; i < n; i++) {
      double yi = y ? y[i % FORWARD_COLS] : NAN;
      double want = r->arity == 1 ? unary_reference(r->code, x[i], p[0], p[1])
                                  : binary_reference(r->code, x[i], yi, p[0]);
      if (r->arity == 2 && r->code >= MX_BIN_EQ) { /* bool */
        cr_expect_eq(got[i], want, "%s on %s, element %d: %g, the reference says %g", r->name,
                     mx_dtype_name(dtypes[d]), i, got[i], want);
        continue;
      }
      double scale = fmax(fabs(x[i]), y ? fabs(yi) : 0), tol = bound(dtypes[d], want, scale);
      cr_expect(fabs(got[i] - want) <= tol || (isnan(got[i]) && isnan(want)),
                "%s on %s, element %d (x = %.9g, y = %.9g): %.9g, the float64 reference says %.9g (|difference| %.3g > "
                "%.3g)", r->name, mx_dtype_name(dtypes[d]), i, x[i], yi, got[i], want,
                fabs(got[i] - want), tol);
    }
    free(x), free(y), free(got);
    mx_scope_end(s);
  }
}

/* --- gradients ----------------------------------------------------------------------------------------------- */

static int formula_ids[256];

static int formula_rows(void) {
  int n = 0;
  for (int k = 0; k < N_ROWS; k++)
    if (rows[k].formula) formula_ids[n++] = k;
  return n;
}

ParameterizedTestParameters(ops_rows, gradcheck) {
  return OP_PARAMS(formula_ids, (size_t)formula_rows());
}

ParameterizedTest(int *k, ops_rows, gradcheck) {
  const row *r = &rows[*k];
  mx_scope *s = mx_scope_begin();
  mx_tensor *in[2];
  row_inputs_of(r, *k, 2, 3, in);
  for (int i = 0; i < r->arity; i++) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK);
  mx_tensor *out = call_row(r, in);
  cr_assert_not_null(out, "%s: %s", r->name, mx_last_error());
  cr_expect(mx_requires_grad(out), "%s: the output does not require grad", r->name);
  cr_expect_eq(mx_gradcheck(row_fn, r->arity, in, (void *)r, 1e-6, 1e-5, 1e-4), MX_OK, "gradcheck %s: %s", r->name,
               mx_last_error());
  cr_expect_eq(mx_gradgradcheck(row_fn, r->arity, in, (void *)r, 1e-6, 1e-5, 1e-4), MX_OK, "gradgradcheck %s: %s",
               r->name, mx_last_error());
  mx_scope_end(s);
}

/* --- autocast ------------------------------------------------------------------------------------------------ */

static int op_index(const char *name) {
  for (int op = 0; op < mx_op_count(); op++)
    if (!strcmp(mx_op_name(op), name)) return op;
  return -1;
}

/* In a region of dtype `region`, the row on inputs of dtype `given` gives what it gives outside any region on the
 * inputs cast to `want` (the dtype and every bit): the policy's cast and nothing else. */
static void expect_autocast(const row *r, mx_dtype region, mx_dtype given, mx_dtype want, int k) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *in64[2], *in[2], *cast[2];
  row_inputs(r, k, in64);
  cast_all(r, in64, given, in);
  cast_all(r, in, want, cast);
  mx_tensor *out = NULL;
  MX_AUTOCAST(MX_CPU, region, true, true) { out = call_row(r, in); }
  mx_tensor *control = call_row(r, cast);
  cr_assert_not_null(out, "%s in a %s region: %s", r->name, mx_dtype_name(region), mx_last_error());
  cr_assert_not_null(control, "%s: %s", r->name, mx_last_error());
  cr_expect_eq(mx_dtype_of(out), mx_dtype_of(control), "%s on %s in a %s region (policy %s): %s, expected %s",
               r->name, mx_dtype_name(given), mx_dtype_name(region),
               mx_cast_policy_name(mx_op_policy(op_index(r->name))), mx_dtype_name(mx_dtype_of(out)),
               mx_dtype_name(mx_dtype_of(control)));
  cr_expect(op_bitwise_equal(mx_to_dtype(out, MX_F64), mx_to_dtype(control, MX_F64)),
            "%s on %s in a %s region: not the bits of the op on %s inputs", r->name, mx_dtype_name(given),
            mx_dtype_name(region), mx_dtype_name(want));
  mx_scope_end(s);
}

ParameterizedTestParameters(ops_rows, autocast) { return OP_PARAMS(row_ids, (size_t)all_rows()); }

ParameterizedTest(int *k, ops_rows, autocast) {
  const row *r = &rows[*k];
  const mx_dtype regions[] = {MX_F16, MX_BF16};
  int op = op_index(r->name);
  cr_assert_geq(op, 0, "no op named %s", r->name);
  for (int g = 0; g < 2; g++) {
    mx_dtype region = regions[g];
    switch (mx_op_policy(op)) {
    case MX_CAST_LOWER: expect_autocast(r, region, MX_F32, region, *k); break;
    case MX_CAST_FP32: expect_autocast(r, region, region, MX_F32, *k); break;
    case MX_CAST_PROMOTE: /* the widest: float32 with float32, the region's dtype with itself */
      expect_autocast(r, region, MX_F32, MX_F32, *k);
      expect_autocast(r, region, region, region, *k);
      break;
    case MX_CAST_NONE: /* neither lowered nor raised */
      expect_autocast(r, region, MX_F32, MX_F32, *k);
      expect_autocast(r, region, region, region, *k);
      break;
    case MX_CAST_BANNED: {
      mx_tensor *in[2];
      row_inputs(r, *k, in);
      mx_tensor *out = NULL;
      MX_AUTOCAST(MX_CPU, region, true, true) { out = call_row(r, in); }
      cr_expect_null(out, "%s is banned under autocast, but ran", r->name);
      mx_clear_error();
      break;
    }
    }
  }
}
