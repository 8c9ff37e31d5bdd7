/* An optimizer's state tensors by parameter and name, the step that hands
 * each group to its type (after checking every gradient), zero_grad, and
 * the helpers a type's step is written with. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "ops/ops.h"
#include "optim/optimizer_internal.h"

/* --- state ------------------------------------------------------------------------------------- */

/* Parameter i (NULL with the error set when out of range). */
static mx__optim_slot *slot_at(const char *fn, const mx_optimizer *opt, int i) {
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  if (i < 0 || i >= opt->n_params) {
    mx__error(MX_INDEX_ERROR, "%s: parameter %d is out of range (the optimizer has %d)", fn, i, opt->n_params);
    return NULL;
  }
  return &opt->slots[i];
}

mx_tensor *mx__optimizer_find_state(const mx_optimizer *opt, int i, const char *name) {
  const mx__optim_slot *s = &opt->slots[i];
  for (int k = 0; k < s->n; k++)
    if (!strcmp(s->states[k].name, name)) return s->states[k].tensor;
  return NULL;
}

void mx__optimizer_drop_states(mx_optimizer *opt, int first, int n, const int *counts) {
  for (int j = 0; j < n; j++) {
    mx__optim_slot *s = &opt->slots[first + j];
    for (int keep = counts ? counts[j] : 0; s->n > keep; s->n--) {
      free(s->states[s->n - 1].name);
      mx__decref(s->states[s->n - 1].tensor);
    }
  }
}

