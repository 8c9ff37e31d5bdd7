/* In-place ops. With no graph to record (the common case: optimizers,
 * the GradScaler, code under MX_NO_GRAD), the kernel writes straight into
 * self in one pass. Otherwise the result is computed out of place (and
 * recorded), then written into self, which takes over the result's place in
 * the graph. Either way the write bumps self's version, so a backward that
 * saved the old value refuses to run ("modified by an in-place operation"). */
#include "kernels/elementwise.h"
#include "ops/op_table.h"

static bool same_view(const mx_tensor *a, const mx_tensor *b) {
  if (a->storage != b->storage || a->offset != b->offset || a->ndim != b->ndim || a->dtype != b->dtype) return false;
  for (int d = 0; d < a->ndim; d++)
    if (a->shape[d] != b->shape[d] || (a->shape[d] > 1 && a->strides[d] != b->strides[d])) return false;
  return true;
}

/* Whether the kernel may write into self directly: nothing to record, a
 * result of self's dtype and shape, self without repeated elements (a
 * broadcast view), and `other` (NULL for unary ops) either apart from self's
 * storage or the very same view, so no element is read after it was
 * overwritten. Anything else takes the general path, which also reports
 * the errors. */
static bool writes_directly(mx_tensor *self, mx_tensor *other, bool dtype_kept) {
  if (!self || !dtype_kept || (mx_is_grad_enabled() && (mx_requires_grad(self) || mx_requires_grad(other))))
    return false;
  for (int d = 0; d < self->ndim; d++)
    if (self->shape[d] > 1 && self->strides[d] == 0) return false;
  if (!other) return true;
  mx_tensor *pair[2] = {self, other};
  if (other->device != self->device || mx__result_type(2, pair) != self->dtype || other->ndim > self->ndim ||
      (other->storage == self->storage && !same_view(self, other)))
    return false;
  for (int j = other->ndim - 1, d = self->ndim - 1; j >= 0; j--, d--)
    if (other->shape[j] != self->shape[d] && other->shape[j] != 1) return false;
  return true;
}

static mx_status unary_into(mx_op op, mx_tensor *self) {
  const mx_backend *be = mx__kernel_backend(op, self->device, MX_KERNEL_UNARY, self->dtype);
  if (!be) return mx_last_status();
  mx_kview v = mx__kview_of(self);
  mx_status status = be->unary(mx__ops[op].code, &v, &v, 0, 0);
  if (status == MX_OK) mx__bump_version(self);
  return status;
}

static mx_status binary_into(mx_op op, mx_tensor *self, mx_tensor *other, double alpha) {
  const mx_backend *be = mx__kernel_backend(op, self->device, MX_KERNEL_BINARY, self->dtype);
  if (!be) return mx_last_status();
  mx_tensor *y = mx__prepare(other, self->dtype, self->device);
  if (!y) return mx_last_status();
  mx_kview out = mx__kview_of(self), yv = mx__kview_broadcast(y, mx_shape_get(self));
  mx_status status = be->binary(mx__ops[op].code, &out, &out, &yv, alpha);
  if (y != other) mx_release(y);
  if (status == MX_OK) mx__bump_version(self);
  return status;
}

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

mx_status mx_add_(mx_tensor *self, const mx_tensor *other) {
  if (writes_directly(self, (mx_tensor *)other, true)) return binary_into(MX_OP_ADD, self, (mx_tensor *)other, 1.0);
  IN_PLACE("mx_add_", self, mx_add(self, other));
}
mx_status mx_mul_(mx_tensor *self, const mx_tensor *other) {
  if (writes_directly(self, (mx_tensor *)other, true)) return binary_into(MX_OP_MUL, self, (mx_tensor *)other, 1.0);
  IN_PLACE("mx_mul_", self, mx_mul(self, other));
}

/* A C scalar joins as a wrapped 0-d tensor, as in the out-of-place op. */
static mx_status scalar_into(mx_op op, mx_tensor *self, double value, bool *done) {
  mx_tensor *w = mx__wrap_scalar(value);
  if (!w) return mx_last_status();
  *done = writes_directly(self, w, true);
  mx_status status = *done ? binary_into(op, self, w, 1.0) : MX_OK;
  mx_release(w);
  return status;
}

mx_status mx_add_scalar_(mx_tensor *self, double value) {
  bool done = false;
  mx_status status = self ? scalar_into(MX_OP_ADD, self, value, &done) : MX_OK;
  if (done || status != MX_OK) return status;
  IN_PLACE("mx_add_scalar_", self, mx_add_scalar(self, value));
}
mx_status mx_mul_scalar_(mx_tensor *self, double value) {
  bool done = false;
  mx_status status = self ? scalar_into(MX_OP_MUL, self, value, &done) : MX_OK;
  if (done || status != MX_OK) return status;
  IN_PLACE("mx_mul_scalar_", self, mx_mul_scalar(self, value));
}

/* Float functions of integer tensors give floats, which self cannot hold. */
static bool keeps_dtype(const mx_tensor *self, mx_op op) {
  return self && (mx_dtype_is_floating(self->dtype) || mx__unary_has_int(mx__ops[op].code));
}

mx_status mx_exp_(mx_tensor *self) {
  if (writes_directly(self, NULL, keeps_dtype(self, MX_OP_EXP))) return unary_into(MX_OP_EXP, self);
  IN_PLACE("mx_exp_", self, mx_exp(self));
}
mx_status mx_relu_(mx_tensor *self) {
  if (writes_directly(self, NULL, keeps_dtype(self, MX_OP_RELU))) return unary_into(MX_OP_RELU, self);
  IN_PLACE("mx_relu_", self, mx_relu(self));
}
