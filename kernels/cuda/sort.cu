/* The sort along one dim on CUDA: the CPU's own line sort (kernels/sort_line.h),
 * a thread per line, so values and indices are the CPU's exactly. Each line is
 * sorted by one thread, which suits the many short lines of sampling (a batch
 * of vocabularies is few long lines, though: CUB's segmented radix sort,
 * cub::DeviceSegmentedRadixSort, would be much faster for long lines). The
 * threads' permutations live in one scratch buffer from the stream's pool. */
#include "kernels/cuda/common.cuh"
#include "kernels/sort_line.h"

struct sort_op {
  mx_kview values, indices, in;
  int64_t elem_size, len;
  int dim;
  bool descending;
  int64_t *scratch; /* 2 * len per line */
  MX_HD void operator()(int64_t line) const {
    int64_t *mine = scratch + 2 * len * line;
    mx_sort_line(&values, &indices, &in, elem_size, dim, descending, line, mine, mine + len);
  }
};

mx_status mx__cuda_sort(const mx_kview *values, const mx_kview *indices, const mx_kview *in, int dim,
                        bool descending) {
  int64_t lines = mx_scan_lines(in, dim), len = in->shape[dim];
  if (lines == 0) return MX_OK;
  sort_op op;
  op.values = *values;
  op.indices = *indices;
  op.in = *in;
  op.elem_size = dtype_bytes(in->dtype);
  op.len = len;
  op.dim = dim;
  op.descending = descending;
  op.scratch = NULL;
  size_t bytes = sizeof(int64_t) * 2 * (size_t)len * (size_t)lines;
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&op.scratch, bytes));
  mx_status status = launch_elementwise("launch of kernel sort", lines, op);
  mx_status freed = scratch_free(op.scratch);
  return status != MX_OK ? status : freed;
}
