/* The tensor: an opaque, reference-counted handle to a strided view of a
 * shared storage, on the CPU or a CUDA device.
 *
 *     mx_scope *s = mx_scope_begin();
 *     mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);   // [0, 1, ..., 5]
 *     mx_tensor *m = mx_reshape(a, MX_SHAPE(2, 3));          // a view of a
 *     mx_tensor *t = mx_transpose(m, 0, 1);                  // (3, 2), strided
 *     mx_print(t);            // tensor([[0., 3.], [1., 4.], [2., 5.]]) on 3 lines
 *     double x = mx_at(t, MX_SHAPE(2, 1));                   // 5.0
 *     mx_scope_end(s);        // releases a, m and t
 *
 * Every function that returns a tensor returns a new handle (views share
 * the storage, not the handle). Handles made inside a scope are released by
 * mx_scope_end; those made outside any scope are released with mx_release.
 * On failure the result is NULL and mx_last_error() says why.
 */
#ifndef MX_TENSOR_TENSOR_H
#define MX_TENSOR_TENSOR_H

#include <stdio.h>

#include "kernels/base.h"

MX_API_BEGIN

typedef struct mx_tensor mx_tensor;

/* A list of up to MX_MAX_DIMS integers: a shape, an index or a dim order. */
typedef struct {
  int ndim;
  int64_t d[MX_MAX_DIMS];
} mx_shape;

#define MX__NARGS(...) MX__NARGS_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define MX__NARGS_(a1, a2, a3, a4, a5, a6, a7, a8, n, ...) n
/* MX_SHAPE(2, 3) is the shape (2, 3); MX_SCALAR is the 0-d shape (). */
#define MX_SHAPE(...) ((mx_shape){MX__NARGS(__VA_ARGS__), {__VA_ARGS__}})
#define MX_DIMS(...) MX_SHAPE(__VA_ARGS__)
#define MX_SCALAR ((mx_shape){0, {0}})
mx_shape mx_shape_of(int ndim, const int64_t *dims);

/* --- creation ------------------------------------------------------------------ */
mx_tensor *mx_empty(mx_shape shape, mx_dtype dtype, mx_device device);
mx_tensor *mx_zeros(mx_shape shape, mx_dtype dtype, mx_device device);
mx_tensor *mx_ones(mx_shape shape, mx_dtype dtype, mx_device device);
mx_tensor *mx_full(mx_shape shape, double value, mx_dtype dtype, mx_device device);
mx_tensor *mx_scalar(double value, mx_dtype dtype, mx_device device); /* 0-d */
/* [start, end) by step, like torch.arange: ceil((end - start) / step) elements */
mx_tensor *mx_arange(double start, double end, double step, mx_dtype dtype, mx_device device);
/* steps evenly spaced values from start to end inclusive */
mx_tensor *mx_linspace(double start, double end, int64_t steps, mx_dtype dtype, mx_device device);
/* n x m with ones on the diagonal */
mx_tensor *mx_eye(int64_t n, int64_t m, mx_dtype dtype, mx_device device);
/* Copies numel(shape) elements from host memory holding dtype's C type
 * (float, double, uint16_t bit patterns for f16/bf16, int64_t, ...). */
mx_tensor *mx_from_data(const void *data, mx_shape shape, mx_dtype dtype, mx_device device);
mx_tensor *mx_empty_like(const mx_tensor *t);
mx_tensor *mx_zeros_like(const mx_tensor *t);
mx_tensor *mx_ones_like(const mx_tensor *t);
mx_tensor *mx_full_like(const mx_tensor *t, double value);

/* --- random numbers: Philox4x32-10, the same stream on the CPU and CUDA ---- */
typedef struct mx_generator mx_generator;
mx_generator *mx_generator_new(uint64_t seed);
void mx_generator_free(mx_generator *gen);
/* The generator used when a function is given NULL. */
mx_generator *mx_default_generator(void);
/* Reseeds the default generator (torch.manual_seed). */
void mx_manual_seed(uint64_t seed);
/* The state is (seed, offset): save both to resume a stream exactly. */
void mx_generator_get_state(const mx_generator *gen, uint64_t *seed, uint64_t *offset);
void mx_generator_set_state(mx_generator *gen, uint64_t seed, uint64_t offset);

