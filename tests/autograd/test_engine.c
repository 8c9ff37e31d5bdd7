/* The backward engine: values, accumulation, retained and freed graphs,
 * mx_grad and double backward, in-place checks, hooks, grad mode. */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>

static mx_tensor *vec(int n, const double *v) { return mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU); }

static mx_tensor *param(int n, const double *v) {
  mx_tensor *t = vec(n, v);
  cr_assert_eq(mx_set_requires_grad(t, true), MX_OK);
  return t;
}

static void expect_values(const mx_tensor *t, int n, const double *want, double tol) {
  cr_assert_not_null(t, "%s", mx_last_error());
  cr_assert_eq(mx_numel(t), n);
  mx_tensor *flat = mx_reshape(t, MX_SHAPE(-1));
  for (int i = 0; i < n; i++) {
    double v = mx_at(flat, MX_SHAPE(i));
    cr_expect(fabs(v - want[i]) <= tol * (1 + fabs(want[i])), "element %d: %.17g, expected %.17g", i, v, want[i]);
  }
}

Test(engine, backward_of_sum_of_squares) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = param(3, (double[]){1, -2, 3});
  mx_tensor *loss = mx_sum(mx_mul(w, w), MX_ALL_DIMS, false);
  cr_expect_eq(mx_item(loss), 14);
  cr_expect_str_eq(mx_grad_fn_name(loss), "SUMBackward");
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  expect_values(mx_grad_of(w), 3, (double[]){2, -4, 6}, 0);
  mx_scope_end(s);
}

Test(engine, gradients_accumulate_and_zero_grad_clears) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = param(2, (double[]){1, 2});
  mx_tensor *y = mx_sum(mx_mul_scalar(w, 3), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(y, NULL, true), MX_OK);
  cr_assert_eq(mx_backward(y, NULL, false), MX_OK, "%s", mx_last_error());
  expect_values(mx_grad_of(w), 2, (double[]){6, 6}, 0);
  mx_zero_grad(w);
  cr_expect_null(mx_grad_of(w));
  mx_scope_end(s);
}

/* Optimizers and the GradScaler change .grad in place, so each leaf's
 * gradient must be memory of its own, each element stored once. */
Test(engine, leaf_gradients_own_dense_memory) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = param(3, (double[]){1, 2, 3}), *b = param(3, (double[]){4, 5, 6});
  /* sum's gradient is one value broadcast to every element; add hands that
   * same tensor to both leaves */
  cr_assert_eq(mx_backward(mx_sum(mx_add(a, b), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  mx_tensor *ga = mx_grad_of(a), *gb = mx_grad_of(b);
  cr_assert(mx_is_contiguous(ga) && mx_is_contiguous(gb));
  cr_assert_eq(mx_mul_scalar_(ga, 0.5), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_add_(gb, vec(3, (double[]){0, 1, 2})), MX_OK, "%s", mx_last_error());
  expect_values(ga, 3, (double[]){0.5, 0.5, 0.5}, 0);
  expect_values(gb, 3, (double[]){1, 2, 3}, 0);
  mx_scope_end(s);
}

Test(engine, second_backward_through_a_freed_graph_fails) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = param(2, (double[]){1, 2});
  mx_tensor *y = mx_sum(mx_exp(w), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(y, NULL, false), MX_OK);
  mx_clear_error();
  cr_expect_eq(mx_backward(y, NULL, false), MX_STATE_ERROR);
  cr_expect(strstr(mx_last_error(), "backward through the graph a second time") != NULL, "%s", mx_last_error());
  cr_expect(strstr(mx_last_error(), "retain_graph") != NULL);
  mx_clear_error();
  mx_scope_end(s);
}

Test(engine, a_non_scalar_output_needs_a_gradient) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = param(2, (double[]){1, 2});
  mx_tensor *y = mx_mul(w, w);
  mx_clear_error();
  cr_expect_eq(mx_backward(y, NULL, false), MX_SHAPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_backward: a gradient can be implied only for a one-element output, not "
                                    "shape [2]; pass one");
  mx_clear_error();
  cr_assert_eq(mx_backward(y, vec(2, (double[]){1, 10}), false), MX_OK);
  expect_values(mx_grad_of(w), 2, (double[]){2, 40}, 0);
  mx_scope_end(s);
}

