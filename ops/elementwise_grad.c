/* Backward formulas of the elementwise ops, written with mx ops so they can
 * be differentiated again. G is the gradient of the output; X (and Y) the
 * saved inputs, OUT the saved output. The engine sums broadcast gradients
 * back to each input's shape and casts them to its dtype. */
#include <math.h>

#include "ops/op_table.h"

/* G and GRAD come from ops/op_table.h; these name the saved tensors and
 * the op's scalar arguments. */
#define X (mx__saved_in(bw, 0))
#define Y (mx__saved_in(bw, 1))
#define OUT (mx__saved_out(bw, 0))
#define A0 (bw->args->f[0])
#define A1 (bw->args->f[1])

#define SQRT_PI 1.7724538509055160273
#define SQRT_2PI 2.5066282746310005024

/* --- unary ------------------------------------------------------------------------------ */

mx_status mx__bwd_neg(mx__bw *bw) { GRAD(0, mx_neg(G)); return MX_OK; }
mx_status mx__bwd_abs(mx__bw *bw) { GRAD(0, mx_mul(G, mx_sign(X))); return MX_OK; }
mx_status mx__bwd_sign(mx__bw *bw) { GRAD(0, mx_zeros_like(G)); return MX_OK; }
mx_status mx__bwd_floor(mx__bw *bw) { GRAD(0, mx_zeros_like(G)); return MX_OK; }
mx_status mx__bwd_ceil(mx__bw *bw) { GRAD(0, mx_zeros_like(G)); return MX_OK; }
mx_status mx__bwd_round(mx__bw *bw) { GRAD(0, mx_zeros_like(G)); return MX_OK; }
mx_status mx__bwd_trunc(mx__bw *bw) { GRAD(0, mx_zeros_like(G)); return MX_OK; }
mx_status mx__bwd_exp(mx__bw *bw) { GRAD(0, mx_mul(G, OUT)); return MX_OK; }
mx_status mx__bwd_expm1(mx__bw *bw) { GRAD(0, mx_mul(G, mx_add_scalar(OUT, 1))); return MX_OK; }
mx_status mx__bwd_log(mx__bw *bw) { GRAD(0, mx_div(G, X)); return MX_OK; }
mx_status mx__bwd_log1p(mx__bw *bw) { GRAD(0, mx_div(G, mx_add_scalar(X, 1))); return MX_OK; }
mx_status mx__bwd_log2(mx__bw *bw) { GRAD(0, mx_div(G, mx_mul_scalar(X, M_LN2))); return MX_OK; }
mx_status mx__bwd_log10(mx__bw *bw) { GRAD(0, mx_div(G, mx_mul_scalar(X, M_LN10))); return MX_OK; }
mx_status mx__bwd_sqrt(mx__bw *bw) { GRAD(0, mx_div(G, mx_mul_scalar(OUT, 2))); return MX_OK; }
mx_status mx__bwd_rsqrt(mx__bw *bw) { GRAD(0, mx_mul(G, mx_mul_scalar(mx_pow_scalar(OUT, 3), -0.5))); return MX_OK; }
mx_status mx__bwd_reciprocal(mx__bw *bw) { GRAD(0, mx_neg(mx_mul(G, mx_mul(OUT, OUT)))); return MX_OK; }
mx_status mx__bwd_sin(mx__bw *bw) { GRAD(0, mx_mul(G, mx_cos(X))); return MX_OK; }
mx_status mx__bwd_cos(mx__bw *bw) { GRAD(0, mx_neg(mx_mul(G, mx_sin(X)))); return MX_OK; }
mx_status mx__bwd_tan(mx__bw *bw) { GRAD(0, mx_mul(G, mx_add_scalar(mx_mul(OUT, OUT), 1))); return MX_OK; }
mx_status mx__bwd_asin(mx__bw *bw) { GRAD(0, mx_mul(G, mx_rsqrt(mx_rsub_scalar(1, mx_mul(X, X))))); return MX_OK; }
mx_status mx__bwd_acos(mx__bw *bw) {
  GRAD(0, mx_neg(mx_mul(G, mx_rsqrt(mx_rsub_scalar(1, mx_mul(X, X))))));
  return MX_OK;
}
mx_status mx__bwd_atan(mx__bw *bw) { GRAD(0, mx_div(G, mx_add_scalar(mx_mul(X, X), 1))); return MX_OK; }
mx_status mx__bwd_sinh(mx__bw *bw) { GRAD(0, mx_mul(G, mx_cosh(X))); return MX_OK; }
mx_status mx__bwd_cosh(mx__bw *bw) { GRAD(0, mx_mul(G, mx_sinh(X))); return MX_OK; }
mx_status mx__bwd_tanh(mx__bw *bw) { GRAD(0, mx_mul(G, mx_rsub_scalar(1, mx_mul(OUT, OUT)))); return MX_OK; }
mx_status mx__bwd_sigmoid(mx__bw *bw) {
  mx_tensor *s = OUT;
  GRAD(0, mx_mul(G, mx_mul(s, mx_rsub_scalar(1, s))));
  return MX_OK;
}
mx_status mx__bwd_relu(mx__bw *bw) { GRAD(0, mx_relu_backward(G, OUT)); return MX_OK; }
/* linear in the gradient; piecewise constant in the output, so none there */
mx_status mx__bwd_relu_backward(mx__bw *bw) { GRAD(0, mx_relu_backward(G, mx__saved_in(bw, 1))); return MX_OK; }
mx_status mx__bwd_leaky_relu(mx__bw *bw) {
  GRAD(0, mx_where(mx_gt_scalar(X, 0), G, mx_mul_scalar(G, A0)));
  return MX_OK;
}
mx_status mx__bwd_elu(mx__bw *bw) {
  /* x <= 0: d/dx alpha (e^x - 1) = alpha e^x = out + alpha */
  GRAD(0, mx_where(mx_gt_scalar(X, 0), G, mx_mul(G, mx_add_scalar(OUT, A0))));
  return MX_OK;
}
mx_status mx__bwd_gelu(mx__bw *bw) {
  /* Phi(x) + x phi(x) */
  mx_tensor *x = X;
  mx_tensor *cdf = mx_mul_scalar(mx_add_scalar(mx_erf(mx_mul_scalar(x, M_SQRT1_2)), 1), 0.5);
  mx_tensor *pdf = mx_mul_scalar(mx_exp(mx_mul_scalar(mx_mul(x, x), -0.5)), 1 / SQRT_2PI);
  GRAD(0, mx_mul(G, mx_add(cdf, mx_mul(x, pdf))));
  return MX_OK;
}
mx_status mx__bwd_gelu_tanh(mx__bw *bw) {
  /* t = tanh(k (x + c x^3)): 0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2) */
  const double k = 0.79788456080286535588, c = 0.044715;
  mx_tensor *x = X;
  mx_tensor *x2 = mx_mul(x, x);
  mx_tensor *t = mx_tanh(mx_mul_scalar(mx_add(x, mx_mul_scalar(mx_mul(x2, x), c)), k));
  mx_tensor *left = mx_mul_scalar(mx_add_scalar(t, 1), 0.5);
  mx_tensor *dt = mx_mul(mx_rsub_scalar(1, mx_mul(t, t)), mx_mul_scalar(mx_add_scalar(mx_mul_scalar(x2, 3 * c), 1), k));
  GRAD(0, mx_mul(G, mx_add(left, mx_mul_scalar(mx_mul(x, dt), 0.5))));
  return MX_OK;
}
mx_status mx__bwd_silu(mx__bw *bw) {
  mx_tensor *x = X;
  mx_tensor *s = mx_sigmoid(x);
  GRAD(0, mx_mul(G, mx_mul(s, mx_add_scalar(mx_mul(x, mx_rsub_scalar(1, s)), 1))));
  return MX_OK;
}
mx_status mx__bwd_softplus(mx__bw *bw) {
  mx_tensor *bx = mx_mul_scalar(X, A0);
  GRAD(0, mx_where(mx_gt_scalar(bx, A1), G, mx_mul(G, mx_sigmoid(bx))));
  return MX_OK;
}
mx_status mx__bwd_erf(mx__bw *bw) {
  mx_tensor *x = X;
  GRAD(0, mx_mul(G, mx_mul_scalar(mx_exp(mx_neg(mx_mul(x, x))), 2 / SQRT_PI)));
  return MX_OK;
}
mx_status mx__bwd_erfinv(mx__bw *bw) {
  mx_tensor *y = OUT;
  GRAD(0, mx_mul(G, mx_mul_scalar(mx_exp(mx_mul(y, y)), SQRT_PI / 2)));
  return MX_OK;
}
mx_status mx__bwd_clamp(mx__bw *bw) {
  mx_tensor *x = X;
  GRAD(0, mx_mul(G, mx_logical_and(mx_ge_scalar(x, A0), mx_le_scalar(x, A1))));
  return MX_OK;
}

