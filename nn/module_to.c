/* Moving a module's tensors to a device or into the channels-last layout, like torch's module.to(device) and
 * module.to(memory_format=torch.channels_last). */
#include <stdlib.h>

#include "autograd/autograd.h"
#include "nn/module.h"
#include "ops/ops.h"
#include "tensor/tensor_impl.h"

/* The module's parameters, then its buffers: n handles in a new array. */
static mx_tensor **members(const mx_module *m, int *n) {
  int p = mx_module_num_parameters(m), b = mx_module_num_buffers(m);
  mx_tensor **all = malloc((size_t)(p + b + 1) * sizeof *all);
  if (!all) return NULL;
  for (int i = 0; i < p; i++) all[i] = mx_module_parameter(m, i, NULL);
  for (int i = 0; i < b; i++) all[p + i] = mx_module_buffer(m, i, NULL);
  *n = p + b;
  return all;
}

/* Gives t the data of `moved` (a copy of it) and moved t's old data, which
 * goes when moved is released. */
static void swap_data(mx_tensor *t, mx_tensor *moved) {
  mx__storage *storage = t->storage;
  t->storage = moved->storage, moved->storage = storage;
  mx_device device = t->device;
  t->device = moved->device, moved->device = device;
  int64_t strides[MX_MAX_DIMS], offset = t->offset;
  for (int d = 0; d < MX_MAX_DIMS; d++) strides[d] = t->strides[d];
  for (int d = 0; d < MX_MAX_DIMS; d++) t->strides[d] = moved->strides[d], moved->strides[d] = strides[d];
  t->offset = moved->offset, moved->offset = offset;
}

/* What becomes of a member: *out a new tensor whose data it takes, or
 * NULL to keep its own; a failure's status. */
typedef mx_status (*member_copy)(const mx_tensor *t, mx_device device, mx_tensor **out);

/* Gives each parameter and buffer the data copy makes of it, in place:
 * every copy first, so that a failure leaves the module as it was. */
static mx_status replace_members(mx_module *m, const char *api, member_copy copy, mx_device device) {
  if (!m) return mx__error(MX_NULL_INPUT, "%s: NULL module", api);
  int n = 0;
  mx_tensor **all = members(m, &n);
  mx_tensor **moved = all ? calloc((size_t)n + 1, sizeof *moved) : NULL;
  if (!moved) {
    free(all);
    return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", api);
  }
  mx_status status = MX_OK;
  MX_NO_GRAD {
    for (int i = 0; i < n && status == MX_OK; i++) status = copy(all[i], device, &moved[i]);
  }
  for (int i = 0; i < n; i++) {
    if (!moved[i]) continue;
    if (status == MX_OK) {
      swap_data(all[i], moved[i]);
      mx_zero_grad(all[i]); /* a gradient of the old data would not add to the new one */
    }
    mx_release(moved[i]);
  }
  free(moved);
  free(all);
  return status;
}

static mx_status to_device(const mx_tensor *t, mx_device device, mx_tensor **out) {
  if (t->device == device) return MX_OK;
  *out = mx_to_device(t, device);
  return *out ? MX_OK : mx_last_status();
}

mx_status mx_module_to(mx_module *m, mx_device device) {
  return replace_members(m, "mx_module_to", to_device, device);
}

/* A 4-d member not yet channels-last: its channels-last copy. */
static mx_status to_channels_last(const mx_tensor *t, mx_device unused, mx_tensor **out) {
  (void)unused;
  if (t->ndim != 4 || mx__suggests_channels_last(t)) return MX_OK;
  *out = mx_to_channels_last(t);
  return *out ? MX_OK : mx_last_status();
}

mx_status mx_module_to_channels_last(mx_module *m) {
  return replace_members(m, "mx_module_to_channels_last", to_channels_last, MX_CPU);
}
