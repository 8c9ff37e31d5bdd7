/* gradcheck and gradgradcheck: analytic gradients (the engine) against
 * central finite differences, in float64, Jacobian column by column. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "kernels/base_internal.h"
#include "tensor/scope.h"

/* The values of t as doubles (malloc'ed), or NULL with the error set. */
static double *values_of(const mx_tensor *t, int64_t *n) {
  *n = mx_numel(t);
  double *v = malloc(sizeof(double) * (size_t)(*n ? *n : 1));
  if (!v) {
    mx__error(MX_OUT_OF_MEMORY, "mx_gradcheck: out of memory");
    return NULL;
  }
  const mx__grad_ops *ops = mx__grad_ops_for("mx_gradcheck");
  mx_tensor *d = ops ? ops->to_dtype(t, MX_F64) : NULL;
  if (!d || mx_to_host(d, v, sizeof(double) * (size_t)*n) != MX_OK) {
    free(v);
    v = NULL;
  }
  mx_release(d);
  return v;
}

static mx_shape unravel(const mx_tensor *t, int64_t linear) {
  mx_shape index = mx_shape_get(t);
  for (int d = index.ndim - 1; d >= 0; d--) {
    int64_t size = index.d[d];
    index.d[d] = linear % size;
    linear /= size;
  }
  return index;
}

/* fn's output, or NULL with an error set: fn may return NULL without one
 * (no mixgrad call of its own failed), which must not read as a pass. */
static mx_tensor *call(mx_gradcheck_fn fn, int n, mx_tensor *const *inputs, void *ctx) {
  mx_tensor *out = fn(n, inputs, ctx);
  if (!out && mx_last_status() == MX_OK)
    mx__error(MX_STATE_ERROR, "mx_gradcheck: the function returned NULL without an error");
  return out;
}

/* f evaluated as doubles, with grad mode on as in the analytic pass: a
 * function that takes gradients itself (a gradient penalty) needs it, and
 * the scope frees the graph it builds. */
static double *evaluate(mx_gradcheck_fn fn, int n, mx_tensor *const *inputs, void *ctx, int64_t *count) {
  double *v = NULL;
  MX_ENABLE_GRAD {
    mx_scope *s = mx_scope_begin();
    mx_tensor *out = call(fn, n, inputs, ctx);
    v = out ? values_of(out, count) : NULL;
    mx_scope_end(s);
  }
  return v;
}

static bool close_enough(double analytic, double numeric, double atol, double rtol) {
  if (isnan(analytic) || isnan(numeric)) return isnan(analytic) && isnan(numeric);
  return fabs(analytic - numeric) <= atol + rtol * fabs(numeric);
}

/* Checks d out / d inputs[i] for one input, all output elements. */
static mx_status check_input(mx_gradcheck_fn fn, int n, mx_tensor *const *inputs, void *ctx, int i,
                             mx_tensor *out, double eps, double atol, double rtol) {
  mx_tensor *x = inputs[i];
  int64_t n_in = mx_numel(x), n_out = mx_numel(out);
  double *analytic = calloc((size_t)(n_in * n_out + 1), sizeof(double));
  if (!analytic) return mx__error(MX_OUT_OF_MEMORY, "mx_gradcheck: out of memory");
  mx_status status = MX_OK;
  /* row j of the Jacobian: the gradient of output element j (all zero
   * when the output has no graph: it does not depend on the inputs) */
  for (int64_t j = 0; j < n_out && status == MX_OK && mx_requires_grad(out); j++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *go = mx_zeros_like(out);
    mx_tensor *grad = NULL;
    status = go ? mx_set(go, unravel(out, j), 1.0) : mx_last_status();
    if (status == MX_OK) status = mx_grad(1, &out, 1, &x, &go, true, false, true, &grad);
    if (status == MX_OK && grad) {
      int64_t count;
      double *g = values_of(grad, &count);
      if (!g) status = mx_last_status();
      else memcpy(analytic + j * n_in, g, sizeof(double) * (size_t)n_in);
      free(g);
    }
    mx_scope_end(s);
  }
  /* column k: central differences in input element k */
  for (int64_t k = 0; k < n_in && status == MX_OK; k++) {
    mx_shape index = unravel(x, k);
    double x0 = mx_at(x, index);
    int64_t count_plus = 0, count_minus = 0;
    mx_set(x, index, x0 + eps);
    double *plus = evaluate(fn, n, inputs, ctx, &count_plus);
    mx_set(x, index, x0 - eps);
    double *minus = evaluate(fn, n, inputs, ctx, &count_minus);
    mx_set(x, index, x0);
    if (!plus || !minus) status = mx_last_status();
    for (int64_t j = 0; j < n_out && status == MX_OK; j++) {
      double numeric = (plus[j] - minus[j]) / (2 * eps), a = analytic[j * n_in + k];
      if (!close_enough(a, numeric, atol, rtol))
        status = mx__error(MX_STATE_ERROR,
                           "mx_gradcheck: d output[%lld] / d input %d [%lld]: analytic %.10g, numerical %.10g",
                           (long long)j, i, (long long)k, a, numeric);
    }
    free(plus);
    free(minus);
  }
  free(analytic);
  return status;
}

