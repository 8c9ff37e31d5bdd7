/* Custom functions under autocast: PyTorch's custom_fwd / custom_bwd. The
 * user's callbacks are wrapped so forward runs with the inputs cast (or
 * under the caller's state) and backward under the state forward saw. */
#include <stdlib.h>

#include "amp/amp_internal.h"

typedef struct {
  const mx_function *fn;
  mx_function wrapped; /* the user's name, the wrapping callbacks */
  mx_device device;
  bool enabled;        /* autocast for device as forward ran */
  mx_dtype dtype;
  bool cache_enabled;
  bool forward_without_autocast; /* cast_inputs given while autocast was on */
} amp_function;

static mx_status wrapped_forward(mx_function_ctx *ctx, int n_inputs, mx_tensor *const *inputs, int n_outputs,
                                 mx_tensor **outputs) {
  amp_function *w = mx__ctx_wrapper(ctx);
  if (!w->forward_without_autocast) return w->fn->forward(ctx, n_inputs, inputs, n_outputs, outputs);
  mx_status status = mx_autocast_begin(w->device, w->dtype, false, w->cache_enabled);
  if (status != MX_OK) return status;
  status = w->fn->forward(ctx, n_inputs, inputs, n_outputs, outputs);
  mx_autocast_end();
  return status;
}

static mx_status wrapped_backward(mx_function_ctx *ctx, int n_outputs, mx_tensor *const *grad_outputs,
                                  int n_inputs, mx_tensor **grad_inputs) {
  amp_function *w = mx__ctx_wrapper(ctx);
  mx_status status = mx_autocast_begin(w->device, w->dtype, w->enabled, w->cache_enabled);
  if (status != MX_OK) return status;
  status = w->fn->backward(ctx, n_outputs, grad_outputs, n_inputs, grad_inputs);
  mx_autocast_end();
  return status;
}

mx_status mx_amp_function_apply(const mx_function *fn, void *user, mx_device device_type, mx_dtype cast_inputs,
                                int n_inputs, mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs) {
  if (!fn || !fn->forward || !fn->backward) return mx__null_input("mx_amp_function_apply", "fn");
  if (device_type != MX_CPU && device_type != MX_CUDA)
    return mx__error(MX_INVALID_ARGUMENT, "mx_amp_function_apply: device_type %d is not MX_CPU or MX_CUDA",
                     (int)device_type);
  if (cast_inputs != MX_DTYPE_COUNT && !mx_dtype_is_floating(cast_inputs))
    return mx__error(MX_DTYPE_ERROR, "mx_amp_function_apply: cast_inputs must be a floating dtype, got %s",
                     mx_dtype_name(cast_inputs));
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i]) return mx__null_input(fn->name ? fn->name : "mx_amp_function_apply", "inputs[i]");
  amp_function *w = malloc(sizeof *w);
  if (!w) return mx__error(MX_OUT_OF_MEMORY, "mx_amp_function_apply: out of memory");
  *w = (amp_function){.fn = fn,
                      .wrapped = {fn->name, wrapped_forward, wrapped_backward},
                      .device = device_type,
                      .enabled = mx_autocast_is_enabled(device_type),
                      .dtype = mx_autocast_dtype(device_type),
                      .cache_enabled = mx_autocast_is_cache_enabled()};
  w->forward_without_autocast = cast_inputs != MX_DTYPE_COUNT && w->enabled;
  if (cast_inputs != MX_DTYPE_COUNT) w->enabled = false; /* forward ran without autocast, so backward will too */

  /* the casts are recorded ops before the function's node, so gradients
   * reach the original inputs in their own dtypes */
  mx_scope *scope = mx_scope_begin();
  if (!scope) {
    free(w);
    return mx_last_status();
  }
  mx_tensor *cast[n_inputs > 0 ? n_inputs : 1];
  mx_status status = MX_OK;
  for (int i = 0; i < n_inputs; i++) {
    const mx_tensor *t = inputs[i];
    bool eligible = mx_dtype_is_floating(mx_dtype_of(t)) && mx_dtype_of(t) != MX_F64 &&
                    mx_device_of(t) == device_type;
    cast[i] = w->forward_without_autocast && eligible ? mx_to_dtype(t, cast_inputs) : inputs[i];
    if (!cast[i]) status = mx_last_status();
  }
  if (status == MX_OK)
    status = mx__function_apply_wrapped(&w->wrapped, user, w, free, n_inputs, cast, n_outputs, outputs);
  else
    free(w);
  for (int k = 0; k < n_outputs && status == MX_OK; k++) mx_keep(outputs[k]);
  mx_scope_end(scope);
  return status;
}