Test(engine, broadcasting_gradients_sum_back_to_the_input_shape) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_reshape(param(6, (double[]){1, 2, 3, 4, 5, 6}), MX_SHAPE(2, 3));
  mx_tensor *b = param(3, (double[]){1, 1, 1});
  mx_tensor *y = mx_sum(mx_mul(a, b), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(y, NULL, false), MX_OK);
  expect_values(mx_grad_of(b), 3, (double[]){5, 7, 9}, 0);
  mx_scope_end(s);
}

Test(engine, mixed_dtypes_give_gradients_in_each_inputs_dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *h = mx_from_data((uint16_t[]){0x3c00, 0x4000}, MX_SHAPE(2), MX_F16, MX_CPU); /* 1, 2 */
  cr_assert_eq(mx_set_requires_grad(h, true), MX_OK);
  mx_tensor *f = mx_full(MX_SHAPE(2), 3, MX_F32, MX_CPU);
  mx_set_requires_grad(f, true);
  mx_tensor *y = mx_sum(mx_mul(h, f), MX_ALL_DIMS, false); /* f32 */
  cr_expect_eq(mx_dtype_of(y), MX_F32);
  cr_assert_eq(mx_backward(y, NULL, false), MX_OK);
  cr_expect_eq(mx_dtype_of(mx_grad_of(h)), MX_F16);
  cr_expect_eq(mx_dtype_of(mx_grad_of(f)), MX_F32);
  cr_expect_eq(mx_at(mx_grad_of(h), MX_SHAPE(1)), 3);
  cr_expect_eq(mx_at(mx_grad_of(f), MX_SHAPE(1)), 2);
  mx_scope_end(s);
}

/* Leaves junk where the next call's locals will be (what an earlier call
 * would), so reading one before it is set shows in a plain run too. */
static __attribute__((noinline)) void leave_junk_on_the_stack(void) {
  volatile unsigned char junk[4096];
  for (size_t i = 0; i < sizeof junk; i++) junk[i] = 0x5a;
}

/* A grad_output of the wrong shape fails before the engine has set up its
 * captures: nothing is dropped that was not caught (the ops fuzz target
 * found mx_grad releasing its uninitialised captures here). */
Test(engine, mx_grad_fails_cleanly_on_a_wrong_grad_output) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){2, 3});
  mx_tensor *y = mx_mul_scalar(x, 2);
  mx_tensor *wrong = mx_ones(MX_SHAPE(3), MX_F64, MX_CPU), *g = x;
  mx_clear_error();
  leave_junk_on_the_stack();
  cr_expect_eq(mx_grad(1, &y, 1, &x, &wrong, false, false, false, &g), MX_SHAPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_grad: gradient of shape [3] given for a tensor of shape [2]");
  cr_expect_null(g);
  mx_clear_error();
  mx_scope_end(s);
}

Test(engine, mx_grad_returns_gradients_without_touching_grad) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){2, 3});
  mx_tensor *unused = param(1, (double[]){1});
  mx_tensor *y = mx_sum(mx_pow_scalar(x, 3), MX_ALL_DIMS, false);
  mx_tensor *g[2];
  mx_tensor *inputs[2] = {x, unused};
  mx_clear_error();
  cr_expect_eq(mx_grad(1, &y, 2, inputs, NULL, true, false, false, g), MX_STATE_ERROR);
  cr_expect(strstr(mx_last_error(), "input 1 was not used") != NULL, "%s", mx_last_error());
  mx_clear_error();
  cr_assert_eq(mx_grad(1, &y, 2, inputs, NULL, true, false, true, g), MX_OK, "%s", mx_last_error());
  expect_values(g[0], 2, (double[]){12, 27}, 1e-15);
  cr_expect_null(g[1]);
  cr_expect_null(mx_grad_of(x));
  mx_scope_end(s);
}