/* Checks the registration of t as parameter i's state name. */
static mx_status check_state(const char *fn, mx_optimizer *opt, int i, const char *name, const mx_tensor *t) {
  if (!slot_at(fn, opt, i)) return mx_last_status();
  if (!name) return mx__null_input(fn, "name");
  if (!t) return mx__null_input(fn, "t");
  size_t length = strlen(name), valid = strspn(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_");
  if (length == 0 || length > MX__OPTIM_NAME_MAX || valid != length)
    return mx__error(MX_INVALID_ARGUMENT, "%s: state '%s' of parameter %d: names are letters, digits and '_', 1 to "
                     "%d of them", fn, name, i, MX__OPTIM_NAME_MAX);
  if (opt->stepping)
    return mx__error(MX_STATE_ERROR, "%s: state '%s' of parameter %d registered during a step of %s; register state "
                     "in init_group or update_group, so that a new optimizer holds what a checkpoint restores", fn,
                     name, i, opt->type->name);
  if (mx__optimizer_find_state(opt, i, name))
    return mx__error(MX_INVALID_ARGUMENT, "%s: parameter %d already has a state '%s'", fn, i, name);
  if (t->device != opt->device)
    return mx__error(MX_DEVICE_ERROR, "%s: state '%s' of parameter %d is on %s but the parameters are on %s", fn, name,
                     i, mx_device_name(t->device), mx_device_name(opt->device));
  return MX_OK;
}

mx_status mx_optimizer_add_state(mx_optimizer *opt, int i, const char *name, mx_tensor *t) {
  const char *fn = "mx_optimizer_add_state";
  mx_status status = check_state(fn, opt, i, name, t);
  mx__optim_slot *s = status == MX_OK ? &opt->slots[i] : NULL;
  if (s && s->n == s->capacity) {
    int capacity = s->capacity ? 2 * s->capacity : 4;
    mx__optim_state *grown = realloc(s->states, sizeof *grown * (size_t)capacity);
    if (grown) s->states = grown, s->capacity = capacity;
    else status = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  char *copy = status == MX_OK ? strdup(name) : NULL;
  if (status == MX_OK && !copy) status = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  if (status == MX_OK) s->states[s->n++] = (mx__optim_state){copy, mx__retain(t)}; /* replaces the caller's handle */
  mx_release(t);
  return status;
}

int mx_optimizer_num_states(const mx_optimizer *opt, int i) {
  const mx__optim_slot *s = slot_at("mx_optimizer_num_states", opt, i);
  return s ? s->n : -1;
}

const char *mx_optimizer_state_name(const mx_optimizer *opt, int i, int k) {
  const mx__optim_slot *s = slot_at("mx_optimizer_state_name", opt, i);
  if (s && (k < 0 || k >= s->n)) {
    mx__error(MX_INDEX_ERROR, "mx_optimizer_state_name: state %d of parameter %d is out of range (it has %d)", k, i,
              s->n);
    return NULL;
  }
  return s ? s->states[k].name : NULL;
}

int mx_optimizer_state_names(const mx_optimizer *opt, int i, const char **names) {
  const mx__optim_slot *s = slot_at("mx_optimizer_state_names", opt, i);
  if (!s) return -1;
  for (int k = 0; k < s->n; k++) names[k] = s->states[k].name;
  return s->n;
}

mx_tensor *mx_optimizer_state(const mx_optimizer *opt, int i, const char *name) {
  const char *fn = "mx_optimizer_state";
  if (!slot_at(fn, opt, i)) return NULL;
  if (!name) {
    mx__null_input(fn, "name");
    return NULL;
  }
  const mx_tensor *t = mx__optimizer_find_state(opt, i, name);
  if (!t) {
    mx__error(MX_INVALID_ARGUMENT, "%s: this %s keeps no state '%s' for parameter %d", fn, opt->type->name, name, i);
    return NULL;
  }
  return mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
}

/* --- steps ------------------------------------------------------------------------------------- */

/* found_inf and grad_scale: float32, one element, on the parameters' device. */
static mx_status check_flag(const char *fn, const mx_optimizer *opt, const mx_tensor *t, const char *name) {
  if (!t) return MX_OK;
  if (t->dtype != MX_F32)
    return mx__error(MX_DTYPE_ERROR, "%s: %s is %s; it must be float32", fn, name, mx_dtype_name(t->dtype));
  if (mx_numel(t) != 1) {
    char dims[MX__DIMS_STR];
    return mx__error(MX_SHAPE_ERROR, "%s: %s has shape %s (%lld elements); it must have one element", fn, name,
                     mx__dims_str(dims, t->ndim, t->shape), (long long)mx_numel(t));
  }
  if (t->device != opt->device)
    return mx__error(MX_DEVICE_ERROR, "%s: %s is on %s but the parameters are on %s", fn, name,
                     mx_device_name(t->device), mx_device_name(opt->device));
  return MX_OK;
}

/* Every gradient fits its parameter (shape and device), checked before any
 * group steps; has[g]: group g has a gradient. */
static mx_status check_grads(const char *fn, const mx_optimizer *opt, bool *has) {
  for (int g = 0; g < opt->n_groups; g++) {
    has[g] = false;
    for (int k = opt->groups[g].first; k < opt->groups[g].first + opt->groups[g].n; k++) {
      const mx_tensor *p = opt->params[k], *grad = mx_grad_of(p);
      if (!grad) continue;
      char a[MX__DIMS_STR], b[MX__DIMS_STR];
      if (grad->ndim != p->ndim || memcmp(grad->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim))
        return mx__error(MX_SHAPE_ERROR, "%s: the grad of parameter %d has shape %s but the parameter %s", fn, k,
                         mx__dims_str(a, grad->ndim, grad->shape), mx__dims_str(b, p->ndim, p->shape));
      if (grad->device != p->device)
        return mx__error(MX_DEVICE_ERROR, "%s: the grad of parameter %d is on %s but the parameter on %s", fn, k,
                         mx_device_name(grad->device), mx_device_name(p->device));
      has[g] = true;
    }
  }
  return MX_OK;
}

/* The type's step on group g: grad mode off, its temporaries in a scope. */
static mx_status step_group(mx_optimizer *opt, int g, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  bool grad_mode = mx_set_grad_enabled(false);
  opt->stepping = true;
  mx_status status = opt->type->step(opt, g, found_inf, grad_scale);
  opt->stepping = false;
  mx_set_grad_enabled(grad_mode);
  mx_scope_end(scope);
  if (status != MX_OK && mx_last_status() == MX_OK) /* a hook that forgot its message */
    mx__error(status, "%s's step failed on group %d without saying why", opt->type->name, g);
  return status;
}

static mx_status step(const char *fn, mx_optimizer *opt, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  if (!opt) return mx__null_input(fn, "opt");
  if (check_flag(fn, opt, found_inf, "found_inf") != MX_OK || check_flag(fn, opt, grad_scale, "grad_scale") != MX_OK)
    return mx_last_status();
  bool *has = malloc(sizeof *has * (size_t)opt->n_groups);
  if (!has) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  mx_status status = check_grads(fn, opt, has);
  for (int g = 0; g < opt->n_groups && status == MX_OK; g++)
    if (has[g] && step_group(opt, g, found_inf, grad_scale) != MX_OK) status = mx__error_prefix(fn);
  free(has);
  return status;
}

mx_status mx_optimizer_step(mx_optimizer *opt) { return step("mx_optimizer_step", opt, NULL, NULL); }

mx_status mx_optimizer_step_amp(mx_optimizer *opt, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return step("mx_optimizer_step_amp", opt, found_inf, grad_scale);
}

mx_status mx_optimizer_zero_grad(mx_optimizer *opt, bool set_to_none) {
  const char *fn = "mx_optimizer_zero_grad";
  if (!opt) return mx__null_input(fn, "opt");
  if (opt->type->zero_grad) return opt->type->zero_grad(opt, set_to_none) == MX_OK ? MX_OK : mx__error_prefix(fn);
  for (int k = 0; k < opt->n_params; k++) {
    mx_tensor *grad = mx_grad_of(opt->params[k]);
    if (!grad) continue;
    if (set_to_none) mx_zero_grad(opt->params[k]);
    else if (mx_fill_(grad, 0) != MX_OK) return mx__error_prefix(fn);
  }
  return MX_OK;
}

/* --- a step's helpers -------------------------------------------------------------------------- */

mx_tensor *mx_optimizer_grad(const mx_tensor *p, const mx_tensor *grad_scale) {
  const char *fn = "mx_optimizer_grad";
  if (!p) {
    mx__null_input(fn, "p");
    return NULL;
  }
  mx_tensor *grad = mx_grad_of(p);
  if (!grad) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the parameter has no gradient", fn);
    return NULL;
  }
  mx_dtype dtype = grad->dtype == MX_F64 ? MX_F64 : MX_F32;
  mx_tensor *out = mx_to_dtype(grad, dtype);
  if (out && grad_scale) {
    /* the float32 inverse, as GradScaler.unscale_ (and mx_amp_inv_scale) takes it */
    mx_tensor *inverse = mx_to_dtype(mx_reciprocal(mx_to_dtype(grad_scale, MX_F64)), MX_F32);
    out = mx_mul(out, dtype == MX_F64 ? mx_to_dtype(inverse, MX_F64) : inverse);
  }
  if (!out) mx__error_prefix(fn);
  return out;
}

mx_status mx_optimizer_assign_(mx_tensor *dst, const mx_tensor *value, const mx_tensor *found_inf) {
  const char *fn = "mx_optimizer_assign_";
  if (!dst || !value) return mx__null_input(fn, !dst ? "dst" : "value");
  if (!found_inf) return mx_copy_(dst, value) == MX_OK ? MX_OK : mx__error_prefix(fn);
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  bool grad_mode = mx_set_grad_enabled(false);
  mx_tensor *kept = mx_where(mx_eq_scalar(found_inf, 0.0), value, dst);
  mx_status status = kept ? mx_copy_(dst, kept) : mx_last_status();
  mx_set_grad_enabled(grad_mode);
  mx_scope_end(scope);
  return status == MX_OK ? MX_OK : mx__error_prefix(fn);
}
