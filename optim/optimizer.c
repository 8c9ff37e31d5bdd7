/* The optimizer object: a type's hooks over parameter groups, their
 * hyper-parameters, the lr and momentum that schedules set, and the checks
 * every optimizer gets (optimizer_state.c keeps the state and the step). */
#include <ctype.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "optim/optimizer_internal.h"

/* --- the type ---------------------------------------------------------------------------------- */

/* Letters, digits and '_', 1 to MX__OPTIM_NAME_MAX of them (they become
 * checkpoint keys). */
static bool valid_name(const char *name) {
  if (!name || !*name || strlen(name) > MX__OPTIM_NAME_MAX) return false;
  for (const char *c = name; *c; c++)
    if (!isalnum((unsigned char)*c) && *c != '_') return false;
  return true;
}

static int hparam_index(const mx_optimizer_type *type, const char *name) {
  for (int k = 0; k < type->n_hparams; k++)
    if (!strcmp(type->hparams[k].name, name)) return k;
  return -1;
}

static mx_status check_type(const char *fn, const mx_optimizer_type *type) {
  if (!type) return mx__null_input(fn, "type");
  if (!type->name || !*type->name) return mx__error(MX_INVALID_ARGUMENT, "%s: the type has no name", fn);
  const char *name = type->name;
  if (!type->step) return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s' has no step", fn, name);
  if (type->n_hparams < 1 || !type->hparams)
    return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s' has %d hyper-parameters%s; it needs at least \"lr\"", fn,
                     name, type->n_hparams, type->hparams ? "" : " (hparams is NULL)");
  for (int k = 0; k < type->n_hparams; k++) {
    const char *h = type->hparams[k].name;
    if (!valid_name(h))
      return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s': hyper-parameter %d is named '%s'; names are letters, "
                       "digits and '_', 1 to %d of them", fn, name, k, h ? h : "(null)", MX__OPTIM_NAME_MAX);
    if (hparam_index(type, h) != k)
      return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s': hyper-parameters %d and %d are both named '%s'", fn, name,
                       hparam_index(type, h), k, h);
  }
  int lr = hparam_index(type, "lr");
  if (lr < 0 || type->hparams[lr].flag)
    return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s' has no %shyper-parameter \"lr\" (schedules set it)", fn,
                     name, lr < 0 ? "" : "numeric ");
  int momentum = type->momentum ? hparam_index(type, type->momentum) : -1;
  if (type->momentum && (momentum < 0 || type->hparams[momentum].flag))
    return mx__error(MX_INVALID_ARGUMENT, "%s: type '%s': momentum names '%s', which is not one of its numeric "
                     "hyper-parameters", fn, name, type->momentum);
  return MX_OK;
}

/* --- checks ------------------------------------------------------------------------------------ */

/* A group's hyper-parameters: lr >= 0, flags 0 or 1, then the type's check. */
static mx_status check_hparams(const char *fn, const mx_optimizer_type *type, int lr, const double *h) {
  if (!h) return mx__null_input(fn, "h");
  if (!(h[lr] >= 0)) return mx__error(MX_INVALID_ARGUMENT, "%s: invalid learning rate %g (must be >= 0)", fn, h[lr]);
  for (int k = 0; k < type->n_hparams; k++)
    if (type->hparams[k].flag && h[k] != 0 && h[k] != 1)
      return mx__error(MX_INVALID_ARGUMENT, "%s: %s is a flag (0 or 1), got %g", fn, type->hparams[k].name, h[k]);
  return type->check ? type->check(h, fn) : MX_OK;
}

/* The index among the optimizer's parameters and params[0..i) of p, or -1. */
static int find_param(const mx_optimizer *opt, int i, mx_tensor *const *params, const mx_tensor *p) {
  for (int k = 0; k < opt->n_params; k++)
    if (opt->params[k] == p) return k;
  for (int j = 0; j < i; j++)
    if (params[j] == p) return opt->n_params + j;
  return -1;
}

/* A new group's parameters: floating leaves that require grad, on the
 * optimizer's device (params[0]'s for the first group), each once. */
