/* A gradient that underflows to zero in float16, and loss scaling saving it.
 *
 * The model is y = x @ w with loss = 2^-26 * sum(y). Every element of y
 * receives the gradient dL/dy = 2^-26 (about 1.5e-8), below float16's
 * smallest subnormal 2^-24. Under an f16 autocast region the matmul runs in
 * float16, so its backward runs in float16 too: dL/dy rounds to 0 and the
 * weight gets a zero gradient. A GradScaler multiplies the loss by 2^16
 * first, dL/dy becomes 2^-10, and unscaling gives back the float32
 * gradient exactly. (The factor 2^-26 stands in for what happens deep in a
 * real network, where many activation gradients are this small; a power of
 * two keeps every number below exact.)
 *
 *     build/examples/amp/underflow
 */
#include <mixgrad.h>
#include <stdio.h>

/* What the hook on y saw: the gradient arriving at the matmul's output. */
typedef struct {
  double value;
  mx_dtype dtype;
} seen;

static mx_tensor *watch(mx_tensor *grad, void *ctx) {
  seen *s = ctx;
  s->value = mx_at(grad, MX_SHAPE(0, 0));
  s->dtype = mx_dtype_of(grad);
  return NULL; /* keep the gradient as it is */
}

typedef struct {
  seen dy;            /* dL/dy */
  mx_tensor *grad_w;  /* dL/dw, unscaled (owned by the caller's scope) */
  double underflow;   /* the scaler's fp16 underflow fraction, -1 without one */
} result;

/* One forward and backward. autocast: an f16 region around the forward;
 * scale > 0: a GradScaler with that initial scale. */
static result run(mx_tensor *x, mx_tensor *w, bool autocast, double scale) {
  result r = {.underflow = -1};
  mx_zero_grad(w);
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, MX_F16, autocast, true) {
    mx_tensor *y = mx_matmul(x, w); /* LOWER: float16 inside the region */
    mx_register_hook(y, watch, &r.dy);
    loss = mx_mul_scalar(mx_sum(y, MX_ALL_DIMS, false), 0x1p-26); /* sum is FP32 */
  }
  if (scale <= 0) {
    mx_backward(loss, NULL, false);
  } else {
    mx_scaler_opts o = mx_scaler_defaults();
    o.init_scale = scale;
    mx_scaler *scaler = mx_scaler_new(&o);
    mx_optimizer *opt = mx_sgd_new(1, &w, NULL); /* unscale works per optimizer */
    mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
    mx_scaler_unscale(scaler, opt); /* grad /= scale, checked for inf/NaN */
    r.underflow = mx_scaler_underflow_fraction(scaler, opt);
    mx_optimizer_free(opt);
    mx_scaler_free(scaler);
  }
  r.grad_w = mx_clone(mx_grad_of(w));
  return r;
}

int main(void) {
  mx_scope *scope = mx_scope_begin();
  const float xs[] = {1, 2, 3, 4, 5, 6};
  mx_tensor *x = mx_from_data(xs, MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *w = mx_ones(MX_SHAPE(3, 2), MX_F32, MX_CPU);
  mx_set_requires_grad(w, true);

  printf("float16: smallest subnormal 2^-24 = %.3g; 2^-26 = %.3g rounds to %g\n\n", 0x1p-24, 0x1p-26,
         mx_item(mx_to_dtype(mx_scalar(0x1p-26, MX_F32, MX_CPU), MX_F16)));

  struct {
    const char *name;
    bool autocast;
    double scale;
  } runs[] = {
      {"float32, no autocast", false, 0},
      {"f16 autocast", true, 0},
      {"f16 autocast, scaler at 1", true, 1},
      {"f16 autocast, scaler at 2^16", true, 65536},
  };
  mx_tensor *reference = NULL;
  printf("%-30s %-20s %-12s %-9s %s\n", "run", "dL/dy (dtype)", "dL/dw[0,0]", "= fp32?", "underflow");
  for (int i = 0; i < 4; i++) {
    result r = run(x, w, runs[i].autocast, runs[i].scale);
    if (!r.grad_w) {
      fprintf(stderr, "underflow: %s\n", mx_last_error());
      return 1;
    }
    if (!reference) reference = r.grad_w;
    /* equal means bit for bit: the largest difference is 0 */
    double diff = mx_item(mx_amax(mx_abs(mx_sub(r.grad_w, reference)), MX_ALL_DIMS, false));
    char dy[32], uf[16] = "-";
    snprintf(dy, sizeof dy, "%.3g (%s)", r.dy.value, mx_dtype_name(r.dy.dtype));
    if (r.underflow >= 0) snprintf(uf, sizeof uf, "%.2f", r.underflow);
    printf("%-30s %-20s %-12.4g %-9s %s\n", runs[i].name, dy, mx_at(r.grad_w, MX_SHAPE(0, 0)),
           diff == 0 ? "yes" : "no", uf);
  }
  printf("\n(dL/dy is what reaches the matmul, scaled when a scaler runs; underflow is the\n"
         " share of w's scaled gradient that is zero or subnormal in float16)\n");
  printf("\nfloat32 gradient of w:\n");
  mx_print(reference);
  mx_scope_end(scope);
  return 0;
}
