/* Custom functions (torch.autograd.Function): user forward and backward
 * callbacks joining the graph as one node. */
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"

#define MAX_SAVED 16

struct mx_function_ctx {
  const mx_function *fn;
  void *user;
  int n_inputs;
  bool *needs_input_grad;
  int n_saved;
  mx_tensor *saved[MAX_SAVED]; /* until the node takes them over */
  mx__node *node;              /* not owned */
  void *wrapper;               /* a wrapper's state (amp/), freed with the context */
  void (*free_wrapper)(void *wrapper);
};

static void ctx_free(void *p) {
  mx_function_ctx *ctx = p;
  for (int i = 0; i < ctx->n_saved; i++)
    if (ctx->saved[i]) mx__decref(ctx->saved[i]);
  if (ctx->free_wrapper) ctx->free_wrapper(ctx->wrapper);
  free(ctx->needs_input_grad);
  free(ctx);
}

void *mx__ctx_wrapper(mx_function_ctx *ctx) { return ctx->wrapper; }

void *mx_ctx_user(mx_function_ctx *ctx) { return ctx ? ctx->user : NULL; }

bool mx_ctx_needs_input_grad(mx_function_ctx *ctx, int i) {
  return ctx && i >= 0 && i < ctx->n_inputs && ctx->needs_input_grad[i];
}

mx_status mx_ctx_save(mx_function_ctx *ctx, int n, mx_tensor *const *tensors) {
  if (!ctx) return mx__null_input("mx_ctx_save", "ctx");
  if (ctx->n_saved + n > MAX_SAVED)
    return mx__error(MX_INVALID_ARGUMENT, "mx_ctx_save: at most %d tensors can be saved", MAX_SAVED);
  for (int i = 0; i < n; i++) {
    if (!tensors[i]) return mx__null_input("mx_ctx_save", "tensors[i]");
    ctx->saved[ctx->n_saved++] = mx__retain(tensors[i]);
  }
  return MX_OK;
}

mx_tensor *mx_ctx_saved(mx_function_ctx *ctx, int i) {
  if (!ctx || i < 0 || i >= ctx->n_saved) {
    mx__error(MX_INDEX_ERROR, "mx_ctx_saved: no saved tensor %d (%d saved)", i, ctx ? ctx->n_saved : 0);
    return NULL;
  }
  return ctx->node ? mx__node_saved(ctx->node, i) : ctx->saved[i];
}

static mx_status custom_apply(mx__node *node, mx_tensor *const *grad_outputs, mx_tensor **grad_inputs) {
  mx_function_ctx *ctx = node->payload;
  if (node->released) return mx__node_saved(node, 0) ? MX_OK : mx_last_status(); /* the "second time" error */
  mx_status status = ctx->fn->backward(ctx, node->n_outputs, grad_outputs, node->n_inputs, grad_inputs);
  if (status != MX_OK && mx_last_status() == MX_OK)
    mx__error(status, "%s: backward failed", ctx->fn->name);
  return status;
}

mx_status mx_function_apply(const mx_function *fn, void *user, int n_inputs, mx_tensor *const *inputs,
                            int n_outputs, mx_tensor **outputs) {
  return mx__function_apply_wrapped(fn, user, NULL, NULL, n_inputs, inputs, n_outputs, outputs);
}

mx_status mx__function_apply_wrapped(const mx_function *fn, void *user, void *wrapper,
                                     void (*free_wrapper)(void *wrapper), int n_inputs, mx_tensor *const *inputs,
                                     int n_outputs, mx_tensor **outputs) {
  mx_status status = MX_OK;
  if (!fn || !fn->forward || !fn->backward) status = mx__null_input("mx_function_apply", "fn");
  for (int i = 0; i < n_inputs && status == MX_OK; i++)
    if (!inputs[i]) status = mx__null_input(fn->name ? fn->name : "mx_function_apply", "inputs[i]");
  mx_function_ctx *ctx = status == MX_OK ? calloc(1, sizeof *ctx) : NULL;
  if (ctx) ctx->needs_input_grad = calloc((size_t)n_inputs + 1, sizeof(bool));
  if (status == MX_OK && (!ctx || !ctx->needs_input_grad))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_function_apply: out of memory");
  if (status != MX_OK) {
    if (ctx) free(ctx->needs_input_grad);
    free(ctx);
    if (free_wrapper) free_wrapper(wrapper);
    return status;
  }
  ctx->wrapper = wrapper;
  ctx->free_wrapper = free_wrapper;
  ctx->fn = fn;
  ctx->user = user;
  ctx->n_inputs = n_inputs;
  bool recording = mx__any_requires_grad(n_inputs, inputs);
  for (int i = 0; i < n_inputs; i++) ctx->needs_input_grad[i] = recording && mx_requires_grad(inputs[i]);
  for (int k = 0; k < n_outputs; k++) outputs[k] = NULL;

  bool previous = mx_set_grad_enabled(false);
  status = fn->forward(ctx, n_inputs, inputs, n_outputs, outputs);
  mx_set_grad_enabled(previous);
  for (int k = 0; k < n_outputs && status == MX_OK; k++)
    if (!outputs[k]) status = mx__error(MX_STATE_ERROR, "%s: forward left output %d NULL", fn->name, k);
  for (int i = 0; i < n_inputs && status == MX_OK && recording; i++)
    if (mx_is_inference(inputs[i]))
      status = mx__error(MX_STATE_ERROR, "%s: input %d is an inference tensor (made in an MX_INFERENCE_MODE block), "
                         "which cannot enter a graph; mx_clone it outside the block for a normal tensor",
                         fn->name ? fn->name : "CustomFunction", i);
  if (status != MX_OK || !recording) {
    ctx_free(ctx);
    return status;
  }
  mx__node *node = mx__node_new(fn->name ? fn->name : "CustomFunction", custom_apply, n_inputs, n_outputs,
                                ctx->n_saved);
  if (!node) {
    ctx_free(ctx);
    return mx_last_status();
  }
  node->payload = ctx;
  node->free_payload = ctx_free;
  ctx->node = node;
  for (int i = 0; i < n_inputs && status == MX_OK; i++) status = mx__node_connect(node, i, inputs[i]);
  for (int k = 0; k < n_outputs && status == MX_OK; k++)
    if (mx_dtype_is_floating(mx_dtype_of(outputs[k]))) mx__node_set_output(node, k, outputs[k]);
  /* the saved tensors move to the node; saved outputs become detached
   * views, so the node does not own the tensors that own it */
  for (int i = 0; i < ctx->n_saved && status == MX_OK; i++) {
    bool is_output = false;
    for (int k = 0; k < n_outputs; k++) is_output |= ctx->saved[i] == outputs[k];
    status = mx__node_save(node, i, ctx->saved[i], is_output);
    mx__decref(ctx->saved[i]);
    ctx->saved[i] = NULL;
  }
  mx__node_decref(node);
  return status;
}
