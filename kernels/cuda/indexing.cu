/* Indexed reads and writes on CUDA: gather, scatter(-add), index_select,
 * index_add/index_copy, with the CPU's rules (kernels/cpu/indexing.c).
 *
 * Reads run one thread per output element. Writes run one thread per line
 * along dim (every other coordinate fixed): two index entries can only
 * meet at one output when their other coordinates agree, so the lines
 * never race, and each walks its entries in order, as the CPU's serial
 * loop does; an accumulation adds in the CPU's order, to the same bits.
 *
 * An index out of range is reported like the CPU's, which costs each call
 * a wait for the device: the kernels note a bad index in device memory and
 * the host reads it back. A step captured into a CUDA graph cannot wait:
 * there the bad index is skipped, unreported (kernels/cuda_graph.h). */
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/graph.h"

/* Where a kernel notes an index out of range. */
struct bad_index_slot {
  int found;
  long long index;
};

MX_HD static void note_bad(bad_index_slot *slot, int64_t k) {
  if (atomic_exchange_int(&slot->found, 1) == 0) slot->index = k;
}

/* The element offset of coordinates c in v. */
MX_HD static int64_t offset_of(const mx_kview &v, const int64_t *c) {
  int64_t off = 0;
  for (int d = 0; d < v.ndim; d++) off += c[d] * v.strides[d];
  return off;
}

MX_HD static void unravel(int64_t linear, int ndim, const int64_t *shape, int64_t *c) {
  for (int d = ndim - 1; d >= 0; d--) {
    c[d] = linear % shape[d];
    linear /= shape[d];
  }
}

MX_HD static char *at(const mx_kview &v, int64_t offset) { return (char *)v.data + offset * dtype_bytes(v.dtype); }

/* out[c] = x[c with c[dim] = index[c]] (gather) or x[c with c[dim] =
 * index[c[dim]]] (index_select, a 1-d index). */
struct select_op {
  mx_kview out, x, index;
  int dim;
  bool one_d_index;
  bad_index_slot *bad;
  MX_HD void operator()(int64_t i) const {
    int64_t c[MX_MAX_DIMS];
    unravel(i, out.ndim, out.shape, c);
    int64_t k = *(const int64_t *)at(index, one_d_index ? c[dim] * index.strides[0] : offset_of(index, c));
    if (k < 0 || k >= x.shape[dim]) {
      note_bad(bad, k);
      return;
    }
    char *o = at(out, offset_of(out, c));
    c[dim] = k;
    int64_t bytes = dtype_bytes(out.dtype);
    store_bits(o, bytes, load_bits(at(x, offset_of(x, c)), bytes));
  }
};

/* One line of src (or index) along dim: out[c with c[dim] = k] = src[c]
 * (or += alpha * src[c]) for each position of the line in order. The
 * index is index[c] (scatter) or index[c[dim]] (index_add, 1-d). */
struct write_line_op {
  mx_kview out, index, src;
  int dim;
  bool one_d_index, accumulate;
  double alpha;
  int64_t line_shape[MX_MAX_DIMS]; /* src's shape with 1 along dim */
  bad_index_slot *bad;
  MX_HD void operator()(int64_t line) const {
    int64_t c[MX_MAX_DIMS];
    unravel(line, src.ndim, line_shape, c);
    for (int64_t j = 0; j < src.shape[dim]; j++) {
      c[dim] = j;
      int64_t k = *(const int64_t *)at(index, one_d_index ? j * index.strides[0] : offset_of(index, c));
      if (k < 0 || k >= out.shape[dim]) {
        note_bad(bad, k);
        return; /* the CPU stops at its first bad index too */
      }
      const char *s = at(src, offset_of(src, c));
      c[dim] = k;
      char *o = at(out, offset_of(out, c));
      if (accumulate)
        mx_element_store(o, out.dtype, mx_element_load(o, out.dtype) + alpha * mx_element_load(s, src.dtype));
      else
        store_bits(o, dtype_bytes(out.dtype), load_bits(s, dtype_bytes(out.dtype)));
    }
  }
};

/* Runs op(i) for i in [0, n) with op.bad pointing at a fresh slot, then
 * reads the slot: MX_OK, or op_name's error for the bad index. */
template <class Op>
static mx_status run_checked(const char *op_name, const char *launch_name, int64_t n, Op op, int dim,
                             int64_t size) {
  bad_index_slot host = {0, 0}, *slot = NULL;
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&slot, sizeof *slot));
  mx_status status = scratch_zero(slot, sizeof *slot);
  op.bad = slot;
  if (status == MX_OK) status = launch_elementwise(launch_name, n, op);
  if (status == MX_OK && !mx__cuda_capturing()) status = scratch_read(&host, slot, sizeof host);
  (void)scratch_free(slot); /* a failed free leaves the call's status as it is */
  if (status == MX_OK && host.found)
    return mx__error(MX_INDEX_ERROR, "%s: index %lld out of range for dim %d of size %lld", op_name, host.index,
                     dim, (long long)size);
  return status;
}

mx_status mx__cuda_gather(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim) {
  select_op op = {*out, *x, *index, dim, false, NULL};
  return run_checked("mx_gather", "launch of kernel gather", mx__kview_numel(out), op, dim, x->shape[dim]);
}

mx_status mx__cuda_index_select(const mx_kview *out, const mx_kview *x, const mx_kview *index, int dim) {
  select_op op = {*out, *x, *index, dim, true, NULL};
  return run_checked("mx_index_select", "launch of kernel index_select", mx__kview_numel(out), op, dim,
                     x->shape[dim]);
}

static mx_status write_lines(const char *op_name, const mx_kview *out, const mx_kview *index, const mx_kview *src,
                             int dim, bool one_d_index, bool accumulate, double alpha) {
  write_line_op op;
  op.out = *out;
  op.index = *index;
  op.src = *src;
  op.dim = dim;
  op.one_d_index = one_d_index;
  op.accumulate = accumulate;
  op.alpha = alpha;
  for (int d = 0; d < MX_MAX_DIMS; d++) op.line_shape[d] = d < src->ndim ? src->shape[d] : 1;
  op.line_shape[dim] = 1;
  int64_t len = src->shape[dim], lines = len ? mx__kview_numel(src) / len : 0;
  return run_checked(op_name, "launch of kernel scatter", lines, op, dim, out->shape[dim]);
}

/* scatter's src is read at index's coordinates (index may be smaller) */
mx_status mx__cuda_scatter(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim,
                           bool accumulate) {
  mx_kview src_part = *src;
  for (int d = 0; d < index->ndim; d++) src_part.shape[d] = index->shape[d];
  return write_lines(accumulate ? "mx_scatter_add" : "mx_scatter", out, index, &src_part, dim, false, accumulate, 1);
}

mx_status mx__cuda_index_add(const mx_kview *out, const mx_kview *index, const mx_kview *src, int dim, double alpha,
                             bool accumulate) {
  if (!mx_dtype_is_floating(out->dtype)) alpha = trunc(alpha);
  return write_lines(accumulate ? "mx_index_add" : "mx_index_copy", out, index, src, dim, true, accumulate, alpha);
}