static mx_status gradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx, double eps,
                           double atol, double rtol) {
  for (int i = 0; i < n_inputs; i++) {
    if (!inputs[i]) return mx__null_input("mx_gradcheck", "inputs[i]");
    if (mx_requires_grad(inputs[i]) && mx_dtype_of(inputs[i]) != MX_F64)
      return mx__error(MX_DTYPE_ERROR, "mx_gradcheck: input %d is %s; finite differences need float64", i,
                       mx_dtype_name(mx_dtype_of(inputs[i])));
  }
  mx_status status = MX_OK;
  for (int i = 0; i < n_inputs && status == MX_OK; i++) {
    if (!mx_requires_grad(inputs[i])) continue;
    /* a fresh graph per input: the perturbations of the last one changed
     * the versions of the tensors the old graph saved */
    mx_scope *s = mx_scope_begin();
    mx_tensor *out = call(fn, n_inputs, inputs, ctx);
    status = out ? check_input(fn, n_inputs, inputs, ctx, i, out, eps, atol, rtol) : mx_last_status();
    mx_scope_end(s);
  }
  return status;
}

/* gradgradcheck: gradcheck of x -> d fn / d inputs[which] . v, with v a
 * fixed random cotangent; with grad mode on the gradient keeps its graph. */
typedef struct {
  mx_gradcheck_fn fn;
  void *ctx;
  int which;
  mx_tensor *v;
} grad_of_fn;

static mx_tensor *first_gradient(int n, mx_tensor *const *inputs, void *vctx) {
  grad_of_fn *g = vctx;
  bool create_graph = mx_is_grad_enabled();
  bool previous = mx_set_grad_enabled(true);
  mx_tensor *out = g->fn(n, inputs, g->ctx);
  mx_tensor *grad = NULL;
  mx_tensor *target = inputs[g->which];
  /* the graph is kept while the gradient has one (PyTorch's default) */
  if (out && mx_grad(1, &out, 1, &target, &g->v, create_graph, create_graph, true, &grad) == MX_OK && !grad)
    grad = mx_zeros_like(target); /* unused: a zero gradient */
  mx_set_grad_enabled(previous);
  return grad;
}

/* Both checks run fn with grad mode on, whatever the caller's mode (see
 * autograd.h): the analytic pass needs a graph, and a function that takes
 * gradients itself needs one in the finite differences too. */
mx_status mx_gradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx, double eps,
                       double atol, double rtol) {
  mx_status status = MX_OK;
  MX_ENABLE_GRAD { status = gradcheck(fn, n_inputs, inputs, ctx, eps, atol, rtol); }
  return status;
}

static mx_status gradgradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx, double eps,
                               double atol, double rtol) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *out = fn(n_inputs, inputs, ctx);
  mx_status status = out ? MX_OK : mx_last_status();
  mx_generator *gen = mx_generator_new(1234);
  mx_tensor *v = out ? mx_randn(mx_shape_get(out), MX_F64, mx_device_of(out), gen) : NULL;
  mx_generator_free(gen);
  for (int i = 0; i < n_inputs && status == MX_OK; i++) {
    if (!mx_requires_grad(inputs[i])) continue;
    grad_of_fn g = {fn, ctx, i, v};
    status = mx_gradcheck(first_gradient, n_inputs, inputs, &g, eps, atol, rtol);
    if (status != MX_OK) {
      char why[800];
      snprintf(why, sizeof why, "%s", mx_last_error());
      status = mx__error(status, "mx_gradgradcheck: gradient of input %d: %s", i, why);
    }
  }
  mx_scope_end(s);
  return status;
}

mx_status mx_gradgradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx, double eps,
                           double atol, double rtol) {
  mx_status status = MX_OK;
  MX_ENABLE_GRAD { status = gradgradcheck(fn, n_inputs, inputs, ctx, eps, atol, rtol); }
  return status;
}
