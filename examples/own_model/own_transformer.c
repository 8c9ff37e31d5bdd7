/* A checkpointed Transformer, outside mixgrad's tree: two encoder layers
 * run through mx_activation_checkpoint_sequential (each layer recomputed in
 * backward instead of keeping its activations) under bfloat16 autocast,
 * using only the installed header. CI builds and runs it against an
 * installed mixgrad (scripts/check-install):
 *
 *     cc own_transformer.c $(pkg-config --cflags --libs mixgrad) -o own_transformer && ./own_transformer
 *
 * The task: each position's output is the mean of its sequence (attention
 * has to mix the positions). Exits 0 when the first step's gradients equal
 * those of the same step without checkpointing, bit for bit, and the final
 * loss is below a quarter of the first one. */
#include <mixgrad.h>
#include <stdio.h>

#define BATCH 16
#define LENGTH 8
#define WIDTH 16

/* encoder (2 layers) -> linear head, the layers in a Sequential so they can be checkpointed together */
static mx_module *model_new(mx_generator *gen, mx_module **layers, mx_module **head) {
  mx_transformer_opts o = mx_transformer_defaults();
  o.dim_feedforward = 32, o.dropout = 0.0, o.norm_first = true;
  *layers = mx_sequential_new(0, NULL);
  for (int i = 0; *layers && i < 2; i++)
    if (mx_sequential_append(*layers, mx_transformer_encoder_layer_new(WIDTH, 4, &o, gen)) != MX_OK) return NULL;
  *head = mx_linear_new(WIDTH, WIDTH, true, gen);
  return *layers && *head ? *layers : NULL;
}

/* The loss of one batch under bfloat16 autocast; checkpointed or not. */
static mx_tensor *loss_of(mx_module *layers, mx_module *head, const mx_tensor *x, const mx_tensor *target,
                          bool checkpointed) {
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    mx_tensor *h = checkpointed ? mx_activation_checkpoint_sequential(layers, 1, x, NULL) : mx_module_forward(layers, x);
    loss = mx_mse_loss(mx_module_forward(head, h), target, MX_REDUCTION_MEAN);
  }
  return loss;
}

/* Whether every parameter's gradient after one checkpointed backward has
 * the bits of the plain one. */
static bool same_gradients(mx_module *layers, mx_module *head, const mx_tensor *x, const mx_tensor *target) {
  mx_module *parts[2] = {layers, head};
  mx_tensor *plain[64];
  int n = 0;
  for (int pass = 0; pass < 2; pass++) {
    for (int p = 0; p < 2; p++)
      for (int i = 0; i < mx_module_num_parameters(parts[p]); i++) mx_zero_grad(mx_module_parameter(parts[p], i, NULL));
    mx_tensor *loss = loss_of(layers, head, x, target, pass == 1);
    if (!loss || mx_backward(loss, NULL, false) != MX_OK) return false;
    int k = 0;
    for (int p = 0; p < 2; p++)
      for (int i = 0; i < mx_module_num_parameters(parts[p]); i++, k++) {
        mx_tensor *g = mx_grad_of(mx_module_parameter(parts[p], i, NULL));
        if (pass == 0) plain[n++] = mx_clone(g);
        else if (!mx_item(mx_all(mx_eq(g, plain[k]), MX_ALL_DIMS, false))) return false;
      }
  }
  return n > 0;
}

int main(void) {
  mx_generator *gen = mx_generator_new(3);
  mx_module *layers, *head;
  if (!model_new(gen, &layers, &head)) return fprintf(stderr, "model: %s\n", mx_last_error()), 1;
  mx_tensor *params[64];
  int n = 0;
  for (int i = 0; i < mx_module_num_parameters(layers); i++) params[n++] = mx_module_parameter(layers, i, NULL);
  for (int i = 0; i < mx_module_num_parameters(head); i++) params[n++] = mx_module_parameter(head, i, NULL);
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 3e-3;
  mx_optimizer *opt = mx_adam_new(n, params, &o);
  mx_scope *s = mx_scope_begin(); /* x and target are kept; the mean's temporaries go with the scope */
  mx_tensor *x = mx_randn(MX_SHAPE(BATCH, LENGTH, WIDTH), MX_F32, MX_CPU, gen);
  mx_tensor *target = x ? mx_expand(mx_mean(x, MX_DIMS(1), true), MX_SHAPE(BATCH, LENGTH, WIDTH)) : NULL;
  if (!opt || !target || !mx_keep(x) || !mx_keep(target)) return fprintf(stderr, "setup: %s\n", mx_last_error()), 1;
  mx_scope_end(s);

  s = mx_scope_begin();
  bool same = same_gradients(layers, head, x, target);
  mx_scope_end(s);
  double first = 0, last = 0;
  for (int step = 0; step < 150; step++) {
    s = mx_scope_begin();
    mx_optimizer_zero_grad(opt, true);
    mx_tensor *loss = loss_of(layers, head, x, target, true);
    if (!loss || mx_backward(loss, NULL, false) != MX_OK || mx_optimizer_step(opt) != MX_OK)
      return fprintf(stderr, "step %d: %s\n", step, mx_last_error()), 1;
    last = mx_item(loss);
    if (step == 0) first = last;
    mx_scope_end(s);
  }
  printf("checkpointed Transformer: gradients %s the plain ones; loss %.4f at the first step, %.4f after 150\n",
         same ? "equal to" : "DIFFER FROM", first, last);
  mx_optimizer_free(opt);
  mx_release(x);
  mx_release(target);
  mx_module_free(layers);
  mx_module_free(head);
  mx_generator_free(gen);
  return same && last < first / 4 ? 0 : 1;
}
