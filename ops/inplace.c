/* In-place ops: the result is computed out of place (and recorded), then
 * written into self, which takes over the result's place in the graph.
 * The write bumps self's version, so a backward that saved the old value
 * refuses to run ("modified by an in-place operation"). */
#include "ops/op_table.h"

static mx_status write_back(const char *op, mx_tensor *self, mx_tensor *result) {
  if (!self) {
    mx_release(result);
    return mx__null_input(op, "self");
  }
  if (!result) return mx_last_status();
  mx_status status = MX_OK;
  bool recording = mx_is_grad_enabled() && mx_requires_grad(result);
  if (mx_dtype_is_floating(result->dtype) && !mx_dtype_is_floating(self->dtype))
    status = mx__error(MX_DTYPE_ERROR, "%s: result type %s cannot be written into a %s tensor", op,
                       mx_dtype_name(result->dtype), mx_dtype_name(self->dtype));
  else if (recording && mx_is_leaf(self) && mx_requires_grad(self))
    status = mx__error(MX_STATE_ERROR, "%s: a leaf tensor that requires grad cannot be modified in place "
                       "(wrap the update in MX_NO_GRAD)", op);
  else if (recording && atomic_load(&self->storage->refs) > 1)
    status = mx__error(MX_STATE_ERROR, "%s: in-place change of a tensor that shares its storage with a view, "
                       "while recording a graph, is not supported; use the out-of-place op", op);
  if (status == MX_OK) {
    bool previous = mx_set_grad_enabled(false);
    status = mx_copy_(self, result);
    mx_set_grad_enabled(previous);
  }
  if (status == MX_OK && recording) { /* self now stands where result stood */
    mx__node *node = result->autograd->grad_fn;
    mx__autograd_meta *meta = mx__meta_of(self);
    if (!meta) status = mx_last_status();
    else mx__node_set_output(node, result->autograd->output_nr, self);
    /* the node saved self's old value as an input; self now owns the node,
     * so keep a detached view instead (no cycle; its version still tells a
     * backward that needs the old value that it was overwritten) */
    for (int i = 0; i < node->n_saved && status == MX_OK; i++) {
      if (node->saved[i].tensor != self) continue;
      mx_tensor *view = mx__tensor_view(self, self->ndim, self->shape, self->strides, self->offset);
      if (!view) {
        status = mx_last_status();
        break;
      }
      mx__retain(view);
      mx_release(view); /* only the node's reference remains */
      node->saved[i].tensor = view;
      mx__decref(self);
    }
  }
  mx_release(result);
  return status;
}

/* The out-of-place op runs with autocast off: an in-place op keeps self's
 * dtype, so autocast never applies to it (PyTorch's rule). */
#define IN_PLACE(name, self, expr)                 \
  do {                                             \
    mx__autocast_excluded++;                       \
    mx_tensor *result_ = (expr);                   \
    mx__autocast_excluded--;                       \
    return write_back(name, self, result_);        \
  } while (0)

mx_status mx_add_(mx_tensor *self, const mx_tensor *other) { IN_PLACE("mx_add_", self, mx_add(self, other)); }
mx_status mx_mul_(mx_tensor *self, const mx_tensor *other) { IN_PLACE("mx_mul_", self, mx_mul(self, other)); }
mx_status mx_add_scalar_(mx_tensor *self, double value) {
  IN_PLACE("mx_add_scalar_", self, mx_add_scalar(self, value));
}
mx_status mx_mul_scalar_(mx_tensor *self, double value) {
  IN_PLACE("mx_mul_scalar_", self, mx_mul_scalar(self, value));
}
mx_status mx_exp_(mx_tensor *self) { IN_PLACE("mx_exp_", self, mx_exp(self)); }
mx_status mx_relu_(mx_tensor *self) { IN_PLACE("mx_relu_", self, mx_relu(self)); }
