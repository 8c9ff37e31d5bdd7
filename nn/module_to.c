/* Moving a module's tensors to a device, like torch's module.to(device). */
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

/* Gives t the data of `moved` (a contiguous copy of it) and moved t's old
 * data, which goes when moved is released. */
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

mx_status mx_module_to(mx_module *m, mx_device device) {
  if (!m) return mx__error(MX_NULL_INPUT, "mx_module_to: NULL module");
  int n = 0;
  mx_tensor **all = members(m, &n);
  mx_tensor **moved = all ? calloc((size_t)n + 1, sizeof *moved) : NULL;
  if (!moved) {
    free(all);
    return mx__error(MX_OUT_OF_MEMORY, "mx_module_to: out of memory");
  }
  /* every copy first, so that a failure leaves the module as it was */
  mx_status status = MX_OK;
  MX_NO_GRAD {
    for (int i = 0; i < n && status == MX_OK; i++) {
      if (all[i]->device == device) continue;
      moved[i] = mx_to_device(all[i], device);
      if (!moved[i]) status = mx_last_status();
    }
  }
  for (int i = 0; i < n; i++) {
    if (!moved[i]) continue;
    if (status == MX_OK) {
      swap_data(all[i], moved[i]);
      mx_zero_grad(all[i]); /* a gradient on the old device would not add to the new data */
    }
    mx_release(moved[i]);
  }
  free(moved);
  free(all);
  return status;
}
