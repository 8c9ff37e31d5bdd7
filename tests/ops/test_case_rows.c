/* The rows that are not elementwise (MX_OP), through their op cases (op_cases.h): each case's forward in float32
 * against the same case in float64 on the same (float32-rounded) inputs, float64 running the plain loops; its row's
 * autocast policy applied in float16 and bfloat16 regions; and the public function of every row declared with the
 * tensor inputs its row names (written by hand for MX_OP rows, from the row for the elementwise ones). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_io.h"
#include "op_cases.h"
#include "op_checks.h"

/* --- forward: float32 against float64 ------------------------------------------------------------------------ */

/* The bound on |float32 - float64|, relative to the largest |float64 value| of the result: CASE_ULPS units of
 * float32's epsilon for each input element, the longest any sum or chain of products in a case can be (the cases'
 * inputs have at most a few dozen elements). */
#define CASE_ULPS 4

static int case_ids[1024];

ParameterizedTestParameters(ops_case_rows, float32_matches_float64) {
  for (int k = 0; k < op_case_count(); k++) case_ids[k] = k;
  return OP_PARAMS(case_ids, (size_t)op_case_count());
}

ParameterizedTest(int *k, ops_case_rows, float32_matches_float64) {
  const op_case *c = op_case_at(*k);
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(20261127u + (uint64_t)*k);
  mx_tensor *in32[OP_MAX_IN] = {0}, *in64[OP_MAX_IN] = {0};
  int64_t length = 1;
  for (int i = 0; i < c->n_in; i++) {
    mx_tensor *drawn = op_case_input(c->shape[i], c->domain[i], gen);
    cr_assert_not_null(drawn, "%s: input %d: %s", c->name, i, mx_last_error());
    bool floating = mx_dtype_is_floating(mx_dtype_of(drawn));
    in32[i] = floating ? mx_to_dtype(drawn, MX_F32) : drawn;
    in64[i] = floating ? mx_to_dtype(in32[i], MX_F64) : drawn; /* the float32 values, exactly */
    cr_assert(in32[i] && in64[i], "%s: %s", c->name, mx_last_error());
    /* as gradcheck has them (the backward ops' cases take a gradient of their input) */
    if (floating && (c->flags & OP_GRADCHECK))
      cr_assert(mx_set_requires_grad(in32[i], true) == MX_OK && mx_set_requires_grad(in64[i], true) == MX_OK);
    length += mx_numel(drawn);
  }
  mx_generator_free(gen);
  mx_tensor *got = c->fn(c->n_in, in32, NULL);
  cr_assert_not_null(got, "%s in float32: %s", c->name, mx_last_error());
  mx_tensor *want = c->fn(c->n_in, in64, NULL);
  cr_assert_not_null(want, "%s in float64: %s", c->name, mx_last_error());
  op_expect_shape(c->name, got, mx_shape_get(want));
  int64_t n = mx_numel(want);
  double *g = op_host_values(got), *w = op_host_values(want), largest = 0;
  for (int64_t i = 0; i < n; i++)
    if (isfinite(w[i])) largest = fmax(largest, fabs(w[i]));
  bool floating = mx_dtype_is_floating(mx_dtype_of(want));
  double tol = floating ? CASE_ULPS * ldexp(1, -23) * (double)length * largest : 0;
  for (int64_t i = 0, bad = 0; i < n && bad < 4; i++) {
    bool ok = fabs(g[i] - w[i]) <= tol || (isnan(g[i]) && isnan(w[i])) || g[i] == w[i];
    cr_expect(ok, "%s, element %lld: float32 %.9g, float64 %.17g (|difference| %.3g > %.3g)", c->name,
              (long long)i, g[i], w[i], fabs(g[i] - w[i]), tol);
    bad += !ok;
  }
  free(g), free(w);
  mx_scope_end(s);
}

/* --- the public functions of the MX_OP rows ---------------------------------------------------------------- */

/* The rows with no public function of their own: backward ops and the primitives under a composite. */
static const char *const internal_rows[] = {"slice_backward", "softmax_backward", "log_softmax_backward",
                                            "max_pool_backward", "avg_pool_backward", "batch_norm_stats",
                                            "batch_norm_elemt", "convolution", "conv_backward_data",
                                            "conv_backward_weight", "rdiv", "batch_norm_elemt_relu",
                                            "conv_backward_weight_bias", "conv2d_max_pool_relu",
                                            "conv2d_max_pool_relu_backward", "batch_norm_training",
                                            "cross_entropy_indices", "cross_entropy_indices_backward"};

/* Whether the comma-separated names of `inputs` (a trailing "..." dropped) are the tensor inputs of the
 * prototype's parameter list `params`, in any order; outputs (mx_tensor **) are not inputs. */
static bool same_tensor_inputs(const char *inputs, const char *params, char *why, size_t size) {
  char list[512], names[16][64];
  int n = 0;
  snprintf(list, sizeof list, "%s", params);
  char *save = NULL;
  for (char *p = strtok_r(list, ",", &save); p && n < 16; p = strtok_r(NULL, ",", &save)) {
    if (!strstr(p, "mx_tensor") || strstr(p, "**")) continue;
    char *name = p + strlen(p);
    while (name > p && (name[-1] == '_' || isalnum((unsigned char)name[-1]))) name--;
    snprintf(names[n++], sizeof names[0], "%s", name);
  }
  char row[512];
  snprintf(row, sizeof row, "%s", inputs);
  int m = 0;
  save = NULL;
  for (char *p = strtok_r(row, ", ", &save); p; p = strtok_r(NULL, ", ", &save), m++) {
    char name[64];
    snprintf(name, sizeof name, "%.*s", (int)strcspn(p, "."), p);
    bool found = false;
    for (int i = 0; i < n && !found; i++) found = !strcmp(names[i], name);
    if (!found) {
      snprintf(why, size, "the row's input %s is not a tensor parameter", name);
      return false;
    }
  }
  if (m != n) snprintf(why, size, "the row names %d tensor inputs, the function takes %d", m, n);
  return m == n;
}

