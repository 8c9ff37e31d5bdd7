/* Batch norm's per-channel coefficient vectors on the CPU (the batch_norm_vectors slot): one loop over the C
 * channels through kernels/batch_norm_vectors.h's formulas, the ones CUDA runs. C is a few hundred at most: no
 * threads. */
#include "kernels/cpu/batch_norm_vectors.h"

#include "kernels/batch_norm_vectors.h"

mx_status mx__cpu_batch_norm_vectors(mx_bn_vectors_formula formula, const mx_bn_vectors *v) {
  mx_bn_vectors_plan plan;
  mx_status status = mx_bn_vectors_plan_of(formula, v, &plan);
  if (status != MX_OK) return status;
  int64_t channels = mx__kview_numel(v->var);
  if (v->var->dtype == MX_F64)
    for (int64_t c = 0; c < channels; c++) mx_bn_vectors_at_f64(&plan, c);
  else
    for (int64_t c = 0; c < channels; c++) mx_bn_vectors_at_f32(&plan, c);
  return MX_OK;
}
