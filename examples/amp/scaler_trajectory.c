/* The GradScaler at work: a small MLP trained with float16 autocast and
 * dynamic loss scaling, its scale written down at every step.
 *
 * The scaler starts far too high (2^24), so the first steps overflow and
 * are skipped while the scale halves; growth_interval is 20 (PyTorch's
 * default is 2000) so growth and backoff both show within 300 steps.
 *
 *     build/examples/amp/scaler_trajectory [out.csv]
 *
 * The CSV has one row per step: step, loss, scale (the one the step used),
 * skipped (1: gradients held inf/NaN, parameters left alone).
 * docs/make_amp_figure.sh draws it into docs/amp_scale.png.
 */
#include <math.h>
#include <mixgrad.h>
#include <stdio.h>

enum { N = 1024, BATCH = 64, IN = 16, HIDDEN = 64, CLASSES = 4, STEPS = 300 };

/* A float32 leaf that requires grad: randn * std (a parameter). */
static mx_tensor *param(mx_shape shape, double std) {
  mx_tensor *p = mx_randn(shape, MX_F32, MX_CPU, NULL);
  mx_mul_scalar_(p, std);
  mx_set_requires_grad(p, true);
  return p;
}

int main(int argc, char **argv) {
  FILE *csv = NULL;
  if (argc > 1 && !(csv = fopen(argv[1], "w"))) {
    perror(argv[1]);
    return 1;
  }
  mx_manual_seed(0);
  mx_scope *scope = mx_scope_begin();

  /* The data: labels from a random linear teacher, argmax(x @ teacher). */
  mx_tensor *x = mx_randn(MX_SHAPE(N, IN), MX_F32, MX_CPU, NULL);
  mx_tensor *y = mx_argmax(mx_matmul(x, mx_randn(MX_SHAPE(IN, CLASSES), MX_F32, MX_CPU, NULL)), 1, false);

  /* The model: linear -> relu -> linear, float32 parameters. */
  mx_tensor *w1 = param(MX_SHAPE(HIDDEN, IN), 1 / sqrt(IN)), *b1 = param(MX_SHAPE(HIDDEN), 0);
  mx_tensor *w2 = param(MX_SHAPE(CLASSES, HIDDEN), 1 / sqrt(HIDDEN)), *b2 = param(MX_SHAPE(CLASSES), 0);
  mx_tensor *params[] = {w1, b1, w2, b2};
  const char *names[] = {"fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"};
  mx_sgd_opts so = mx_sgd_defaults();
  so.lr = 0.1, so.momentum = 0.9;
  mx_optimizer *opt = mx_sgd_new(4, params, &so);

  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 0x1p24;   /* 16777216: overflows at first */
  o.growth_interval = 20;  /* double after 20 clean steps */
  mx_scaler *scaler = mx_scaler_new(&o);
  if (!opt || !scaler) {
    fprintf(stderr, "scaler_trajectory: %s\n", mx_last_error());
    return 1;
  }

  if (csv) fprintf(csv, "step,loss,scale,skipped\n");
  int skipped = 0, first_skip_reported = 0;
  double loss_value = 0;
  for (int step = 0; step < STEPS; step++) {
    mx_scope *s = mx_scope_begin(); /* frees this step's tensors */
    int64_t at = (int64_t)step * BATCH % N;
    mx_tensor *xb = mx_slice(x, 0, at, at + BATCH, 1), *yb = mx_slice(y, 0, at, at + BATCH, 1);

    mx_optimizer_zero_grad(opt, true);
    mx_tensor *loss = NULL;
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) { /* linear: float16; cross_entropy: float32 */
      mx_tensor *h = mx_relu(mx_linear(xb, w1, b1));
      loss = mx_cross_entropy(mx_linear(h, w2, b2), yb, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
    }
    double scale = mx_scaler_get_scale(scaler); /* the scale this step uses */
    mx_scaler_step_info info;
    mx_status st = mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
    if (st == MX_OK) st = mx_scaler_step(scaler, opt, &info); /* unscale, check, step or skip */
    if (st == MX_OK && !info.stepped && !first_skip_reported++) {
      printf("step %d skipped at scale %.0f = 2^%g: %lld inf, %lld NaN in %d parameter(s)\n", step, scale, log2(scale),
             (long long)info.infs, (long long)info.nans, info.params_with_nonfinite);
      mx_scaler_overflow_report(scaler, opt, names, stdout);
    }
    if (st == MX_OK && step == STEPS - 1)
      printf("last step: %.2f%% of the scaled gradient values would be zero or subnormal in float16\n",
             100 * mx_scaler_underflow_fraction(scaler, opt));
    if (st == MX_OK) st = mx_scaler_update(scaler); /* backoff or growth */
    if (st != MX_OK) {
      fprintf(stderr, "scaler_trajectory: step %d: %s\n", step, mx_last_error());
      return 1;
    }
    loss_value = mx_item(loss);
    skipped += !info.stepped;
    if (csv) fprintf(csv, "%d,%.6f,%.0f,%d\n", step, loss_value, scale, !info.stepped);
    mx_scope_end(s);
  }

  mx_scaler_stats stats = mx_scaler_stats_get(scaler);
  printf("%d steps, %d skipped (scaler: %lld updates, %lld skipped), final scale %.0f = 2^%g, final loss %.4f\n",
         STEPS, skipped, (long long)stats.updates, (long long)stats.skipped, stats.scale, log2(stats.scale),
         loss_value);
  if (csv) fclose(csv);
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_scope_end(scope);
  return 0;
}
