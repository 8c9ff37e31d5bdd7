/* The tensor's insides, for the rooms built on it (not installed). */
#ifndef MX_TENSOR_TENSOR_IMPL_H
#define MX_TENSOR_TENSOR_IMPL_H

#include <stdatomic.h>

#include "kernels/backend.h"
#include "tensor/scope.h"
#include "tensor/tensor.h"

/* Memory shared by a tensor and all its views. */
typedef struct {
  atomic_long refs;
  void *data;
  size_t bytes;
  mx_device device;
  const mx_backend *backend;
  atomic_ullong version; /* in-place writes, seen by every view */
  bool inference;        /* made in inference mode: no versions, no graph */
  uint64_t id;           /* unique for the process's life (mx_kview.origin) */
  atomic_bool exposed;   /* mx_data_ptr handed out its address: writes may bypass the version */
} mx__storage;

/* The autograd room's per-tensor state (requires_grad, grad, grad_fn, hooks);
 * NULL for tensors autograd never touched. The tensor room only frees it,
 * through the function autograd/ installs. */
typedef struct mx__autograd_meta mx__autograd_meta;
extern void (*mx__autograd_meta_free)(mx__autograd_meta *meta);

struct mx_tensor {
  atomic_long refs; /* the handle's reference plus internal ones */
  mx_dtype dtype;
  mx_device device;
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  int64_t strides[MX_MAX_DIMS]; /* in elements */
  int64_t offset;               /* into the storage, in elements */
  mx__storage *storage;
  mx__autograd_meta *autograd;
  bool wrapped_number; /* a C scalar turned into a 0-d tensor: it does not
                          widen the dtype of a result (PyTorch's rule) */
  mx_scope *owner;     /* the scope owning the handle; NULL: the caller */
  size_t owner_slot; /* its place in owner's list */
  /* A weight's 16-bit cast written ahead by the optimizer (prepared_cast.c) */
  atomic_int cast_wanted;                 /* the dtype autocast last cast it to since its step, + 1; 0: none */
  _Atomic(struct mx_tensor *) cast_ready; /* NULL, or a cast of dtype cast_dtype, made from storage cast_storage */
  mx_dtype cast_dtype;                    /* at version cast_version */
  uint64_t cast_storage, cast_version;
};

/* A contiguous tensor on fresh storage; validates shape, dtype and device,
 * naming `op` in any error. The data is uninitialised. */
mx_tensor *mx__tensor_alloc(const char *op, mx_shape shape, mx_dtype dtype, mx_device device);
/* The same for a 4-D shape, laid out channels-last (mx__kview_is_channels_last). */
mx_tensor *mx__tensor_alloc_channels_last(const char *op, mx_shape shape, mx_dtype dtype, mx_device device);
/* Whether t is a dense channels-last 4-D tensor. */
bool mx__is_channels_last(const mx_tensor *t);
/* Whether the ops that read t lay out their outputs channels-last (PyTorch's
 * suggest_memory_format): t is channels-last, and not a row-major tensor
 * that is one too (one channel, or one pixel: the two layouts are the same
 * memory there, and only t's strides along its size-1 dims, row-major's or
 * mx__channels_last_strides', say which it was made as). */
bool mx__suggests_channels_last(const mx_tensor *t);

/* A new handle on t's storage with the given geometry (no checks: a caller
 * whose shape may hold more elements than t's checks it first). */
mx_tensor *mx__tensor_view(const mx_tensor *t, int ndim, const int64_t *shape, const int64_t *strides,
                           int64_t offset);

/* Internal references: keep a tensor alive without owning its handle. */
mx_tensor *mx__retain(mx_tensor *t);
void mx__decref(mx_tensor *t);

/* Checks a shape: 0..MX_MAX_DIMS dims, no negative size, no overflow
 * (mx__numel_overflows). */
mx_status mx__check_shape(const char *op, mx_shape shape);
/* The error for dims (sizes >= 0) that mx__numel_overflows refuses, naming op and the shape. */
mx_status mx__error_too_many_elements(const char *op, int ndim, const int64_t *dims);
mx_status mx__check_dtype(const char *op, mx_dtype dtype);
/* Checks a dim against ndim (negative counts from the end) and returns it
 * in [0, ndim), or -1 with the error set. */
