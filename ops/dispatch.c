/* The dispatcher: the one path every op takes.
 *
 *   1. check     NULL inputs, devices
 *   2. autocast  the policy of the op's row, if autocast is on (amp/)
 *   3. autograd  record a node when an input requires grad
 *   4. kernel    the op's forward: kernels for a primitive, other ops for a
 *                composite (which record themselves, with autocast off)
 *
 * Each call runs in a scope of its own, so temporaries (casts, staged
 * copies) die with it and only the outputs reach the caller's scope. */
#include <string.h>

#include "ops/op_table.h"
#include "tensor/object_cache.h"

const mx__autocast_hooks *mx__autocast;

/* Inside an op's forward autocast stays off: the policy was applied once at
 * its entry, as PyTorch does for composites. */
_Thread_local int mx__autocast_excluded;

/* The engine's gradient arithmetic (autograd/node.h: autograd/ calls ops
 * through this table, never by name, so that it sits below ops/). Installed
 * from here because every program that runs an op links this file. */
__attribute__((constructor)) static void install_grad_ops(void) {
  static const mx__grad_ops grad_ops = {mx_add, mx_to_dtype, mx__sum_to, mx_clone};
  mx__grad_ops_installed = &grad_ops;
}

static mx_status check_inputs(mx_op op, int n_in, mx_tensor *const *in) {
  const mx__op_def *def = &mx__ops[op];
  for (int i = 0; i < n_in; i++) {
    if (in[i]) continue;
    char arg[32];
    return mx__null_input(def->api_name, mx__input_name(op, i, arg, sizeof arg));
  }
  /* one device; 0-d CPU tensors (scalars) may join any device */
  mx_device device = MX_CPU;
  bool found = false;
  for (int i = 0; i < n_in; i++) {
    if (in[i]->ndim == 0 && in[i]->device == MX_CPU) continue;
    if (found && in[i]->device != device)
      return mx__error(MX_DEVICE_ERROR, "mx_%s: expected all tensors on one device, but input %d is on %s and "
                       "an earlier one on %s", def->name, i, mx_device_name(in[i]->device), mx_device_name(device));
    device = in[i]->device;
    found = true;
  }
  return MX_OK;
}

typedef struct {
  mx_op op;
  mx__args args;
} op_payload;

static mx_status apply_op(mx__node *node, mx_tensor *const *grad_outputs, mx_tensor **grad_inputs) {
  op_payload *p = node->payload;
  mx__bw bw = {.op = p->op, .args = &p->args, .node = node, .grad_out = grad_outputs, .grad_in = grad_inputs};
  return mx__ops[p->op].backward(&bw);
}

static void free_payload(void *p) { mx__object_free(p, sizeof(op_payload)); }

static mx_status record(mx__call *call, int n_out) {
  const mx__op_def *def = &mx__ops[call->op];
  for (int i = 0; i < call->n_in; i++)
    if (mx_is_inference(call->in[i]))
      return mx__error(MX_STATE_ERROR, "mx_%s: input %d is an inference tensor (made in an MX_INFERENCE_MODE "
                       "block), which cannot enter a graph; mx_clone it outside the block for a normal tensor",
                       def->name, i);
  mx__node *node = mx__node_new(def->node_name, apply_op, call->n_in, n_out, call->n_in + n_out);
  if (!node) return mx_last_status();
  op_payload *p = mx__object_new(sizeof *p);
  if (!p) {
    mx__node_decref(node);
    return mx__error(MX_OUT_OF_MEMORY, "mx_%s: out of memory recording the graph", def->name);
  }
  p->op = call->op;
  p->args = call->args ? *call->args : (mx__args){0};
  node->payload = p;
  node->free_payload = free_payload;
  mx_status status = MX_OK;
  for (int i = 0; i < call->n_in && status == MX_OK; i++) status = mx__node_connect(node, i, call->in[i]);
  for (int k = 0; k < n_out && status == MX_OK; k++)
    if (mx_dtype_is_floating(call->out[k]->dtype)) mx__node_set_output(node, k, call->out[k]);
  for (int i = 0; i < call->n_in && status == MX_OK && (def->save & MX__SAVE_IN); i++)
    status = mx__node_save(node, i, call->in[i], false);
  for (int k = 0; k < n_out && status == MX_OK && (def->save & MX__SAVE_OUT); k++)
    status = mx__node_save(node, call->n_in + k, call->out[k], true);
  mx__node_decref(node); /* the outputs hold it now */
  return status;
}

/* An error inside a composite's body names the op the user called:
 * "mx_mul: ..." from inside mx_addcmul becomes "mx_addcmul: ...". */
static void rename_error(const char *name) {
  const char *message = mx_last_error();
  size_t inner = strncmp(message, "mx_", 3) == 0 ? strcspn(message, ": ") : 0;
  if (!inner || message[inner] != ':') return;
  char rest[1024];
  snprintf(rest, sizeof rest, "%s", message + inner);
  mx__error(mx_last_status(), "mx_%s%s", name, rest);
}

