/* Gradient clipping by total norm and by value: the gradients scaled or clamped in place with mx ops, as
 * torch.nn.utils.clip_grad_norm_ and clip_grad_value_ (PyTorch 1.13) do. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels/base_internal.h"
#include "ops/ops.h"
#include "optim/clip.h"
#include "tensor/scope.h"

static mx_status check_params(const char *fn, int n, mx_tensor *const *params) {
  if (n < 0) return mx__error(MX_INVALID_ARGUMENT, "%s: n is %d (must be >= 0)", fn, n);
  if (n > 0 && !params) return mx__null_input(fn, "params");
  for (int i = 0; i < n; i++)
    if (!params[i]) {
      char arg[32];
      snprintf(arg, sizeof arg, "params[%d]", i);
      return mx__null_input(fn, arg);
    }
  return MX_OK;
}

/* The gradients of params (borrowed), those that have one; *n_grads gets their number. NULL when out of memory. */
static mx_tensor **grads_of(const char *fn, int n, mx_tensor *const *params, int *n_grads) {
  mx_tensor **grads = malloc(sizeof *grads * (size_t)(n > 0 ? n : 1));
  if (!grads) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  *n_grads = 0;
  for (int i = 0; i < n; i++)
    if (mx_grad_of(params[i])) grads[(*n_grads)++] = mx_grad_of(params[i]);
  return grads;
}

/* PyTorch's promotion of two floating dtypes (float16 with bfloat16 gives float32). */
static mx_dtype promote(mx_dtype a, mx_dtype b) {
  if (a == b) return a;
  return a == MX_F64 || b == MX_F64 ? MX_F64 : MX_F32;
}

/* torch.norm(t, p) over all elements: float16 and bfloat16 accumulate in float32 and round the result. */
static mx_tensor *norm_of(mx_tensor *t, double p) {
  mx_dtype dtype = mx_dtype_of(t);
  if (dtype == MX_F32 || dtype == MX_F64) return mx_norm(t, p, MX_ALL_DIMS, false);
  return mx_to_dtype(mx_norm(mx_to_dtype(t, MX_F32), p, MX_ALL_DIMS, false), dtype);
}

/* The norm of the gradients' norms, in their widest dtype, on the first one's device (0-d). */
static mx_tensor *total_norm(const char *fn, int n, mx_tensor *const *grads, double p) {
  mx_tensor **norms = malloc(sizeof *norms * (size_t)n);
  if (!norms) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  mx_dtype dtype = mx_dtype_of(grads[0]);
  for (int i = 0; i < n; i++) {
    norms[i] = norm_of(grads[i], p);
    dtype = promote(dtype, mx_dtype_of(grads[i]));
  }
  for (int i = 0; i < n; i++) norms[i] = mx_to_device(mx_to_dtype(norms[i], dtype), mx_device_of(grads[0]));
  mx_tensor *total = norm_of(mx_stack(n, norms, 0), p);
  free(norms);
  return total;
}

/* The body of mx_clip_grad_norm, inside a scope and without grad. */
static mx_status clip_norm(const char *fn, int n, mx_tensor *const *grads, double max_norm, double p,
                           bool error_if_nonfinite, double *total_norm_out) {
  if (n == 0) {
    if (total_norm_out) *total_norm_out = 0;
    return MX_OK;
  }
  mx_tensor *total = total_norm(fn, n, grads, p);
  if (!total) return mx__error_prefix(fn);
  if (total_norm_out || error_if_nonfinite) {
    double value = mx_item(total);
    if (total_norm_out) *total_norm_out = value;
    if (error_if_nonfinite && !isfinite(value))
      return mx__error(MX_STATE_ERROR,
                       "%s: the total norm of order %g for the gradients is non-finite (%g), so it "
                       "cannot be clipped; to scale them by it anyway, pass error_if_nonfinite = false",
                       fn, p, value);
  }
  /* clip_coef = max_norm / (total + 1e-6), which Python computes as reciprocal(total + 1e-6) * max_norm */
  mx_tensor *coef = mx_clamp(mx_mul_scalar(mx_reciprocal(mx_add_scalar(total, 1e-6)), max_norm), -INFINITY, 1.0);
  if (!coef) return mx__error_prefix(fn);
  for (int i = 0; i < n; i++)
    if (mx_mul_(grads[i], mx_to_device(coef, mx_device_of(grads[i]))) != MX_OK) return mx__error_prefix(fn);
  return MX_OK;
}