mx_status mx__bwd_mish(mx__bw *bw) {
  /* t = tanh(softplus(x)): t + x (1 - t^2) sigmoid(x) */
  mx_tensor *x = X, *t = mx_tanh(mx_softplus(x, 1, 20));
  GRAD(0, mx_mul(G, mx_add(t, mx_mul(mx_mul(x, mx_rsub_scalar(1, mx_mul(t, t))), mx_sigmoid(x)))));
  return MX_OK;
}

/* --- binary ------------------------------------------------------------------------------ */

mx_status mx__bwd_add(mx__bw *bw) {
  GRAD(0, G);
  GRAD(1, A0 == 1 ? G : mx_mul_scalar(G, A0));
  return MX_OK;
}
mx_status mx__bwd_sub(mx__bw *bw) {
  GRAD(0, G);
  GRAD(1, mx_mul_scalar(G, -A0));
  return MX_OK;
}
mx_status mx__bwd_mul(mx__bw *bw) {
  GRAD(0, mx_mul(G, Y));
  GRAD(1, mx_mul(G, X));
  return MX_OK;
}
mx_status mx__bwd_div(mx__bw *bw) {
  mx_tensor *y = Y;
  GRAD(0, mx_div(G, y));
  GRAD(1, mx_neg(mx_div(mx_mul(G, X), mx_mul(y, y))));
  return MX_OK;
}
mx_status mx__bwd_pow(mx__bw *bw) {
  mx_tensor *x = X, *y = Y;
  /* a C-scalar exponent takes x's dtype here: y - 1 between two C scalars
   * would otherwise be computed in float32 */
  if (x && y && y->wrapped_number && mx_dtype_is_floating(x->dtype)) y = mx_to_dtype(y, x->dtype);
  /* y x^(y-1), taken as 0 where y == 0 (so 0^0 has no NaN gradient) */
  GRAD(0, mx_masked_fill(mx_mul(G, mx_mul(y, mx_pow(x, mx_sub_scalar(y, 1)))), mx_eq_scalar(y, 0), 0));
  /* x^y log x, taken as 0 where x == 0 and y >= 0 */
  GRAD(1, mx_masked_fill(mx_mul(G, mx_mul(mx_pow(x, y), mx_log(x))),
                         mx_logical_and(mx_eq_scalar(x, 0), mx_ge_scalar(y, 0)), 0));
  return MX_OK;
}
mx_status mx__bwd_remainder(mx__bw *bw) {
  GRAD(0, G);
  GRAD(1, mx_neg(mx_mul(G, mx_floor(mx_div(X, Y)))));
  return MX_OK;
}
/* Ties share the gradient equally, as in PyTorch. */
static mx_status extremum_grad(mx__bw *bw, bool is_max) {
  mx_tensor *x = X, *y = Y;
  mx_tensor *split = mx_where(mx_eq(x, y), mx_mul_scalar(G, 0.5), G);
  mx_tensor *x_loses = is_max ? mx_lt(x, y) : mx_gt(x, y);
  mx_tensor *y_loses = is_max ? mx_gt(x, y) : mx_lt(x, y);
  GRAD(0, mx_masked_fill(split, x_loses, 0));
  GRAD(1, mx_masked_fill(split, y_loses, 0));
  return MX_OK;
}
mx_status mx__bwd_maximum(mx__bw *bw) { return extremum_grad(bw, true); }
mx_status mx__bwd_minimum(mx__bw *bw) { return extremum_grad(bw, false); }
mx_status mx__bwd_atan2(mx__bw *bw) {
  mx_tensor *x = X, *y = Y;
  mx_tensor *denominator = mx_add(mx_mul(x, x), mx_mul(y, y));
  GRAD(0, mx_div(mx_mul(G, y), denominator));
  GRAD(1, mx_neg(mx_div(mx_mul(G, x), denominator)));
  return MX_OK;
}

/* --- where ------------------------------------------------------------------------------- */

mx_status mx__bwd_where(mx__bw *bw) {
  mx_tensor *cond = X;
  GRAD(1, mx_masked_fill(G, mx_logical_not(cond), 0));
  GRAD(2, mx_masked_fill(G, cond, 0));
  return MX_OK;
}