/* gen may be NULL for the default generator. Float dtypes only, except
 * randint (any numeric dtype) and bernoulli (any dtype). */
mx_tensor *mx_rand(mx_shape shape, mx_dtype dtype, mx_device device, mx_generator *gen);
mx_tensor *mx_randn(mx_shape shape, mx_dtype dtype, mx_device device, mx_generator *gen);
mx_tensor *mx_randint(int64_t low, int64_t high, mx_shape shape, mx_dtype dtype, mx_device device,
                      mx_generator *gen);
/* Each element 1 with probability p[i] (p holds probabilities in [0, 1]);
 * the result has p's shape, dtype and device. */
mx_tensor *mx_bernoulli(const mx_tensor *p, mx_generator *gen);
/* Each element 1 with probability p. */
mx_tensor *mx_bernoulli_p(mx_shape shape, double p, mx_dtype dtype, mx_device device,
                          mx_generator *gen);

/* --- properties ------------------------------------------------------------------ */
mx_dtype mx_dtype_of(const mx_tensor *t);
mx_device mx_device_of(const mx_tensor *t);
int mx_ndim(const mx_tensor *t);
mx_shape mx_shape_get(const mx_tensor *t);
mx_shape mx_strides_get(const mx_tensor *t); /* in elements */
int64_t mx_size(const mx_tensor *t, int dim); /* dim may be negative */
int64_t mx_numel(const mx_tensor *t);
int64_t mx_offset(const mx_tensor *t); /* into the storage, in elements */
bool mx_is_contiguous(const mx_tensor *t);
/* Whether t is a 4-D (N, C, H, W) tensor laid out channels-last: its
 * elements in memory as (N, H, W, C), strides (H*W*C, 1, W*C, C) (size-1
 * dims may have any stride, so a tensor can be both this and contiguous).
 * mx_to_channels_last makes one; the ops that read one keep the layout. */
bool mx_is_channels_last(const mx_tensor *t);
/* Whether a and b are views of one storage. */
bool mx_shares_storage(const mx_tensor *a, const mx_tensor *b);
/* Bumped by every in-place write to the storage (shared by all its views). */
uint64_t mx_version(const mx_tensor *t);
/* Inference mode, per thread (MX_INFERENCE_MODE in autograd/autograd.h):
 * whether it is on, and whether t was made in it (or is a view of a tensor
 * that was). */
bool mx_is_inference_mode_enabled(void);
bool mx_is_inference(const mx_tensor *t);
bool mx__inference_mode_set(bool enabled); /* returns the previous mode; MX_INFERENCE_MODE's */
/* The address of element 0 (device memory for CUDA tensors). Writes through
 * it do not bump the version, so from then on no kernel keeps a copy derived
 * from this storage (the CPU convolutions' reordered operands). */
void *mx_data_ptr(const mx_tensor *t);

/* --- in-place writes (not recorded by autograd: they set data, like
 * PyTorch's .data; both bump the version counter) ---------------------------- */
/* Writes src (broadcast to dst's shape, converted to dst's dtype, from any
 * device) into dst in place. */
mx_status mx_copy_(mx_tensor *dst, const mx_tensor *src);
mx_status mx_fill_(mx_tensor *t, double value);

/* --- element access (for tests and small tensors; slow on CUDA) ----------------- */
double mx_at(const mx_tensor *t, mx_shape index); /* NaN + error on a bad index */
mx_status mx_set(mx_tensor *t, mx_shape index, double value);
double mx_item(const mx_tensor *t); /* the one element of a 1-element tensor */
/* Copies the elements, in row-major order, as dtype's C type into host memory
 * of `bytes` bytes. */
mx_status mx_to_host(const mx_tensor *t, void *dst, size_t bytes);

/* --- printing, like PyTorch's repr ------------------------------------------------ */
/* A malloc'ed string (free it with free()), or NULL. */
char *mx_to_string(const mx_tensor *t);
void mx_fprint(FILE *f, const mx_tensor *t);
void mx_print(const mx_tensor *t);

MX_API_END

#endif