static mx_status check_params(const char *fn, const mx_optimizer *opt, int n, mx_tensor *const *params) {
  if (!params) return mx__null_input(fn, "params");
  if (n <= 0) return mx__error(MX_INVALID_ARGUMENT, "%s: n_params is %d; a group needs at least one parameter", fn, n);
  for (int i = 0; i < n; i++) {
    const mx_tensor *p = params[i];
    if (!p) {
      char arg[32];
      snprintf(arg, sizeof arg, "params[%d]", i);
      return mx__null_input(fn, arg);
    }
    if (!mx_dtype_is_floating(p->dtype))
      return mx__error(MX_DTYPE_ERROR, "%s: params[%d] is %s; parameters must be floating", fn, i,
                       mx_dtype_name(p->dtype));
    if (!mx_is_leaf(p))
      return mx__error(MX_INVALID_ARGUMENT, "%s: params[%d] is not a leaf (made by %s); only leaves can be optimized",
                       fn, i, mx_grad_fn_name(p));
    if (!mx_requires_grad(p))
      return mx__error(MX_INVALID_ARGUMENT, "%s: params[%d] does not require grad (see mx_set_requires_grad)", fn, i);
    if (opt->n_groups > 0 && p->device != opt->device)
      return mx__error(MX_DEVICE_ERROR, "%s: params[%d] is on %s but the optimizer's parameters are on %s", fn, i,
                       mx_device_name(p->device), mx_device_name(opt->device));
    if (p->device != params[0]->device)
      return mx__error(MX_DEVICE_ERROR, "%s: params[%d] is on %s but params[0] is on %s; parameters share one device",
                       fn, i, mx_device_name(p->device), mx_device_name(params[0]->device));
    for (int d = 0; d < p->ndim; d++)
      if (p->strides[d] == 0 && p->shape[d] > 1)
        return mx__error(MX_INVALID_ARGUMENT, "%s: params[%d] is a broadcast view (stride 0 in dim %d); its elements "
                         "must be distinct", fn, i, d);
    int k = find_param(opt, i, params, p);
    if (k >= 0)
      return mx__error(MX_INVALID_ARGUMENT, "%s: params[%d] appears twice (it is already parameter %d)", fn, i, k);
  }
  return MX_OK;
}

/* --- groups ------------------------------------------------------------------------------------ */

/* Removes the last group, its parameters and their state. */
static void pop_group(mx_optimizer *opt) {
  mx__optim_group *g = &opt->groups[--opt->n_groups];
  mx__optimizer_drop_states(opt, g->first, g->n, NULL);
  for (int j = g->first; j < g->first + g->n; j++) {
    mx__decref(opt->params[j]);
    free(opt->slots[j].states);
  }
  opt->n_params -= g->n;
  free(g->h);
}

mx_status mx__optimizer_add_group(const char *fn, mx_optimizer *opt, int n, mx_tensor *const *params,
                                  const double *h) {
  if (!opt) return mx__null_input(fn, "opt");
  if (!h) h = opt->defaults;
  const mx_optimizer_type *type = opt->type;
  if (check_hparams(fn, type, opt->lr, h) != MX_OK || check_params(fn, opt, n, params) != MX_OK)
    return mx_last_status();
  size_t n_total = (size_t)opt->n_params + (size_t)n;
  mx__optim_group *groups = realloc(opt->groups, sizeof *groups * (size_t)(opt->n_groups + 1));
  if (groups) opt->groups = groups;
  mx_tensor **all = groups ? realloc(opt->params, sizeof *all * n_total) : NULL;
  if (all) opt->params = all;
  mx__optim_slot *slots = all ? realloc(opt->slots, sizeof *slots * n_total) : NULL;
  if (slots) opt->slots = slots;
  double *values = slots ? malloc(sizeof *values * (size_t)type->n_hparams) : NULL;
  if (!values) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  memcpy(values, h, sizeof *values * (size_t)type->n_hparams);
  if (opt->n_groups == 0) opt->device = params[0]->device;
  for (int j = 0; j < n; j++) {
    opt->params[opt->n_params + j] = mx__retain(params[j]);
    opt->slots[opt->n_params + j] = (mx__optim_slot){0};
  }
  opt->groups[opt->n_groups++] = (mx__optim_group){.first = opt->n_params, .n = n, .h = values, .initial_lr = NAN};
  opt->n_params += n;
  if (type->init_group && type->init_group(opt, opt->n_groups - 1, fn) != MX_OK) {
    mx_status status = mx_last_status();
    pop_group(opt);
    return status;
  }
  return MX_OK;
}

