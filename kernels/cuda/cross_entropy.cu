/* cross_entropy over class indices on CUDA: a thread per row running the CPU's general rows
 * (kernels/cross_entropy_row.h), so the two give the same rows but for the CPU's vectorised float32 ones. The sum
 * (or mean) and the mean's count of rows not ignored are one block's reduction after the rows: each thread adds
 * every 256th row in float64, then a fixed tree, so a run repeats its bits, within float64's rounding of the CPU's
 * row-order sum (a language model's batch has tens of thousands of rows: one thread would walk them in a row). */
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

#define TOTAL_THREADS 256

struct sum_and_count {
  double sum;
  int64_t count; /* rows not ignored */
};

/* One block (launch_block_reduce, one item): out = the sum of the N partials, or their mean over the rows not
 * ignored; without partials, only the count, into *count. */
struct cross_entropy_total_op {
  typedef sum_and_count partial;
  int64_t items;
  mx_kview out, target;
  const double *partials; /* NULL: count only */
  int64_t ignore_index;
  bool mean;
  int64_t *count;
  MX_HD partial thread_partial(int64_t, unsigned thread, unsigned threads) const {
    partial p = {0, 0};
    for (int64_t i = thread; i < target.shape[0]; i += threads) {
      if (partials) p.sum += partials[i];
      p.count += mx_xent_target(&target, i) != ignore_index;
    }
    return p;
  }
  MX_HD partial combine(partial a, partial b) const { return {a.sum + b.sum, a.count + b.count}; }
  MX_HD void finish(int64_t, partial all) const {
    if (!partials) *count = all.count;
    else mx_element_store(out.data, out.dtype, mean ? all.sum / (double)all.count : all.sum);
  }
};

static mx_status launch_total(const cross_entropy_total_op &body) {
  return launch_block_reduce<TOTAL_THREADS>("launch of kernel cross_entropy_total", 1, TOTAL_THREADS, body);
}

mx_status mx__cuda_cross_entropy(const mx_kview *out, const mx_kview *rows, const mx_kview *x, const mx_kview *target,
                                 int64_t ignore_index, bool mean) {
  int64_t n = x->shape[0];
  cross_entropy_rows_op op = {*x, *target, {}, NULL, ignore_index};
  if (rows) op.rows = *rows;
  if (!out) return launch_elementwise("launch of kernel cross_entropy", n, op);
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&op.partial, sizeof(double) * (size_t)(n ? n : 1)));
  mx_status status = launch_elementwise("launch of kernel cross_entropy", n, op);
  cross_entropy_total_op total = {1, *out, *target, op.partial, ignore_index, mean, NULL};
  if (status == MX_OK) status = launch_total(total);
  mx_status freed = scratch_free(op.partial);
  return status != MX_OK ? status : freed;
}

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
  cross_entropy_total_op counter = {1, {}, *target, NULL, ignore_index, true, count};
  mx_status status = launch_total(counter);
  op.count = count;
  if (status == MX_OK) status = launch_elementwise("launch of kernel cross_entropy_backward", n, op);
  mx_status freed = scratch_free(count);
  return status != MX_OK ? status : freed;
}
