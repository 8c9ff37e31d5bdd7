/* Every row of ops/ops.def is checked: an elementwise row by test_rows.c from the row itself, any other row
 * through at least one case in op_cases.h (whose forward test_case_rows.c compares with float64 and runs under
 * autocast, and test_gradcheck.c gradchecks). A new MX_OP row with no case fails here, naming the row. */
#include <criterion/criterion.h>
#include <stdio.h>
#include <string.h>

#include "op_cases.h"

/* The elementwise rows: test_rows.c checks each from its row, with no case. */
static const char *const elementwise_rows[] = {
#define MX_UNARY(E, name, ...) #name,
#define MX_BINARY(E, name, ...) #name,
#define MX_OP(...)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};

/* Rows no case is named after, and the prefix of the cases that run them: primitives that only run under a
 * composite, and composites whose cases are named after the rank-specific function. */
static const struct {
  const char *row, *case_prefix;
} reached_through[] = {
    {"to_dtype", "to_f32"},          /* mx_to_dtype: the to_<dtype> cases */
    {"norm", "norm2_all"},           /* mx_norm: the norm<p>_* cases */
    {"max_dim", "max_dim1"},         /* mx_max_dim: the max_dim<d> cases */
    {"min_dim", "min_dim0"},         /* mx_min_dim: the min_dim<d> cases */
    {"max_pool", "max_pool2d"},      /* the max_pool<rank>d cases */
    {"avg_pool", "avg_pool2d"},
    {"convolution", "conv2d"},       /* the primitive under every conv and conv_transpose */
    {"conv", "conv2d"},              /* conv1d/2d/3d are conv with a rank */
    {"conv_transpose", "conv_transpose2d"},
    {"batch_norm_stats", "batch_norm_train"}, /* batch_norm's primitives in training */
    {"batch_norm_elemt", "batch_norm_eval"},
    {"batch_norm_elemt_relu", "batch_norm_relu"}, /* batch_norm_relu's primitive */
    {"batch_norm_training", "batch_norm_train"}, /* batch_norm's and batch_norm_relu's primitive in training */
    {"cross_entropy_indices", "cross_entropy_ignore"}, /* mx_cross_entropy's fused primitive, and its backward */
    {"cross_entropy_indices_backward", "cross_entropy_ignore"},
};

/* Rows that truly cannot have a case, each with its reason. Empty: every row can. It stays here, commented, so
 * that a row added without a case is a choice made in review, never a silent gap. */
static const char *const no_case_possible[] = {
    /* internal rows with no public function (nn's Sequential runs them) that the cases, linked to the shared
     * library, cannot call: tests/ops/test_conv_pool.c checks them against the unfused ops bit for bit and runs
     * gradcheck and gradgradcheck on them in float64 */
    "conv2d_max_pool_relu", "conv2d_max_pool_relu_backward"};

static bool listed(const char *name, const char *const *list, size_t n) {
  for (size_t k = 0; k < n; k++)
    if (list[k] && !strcmp(list[k], name)) return true;
  return false;
}

static bool has_case(int op) {
  const char *name = mx_op_name(op);
  for (int k = 0; k < op_case_count(); k++)
    if (op_case_row(op_case_at(k)->name) == op) return true;
  for (size_t k = 0; k < sizeof reached_through / sizeof *reached_through; k++) {
    if (strcmp(reached_through[k].row, name)) continue;
    const char *prefix = reached_through[k].case_prefix;
    for (int c = 0; c < op_case_count(); c++)
      if (!strncmp(op_case_at(c)->name, prefix, strlen(prefix))) return true;
  }
  return false;
}

Test(ops_every_row, every_row_has_a_row_test_or_a_case) {
  char missing[4096] = "";
  int n_missing = 0, n_rows = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    const char *name = mx_op_name(op);
    n_rows++;
    if (listed(name, elementwise_rows, sizeof elementwise_rows / sizeof *elementwise_rows)) continue;
    if (listed(name, no_case_possible, sizeof no_case_possible / sizeof *no_case_possible)) continue;
    if (has_case(op)) continue;
    size_t used = strlen(missing);
    snprintf(missing + used, sizeof missing - used, "%s%s", n_missing ? ", " : "", name);
    n_missing++;
  }
  cr_expect_geq(n_rows, 190, "only %d rows in the op table", n_rows);
  cr_expect_eq(n_missing, 0, "%d rows of ops/ops.def have neither an elementwise row test nor a case in "
               "tests/ops/op_cases_appended.c: %s", n_missing, missing);
}

/* The lists above name real rows and real cases: a renamed row or case cannot leave a stale entry behind. */
Test(ops_every_row, the_lists_name_rows_and_cases) {
  for (size_t k = 0; k < sizeof reached_through / sizeof *reached_through; k++) {
    bool row = false, found = false;
    for (int op = 0; op < mx_op_count(); op++) row |= !strcmp(mx_op_name(op), reached_through[k].row);
    for (int c = 0; c < op_case_count(); c++)
      found |= !strncmp(op_case_at(c)->name, reached_through[k].case_prefix, strlen(reached_through[k].case_prefix));
    cr_expect(row, "reached_through names %s, no row of ops/ops.def", reached_through[k].row);
    cr_expect(found, "reached_through: no case starts with %s", reached_through[k].case_prefix);
  }
  for (size_t k = 0; k < sizeof no_case_possible / sizeof *no_case_possible; k++) {
    if (!no_case_possible[k]) continue;
    bool row = false;
    for (int op = 0; op < mx_op_count(); op++) row |= !strcmp(mx_op_name(op), no_case_possible[k]);
    cr_expect(row, "no_case_possible names %s, no row of ops/ops.def", no_case_possible[k]);
  }
}

/* Case names are unique: op_case_find and the fuzz seeds name cases by name. */
Test(ops_every_row, case_names_are_unique) {
  for (int k = 0; k < op_case_count(); k++)
    cr_expect_eq(op_case_find(op_case_at(k)->name), op_case_at(k), "two cases are named %s", op_case_at(k)->name);
}
