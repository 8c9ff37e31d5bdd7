/* Normalisation layers: BatchNorm1d/2d/3d (with running statistics), LayerNorm and GroupNorm. */
#include <math.h>
#include <stdlib.h>

#include "nn/nn_internal.h"
#include "tensor/tensor_impl.h"

typedef struct {
  int spatial; /* BatchNorm: 1, 2 or 3 */
  int64_t features, groups;
  mx_shape normalized;
  double eps, momentum;
  bool affine, track;
  mx_tensor *weight, *bias, *running_mean, *running_var, *num_batches_tracked;
  /* BatchNorm: 1 on num_batches_tracked's device, which each training step
   * adds; made once (again after the module moves), since on a GPU a new
   * scalar a step is an allocation and a fill launch more per layer */
  mx_tensor *one;
} norm_self;

/* The affine parameters of shape, ones and zeros (none unless affine). */
static mx_status add_affine(mx_module *m, norm_self *s, mx_shape shape) {
  if (!s->affine) return MX_OK;
  if (!(s->weight = mx__add_parameter(m, "weight", shape)) || mx_init_ones_(s->weight) != MX_OK ||
      !(s->bias = mx__add_parameter(m, "bias", shape)) || mx_init_zeros_(s->bias) != MX_OK)
    return mx_last_status();
  return MX_OK;
}

/* --- BatchNorm ---------------------------------------------------------------------------------------------------- */

/* num_batches_tracked += 1, adding the module's kept 1 (made on the buffer's device when missing or elsewhere). */
static mx_status count_batch(norm_self *s) {
  mx_device device = mx_device_of(s->num_batches_tracked);
  if (!s->one || mx_device_of(s->one) != device) {
    if (s->one) mx__decref(s->one);
    s->one = mx_scalar(1, MX_I64, device);
    if (!s->one) return mx_last_status();
    mx__retain(s->one); /* the module's own reference: no scope releases it */
    mx_release(s->one);
  }
  mx_status status = MX_OK;
  MX_NO_GRAD { status = mx_add_(s->num_batches_tracked, s->one); }
  return status;
}

/* The module's batch norm of x, followed by relu in the same passes when asked (mx_batch_norm_relu). */
static mx_tensor *batch_norm_run(mx_module *m, const mx_tensor *x, bool relu) {
  norm_self *s = mx_module_self(m);
  int ndim = mx_ndim(x);
  bool fits = s->spatial == 1 ? ndim == 2 || ndim == 3 : ndim == s->spatial + 2;
  if (!fits) {
    if (s->spatial == 1)
      mx__error(MX_SHAPE_ERROR, "expected a 2-d or 3-d input (N, C[, L]), got %d dims", ndim);
    else
      mx__error(MX_SHAPE_ERROR, "expected a %d-d input (N, C, %d spatial dims), got %d dims", s->spatial + 2,
                s->spatial, ndim);
    return NULL;
  }
  if (mx_size(x, 1) != s->features) {
    mx__error(MX_SHAPE_ERROR, "expected %lld channels (dim 1), got %lld", (long long)s->features,
              (long long)mx_size(x, 1));
    return NULL;
  }
  bool training = mx_module_is_training(m);
  double factor = s->momentum;
  if (training && s->track) {
    if (count_batch(s) != MX_OK) return NULL;
    if (isnan(s->momentum)) factor = 1 / mx_item(s->num_batches_tracked); /* a cumulative moving average */
  }
  mx_tensor *running_mean = s->track ? s->running_mean : NULL, *running_var = s->track ? s->running_var : NULL;
  return (relu ? mx_batch_norm_relu : mx_batch_norm)(x, running_mean, running_var, s->weight, s->bias,
                                                     training || !s->track, factor, s->eps);
}

static mx_tensor *batch_norm_forward(mx_module *m, const mx_tensor *x) { return batch_norm_run(m, x, false); }

/* A BatchNorm followed by a ReLU in a Sequential (nn_internal.h). */
static mx_tensor *batch_norm_relu_forward(mx_module *m, const mx_tensor *x) { return batch_norm_run(m, x, true); }

static void batch_norm_extra(const mx_module *m, char *buf, size_t size) {
  const norm_self *s = mx_module_self(m);
  char eps[32], momentum[32];
  mx__float_repr(eps, sizeof eps, s->eps);
  if (isnan(s->momentum)) snprintf(momentum, sizeof momentum, "None");
  else mx__float_repr(momentum, sizeof momentum, s->momentum);
  snprintf(buf, size, "%lld, eps=%s, momentum=%s, affine=%s, track_running_stats=%s", (long long)s->features, eps,
           momentum, mx__bool_repr(s->affine), mx__bool_repr(s->track));
}

static void batch_norm_free_self(void *self) {
  norm_self *s = self;
  if (s->one) mx__decref(s->one);
  free(s);
}

#define BN_TYPE(type_name) \
  {.name = type_name, .forward = batch_norm_forward, .free_self = batch_norm_free_self, .extra = batch_norm_extra}
static const mx_module_type batch_norm_types[3] = {BN_TYPE("BatchNorm1d"), BN_TYPE("BatchNorm2d"),
                                                   BN_TYPE("BatchNorm3d")};