static mx_status forward(mx__call *call, int n_out) {
  const mx__op_def *def = &mx__ops[call->op];
  if (def->grad == MX__GRAD_BODY) {
    mx_status status = def->forward(call);
    if (status != MX_OK) rename_error(def->name);
    return status;
  }
  bool recording = def->grad == MX__GRAD_FORMULA && mx__any_requires_grad(call->n_in, call->in);
  bool previous = mx_set_grad_enabled(false);
  mx_status status = def->forward(call);
  mx_set_grad_enabled(previous);
  if (status == MX_OK && recording) status = record(call, n_out);
  return status;
}

static mx_status run(mx__call *call, int n_out) {
  bool autocast = mx__autocast && !mx__autocast_excluded;
  mx__autocast_excluded++;
  mx_status status = autocast ? mx__autocast->before(call->op, call->n_in, call->in, call->args) : MX_OK;
  if (status == MX_OK) status = forward(call, n_out);
  mx__autocast_excluded--;
  if (autocast) mx__autocast->after(call->op, n_out, call->out, status);
  return status;
}

mx_status mx__dispatch(mx_op op, int n_in, const mx_tensor *const *in, const mx__args *args, mx_tensor **out) {
  const mx__op_def *def = &mx__ops[op];
  int n_out = def->n_out;
  mx_tensor *inputs[n_in > 0 ? n_in : 1];
  memcpy(inputs, in, sizeof(mx_tensor *) * (size_t)n_in);
  mx_status status = check_inputs(op, n_in, inputs);
  if (status != MX_OK) return status;
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx__call call = {.op = op, .n_in = n_in, .in = inputs, .args = args};
  status = run(&call, n_out);
  for (int k = 0; k < n_out; k++) {
    out[k] = status == MX_OK ? call.out[k] : NULL;
    if (out[k] && !mx_keep(out[k])) status = mx_last_status();
  }
  mx_scope_end(scope);
  return status;
}

mx_tensor *mx__call1(mx_op op, const mx_tensor *a, const mx__args *args) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[1] = {a};
  return mx__dispatch(op, 1, in, args, out) == MX_OK ? out[0] : NULL;
}

mx_tensor *mx__call2(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx__args *args) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[2] = {a, b};
  return mx__dispatch(op, 2, in, args, out) == MX_OK ? out[0] : NULL;
}

mx_tensor *mx__call3(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx_tensor *c, const mx__args *args) {
  mx_tensor *out[MX__MAX_OUTPUTS] = {0};
  const mx_tensor *in[3] = {a, b, c};
  return mx__dispatch(op, 3, in, args, out) == MX_OK ? out[0] : NULL;
}

/* --- helpers for the op implementations -------------------------------------------- */

const mx_backend *mx__backend_of(mx_op op, mx_device device) {
  const mx_backend *be = mx__backend(device);
  if (!be) mx__error_prefix(mx__ops[op].api_name);
  return be;
}

bool mx__kernel_usable(mx_op op, const mx_backend *be, mx_kernel kernel, mx_dtype dtype) {
  const char *name = mx__ops[op].name, *what = mx__kernel_name(kernel), *device = mx_device_name(be->device);
  switch (mx__backend_supports(be, kernel, dtype)) {
  case MX_KERNEL_NATIVE: return true;
  case MX_KERNEL_VIA_F32:
    if (mx__autocast) mx__autocast->via_f32(op, dtype, be->device);
    return true;
  case MX_KERNEL_NOT_BUILT:
    mx__error(MX_NOT_BUILT, "mx_%s: this build of mixgrad has no %s kernel for %s on %s", name, what,
              mx_dtype_name(dtype), device);
    return false;
  case MX_KERNEL_NOT_HERE:
  default:
    mx__error(MX_NOT_SUPPORTED, "mx_%s: this %s cannot run the %s kernel for %s", name, device, what,
              mx_dtype_name(dtype));
    return false;
  }
}

const mx_backend *mx__kernel_backend(mx_op op, mx_device device, mx_kernel kernel, mx_dtype dtype) {
  const mx_backend *be = mx__backend_of(op, device);
  return be && mx__kernel_usable(op, be, kernel, dtype) ? be : NULL;
}

mx_tensor *mx__wrap_scalar(double value) {
  mx_tensor *t = mx_scalar(value, MX_F64, MX_CPU);
  if (t) t->wrapped_number = true;
  return t;
}

static int rank(mx_dtype t) {
  switch (t) {
  case MX_BOOL: return 0;
  case MX_U8: return 1;
  case MX_I32: return 2;
  case MX_I64: return 3;
  case MX_F16: case MX_BF16: return 4;
  case MX_F32: return 5;
  case MX_F64: return 6;
  default: return -1;
  }
}