int mx__wrap_dim(const char *op, int dim, int ndim);

int64_t mx__numel(int ndim, const int64_t *shape);
void mx__contiguous_strides(int ndim, const int64_t *shape, int64_t *strides);

/* The view a kernel sees. */
mx_kview mx__kview_of(const mx_tensor *t);
/* Marks an in-place write. */
void mx__bump_version(mx_tensor *t);

/* The raw (unrecorded) views and copies behind the differentiable ops of
 * ops/shape.c; errors name the public op. */
mx_tensor *mx__tensor_reshape(const mx_tensor *t, mx_shape shape);
mx_tensor *mx__tensor_view_shape(const mx_tensor *t, mx_shape shape);
mx_tensor *mx__tensor_transpose(const mx_tensor *t, int dim0, int dim1);
mx_tensor *mx__tensor_permute(const mx_tensor *t, mx_shape dims);
mx_tensor *mx__tensor_squeeze(const mx_tensor *t, int dim);
mx_tensor *mx__tensor_squeeze_all(const mx_tensor *t);
mx_tensor *mx__tensor_unsqueeze(const mx_tensor *t, int dim);
mx_tensor *mx__tensor_slice(const mx_tensor *t, int dim, int64_t start, int64_t end, int64_t step);
mx_tensor *mx__tensor_narrow(const mx_tensor *t, int dim, int64_t start, int64_t length);
mx_tensor *mx__tensor_select(const mx_tensor *t, int dim, int64_t index);
mx_tensor *mx__tensor_expand(const mx_tensor *t, mx_shape shape);
mx_tensor *mx__tensor_broadcast_to(const mx_tensor *t, mx_shape shape);
mx_tensor *mx__tensor_flatten(const mx_tensor *t, int start_dim, int end_dim);
mx_tensor *mx__tensor_contiguous(const mx_tensor *t);
/* t as a kernel takes it, channels-last (4-d) or row-major: a new handle on
 * t where it already is, else a copy; errors name op. */
mx_tensor *mx__tensor_in_layout(const char *op, const mx_tensor *t, bool channels_last);
mx_tensor *mx__tensor_to_channels_last(const mx_tensor *t);
mx_tensor *mx__tensor_clone(const mx_tensor *t);
mx_tensor *mx__tensor_to_dtype(const mx_tensor *t, mx_dtype dtype);
mx_tensor *mx__tensor_to_device(const mx_tensor *t, mx_device device);

/* Scope bookkeeping (scope.c), called when a handle is made or dies. */
mx_status mx__scope_adopt(mx_tensor *t);

/* Prepared casts (prepared_cast.c). Under autocast a weight is cast to 16
 * bits at its first use in every step, just after the optimizer step wrote
 * it; the step can write that cast in the same pass instead. Autocast marks
 * the weights it casts (want); the optimizer asks which dtype a parameter
 * was cast to since its last step (asked, which clears the mark;
 * MX_DTYPE_COUNT: none, or prepared casts are off), writes the cast while
 * it updates the parameter and attaches it (set); autocast's next cast of
 * the weight takes it if it is still the cast of the weight's current data
 * (take). Each costs one 16-bit copy of the weight kept alive between
 * steps. MX_PREPARED_CASTS=0 in the environment turns them off. */
void mx__prepared_cast_want(mx_tensor *t, mx_dtype dtype);
mx_dtype mx__prepared_cast_asked(mx_tensor *t);
/* Attaches cast (an internal reference, which t takes; NULL: none) as t's
 * cast of its data now, dropping any earlier one. */
void mx__prepared_cast_set(mx_tensor *t, mx_tensor *cast);
/* t's attached cast (an internal reference for the caller) if it is of
 * dtype and of t's data now, else NULL. t keeps a cast of another dtype
 * (for a use of t under it), and drops a stale one. */
mx_tensor *mx__prepared_cast_take(mx_tensor *t, mx_dtype dtype);
/* Whether prepared casts are on (MX_PREPARED_CASTS), and a switch for tests. */
bool mx__prepared_casts_enabled(void);
void mx__prepared_casts_set_enabled(bool on);

/* Allocation statistics (memory.c). */
void mx__stats_storage(mx_device device, int64_t bytes_delta, int storages_delta);
void mx__stats_tensor(mx_device device, int delta);

#endif