Test(ops_case_rows, public_functions_take_the_rows_inputs) {
  const char *headers[] = {MX_OPS_DIR "/ops.h", MX_OPS_DIR "/composites.h", MX_OPS_DIR "/losses.h",
                           MX_OPS_BUILD_DIR "/elementwise_api.h"};
  char *text[4];
  for (int h = 0; h < 4; h++) cr_assert_not_null(text[h] = fx_read_file(headers[h]), "cannot read %s", headers[h]);
  int checked = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    const char *name = mx_op_name(op);
    bool internal = false;
    for (size_t k = 0; k < sizeof internal_rows / sizeof *internal_rows; k++)
      internal |= !strcmp(internal_rows[k], name);
    /* the declaration, not a call in a comment: the return type before the name */
    char call[2][96];
    snprintf(call[0], sizeof call[0], "mx_tensor *mx_%s(", name);
    snprintf(call[1], sizeof call[1], "mx_status mx_%s(", name);
    const char *at = NULL;
    for (int h = 0; h < 4 && !at; h++)
      for (int k = 0; k < 2 && !at; k++)
        if ((at = strstr(text[h], call[k]))) at += strlen(call[k]);
    if (internal) continue;
    if (!at) {
      cr_expect(false, "op %s: no prototype of mx_%s in ops/ops.h, composites.h, losses.h or elementwise_api.h", name,
                name);
      continue;
    }
    char params[512], why[128] = "";
    snprintf(params, sizeof params, "%.*s", (int)strcspn(at, ")"), at);
    cr_expect(same_tensor_inputs(mx_op_inputs(op), params, why, sizeof why), "mx_%s(%s): %s (ops/ops.def: \"%s\")",
              name, params, why, mx_op_inputs(op));
    checked++;
  }
  cr_expect_geq(checked, 180, "only %d rows checked", checked);
  for (int h = 0; h < 4; h++) free(text[h]);
}

/* --- autocast: each row's policy, through its cases ---------------------------------------------------------- */

/* The case in a region of dtype `region`, on floating inputs of dtype `given`, against the case outside any region
 * on those inputs cast to `want`: the same dtype and bits. */
static void expect_case_autocast(const op_case *c, int k, mx_dtype region, mx_dtype given, mx_dtype want) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(20261128u + (uint64_t)k);
  mx_tensor *in[OP_MAX_IN] = {0}, *cast[OP_MAX_IN] = {0};
  for (int i = 0; i < c->n_in; i++) {
    mx_tensor *drawn = op_case_input(c->shape[i], c->domain[i], gen);
    bool floating = drawn && mx_dtype_is_floating(mx_dtype_of(drawn));
    in[i] = floating ? mx_to_dtype(drawn, given) : drawn;
    cast[i] = floating ? mx_to_dtype(in[i], want) : drawn;
    cr_assert(in[i] && cast[i], "%s: %s", c->name, mx_last_error());
  }
  mx_generator_free(gen);
  mx_tensor *out = NULL;
  MX_AUTOCAST(MX_CPU, region, true, true) { out = c->fn(c->n_in, in, NULL); }
  mx_tensor *control = c->fn(c->n_in, cast, NULL);
  cr_assert_not_null(out, "%s in a %s region: %s", c->name, mx_dtype_name(region), mx_last_error());
  cr_assert_not_null(control, "%s: %s", c->name, mx_last_error());
  cr_expect_eq(mx_dtype_of(out), mx_dtype_of(control), "%s on %s in a %s region: %s, expected %s", c->name,
               mx_dtype_name(given), mx_dtype_name(region), mx_dtype_name(mx_dtype_of(out)),
               mx_dtype_name(mx_dtype_of(control)));
  cr_expect(op_bitwise_equal(mx_to_dtype(out, MX_F64), mx_to_dtype(control, MX_F64)),
            "%s on %s in a %s region: not the bits of the case on %s inputs", c->name, mx_dtype_name(given),
            mx_dtype_name(region), mx_dtype_name(want));
  mx_scope_end(s);
}

ParameterizedTestParameters(ops_case_rows, autocast) {
  for (int k = 0; k < op_case_count(); k++) case_ids[k] = k;
  return OP_PARAMS(case_ids, (size_t)op_case_count());
}

ParameterizedTest(int *k, ops_case_rows, autocast) {
  const op_case *c = op_case_at(*k);
  int op = op_case_row(c->name);
  /* the backward ops run inside backward, which no region reaches (their cases take a gradient in the region) */
  if (op < 0 || strstr(mx_op_name(op), "backward")) return;
  const mx_dtype regions[] = {MX_F16, MX_BF16};
  for (int g = 0; g < 2; g++) {
    mx_dtype region = regions[g];
    switch (mx_op_policy(op)) {
    case MX_CAST_LOWER: expect_case_autocast(c, *k, region, MX_F32, region); break;
    case MX_CAST_FP32: expect_case_autocast(c, *k, region, region, MX_F32); break;
    case MX_CAST_PROMOTE:
    case MX_CAST_NONE:
      expect_case_autocast(c, *k, region, MX_F32, MX_F32);
      expect_case_autocast(c, *k, region, region, region);
      break;
    case MX_CAST_BANNED: break; /* tests/amp: autocast_banned */
    }
  }
}