Test(engine, double_backward_gives_the_second_derivative) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){2, -1});
  mx_tensor *y = mx_sum(mx_mul(mx_sin(x), mx_mul(x, x)), MX_ALL_DIMS, false); /* x^2 sin x */
  mx_tensor *dy;
  cr_assert_eq(mx_grad(1, &y, 1, &x, NULL, true, true, false, &dy), MX_OK, "%s", mx_last_error());
  cr_expect(mx_requires_grad(dy), "create_graph keeps a graph on the gradient");
  mx_tensor *d2y;
  mx_tensor *sum_dy = mx_sum(dy, MX_ALL_DIMS, false);
  cr_assert_eq(mx_grad(1, &sum_dy, 1, &x, NULL, false, false, false, &d2y), MX_OK, "%s", mx_last_error());
  double want[2];
  for (int i = 0; i < 2; i++) { /* (x^2 sin x)'' = 2 sin x + 4 x cos x - x^2 sin x */
    double v = i == 0 ? 2 : -1;
    want[i] = 2 * sin(v) + 4 * v * cos(v) - v * v * sin(v);
  }
  expect_values(d2y, 2, want, 1e-14);
  mx_scope_end(s);
}

/* PyTorch's AMP page, "Gradient penalty", without AMP; the expected values
 * come from tests/fixtures/make_gradient_penalty.py. */
Test(engine, gradient_penalty_matches_pytorch) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w_leaf = param(6, (double[]){0.5, -1.0, 0.25, 1.5, 0.75, -0.5});
  mx_tensor *W = mx_reshape(w_leaf, MX_SHAPE(2, 3));
  mx_tensor *b = param(2, (double[]){0.1, -0.2});
  mx_tensor *x = mx_reshape(vec(6, (double[]){1, 2, -1, 0.5, -0.5, 2}), MX_SHAPE(2, 3));
  mx_tensor *target = mx_reshape(vec(4, (double[]){0, 1, 1, 0}), MX_SHAPE(2, 2));
  mx_tensor *out = mx_tanh(mx_add(mx_matmul(x, mx_transpose(W, 0, 1)), b));
  mx_tensor *diff = mx_sub(out, target);
  mx_tensor *loss = mx_mean(mx_mul(diff, diff), MX_ALL_DIMS, false);
  mx_tensor *params[2] = {W, b}, *grads[2];
  cr_assert_eq(mx_grad(1, &loss, 2, params, NULL, true, true, false, grads), MX_OK, "%s", mx_last_error());
  mx_tensor *norm = mx_sqrt(mx_add(mx_sum(mx_mul(grads[0], grads[0]), MX_ALL_DIMS, false),
                                   mx_sum(mx_mul(grads[1], grads[1]), MX_ALL_DIMS, false)));
  cr_expect(fabs(mx_item(loss) - 0.334508753440256) < 1e-14);
  cr_expect(fabs(mx_item(norm) - 0.4597929176352611) < 1e-14);
  cr_assert_eq(mx_backward(mx_add(loss, norm), NULL, false), MX_OK, "%s", mx_last_error());
  expect_values(mx_grad_of(w_leaf), 6,
                (double[]){0.030099795202435633, 0.0800632149304374, -0.06320583607837918, 0.020413851123215886,
                           -0.020383209784207525, 0.08160433559451628},
                1e-12);
  expect_values(mx_grad_of(b), 2, (double[]){0.023478587027246922, 0.04081748846676232}, 1e-12);
  mx_scope_end(s);
}