#define UNDEFINED MX_DTYPE_COUNT

/* The smallest dtype both convert to without losing range: the lattice
 * bool < u8 < i32 < i64 < {f16, bf16} < f32 < f64, with f16 + bf16 = f32. */
static mx_dtype promote(mx_dtype a, mx_dtype b) {
  if (a == UNDEFINED) return b;
  if (b == UNDEFINED || a == b) return a;
  if ((a == MX_F16 && b == MX_BF16) || (a == MX_BF16 && b == MX_F16)) return MX_F32;
  return rank(a) >= rank(b) ? a : b;
}

static mx_dtype combine(mx_dtype higher, mx_dtype lower) {
  if (higher != UNDEFINED && mx_dtype_is_floating(higher)) return higher;
  if (higher == MX_BOOL || (lower != UNDEFINED && mx_dtype_is_floating(lower))) return promote(higher, lower);
  return higher != UNDEFINED ? higher : lower;
}

mx_dtype mx__result_type(int n, mx_tensor *const *in) {
  mx_dtype dimensioned = UNDEFINED, zero_dim = UNDEFINED, wrapped = UNDEFINED;
  for (int i = 0; i < n; i++) {
    mx_dtype t = in[i]->dtype;
    if (in[i]->wrapped_number) /* a C double is "a float", a whole one too */
      wrapped = promote(wrapped, mx_dtype_is_floating(t) ? MX_F32 : t == MX_BOOL ? MX_BOOL : MX_I64);
    else if (in[i]->ndim == 0)
      zero_dim = promote(zero_dim, t);
    else
      dimensioned = promote(dimensioned, t);
  }
  return combine(dimensioned, combine(zero_dim, wrapped));
}

mx_status mx__broadcast_shape(const char *op, int n, mx_tensor *const *in, mx_shape *out) {
  int ndim = 0;
  for (int i = 0; i < n; i++) ndim = in[i]->ndim > ndim ? in[i]->ndim : ndim;
  out->ndim = ndim;
  int set_by[MX_MAX_DIMS]; /* which input gave each dim its size */
  for (int d = 0; d < ndim; d++) out->d[d] = 1, set_by[d] = 0;
  for (int i = 0; i < n; i++) {
    for (int j = in[i]->ndim - 1, d = ndim - 1; j >= 0; j--, d--) {
      int64_t size = in[i]->shape[j];
      if (size == out->d[d] || size == 1) continue;
      if (out->d[d] == 1) {
        out->d[d] = size;
        set_by[d] = i;
        continue;
      }
      const mx_tensor *other = in[set_by[d]];
      char a[MX__DIMS_STR], b[MX__DIMS_STR];
      return mx__error(MX_SHAPE_ERROR, "%s: shapes %s and %s cannot be broadcast together (dim %d: %lld vs %lld)",
                       op, mx__dims_str(a, other->ndim, other->shape), mx__dims_str(b, in[i]->ndim, in[i]->shape),
                       d, (long long)out->d[d], (long long)size);
    }
  }
  return MX_OK;
}

mx_kview mx__kview_broadcast(const mx_tensor *t, mx_shape shape) {
  mx_kview v = mx__kview_of(t);
  v.ndim = shape.ndim;
  for (int d = shape.ndim - 1, j = t->ndim - 1; d >= 0; d--, j--) {
    bool real = j >= 0 && t->shape[j] == shape.d[d];
    v.strides[d] = real ? t->strides[j] : 0;
    v.shape[d] = shape.d[d];
  }
  return v;
}

mx_tensor *mx__prepare(mx_tensor *t, mx_dtype dtype, mx_device device) {
  if (t->device != device && t->device == MX_CPU && t->dtype != dtype) {
    /* a CPU operand (mostly a 0-d scalar) joining a device op: converted
     * where it is, so the device gets its final bytes in one small write,
     * no conversion kernel (the same bits: one mx_element_convert) */
    t = mx__tensor_to_dtype(t, dtype);
    if (!t) return NULL;
  }
  if (t->device != device) {
    t = mx__tensor_to_device(t, device);
    if (!t) return NULL;
  }
  return t->dtype == dtype ? t : mx__tensor_to_dtype(t, dtype);
}

mx_tensor *mx__saved_in(mx__bw *bw, int i) { return mx__node_saved(bw->node, i); }

mx_tensor *mx__saved_out(mx__bw *bw, int k) { return mx__node_saved(bw->node, bw->node->n_inputs + k); }

bool mx__needs_grad(mx__bw *bw, int i) { return bw->node->next[i].node != NULL; }

mx_shape mx__in_shape(mx__bw *bw, int i) {
  return mx_shape_of(bw->node->in_meta[i].ndim, bw->node->in_meta[i].shape);
}