static mx_module *batch_norm_new(const char *fn, int spatial, int64_t num_features, double eps, double momentum,
                                 bool affine, bool track_running_stats) {
  if (num_features <= 0 || !(eps >= 0)) {
    mx__error(MX_INVALID_ARGUMENT, "%s: num_features must be positive and eps >= 0, got %lld and %g", fn,
              (long long)num_features, eps);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&batch_norm_types[spatial - 1], sizeof(norm_self));
  if (!m) return NULL;
  norm_self *s = mx_module_self(m);
  *s = (norm_self){.spatial = spatial, .features = num_features, .eps = eps, .momentum = momentum, .affine = affine,
                   .track = track_running_stats};
  mx_status status = add_affine(m, s, MX_SHAPE(num_features));
  if (status == MX_OK && track_running_stats &&
      (!(s->running_mean = mx__add_buffer(m, "running_mean", mx_zeros(MX_SHAPE(num_features), MX_F32, MX_CPU))) ||
       !(s->running_var = mx__add_buffer(m, "running_var", mx_ones(MX_SHAPE(num_features), MX_F32, MX_CPU))) ||
       !(s->num_batches_tracked = mx__add_buffer(m, "num_batches_tracked", mx_zeros(MX_SCALAR, MX_I64, MX_CPU)))))
    status = mx_last_status();
  if (status != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

mx__forward_relu_fn mx__batch_norm_forward_relu(const mx_module *m) {
  const mx_module_type *type = mx_module_type_of(m);
  return type >= batch_norm_types && type < batch_norm_types + 3 ? batch_norm_relu_forward : NULL;
}

mx_module *mx_batch_norm1d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats) {
  return batch_norm_new("mx_batch_norm1d_new", 1, num_features, eps, momentum, affine, track_running_stats);
}
mx_module *mx_batch_norm2d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats) {
  return batch_norm_new("mx_batch_norm2d_new", 2, num_features, eps, momentum, affine, track_running_stats);
}
mx_module *mx_batch_norm3d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats) {
  return batch_norm_new("mx_batch_norm3d_new", 3, num_features, eps, momentum, affine, track_running_stats);
}

/* --- LayerNorm ---------------------------------------------------------------------------------------------------- */

static mx_tensor *layer_norm_forward(mx_module *m, const mx_tensor *x) {
  const norm_self *s = mx_module_self(m);
  return mx_layer_norm(x, s->normalized, s->weight, s->bias, s->eps);
}

static void layer_norm_extra(const mx_module *m, char *buf, size_t size) {
  const norm_self *s = mx_module_self(m);
  char shape[128], eps[32];
  mx__list_repr(shape, sizeof shape, s->normalized, true);
  mx__float_repr(eps, sizeof eps, s->eps);
  snprintf(buf, size, "%s, eps=%s, elementwise_affine=%s", shape, eps, mx__bool_repr(s->affine));
}

static const mx_module_type layer_norm_type = {.name = "LayerNorm", .forward = layer_norm_forward, .free_self = free,
                                               .extra = layer_norm_extra};

mx_module *mx_layer_norm_new(mx_shape normalized_shape, double eps, bool elementwise_affine) {
  bool ok = normalized_shape.ndim >= 1 && normalized_shape.ndim <= MX_MAX_DIMS && eps >= 0;
  for (int i = 0; ok && i < normalized_shape.ndim; i++) ok = normalized_shape.d[i] > 0;
  if (!ok) {
    mx__error(MX_INVALID_ARGUMENT, "mx_layer_norm_new: normalized_shape needs 1 to %d positive sizes (got %d dims) "
              "and eps >= 0 (got %g)", MX_MAX_DIMS, normalized_shape.ndim, eps);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&layer_norm_type, sizeof(norm_self));
  if (!m) return NULL;
  norm_self *s = mx_module_self(m);
  *s = (norm_self){.normalized = normalized_shape, .eps = eps, .affine = elementwise_affine};
  if (add_affine(m, s, normalized_shape) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- GroupNorm ---------------------------------------------------------------------------------------------------- */

static mx_tensor *group_norm_forward(mx_module *m, const mx_tensor *x) {
  const norm_self *s = mx_module_self(m);
  if (mx_ndim(x) < 2 || mx_size(x, 1) != s->features) {
    mx__error(MX_SHAPE_ERROR, "expected (N, %lld, *) input, got %d dims with %lld channels", (long long)s->features,
              mx_ndim(x), mx_ndim(x) >= 2 ? (long long)mx_size(x, 1) : 0LL);
    return NULL;
  }
  return mx_group_norm(x, s->groups, s->weight, s->bias, s->eps);
}

static void group_norm_extra(const mx_module *m, char *buf, size_t size) {
  const norm_self *s = mx_module_self(m);
  char eps[32];
  mx__float_repr(eps, sizeof eps, s->eps);
  snprintf(buf, size, "%lld, %lld, eps=%s, affine=%s", (long long)s->groups, (long long)s->features, eps,
           mx__bool_repr(s->affine));
}

static const mx_module_type group_norm_type = {.name = "GroupNorm", .forward = group_norm_forward, .free_self = free,
                                               .extra = group_norm_extra};

mx_module *mx_group_norm_new(int64_t num_groups, int64_t num_channels, double eps, bool affine) {
  if (num_groups <= 0 || num_channels <= 0 || num_channels % num_groups || !(eps >= 0)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_group_norm_new: num_channels (%lld) must be divisible by num_groups (%lld), "
              "both positive, and eps >= 0 (got %g)", (long long)num_channels, (long long)num_groups, eps);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&group_norm_type, sizeof(norm_self));
  if (!m) return NULL;
  norm_self *s = mx_module_self(m);
  *s = (norm_self){.features = num_channels, .groups = num_groups, .eps = eps, .affine = affine};
  if (add_affine(m, s, MX_SHAPE(num_channels)) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}