Test(engine, a_saved_tensor_modified_in_place_is_refused) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){1, 2});
  mx_tensor *a = mx_mul_scalar(x, 2);
  mx_tensor *y = mx_sum(mx_mul(a, a), MX_ALL_DIMS, false); /* saves a */
  uint64_t before = mx_version(a);
  cr_assert_eq(mx_add_scalar_(a, 1), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_version(a), before + 1);
  mx_clear_error();
  cr_expect_eq(mx_backward(y, NULL, false), MX_STATE_ERROR);
  cr_expect(strstr(mx_last_error(), "modified by an in-place operation") != NULL, "%s", mx_last_error());
  cr_expect(strstr(mx_last_error(), "version 1; expected version 0") != NULL, "%s", mx_last_error());
  mx_clear_error();
  mx_scope_end(s);
}

Test(engine, in_place_ops_join_the_graph) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){1, 2});
  mx_tensor *a = mx_mul_scalar(x, 3);
  cr_assert_eq(mx_exp_(a), MX_OK, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(a), "EXPBackward");
  cr_assert_eq(mx_backward(mx_sum(a, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  expect_values(mx_grad_of(x), 2, (double[]){3 * exp(3.0), 3 * exp(6.0)}, 1e-15);
  mx_clear_error();
  cr_expect_eq(mx_add_scalar_(x, 1), MX_STATE_ERROR, "a leaf that requires grad");
  cr_expect(strstr(mx_last_error(), "a leaf tensor that requires grad cannot be modified in place") != NULL);
  mx_clear_error();
  MX_NO_GRAD { cr_expect_eq(mx_add_scalar_(x, 1), MX_OK, "allowed without recording"); }
  cr_expect_eq(mx_at(x, MX_SHAPE(0)), 2);
  mx_scope_end(s);
}

static mx_tensor *double_it(mx_tensor *grad, void *ctx) {
  (*(int *)ctx)++;
  return mx_mul_scalar(grad, 2);
}

Test(engine, hooks_see_and_replace_gradients) {
  mx_scope *s = mx_scope_begin();
  int leaf_calls = 0, inner_calls = 0;
  mx_tensor *x = param(2, (double[]){1, 2});
  mx_tensor *h = mx_mul(x, x);
  cr_assert_eq(mx_register_hook(h, double_it, &inner_calls), MX_OK);
  cr_assert_eq(mx_register_hook(x, double_it, &leaf_calls), MX_OK);
  cr_assert_eq(mx_backward(mx_sum(h, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(leaf_calls, 1);
  cr_expect_eq(inner_calls, 1);
  expect_values(mx_grad_of(x), 2, (double[]){8, 16}, 0); /* 2x, doubled twice */
  mx_scope_end(s);
}

/* A hook that differentiates, mid-backward, through nodes the running
 * backward has still to reach: each call keeps its own dependency counts
 * and buffers, so neither sees the other's. */
typedef struct {
  mx_tensor *inner_root, *leaf;
  double inner_grad[3];
  mx_status status;
} nested_ctx;

static mx_tensor *differentiate_again(mx_tensor *grad, void *arg) {
  nested_ctx *c = arg;
  mx_tensor *g = NULL;
  c->status = mx_grad(1, &c->inner_root, 1, &c->leaf, NULL, true, false, false, &g);
  if (c->status == MX_OK) c->status = mx_to_host(g, c->inner_grad, sizeof c->inner_grad);
  return NULL;
}

Test(engine, a_backward_inside_a_hook_shares_nodes_with_the_outer_one) {
  mx_scope *s = mx_scope_begin();
  const double values[3] = {1, -2, 3};
  mx_tensor *w = param(3, values);
  mx_tensor *a = mx_mul(w, w);
  mx_tensor *b = mx_mul_scalar(a, 3);
  nested_ctx c = {.inner_root = mx_sum(a, MX_ALL_DIMS, false), .leaf = w, .status = MX_STATE_ERROR};
  cr_assert_eq(mx_register_hook(b, differentiate_again, &c), MX_OK);
  cr_assert_eq(mx_backward(mx_sum(b, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_assert_eq(c.status, MX_OK, "%s", mx_last_error());
  for (int i = 0; i < 3; i++) cr_expect_eq(c.inner_grad[i], 2 * values[i], "element %d", i); /* d sum(w^2) */
  expect_values(mx_grad_of(w), 3, (double[]){6, -12, 18}, 0); /* d sum(3 w^2), untouched by mx_grad */
  mx_scope_end(s);
}

Test(engine, grad_mode_is_per_block_and_per_thread) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(1, (double[]){1});
  MX_NO_GRAD {
    cr_expect(!mx_is_grad_enabled());
    cr_expect(!mx_requires_grad(mx_exp(x)));
    MX_ENABLE_GRAD { cr_expect(mx_requires_grad(mx_exp(x))); }
    cr_expect(!mx_is_grad_enabled());
  }
  for (int i = 0; i < 3; i++) {
    MX_NO_GRAD {
      if (i == 1) break; /* leaving early still restores grad mode */
    }
    cr_expect(mx_is_grad_enabled());
  }
  cr_expect(mx_requires_grad(mx_exp(x)));
  cr_expect(!mx_requires_grad(mx_detach(mx_exp(x))));
  mx_scope_end(s);
}

Test(engine, requires_grad_rules) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *i = mx_zeros(MX_SHAPE(2), MX_I64, MX_CPU);
  mx_clear_error();
  cr_expect_eq(mx_set_requires_grad(i, true), MX_DTYPE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_set_requires_grad: only floating tensors can require grad, not int64");
  mx_tensor *x = param(1, (double[]){1});
  mx_tensor *y = mx_exp(x);
  mx_clear_error();
  cr_expect_eq(mx_set_requires_grad(y, false), MX_STATE_ERROR);
  cr_expect(strstr(mx_last_error(), "only leaf tensors") != NULL);
  cr_expect(mx_is_leaf(x) && !mx_is_leaf(y));
  mx_clear_error();
  mx_scope_end(s);
}

/* --- custom functions --------------------------------------------------------------- */

static mx_status cube_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  mx_ctx_save(ctx, 1, in);
  out[0] = mx_mul(in[0], mx_mul(in[0], in[0]));
  return out[0] ? MX_OK : mx_last_status();
}

static mx_status cube_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gi) {
  mx_tensor *x = mx_ctx_saved(ctx, 0);
  (*(int *)mx_ctx_user(ctx))++;
  gi[0] = mx_mul(g[0], mx_mul_scalar(mx_mul(x, x), 3));
  return gi[0] ? MX_OK : mx_last_status();
}

static const mx_function cube = {"Cube", cube_forward, cube_backward};

static mx_tensor *apply_cube(int n, mx_tensor *const *in, void *ctx) {
  mx_tensor *out;
  return mx_function_apply(&cube, ctx, 1, in, 1, &out) == MX_OK ? out : NULL;
}

Test(engine, custom_functions_join_the_graph) {
  mx_scope *s = mx_scope_begin();
  int calls = 0;
  mx_tensor *x = param(3, (double[]){1, -2, 0.5});
  mx_tensor *y = apply_cube(1, &x, &calls);
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_str_eq(mx_grad_fn_name(y), "Cube");
  cr_assert_eq(mx_backward(mx_sum(mx_exp(y), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(calls, 1);
  double want[3];
  double xs[3] = {1, -2, 0.5};
  for (int i = 0; i < 3; i++) want[i] = exp(xs[i] * xs[i] * xs[i]) * 3 * xs[i] * xs[i];
  expect_values(mx_grad_of(x), 3, want, 1e-14);
  cr_expect_eq(mx_gradcheck(apply_cube, 1, &x, &calls, 1e-6, 1e-6, 1e-5), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
}

/* --- gradcheck catches a wrong formula ------------------------------------------------ */

static mx_status wrong_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *g, int n_in, mx_tensor **gi) {
  gi[0] = mx_mul_scalar(g[0], 2.5); /* d/dx x^3 is not 2.5 */
  return MX_OK;
}
static const mx_function wrong = {"Wrong", cube_forward, wrong_backward};
static mx_tensor *apply_wrong(int n, mx_tensor *const *in, void *ctx) {
  mx_tensor *out;
  return mx_function_apply(&wrong, ctx, 1, in, 1, &out) == MX_OK ? out : NULL;
}

Test(engine, gradcheck_rejects_a_wrong_gradient) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){1, 2});
  mx_clear_error();
  cr_expect_eq(mx_gradcheck(apply_wrong, 1, &x, NULL, 1e-6, 1e-6, 1e-5), MX_STATE_ERROR);
  cr_expect(strstr(mx_last_error(), "analytic 2.5, numerical 3") != NULL, "%s", mx_last_error());
  mx_clear_error();
  mx_scope_end(s);
}

/* A function that gives up by itself after its first call: no mixgrad call
 * failed, so no error is set (a caller has no way to set one). gradcheck
 * read the missing finite differences and crashed; it now fails, naming
 * what happened, and leaves the input as it was. */
static mx_tensor *gives_up_after_one_call(int n, mx_tensor *const *in, void *ctx) {
  int *calls = ctx;
  return (*calls)++ ? NULL : mx_mul(in[0], in[0]);
}

Test(engine, gradcheck_fails_on_a_function_that_returns_null_without_an_error) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){1, 2});
  int calls = 0;
  mx_clear_error();
  cr_expect_eq(mx_gradcheck(gives_up_after_one_call, 1, &x, &calls, 1e-6, 1e-6, 1e-5), MX_STATE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_gradcheck: the function returned NULL without an error");
  cr_expect_gt(calls, 1, "the finite differences were not evaluated");
  expect_values(x, 2, (double[]){1, 2}, 0); /* the perturbed input is restored */
  mx_clear_error();
  mx_scope_end(s);
}

/* A gradient penalty: sum((d/dx sum(x^3))^2) = sum(9 x^4), whose body takes
 * a gradient with create_graph. gradcheck runs it with grad mode on in both
 * passes (it used to evaluate the finite differences under no-grad, where
 * the inner mx_grad has no graph to follow), even when the caller has grad
 * mode off. */
static mx_tensor *gradient_penalty(int n, mx_tensor *const *in, void *ctx) {
  mx_tensor *x = in[0], *g = NULL;
  mx_tensor *y = mx_sum(mx_pow_scalar(x, 3.0), MX_ALL_DIMS, false);
  if (mx_grad(1, &y, 1, &x, NULL, false, true, false, &g) != MX_OK) return NULL;
  return mx_sum(mx_mul(g, g), MX_ALL_DIMS, false);
}

Test(engine, gradcheck_checks_a_function_that_takes_gradients) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(3, (double[]){0.5, -1.25, 2});
  mx_tensor *p = gradient_penalty(1, &x, NULL);
  cr_assert_not_null(p, "%s", mx_last_error());
  cr_expect_float_eq(mx_item(p), 9 * (pow(0.5, 4) + pow(1.25, 4) + 16), 1e-12);
  cr_expect_eq(mx_gradcheck(gradient_penalty, 1, &x, NULL, 1e-6, 1e-6, 1e-5), MX_OK, "%s", mx_last_error());
  MX_NO_GRAD {
    cr_expect_eq(mx_gradcheck(gradient_penalty, 1, &x, NULL, 1e-6, 1e-6, 1e-5), MX_OK, "%s", mx_last_error());
  }
  mx_scope_end(s);
}

Test(engine, the_graph_is_freed_with_its_tensors) {
  mx_memory_stats before = mx_memory_stats_get(MX_CPU);
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(100, (double[100]){0});
  for (int i = 0; i < 10; i++) {
    mx_tensor *y = mx_sum(mx_tanh(mx_mul_scalar(x, i)), MX_ALL_DIMS, false);
    cr_assert_eq(mx_backward(y, NULL, false), MX_OK);
  }
  mx_scope_end(s);
  mx_memory_stats after = mx_memory_stats_get(MX_CPU);
  cr_expect_eq(after.live_tensors, before.live_tensors);
  cr_expect_eq(after.bytes_in_use, before.bytes_in_use);
}

/* --- inference mode --------------------------------------------------------------------------------------------- */

static bool inference_block_left_early(void) {
  MX_INFERENCE_MODE {
    if (mx_is_inference_mode_enabled()) return true;
  }
  return false;
}

/* torch.inference_mode: no graph inside, no version bumps on what was made
 * there, and what was made there never enters a graph afterwards. */
Test(engine, inference_mode_makes_tensors_that_stay_out_of_graphs) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = mx_full(MX_SHAPE(3), 2.0, MX_F32, MX_CPU);
  cr_assert_eq(mx_set_requires_grad(w, true), MX_OK);
  mx_tensor *x = mx_full(MX_SHAPE(3), 3.0, MX_F32, MX_CPU);
  mx_tensor *y = NULL, *made = NULL;
  uint64_t version_before = 1, version_after = 0;
  MX_INFERENCE_MODE {
    cr_assert(mx_is_inference_mode_enabled());
    cr_assert_not(mx_is_grad_enabled());
    y = mx_mul(w, x); /* w requires grad, but nothing is recorded */
    made = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU);
    version_before = mx_version(made);
    cr_assert_eq(mx_add_scalar_(made, 1.0), MX_OK, "%s", mx_last_error());
    version_after = mx_version(made);
  }
  cr_assert_not(mx_is_inference_mode_enabled());
  cr_assert(mx_is_grad_enabled());
  cr_assert_not_null(y, "%s", mx_last_error());
  cr_expect_not(mx_requires_grad(y));
  cr_expect_eq(mx_at(y, MX_SHAPE(1)), 6.0);
  cr_expect_eq(version_after, version_before, "an inference tensor counts no versions");
  cr_expect_eq(mx_at(made, MX_SHAPE(0)), 1.0);
  cr_expect(mx_is_inference(y) && mx_is_inference(made) && mx_is_inference(mx_narrow(y, 0, 1, 2)));
  cr_expect_not(mx_is_inference(w) || mx_is_inference(x));

  /* afterwards: refused by any op that would record it, and by requires_grad */
  mx_clear_error();
  cr_expect_null(mx_mul(y, w));
  cr_expect_str_eq(mx_last_error(), "mx_mul: input 0 is an inference tensor (made in an MX_INFERENCE_MODE block), "
                                    "which cannot enter a graph; mx_clone it outside the block for a normal tensor");
  cr_expect_null(mx_matmul(w, y), "a composite's inner op refuses too");
  cr_expect_eq(mx_set_requires_grad(y, true), MX_STATE_ERROR);
  cr_expect_str_eq(mx_last_error(), "mx_set_requires_grad: an inference tensor (made in an MX_INFERENCE_MODE block) "
                                    "cannot require grad; mx_clone it outside the block for a normal tensor");
  cr_expect_not_null(mx_add(y, x), "without grad, an inference tensor is an ordinary input");
  /* a clone made outside is a normal tensor */
  mx_tensor *c = mx_clone(y);
  cr_assert_not_null(c, "%s", mx_last_error());
  cr_expect_not(mx_is_inference(c));
  mx_tensor *loss = mx_sum(mx_mul(c, w), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_at(mx_grad_of(w), MX_SHAPE(2)), 6.0);
  /* the modes come back however the block is left */
  cr_assert(inference_block_left_early());
  cr_assert_not(mx_is_inference_mode_enabled());
  cr_assert(mx_is_grad_enabled());
  mx_scope_end(s);
}