static mx_status clip_grad_norm(const char *fn, int n, mx_tensor *const *params, double max_norm, double norm_type,
                                bool error_if_nonfinite, double *total_norm_out) {
  if (check_params(fn, n, params) != MX_OK) return mx_last_status();
  if (isnan(norm_type)) return mx__error(MX_INVALID_ARGUMENT, "%s: invalid norm_type nan", fn);
  int n_grads;
  mx_tensor **grads = grads_of(fn, n, params, &n_grads);
  if (!grads) return MX_OUT_OF_MEMORY;
  mx_scope *scope = mx_scope_begin();
  mx_status status = MX_OK;
  MX_NO_GRAD { status = clip_norm(fn, n_grads, grads, max_norm, norm_type, error_if_nonfinite, total_norm_out); }
  mx_scope_end(scope);
  free(grads);
  return status;
}

mx_status mx_clip_grad_norm(int n, mx_tensor *const *params, double max_norm, double norm_type, bool error_if_nonfinite,
                            double *total_norm_out) {
  return clip_grad_norm("mx_clip_grad_norm", n, params, max_norm, norm_type, error_if_nonfinite, total_norm_out);
}

static mx_status clip_grad_value(const char *fn, int n, mx_tensor *const *params, double clip_value) {
  if (check_params(fn, n, params) != MX_OK) return mx_last_status();
  mx_status status = MX_OK;
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD {
    for (int i = 0; i < n && status == MX_OK; i++) {
      mx_tensor *grad = mx_grad_of(params[i]);
      if (grad && mx_copy_(grad, mx_clamp(grad, -clip_value, clip_value)) != MX_OK) status = mx__error_prefix(fn);
    }
  }
  mx_scope_end(scope);
  return status;
}

mx_status mx_clip_grad_value(int n, mx_tensor *const *params, double clip_value) {
  return clip_grad_value("mx_clip_grad_value", n, params, clip_value);
}

/* --- over an optimizer's parameters --------------------------------------------------------------- */

/* All of opt's parameters (borrowed) in a new array; NULL with the error set. */
static mx_tensor **params_of(const char *fn, const mx_optimizer *opt, int *n) {
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  *n = mx_optimizer_num_params(opt);
  mx_tensor **params = malloc(sizeof *params * (size_t)*n);
  if (!params) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  for (int i = 0; i < *n; i++) params[i] = mx_optimizer_param(opt, i);
  return params;
}

mx_status mx_clip_grad_norm_optimizer(const mx_optimizer *opt, double max_norm, double norm_type,
                                      bool error_if_nonfinite, double *total_norm_out) {
  const char *fn = "mx_clip_grad_norm_optimizer";
  int n;
  mx_tensor **params = params_of(fn, opt, &n);
  if (!params) return mx_last_status();
  mx_status status = clip_grad_norm(fn, n, params, max_norm, norm_type, error_if_nonfinite, total_norm_out);
  free(params);
  return status;
}

mx_status mx_clip_grad_value_optimizer(const mx_optimizer *opt, double clip_value) {
  const char *fn = "mx_clip_grad_value_optimizer";
  int n;
  mx_tensor **params = params_of(fn, opt, &n);
  if (!params) return mx_last_status();
  mx_status status = clip_grad_value(fn, n, params, clip_value);
  free(params);
  return status;
}