mx_optimizer *mx__optimizer_new(const char *fn, const mx_optimizer_type *type, void *self, int n,
                                mx_tensor *const *params, const double *h) {
  mx_optimizer *opt = NULL;
  if (check_type(fn, type) == MX_OK) {
    if (!h) mx__null_input(fn, "h");
    else if (!(opt = calloc(1, sizeof *opt))) mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  }
  if (!opt) {
    if (type && type->free_self) type->free_self(self);
    return NULL;
  }
  opt->type = type;
  opt->self = self;
  opt->lr = hparam_index(type, "lr");
  opt->momentum = type->momentum ? hparam_index(type, type->momentum) : -1;
  opt->defaults = malloc(sizeof *opt->defaults * (size_t)type->n_hparams);
  if (!opt->defaults) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    mx_optimizer_free(opt);
    return NULL;
  }
  memcpy(opt->defaults, h, sizeof *opt->defaults * (size_t)type->n_hparams);
  if (mx__optimizer_add_group(fn, opt, n, params, h) != MX_OK) {
    mx_optimizer_free(opt);
    return NULL;
  }
  return opt;
}

mx_optimizer *mx_optimizer_new(const mx_optimizer_type *type, void *self, int n_params, mx_tensor *const *params,
                               const double *h) {
  return mx__optimizer_new("mx_optimizer_new", type, self, n_params, params, h);
}

mx_status mx_optimizer_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const double *h) {
  return mx__optimizer_add_group("mx_optimizer_add_group", opt, n_params, params, h);
}

void mx_optimizer_free(mx_optimizer *opt) {
  if (!opt) return;
  while (opt->n_groups > 0) pop_group(opt);
  if (opt->type->free_self) opt->type->free_self(opt->self);
  free(opt->groups);
  free(opt->params);
  free(opt->slots);
  free(opt->defaults);
  free(opt);
}

/* --- properties -------------------------------------------------------------------------------- */

const char *mx_optimizer_name(const mx_optimizer *opt) {
  if (!opt) {
    mx__null_input("mx_optimizer_name", "opt");
    return NULL;
  }
  return opt->type->name;
}

const mx_optimizer_type *mx_optimizer_type_of(const mx_optimizer *opt) {
  if (!opt) mx__null_input("mx_optimizer_type_of", "opt");
  return opt ? opt->type : NULL;
}

void *mx_optimizer_self(const mx_optimizer *opt) { return opt ? opt->self : NULL; }

int mx_optimizer_num_groups(const mx_optimizer *opt) {
  if (!opt) {
    mx__null_input("mx_optimizer_num_groups", "opt");
    return 0;
  }
  return opt->n_groups;
}

int mx_optimizer_num_params(const mx_optimizer *opt) {
  if (!opt) {
    mx__null_input("mx_optimizer_num_params", "opt");
    return 0;
  }
  return opt->n_params;
}

mx_tensor *mx_optimizer_param(const mx_optimizer *opt, int i) {
  if (!opt) {
    mx__null_input("mx_optimizer_param", "opt");
    return NULL;
  }
  if (i < 0 || i >= opt->n_params) {
    mx__error(MX_INDEX_ERROR, "mx_optimizer_param: parameter %d is out of range (the optimizer has %d)", i,
              opt->n_params);
    return NULL;
  }
  return opt->params[i];
}

mx__optim_group *mx__optimizer_group(const char *fn, const mx_optimizer *opt, int i) {
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  if (i < 0 || i >= opt->n_groups) {
    mx__error(MX_INDEX_ERROR, "%s: group %d is out of range (the optimizer has %d)", fn, i, opt->n_groups);
    return NULL;
  }
  return &opt->groups[i];
}

int mx_optimizer_group_first(const mx_optimizer *opt, int group) {
  const mx__optim_group *g = mx__optimizer_group("mx_optimizer_group_first", opt, group);
  return g ? g->first : -1;
}

int mx_optimizer_group_size(const mx_optimizer *opt, int group) {
  const mx__optim_group *g = mx__optimizer_group("mx_optimizer_group_size", opt, group);
  return g ? g->n : 0;
}

/* --- hyper-parameters -------------------------------------------------------------------------- */

const double *mx_optimizer_hparams(const mx_optimizer *opt, int group) {
  const mx__optim_group *g = mx__optimizer_group("mx_optimizer_hparams", opt, group);
  return g ? g->h : NULL;
}

/* The index of the hyper-parameter name, or -1 with the error set. */
static int named_hparam(const char *fn, const mx_optimizer *opt, const char *name) {
  if (!name) {
    mx__null_input(fn, "name");
    return -1;
  }
  int k = hparam_index(opt->type, name);
  if (k < 0) mx__error(MX_INVALID_ARGUMENT, "%s: %s has no hyper-parameter '%s'", fn, opt->type->name, name);
  return k;
}

double mx_optimizer_get_hparam(const mx_optimizer *opt, int group, const char *name) {
  const char *fn = "mx_optimizer_get_hparam";
  const mx__optim_group *g = mx__optimizer_group(fn, opt, group);
  int k = g ? named_hparam(fn, opt, name) : -1;
  return k >= 0 ? g->h[k] : NAN;
}

