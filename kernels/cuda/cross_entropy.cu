/* cross_entropy over class indices on CUDA: a thread per row running the CPU's general rows
 * (kernels/cross_entropy_row.h), so the two give the same bits but for the CPU's vectorised float32 rows. The sum
 * (or mean) and the mean's count of rows not ignored run on one thread after the rows, in row order as the CPU
 * adds them: right for the classification batches this op serves, slow for millions of rows. */
#include "kernels/cross_entropy_row.h"
#include "kernels/cuda/common.cuh"

/* Each row's loss into rows (N, any dtype; data NULL: not wanted) and partial (float64; NULL: not wanted). */
struct cross_entropy_rows_op {
  mx_kview x, target, rows;
  double *partial;
  int64_t ignore_index;
  MX_HD void operator()(int64_t row) const {
    double loss = mx_xent_loss(&x, &target, row, ignore_index);
    if (rows.data)
      mx_element_store((char *)rows.data + row * rows.strides[0] * mx_xent_size(rows.dtype), rows.dtype, loss);
    if (partial) partial[row] = loss;
  }
};

/* out = the sum of the N partials, or their mean over the rows not ignored: one thread. */
struct cross_entropy_sum_op {
  mx_kview out, target;
  const double *partial;
  int64_t ignore_index;
  bool mean;
  MX_HD void operator()(int64_t) const {
    double sum = 0;
    for (int64_t i = 0; i < target.shape[0]; i++) sum += partial[i];
    mx_element_store(out.data, out.dtype, mean ? sum / (double)mx_xent_count(&target, ignore_index) : sum);
  }
};

mx_status mx__cuda_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                 int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0];
  cross_entropy_rows_op op = {*x, *target, {}, NULL, ignore_index};
  if (rows) op.rows = *rows;
  if (!out) return launch_elementwise("launch of kernel cross_entropy", n, op);
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&op.partial, sizeof(double) * (size_t)(n ? n : 1)));
  mx_status status = launch_elementwise("launch of kernel cross_entropy", n, op);
  cross_entropy_sum_op sum = {*out, *target, op.partial, ignore_index, mean};
  if (status == MX_OK) status = launch_elementwise("launch of kernel cross_entropy_sum", 1, sum);
  mx_status freed = scratch_free(op.partial);
  return status != MX_OK ? status : freed;
}

/* The mean's divisor: one thread. */
struct cross_entropy_count_op {
  mx_kview target;
  int64_t ignore_index;
  int64_t *count;
  MX_HD void operator()(int64_t) const { *count = mx_xent_count(&target, ignore_index); }
};

struct cross_entropy_grad_op {
  mx_kview dx, grad, x, target;
  int64_t ignore_index;
  const int64_t *count; /* NULL: not the mean */
  MX_HD void operator()(int64_t row) const {
    double scale = mx_xent_scale(&grad, &target, row, ignore_index, count != NULL, count ? *count : 1);
    mx_xent_grad_row(&dx, &x, &target, row, ignore_index, scale);
  }
};

mx_status mx__cuda_cross_entropy_backward(const mx_kview *dx, const mx_kview *grad, const mx_kview *x,
                                          const mx_kview *target, int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0];
  cross_entropy_grad_op op = {*dx, *grad, *x, *target, ignore_index, NULL};
  if (!mean) return launch_elementwise("launch of kernel cross_entropy_backward", n, op);
  int64_t *count = NULL;
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&count, sizeof *count));
  cross_entropy_count_op counter = {*target, ignore_index, count};
  mx_status status = launch_elementwise("launch of kernel cross_entropy_count", 1, counter);
  op.count = count;
  if (status == MX_OK) status = launch_elementwise("launch of kernel cross_entropy_backward", n, op);
  mx_status freed = scratch_free(count);
  return status != MX_OK ? status : freed;
}
