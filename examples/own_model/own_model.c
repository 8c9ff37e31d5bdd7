/* Your own model, outside mixgrad's tree: a custom module (a residual MLP)
 * trained with AdamW under bfloat16 autocast on a generated task, using
 * only the installed header. README's "Your own model" builds it exactly
 * so, and CI does the same (scripts/check-install):
 *
 *     cc own_model.c $(pkg-config --cflags --libs mixgrad) -o own_model && ./own_model
 *
 * The task: label points of the plane by which of four quadrants they are
 * in, after a fixed random rotation. Exits 0 when the final loss is below
 * a quarter of the first one, so a broken install fails loudly. */
#include <mixgrad.h>
#include <stdio.h>

/* --- the model: x -> fc1 -> relu -> (+ fc2(relu)) -> head ------------------------------------ */

static mx_tensor *residual_mlp_forward(mx_module *m, const mx_tensor *x) {
  mx_tensor *h = mx_relu(mx_module_forward(mx_module_get_child(m, "fc1"), x));
  h = mx_add(h, mx_relu(mx_module_forward(mx_module_get_child(m, "fc2"), h)));
  return mx_module_forward(mx_module_get_child(m, "head"), h);
}

static const mx_module_type residual_mlp = {.name = "ResidualMLP", .forward = residual_mlp_forward};

static mx_module *residual_mlp_new(int64_t in, int64_t hidden, int64_t classes, mx_generator *gen) {
  mx_module *m = mx_module_new(&residual_mlp, NULL);
  if (m && (mx_module_add_child(m, "fc1", mx_linear_new(in, hidden, true, gen)) != MX_OK ||
            mx_module_add_child(m, "fc2", mx_linear_new(hidden, hidden, true, gen)) != MX_OK ||
            mx_module_add_child(m, "head", mx_linear_new(hidden, classes, true, gen)) != MX_OK)) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- the data: quadrant labels of rotated points --------------------------------------------- */

static void make_batch(mx_generator *gen, int64_t n, mx_tensor **x, mx_tensor **y) {
  mx_tensor *p = mx_randn(MX_SHAPE(n, 2), MX_F32, MX_CPU, gen);
  mx_tensor *rot = mx_from_data((float[]){0.8f, -0.6f, 0.6f, 0.8f}, MX_SHAPE(2, 2), MX_F32, MX_CPU);
  mx_tensor *q = mx_matmul(p, rot);
  mx_tensor *right = mx_gt_scalar(mx_select(q, 1, 0), 0.0), *up = mx_gt_scalar(mx_select(q, 1, 1), 0.0);
  *x = p;
  mx_tensor *up2 = mx_to_dtype(up, MX_I64);
  *y = mx_add(mx_add(mx_to_dtype(right, MX_I64), up2), up2); /* 0..3, int64 (a C double would make it float) */
}

int main(void) {
  mx_generator *gen = mx_generator_new(1);
  mx_module *net = residual_mlp_new(2, 32, 4, gen);
  if (!net) return fprintf(stderr, "model: %s\n", mx_last_error()), 1;
  mx_tensor *params[16];
  int n = mx_module_num_parameters(net);
  for (int i = 0; i < n; i++) params[i] = mx_module_parameter(net, i, NULL);
  mx_adam_opts o = mx_adamw_defaults();
  o.lr = 1e-2;
  mx_optimizer *opt = mx_adamw_new(n, params, &o);
  if (!opt) return fprintf(stderr, "optimizer: %s\n", mx_last_error()), 1;

  double first = 0, last = 0;
  for (int step = 0; step < 200; step++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *x, *y, *loss;
    make_batch(gen, 64, &x, &y);
    mx_optimizer_zero_grad(opt, true);
    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { /* linears in bfloat16, the loss in float32 */
      loss = mx_cross_entropy(mx_module_forward(net, x), y, NULL, -100, MX_REDUCTION_MEAN, 0.0);
    }
    if (!loss || mx_backward(loss, NULL, false) != MX_OK || mx_optimizer_step(opt) != MX_OK) {
      fprintf(stderr, "step %d: %s\n", step, mx_last_error());
      return 1;
    }
    last = mx_item(loss);
    if (step == 0) first = last;
    mx_scope_end(s);
  }
  printf("%s, %lld parameters: loss %.4f at the first step, %.4f after 200\n", mx_module_type_of(net)->name,
         (long long)mx_module_parameter_count(net), first, last);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_generator_free(gen);
  return last < first / 4 ? 0 : 1;
}
