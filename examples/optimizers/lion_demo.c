/* Lion (lion.c, a user-written optimizer) training a linear regression in
 * float16 autocast under the GradScaler, with gradient clipping and a
 * cosine LR schedule: everything the built-in optimizers get, through the
 * public optimizer interface and the installed header only.
 *
 *     cc lion_demo.c lion.c $(pkg-config --cflags --libs mixgrad) -o lion_demo && ./lion_demo
 *
 * The first steps overflow float16 at the scaler's initial scale (2^16):
 * those steps are skipped on the device and the scale backs off. Exits 0
 * when the final loss is below a tenth of the first one. */
#include <stdio.h>

#include "lion.h"

#define STEPS 300
#define FEATURES 16

int main(void) {
  mx_generator *gen = mx_generator_new(7);
  mx_tensor *w_true = mx_randn(MX_SHAPE(FEATURES, 1), MX_F32, MX_CPU, gen); /* the task: y = x w_true + 0.5 */
  mx_module *net = mx_linear_new(FEATURES, 1, true, gen);
  if (!w_true || !net) return fprintf(stderr, "setup: %s\n", mx_last_error()), 1;
  mx_tensor *params[2] = {mx_module_parameter(net, 0, NULL), mx_module_parameter(net, 1, NULL)};
  lion_opts o = lion_defaults();
  o.lr = 0.02, o.weight_decay = 0.01;
  mx_optimizer *opt = lion_new(2, params, &o);
  mx_schedule *cosine = opt ? mx_cosine_annealing_lr_new(opt, STEPS, 0.0) : NULL;
  mx_scaler *scaler = mx_scaler_new(NULL);
  if (!opt || !cosine || !scaler) return fprintf(stderr, "optimizer: %s\n", mx_last_error()), 1;

  double first = 0, last = 0, norm = 0;
  for (int step = 0; step < STEPS; step++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = mx_randn(MX_SHAPE(64, FEATURES), MX_F32, MX_CPU, gen);
    mx_tensor *y = mx_add_scalar(mx_matmul(x, w_true), 0.5), *loss = NULL;
    mx_optimizer_zero_grad(opt, true);
    MX_AUTOCAST(MX_CPU, MX_F16, true, true) { /* the linear in float16 */
      loss = mx_mse_loss(mx_to_dtype(mx_module_forward(net, x), MX_F32), y, MX_REDUCTION_MEAN);
    }
    mx_tensor *scaled = mx_scaler_scale(scaler, loss);
    if (!scaled || mx_backward(scaled, NULL, false) != MX_OK || mx_scaler_unscale(scaler, opt) != MX_OK ||
        mx_clip_grad_norm_optimizer(opt, 10.0, 2.0, false, &norm) != MX_OK ||
        mx_scaler_step(scaler, opt, NULL) != MX_OK || mx_scaler_update(scaler) != MX_OK ||
        mx_schedule_step(cosine) != MX_OK) {
      fprintf(stderr, "step %d: %s\n", step, mx_last_error());
      return 1;
    }
    last = mx_item(loss);
    if (step == 0) first = last;
    mx_scope_end(s);
  }
  mx_scaler_stats stats = mx_scaler_stats_get(scaler);
  printf("%s: loss %.4f at the first step, %.4f after %d; %lld steps skipped on overflow, scale now %g\n",
         mx_optimizer_name(opt), first, last, STEPS, (long long)stats.skipped, stats.scale);
  mx_schedule_free(cosine);
  mx_scaler_free(scaler);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_release(w_true);
  mx_generator_free(gen);
  return last < first / 10 ? 0 : 1;
}
