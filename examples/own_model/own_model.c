/* Your own model, outside mixgrad's tree: a custom module (a residual MLP)
 * trained with AdamW under bfloat16 autocast on a dataset of your own
 * (two callbacks, read by the shuffling loader), using only the installed
 * header. README's "Your own model" builds it exactly
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

/* --- the data: a dataset of your own, quadrant labels of rotated points ------------------------ */

typedef struct {
  int64_t n;      /* points */
  float cos, sin; /* the rotation */
} points;

static int64_t points_length(void *user) { return ((const points *)user)->n; }

/* Point i (two coordinates in -1..1, from a hash of i) and which of the four
 * quadrants it lies in after the rotation: 0..3. */
static bool points_get(void *user, int64_t i, float *x, int64_t *y) {
  const points *p = user;
  uint64_t h = (uint64_t)i * 0x9e3779b97f4a7c15u;
  h = (h ^ h >> 31) * 0xbf58476d1ce4e5b9u;
  x[0] = (float)(h >> 40) / (1 << 23) - 1.0f;
  x[1] = (float)(h >> 16 & 0xffffff) / (1 << 23) - 1.0f;
  float right = p->cos * x[0] + p->sin * x[1], up = -p->sin * x[0] + p->cos * x[1];
  *y = (right > 0) + 2 * (up > 0);
  return true;
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

  points task = {.n = 2048, .cos = 0.8f, .sin = 0.6f};
  mx_dataset *data = mx_dataset_custom(&(mx_dataset_callbacks){points_length, points_get, &task}, MX_SHAPE(2), 4);
  mx_loader *loader = data ? mx_loader_new(data, &(mx_loader_options){.batch_size = 64, .shuffle = true, .seed = 1,
                                                                      .background = true})
                           : NULL;
  if (!loader) return fprintf(stderr, "data: %s\n", mx_last_error()), 1;

  double first = 0, last = 0;
  mx_tensor *x, *y;
  for (int step = 0; step < 200; step++) {
    if (!mx_loader_next(loader, &x, &y)) { /* the end of an epoch: the next, reshuffled */
      if (mx_loader_status(loader) != MX_OK || mx_loader_reset(loader, step / mx_loader_batches(loader)) != MX_OK ||
          !mx_loader_next(loader, &x, &y))
        return fprintf(stderr, "data: %s\n", mx_last_error()), 1;
    }
    mx_scope *s = mx_scope_begin();
    mx_tensor *loss;
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
    mx_release(x); /* the loader's batches are made outside the scope */
    mx_release(y);
  }
  printf("%s, %lld parameters: loss %.4f at the first step, %.4f after 200\n", mx_module_type_of(net)->name,
         (long long)mx_module_parameter_count(net), first, last);
  mx_loader_free(loader);
  mx_dataset_free(data);
  mx_optimizer_free(opt);
  mx_module_free(net);
  mx_generator_free(gen);
  return last < first / 4 ? 0 : 1;
}
