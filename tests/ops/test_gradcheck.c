/* gradcheck and gradgradcheck for every differentiable op in ops/ops.def:
 * analytic gradients (the backward formulas) against central finite
 * differences in float64, on inputs from a seeded generator drawn from each
 * op's domain (see op_cases.h: one row per case). */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "op_cases.h"

#define EPS 1e-6
#define ATOL 1e-5
#define RTOL 1e-4

/* The indices of the cases with a flag (static: the forked tests read it). */
static int gradcheck_ids[512], gradgrad_ids[512];

static int select_cases(unsigned flag, int *ids) {
  int n = 0;
  for (int k = 0; k < op_case_count() && n < 512; k++)
    if (op_case_at(k)->flags & flag) ids[n++] = k;
  return n;
}

/* The case's inputs: floating ones require grad, masks do not. */
static void make_inputs(const op_case *c, int k, mx_tensor **inputs) {
  mx_generator *gen = mx_generator_new(20240601u + (uint64_t)k);
  cr_assert_not_null(gen);
  for (int i = 0; i < c->n_in; i++) {
    inputs[i] = op_case_input(c->shape[i], c->domain[i], gen);
    cr_assert_not_null(inputs[i], "%s: input %d: %s", c->name, i, mx_last_error());
    if (c->domain[i] != DOM_BOOL)
      cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK, "%s: %s", c->name, mx_last_error());
  }
  mx_generator_free(gen);
}

ParameterizedTestParameters(ops_grad, gradcheck) {
  int n = select_cases(OP_GRADCHECK, gradcheck_ids);
  return OP_PARAMS(gradcheck_ids, (size_t)n);
}

ParameterizedTest(int *id, ops_grad, gradcheck) {
  const op_case *c = op_case_at(*id);
  mx_scope *s = mx_scope_begin();
  mx_tensor *inputs[OP_MAX_IN] = {0};
  make_inputs(c, *id, inputs);
  /* the op runs and records a graph */
  mx_tensor *out = c->fn(c->n_in, inputs, NULL);
  cr_assert_not_null(out, "%s: %s", c->name, mx_last_error());
  cr_expect(mx_requires_grad(out), "%s: the output does not require grad", c->name);
  mx_status st = mx_gradcheck(c->fn, c->n_in, inputs, NULL, c->eps ? c->eps : EPS,
                              c->atol ? c->atol : ATOL, c->rtol ? c->rtol : RTOL);
  cr_expect_eq(st, MX_OK, "gradcheck %s: %s", c->name, mx_last_error());
  mx_scope_end(s);
}

ParameterizedTestParameters(ops_grad, gradgradcheck) {
  int n = select_cases(OP_GRADGRAD, gradgrad_ids);
  return OP_PARAMS(gradgrad_ids, (size_t)n);
}

ParameterizedTest(int *id, ops_grad, gradgradcheck) {
  const op_case *c = op_case_at(*id);
  mx_scope *s = mx_scope_begin();
  mx_tensor *inputs[OP_MAX_IN] = {0};
  make_inputs(c, *id, inputs);
  mx_status st = mx_gradgradcheck(c->fn, c->n_in, inputs, NULL, c->eps ? c->eps : EPS,
                                  c->atol ? c->atol : ATOL, c->rtol ? c->rtol : RTOL);
  cr_expect_eq(st, MX_OK, "gradgradcheck %s: %s", c->name, mx_last_error());
  mx_scope_end(s);
}

/* mx_gradcheck with two differentiable inputs: the finite differences of
 * input 0 write into it, and a graph built before them saved it, so the
 * analytic pass for input 1 must not run into "modified by an in-place
 * operation" (a regression test: it did). */
static mx_tensor *plain_mul(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  return mx_mul(in[0], in[1]);
}

