/* cross_entropy over class indices as one primitive, and its gradient as another (the cross_entropy_indices rows of
 * ops/ops.def): what mx_cross_entropy's body (ops/losses.c) runs for an (N, C) input with int64 targets, no weight
 * and no label smoothing, in place of the ~14 ops of its composite and their backward nodes. The arguments are
 * cross_entropy's: args.i[1] the reduction, args.i[2] ignore_index. */
#include "ops/op_table.h"

#define REDUCTION(args) ((args)->i[1])
#define IGNORE_INDEX(args) ((args)->i[2])

bool mx__cross_entropy_indices_fits(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                                    double label_smoothing) {
  const mx_backend *be = mx__backend(input->device);
  return be && be->cross_entropy && be->cross_entropy_backward && input->ndim == 2 && target->ndim == 1 &&
         target->dtype == MX_I64 && mx_dtype_is_floating(input->dtype) && !weight && label_smoothing == 0;
}

/* loss: (N) in x's dtype for MX_REDUCTION_NONE, else 0-d */
mx_status mx__fwd_cross_entropy_indices(mx__call *c) {
  mx_tensor *x = c->in[0], *target = c->in[1];
  bool none = REDUCTION(c->args) == MX_REDUCTION_NONE;
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_CROSS_ENTROPY, x->dtype);
  mx_shape shape = {.ndim = none ? 1 : 0, .d = {x->shape[0]}};
  mx_tensor *loss = be ? mx__tensor_alloc("mx_cross_entropy", shape, x->dtype, x->device) : NULL;
  if (!loss) return mx_last_status();
  c->out[0] = loss;
  mx_kview lv = mx__kview_of(loss), xv = mx__kview_of(x), tv = mx__kview_of(target);
  return be->cross_entropy(none ? NULL : &lv, none ? &lv : NULL, &xv, &tv, IGNORE_INDEX(c->args),
                           REDUCTION(c->args) == MX_REDUCTION_MEAN);
}

mx_status mx__bwd_cross_entropy_indices(mx__bw *bw) {
  GRAD(0, mx__call3(MX_OP_CROSS_ENTROPY_INDICES_BACKWARD, G, mx__saved_in(bw, 0), mx__saved_in(bw, 1), bw->args));
  return MX_OK;
}

/* dx (x's shape, contiguous) from the loss's gradient grad (its shape), x and the targets */
mx_status mx__fwd_cross_entropy_indices_backward(mx__call *c) {
  mx_tensor *x = c->in[1], *target = c->in[2];
  const mx_backend *be = mx__kernel_backend(c->op, x->device, MX_KERNEL_CROSS_ENTROPY_BACKWARD, x->dtype);
  mx_tensor *g = be ? mx__prepare(c->in[0], x->dtype, x->device) : NULL;
  mx_tensor *dx = g ? mx__tensor_alloc("mx_cross_entropy", mx_shape_get(x), x->dtype, x->device) : NULL;
  if (!dx) return mx_last_status();
  c->out[0] = dx;
  mx_kview dv = mx__kview_of(dx), gv = mx__kview_of(g), xv = mx__kview_of(x), tv = mx__kview_of(target);
  return be->cross_entropy_backward(&dv, &gv, &xv, &tv, IGNORE_INDEX(c->args), REDUCTION(c->args) == MX_REDUCTION_MEAN);
}

/* dx = (p - onehot(t)) s with p = softmax(x) and s each row's factor (g, or g / count, 0 where ignored), so with
 * GG dx's gradient: d/dg sums GG (p - onehot) over the rows' factors, and d/dx = s p (GG - sum(GG p)), softmax's
 * backward scaled. */
mx_status mx__bwd_cross_entropy_indices_backward(mx__bw *bw) {
  mx_tensor *g = mx__saved_in(bw, 0), *x = mx__saved_in(bw, 1), *target = mx__saved_in(bw, 2);
  if (!g || !x || !target) return mx_last_status();
  int64_t reduction = REDUCTION(bw->args);
  mx_tensor *ignored = mx_eq_scalar(target, (double)IGNORE_INDEX(bw->args));
  mx_tensor *kept = mx_to_dtype(mx_logical_not(ignored), x->dtype); /* (N): 1, or 0 where ignored */
  mx_tensor *per_row = reduction == MX_REDUCTION_MEAN ? mx_div(kept, mx_sum(kept, MX_ALL_DIMS, false)) : kept;
  mx_tensor *p = mx_softmax(x, 1);
  if (mx__needs_grad(bw, 0)) {
    mx_tensor *onehot = mx_to_dtype(mx_one_hot(mx_masked_fill(target, ignored, 0), x->shape[1]), x->dtype);
    mx_tensor *rows = mx_mul(mx_sum(mx_mul(G, mx_sub(p, onehot)), MX_DIMS(1), false), per_row);
    GRAD(0, reduction == MX_REDUCTION_NONE ? rows : mx_sum(rows, MX_ALL_DIMS, false));
  }
  mx_tensor *s = mx_unsqueeze(mx_mul(per_row, g), 1);
  GRAD(1, mx_mul(mx_mul(s, p), mx_sub(G, mx_sum(mx_mul(G, p), MX_DIMS(1), true))));
  return MX_OK;
}