mx_status mx__optimizer_set_hparams(const char *fn, mx_optimizer *opt, int group, const double *h) {
  mx__optim_group *g = mx__optimizer_group(fn, opt, group);
  if (!g || check_hparams(fn, opt->type, opt->lr, h) != MX_OK) return mx_last_status();
  if (opt->type->update_group) {
    int *counts = malloc(sizeof *counts * (size_t)g->n);
    if (!counts) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    for (int j = 0; j < g->n; j++) counts[j] = opt->slots[g->first + j].n;
    mx_status status = opt->type->update_group(opt, group, h, fn);
    if (status != MX_OK) mx__optimizer_drop_states(opt, g->first, g->n, counts);
    free(counts);
    if (status != MX_OK) return status;
  }
  memmove(g->h, h, sizeof *g->h * (size_t)opt->type->n_hparams);
  return MX_OK;
}

mx_status mx_optimizer_set_hparams(mx_optimizer *opt, int group, const double *h) {
  return mx__optimizer_set_hparams("mx_optimizer_set_hparams", opt, group, h);
}

/* Sets hyper-parameter k of the group to value, the others as they are. */
static mx_status set_one(const char *fn, mx_optimizer *opt, int group, int k, double value) {
  const mx__optim_group *g = &opt->groups[group];
  double stack[16], *h = opt->type->n_hparams <= 16 ? stack : malloc(sizeof *h * (size_t)opt->type->n_hparams);
  if (!h) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  memcpy(h, g->h, sizeof *h * (size_t)opt->type->n_hparams);
  h[k] = value;
  mx_status status = mx__optimizer_set_hparams(fn, opt, group, h);
  if (h != stack) free(h);
  return status;
}

mx_status mx_optimizer_set_hparam(mx_optimizer *opt, int group, const char *name, double value) {
  const char *fn = "mx_optimizer_set_hparam";
  if (!mx__optimizer_group(fn, opt, group)) return mx_last_status();
  int k = named_hparam(fn, opt, name);
  return k < 0 ? mx_last_status() : set_one(fn, opt, group, k, value);
}

double mx_optimizer_lr(const mx_optimizer *opt, int group) {
  const mx__optim_group *g = mx__optimizer_group("mx_optimizer_lr", opt, group);
  return g ? g->h[opt->lr] : NAN;
}

mx_status mx_optimizer_set_lr(mx_optimizer *opt, int group, double lr) {
  const char *fn = "mx_optimizer_set_lr";
  return mx__optimizer_group(fn, opt, group) ? set_one(fn, opt, group, opt->lr, lr) : mx_last_status();
}

double mx_optimizer_initial_lr(const mx_optimizer *opt, int group) {
  const mx__optim_group *g = mx__optimizer_group("mx_optimizer_initial_lr", opt, group);
  return g ? g->initial_lr : NAN;
}

mx_status mx_optimizer_set_initial_lr(mx_optimizer *opt, int group, double lr) {
  mx__optim_group *g = mx__optimizer_group("mx_optimizer_set_initial_lr", opt, group);
  if (!g) return mx_last_status();
  if (!(lr >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "mx_optimizer_set_initial_lr: invalid learning rate %g (must be >= 0)", lr);
  g->initial_lr = lr;
  return MX_OK;
}

/* The error for a type without momentum. */
static mx_status no_momentum(const char *fn, const mx_optimizer *opt) {
  return mx__error(MX_INVALID_ARGUMENT, "%s: %s has no momentum (its type names no momentum hyper-parameter)", fn,
                   opt->type->name);
}

double mx_optimizer_momentum(const mx_optimizer *opt, int group) {
  const char *fn = "mx_optimizer_momentum";
  const mx__optim_group *g = mx__optimizer_group(fn, opt, group);
  if (g && opt->momentum < 0) no_momentum(fn, opt);
  return g && opt->momentum >= 0 ? g->h[opt->momentum] : NAN;
}

mx_status mx_optimizer_set_momentum(mx_optimizer *opt, int group, double momentum) {
  const char *fn = "mx_optimizer_set_momentum";
  if (!mx__optimizer_group(fn, opt, group)) return mx_last_status();
  if (opt->momentum < 0) return no_momentum(fn, opt);
  return set_one(fn, opt, group, opt->momentum, momentum);
}

mx_status mx_optimizer_error(mx_status status, const char *fmt, ...) {
  char message[1024];
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(message, sizeof message, fmt ? fmt : "", ap);
  va_end(ap);
  return mx__error(status == MX_OK ? MX_INVALID_ARGUMENT : status, "%s", message);
}