Test(ops_grad, gradcheck_two_inputs_in_place) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(9);
  mx_tensor *inputs[2] = {op_case_input(MX_SHAPE(2, 3), DOM_ANY, gen), op_case_input(MX_SHAPE(3), DOM_ANY, gen)};
  mx_generator_free(gen);
  for (int i = 0; i < 2; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK);
  cr_expect_eq(mx_gradcheck(plain_mul, 2, inputs, NULL, EPS, ATOL, RTOL), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_gradgradcheck(plain_mul, 2, inputs, NULL, EPS, ATOL, RTOL), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

/* mx_gradgradcheck of exp: the first gradient g * exp(x) uses exp's saved
 * output, so differentiating it again walks exp's node a second time (the
 * first gradient must keep its graph; a regression test: it did not). */
static mx_tensor *plain_exp(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  return mx_exp(in[0]);
}

Test(ops_grad, gradgradcheck_of_a_saved_output) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(10);
  mx_tensor *x = op_case_input(MX_SHAPE(3), DOM_ANY, gen);
  mx_generator_free(gen);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  cr_expect_eq(mx_gradgradcheck(plain_exp, 1, &x, NULL, EPS, ATOL, RTOL), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

/* batch_norm's formulas (ops/norm.c: batch_norm_training and batch_norm_elemt) where the fixture
 * cases do not reach: weight or bias alone, eval on a 4-d input, eval without running statistics
 * (the batch's, with their gradient, as in training); gradients and gradients of gradients in
 * float64 against finite differences. */
typedef struct {
  bool training, running, weight, bias;
  mx_shape shape;
} bn_mode;

/* in: x, then the weight and the bias the mode has */
static mx_tensor *batch_norm_of(int n, mx_tensor *const *in, void *ctx) {
  const bn_mode *m = ctx;
  (void)n;
  mx_tensor *mean = NULL, *var = NULL;
  if (m->running) {
    mean = mx_from_data((const double[]){0.5, -0.25, 1.0}, MX_SHAPE(3), MX_F64, MX_CPU);
    var = mx_from_data((const double[]){0.5, 2.0, 1.5}, MX_SHAPE(3), MX_F64, MX_CPU);
  }
  return mx_batch_norm(in[0], mean, var, m->weight ? in[1] : NULL, m->bias ? in[1 + m->weight] : NULL, m->training,
                       0.1, 1e-5);
}

Test(ops_grad, batch_norm_modes) {
  bn_mode modes[] = {
      {.training = true, .running = true, .weight = true, .shape = MX_SHAPE(3, 3, 2)},
      {.training = true, .bias = true, .shape = MX_SHAPE(5, 3)},
      {.running = true, .weight = true, .bias = true, .shape = MX_SHAPE(2, 3, 2, 2)},
      {.weight = true, .bias = true, .shape = MX_SHAPE(3, 3, 2)},
  };
  for (size_t k = 0; k < sizeof modes / sizeof *modes; k++) {
    bn_mode *m = &modes[k];
    mx_scope *s = mx_scope_begin();
    mx_generator *gen = mx_generator_new(30 + k);
    int n = 1 + m->weight + m->bias;
    mx_tensor *inputs[3] = {op_case_input(m->shape, DOM_ANY, gen), op_case_input(MX_SHAPE(3), DOM_ANY, gen),
                            op_case_input(MX_SHAPE(3), DOM_ANY, gen)};
    mx_generator_free(gen);
    for (int i = 0; i < n; i++) cr_assert_eq(mx_set_requires_grad(inputs[i], true), MX_OK);
    cr_expect_eq(mx_gradcheck(batch_norm_of, n, inputs, m, EPS, ATOL, RTOL), MX_OK, "mode %zu: %s", k,
                 mx_last_error());
    cr_expect_eq(mx_gradgradcheck(batch_norm_of, n, inputs, m, EPS, ATOL, RTOL), MX_OK, "mode %zu: %s", k,
                 mx_last_error());
    mx_scope_end(s);
  }
}

/* The checker itself must be able to fail: a function whose recorded
 * gradient is wrong is caught. */
static mx_tensor *wrong_gradient(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  /* value x^2, but the graph only sees x * detach(x): gradient x, not 2x */
  return mx_mul(in[0], mx_detach(in[0]));
}

Test(ops_grad, gradcheck_catches_a_wrong_gradient) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(7);
  mx_tensor *x = op_case_input(MX_SHAPE(2, 3), DOM_POS, gen);
  mx_generator_free(gen);
  cr_assert_not_null(x);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  mx_tensor *inputs[1] = {x};
  cr_expect_neq(mx_gradcheck(wrong_gradient, 1, inputs, NULL, EPS, ATOL, RTOL), MX_OK);
  cr_expect(strstr(mx_last_error(), "mx_gradcheck") != NULL, "message: %s", mx_last_error());
  mx_scope_end(s);
}

/* A custom op with a right first derivative and a wrong second one: y = x^3
 * whose backward, 3 g detach(x)^2, has no graph back to x. gradcheck passes,
 * gradgradcheck must not. */
static mx_status cube_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  (void)n_in, (void)n_out;
  out[0] = mx_mul(in[0], mx_mul(in[0], in[0]));
  return out[0] && mx_ctx_save(ctx, 1, in) == MX_OK ? MX_OK : mx_last_status();
}

static mx_status cube_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gin) {
  (void)n_out, (void)n_in;
  mx_tensor *x = mx_detach(mx_ctx_saved(ctx, 0));
  gin[0] = mx_mul(g[0], mx_mul_scalar(mx_mul(x, x), 3));
  return gin[0] ? MX_OK : mx_last_status();
}

