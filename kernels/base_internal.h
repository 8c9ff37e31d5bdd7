/* Internal helpers for setting errors and describing shapes in messages,
 * and MX__CAT for the kernels' C templates (the *.inc files). */
#ifndef MX_KERNELS_BASE_INTERNAL_H
#define MX_KERNELS_BASE_INTERNAL_H

#include "kernels/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define MX__PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define MX__PRINTF(a, b)
#endif

/* a and b pasted into one name, after both are expanded. */
#define MX__CAT_(a, b) a##b
#define MX__CAT(a, b) MX__CAT_(a, b)

/* The CUDA convolutions cuDNN ran, and those it declined (the direct
 * kernels ran them), in this process (kernels/cudnn_settings.c): the CUDA
 * module counts each through its host table, and the GPU suite checks
 * with them that the convolutions it tests went through cuDNN. */
void mx__cudnn_count(bool ran);
void mx__cudnn_counts(int64_t *ran, int64_t *declined);

/* Sets the thread's error (always overwriting) and returns the status. */
mx_status mx__error(mx_status status, const char *fmt, ...) MX__PRINTF(2, 3);

/* Puts "<op>: " in front of the pending message (a lower layer's words, the
 * op that called it). Returns the status. */
mx_status mx__error_prefix(const char *op);

/* For a NULL input: sets "<op>: argument '<arg>' is NULL" only when no error
 * is pending, so the first failure of a chain is the one reported. */
mx_status mx__null_input(const char *op, const char *arg);

/* Checked size arithmetic, the one way mixgrad multiplies or adds element
 * and byte counts: *out = a * b (or a + b); true, with *out wrapped, when the
 * exact result does not fit int64_t (the caller refuses the shape, naming its op). */
static inline bool mx__mul_overflows(int64_t a, int64_t b, int64_t *out) { return __builtin_mul_overflow(a, b, out); }
static inline bool mx__add_overflows(int64_t a, int64_t b, int64_t *out) { return __builtin_add_overflow(a, b, out); }

/* The number of elements of dims (sizes >= 0) into *numel. True when the product of the
 * sizes, each 0 counted as 1, passes INT64_MAX: such a shape is refused even
 * when a 0 makes it empty, so that every partial product of its sizes (its
 * strides, a flattened run of dims) fits int64_t as well. */
bool mx__numel_overflows(int ndim, const int64_t *dims, int64_t *numel);

/* Writes "[2,3,4]" into buf (at least MX__DIMS_STR bytes). */
#define MX__DIMS_STR 200
const char *mx__dims_str(char *buf, int ndim, const int64_t *dims);

/* The strided view a kernel works on: data already points at element 0,
 * strides are in elements. Kernels see nothing but this. */
typedef struct {
  void *data;
  mx_dtype dtype;
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  int64_t strides[MX_MAX_DIMS];
  /* Where data came from, for kernels that keep what they derive from an
   * operand (dnnl_conv.c's reordered weights): the storage's unique id (0:
   * unknown, or writes there may skip the version), its version then, and
   * data as mx__kview_of set it (a copy whose data moved elsewhere no longer
   * matches). */
  uint64_t origin, origin_version;
  const void *origin_data;
} mx_kview;

int64_t mx__kview_numel(const mx_kview *v);
bool mx__kview_is_contiguous(const mx_kview *v);

/* v's samples n0 .. n0 + n (its first dim), for kernels that run a batch a block of samples at a time. */
static inline mx_kview mx__kview_samples(const mx_kview *v, int64_t n0, int64_t n) {
  mx_kview part = *v;
  part.data = (char *)v->data + n0 * v->strides[0] * (int64_t)mx_dtype_size(v->dtype);
  part.shape[0] = n;
  return part;
}

/* Channels-last (NHWC) is the one other dense layout mixgrad keeps: a 4-D
 * (N, C, H, W) view whose elements lie in memory as (N, H, W, C), strides
 * (H*W*C, 1, W*C, C) (size-1 dims may have any stride, as in
 * mx__kview_is_contiguous). oneDNN's and cuDNN's convolution kernels read it
 * without a reorder, and the ops that see one keep it (mx_to_channels_last). */
bool mx__kview_is_channels_last(const mx_kview *v);
/* The channels-last strides of a 4-D shape, in elements. */
void mx__channels_last_strides(const int64_t shape[4], int64_t strides[4]);

#ifdef __cplusplus
}
#endif

#endif
