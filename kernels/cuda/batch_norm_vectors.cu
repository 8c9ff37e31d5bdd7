/* Batch norm's per-channel coefficient vectors on CUDA (the batch_norm_vectors slot): one elementwise launch over
 * the C channels, a thread per channel running kernels/batch_norm_vectors.h's formulas, the CPU's (the build passes
 * --fmad=false, so nothing contracts into an FMA): the same bits, in one launch where the ops took one each. */
#include "kernels/batch_norm_vectors.h"
#include "kernels/cuda/common.cuh"

struct vectors_op {
  mx_bn_vectors_plan plan;
  bool f64; /* the vectors are double, else float */
  MX_HD void operator()(int64_t c) const {
    if (f64) mx_bn_vectors_at_f64(&plan, c);
    else mx_bn_vectors_at_f32(&plan, c);
  }
};

mx_status mx__cuda_batch_norm_vectors(mx_bn_vectors_formula formula, const mx_bn_vectors *v) {
  vectors_op op;
  memset(&op, 0, sizeof op);
  mx_status status = mx_bn_vectors_plan_of(formula, v, &op.plan);
  if (status != MX_OK) return status;
  op.f64 = v->var->dtype == MX_F64;
  return launch_elementwise("launch of kernel batch_norm_vectors", mx__kview_numel(v->var), op);
}