static mx_tensor *cube(int n, mx_tensor *const *in, void *ctx) {
  (void)ctx;
  static const mx_function fn = {"CubeWithCutBackward", cube_forward, cube_backward};
  mx_tensor *out = NULL;
  return mx_function_apply(&fn, NULL, n, in, 1, &out) == MX_OK ? out : NULL;
}

Test(ops_grad, gradgradcheck_catches_a_wrong_second_derivative) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(8);
  mx_tensor *x = op_case_input(MX_SHAPE(3), DOM_POS, gen);
  mx_generator_free(gen);
  cr_assert_not_null(x);
  cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
  mx_tensor *inputs[1] = {x};
  cr_expect_eq(mx_gradcheck(cube, 1, inputs, NULL, EPS, ATOL, RTOL), MX_OK, "%s", mx_last_error());
  cr_expect_neq(mx_gradgradcheck(cube, 1, inputs, NULL, EPS, ATOL, RTOL), MX_OK);
  cr_expect(strstr(mx_last_error(), "mx_gradgradcheck") != NULL, "message: %s", mx_last_error());
  mx_scope_end(s);
}

/* Every differentiable op of the table has at least one gradcheck case:
 * a new MX_OP row in ops/ops.def without a case in op_cases_appended.c fails this
 * test. The elementwise rows need none: test_rows.c checks each from its row. */
Test(ops_grad, every_differentiable_op_has_a_case) {
  mx_scope *s = mx_scope_begin();
  /* ops with no gradient (one_hot: int64 in, int64 out; argsort and multinomial: int64 out), or reached only
   * through other ops */
  static const char *no_gradient[] = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or",
                                      "logical_xor", "logical_not", "argmax", "argmin", "all", "any",
                                      "to_device", "slice_backward", "one_hot", "argsort", "multinomial",
                                      "batch_norm_stats"};
  /* op name -> the prefix of the case names that cover it */
  static const struct {
    const char *op, *case_prefix;
  } alias[] = {{"max_dim", "max_dim1"}, {"min_dim", "min_dim0"}, {"to_dtype", "to_f"}, {"norm", "norm"},
               {"var", "var_"}, {"std", "std_"}, {"sum", "sum_"}, {"mean", "mean_"}, {"prod", "prod_"},
               {"amax", "amax_"}, {"amin", "amin_"}, {"logsumexp", "logsumexp_"}, {"cumsum", "cumsum_"},
               {"cumprod", "cumprod_"}, {"matmul", "matmul_"},
               /* the primitives under every conv and conv_transpose case, and under batch_norm's */
               {"convolution", "conv"}, {"batch_norm_training", "batch_norm_train"}, {"batch_norm_elemt", "batch_norm"},
               {"batch_norm_elemt_relu", "batch_norm_relu"},
               /* mx_cross_entropy's fused primitive, and its backward through the case's gradgradcheck */
               {"cross_entropy_indices", "cross_entropy_ignore"}, {"cross_entropy_indices_backward", "cross_entropy_ignore"}};
  static const char *elementwise_rows[] = {
#define MX_UNARY(E, name, ...) #name,
#define MX_BINARY(E, name, ...) #name,
#define MX_OP(...)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
  };
  /* internal rows the cases (linked to the shared library) cannot call, gradchecked by their own suite:
   * conv2d_max_pool_relu and its backward op (tests/ops/test_conv_pool.c, gradcheck and gradgradcheck) */
  static const char *own_suite[] = {"conv2d_max_pool_relu", "conv2d_max_pool_relu_backward"};
  int covered = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    const char *name = mx_op_name(op);
    bool skip = false;
    for (size_t k = 0; k < sizeof own_suite / sizeof *own_suite; k++) skip |= !strcmp(name, own_suite[k]);
    for (size_t k = 0; k < sizeof elementwise_rows / sizeof *elementwise_rows; k++)
      skip |= !strcmp(name, elementwise_rows[k]);
    for (size_t k = 0; k < sizeof no_gradient / sizeof *no_gradient; k++) skip |= !strcmp(name, no_gradient[k]);
    if (skip) continue;
    const char *prefix = name;
    for (size_t k = 0; k < sizeof alias / sizeof *alias; k++)
      if (!strcmp(name, alias[k].op)) prefix = alias[k].case_prefix;
    bool found = false;
    for (int k = 0; k < op_case_count() && !found; k++)
      found = (op_case_at(k)->flags & OP_GRADCHECK) && !strncmp(op_case_at(k)->name, prefix, strlen(prefix));
    cr_expect(found, "op %s has no gradcheck case in tests/ops/op_cases_appended.c", name);
    covered += found;
  }
  cr_expect_geq(covered, 80, "only %d ops covered", covered);
  mx_scope_end(s);
}
