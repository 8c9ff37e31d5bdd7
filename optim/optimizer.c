/* SGD, Adam and AdamW: parameter groups, their state in contiguous buffers on
 * the parameters' device, and the step that hands each group to the
 * backend's multi-tensor kernel. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "optim/optimizer.h"
#include "tensor/tensor_impl.h"

typedef enum { KIND_SGD, KIND_ADAM, KIND_ADAMW } opt_kind;

static const char *const kind_names[] = {"SGD", "Adam", "AdamW"};

/* State is float32 for f32, f16 and bf16 parameters and float64 for f64
 * ones (kernels/backend.h, mx_optim_item): a group keeps one bank of
 * buffers per state dtype. */
enum { BANK_F32, BANK_F64, N_BANKS };
#define MAX_STATES 3 /* SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq, max_exp_avg_sq */

static const char *const state_names[2][MAX_STATES] = {
    {"momentum_buffer", NULL, NULL}, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}};

typedef struct {
  int n;
  mx_tensor **params;                     /* references of the optimizer's own */
  int64_t *offset;                        /* where each parameter's state starts in its bank */
  mx_tensor *state[N_BANKS][MAX_STATES];  /* 1-d, one per bank and kind; NULL: unused or empty */
  mx_tensor *steps;                       /* int64 [n], steps taken; NULL for SGD without momentum */
  mx_sgd_hparams sgd;
  mx_adam_hparams adam;
  double initial_lr;    /* the lr before an LR schedule changed it (PyTorch's 'initial_lr'); NAN: none yet */
  mx_optim_item *items; /* a step's parameters that have a gradient */
  int n_items;
} group;

struct mx_optimizer {
  opt_kind kind;
  mx_device device;
  const mx_backend *backend;
  int n_groups, n_params;
  group *groups;
  mx_sgd_hparams sgd_defaults; /* the options given at creation, for groups added with NULL */
  mx_adam_hparams adam_defaults;
};

mx_sgd_opts mx_sgd_defaults(void) { return (mx_sgd_opts){.lr = 1e-3}; }

mx_adam_opts mx_adam_defaults(void) { return (mx_adam_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}; }

mx_adam_opts mx_adamw_defaults(void) {
  mx_adam_opts o = mx_adam_defaults();
  o.weight_decay = 1e-2;
  return o;
}

/* --- checks ------------------------------------------------------------------- */

static mx_status check_lr(const char *fn, double lr) {
  if (!(lr >= 0)) return mx__error(MX_INVALID_ARGUMENT, "%s: invalid learning rate %g (must be >= 0)", fn, lr);
  return MX_OK;
}

static mx_status check_sgd(const char *fn, const mx_sgd_opts *o) {
  if (check_lr(fn, o->lr) != MX_OK) return MX_INVALID_ARGUMENT;
  if (!(o->momentum >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid momentum %g (must be >= 0)", fn, o->momentum);
  if (!(o->weight_decay >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid weight_decay %g (must be >= 0)", fn, o->weight_decay);
  if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
    return mx__error(MX_INVALID_ARGUMENT,
                     "%s: nesterov momentum requires a momentum > 0 and zero dampening (momentum %g, dampening %g)",
                     fn, o->momentum, o->dampening);
  return MX_OK;
}

static mx_status check_adam(const char *fn, const mx_adam_opts *o) {
  if (check_lr(fn, o->lr) != MX_OK) return MX_INVALID_ARGUMENT;
  if (!(o->eps >= 0)) return mx__error(MX_INVALID_ARGUMENT, "%s: invalid eps %g (must be >= 0)", fn, o->eps);
  if (!(o->beta1 >= 0 && o->beta1 < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid beta1 %g (must be in [0, 1))", fn, o->beta1);
  if (!(o->beta2 >= 0 && o->beta2 < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid beta2 %g (must be in [0, 1))", fn, o->beta2);
  if (!(o->weight_decay >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid weight_decay %g (must be >= 0)", fn, o->weight_decay);
  return MX_OK;
}

/* The index among the optimizer's parameters and params[0..i) of p, or -1. */
static int find_param(const mx_optimizer *opt, int i, mx_tensor *const *params, const mx_tensor *p) {
  int k = 0;
  for (int g = 0; g < opt->n_groups; g++)
    for (int j = 0; j < opt->groups[g].n; j++, k++)
      if (opt->groups[g].params[j] == p) return k;
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

/* --- groups --------------------------------------------------------------------- */

/* A zero-filled 1-d tensor that belongs to the optimizer, not to an open scope. */
static mx_tensor *owned_zeros(const char *fn, int64_t n, mx_dtype dtype, mx_device device) {
  mx_tensor *t = mx_zeros(MX_SHAPE(n), dtype, device);
  if (!t) {
    mx__error_prefix(fn);
    return NULL;
  }
  mx__retain(t);
  mx_release(t); /* the scope lets go of its handle; the optimizer's reference stays */
  return t;
}

static int bank_of(const mx_tensor *p) { return p->dtype == MX_F64 ? BANK_F64 : BANK_F32; }

static void group_free(group *g) {
  for (int i = 0; i < g->n; i++)
    if (g->params[i]) mx__decref(g->params[i]);
  for (int b = 0; b < N_BANKS; b++)
    for (int k = 0; k < MAX_STATES; k++)
      if (g->state[b][k]) mx__decref(g->state[b][k]);
  if (g->steps) mx__decref(g->steps);
  free(g->params);
  free(g->offset);
  free(g->items);
}

/* Fills g for the (checked) params with n_states buffers per bank. */
static mx_status group_init(const char *fn, group *g, int n, mx_tensor *const *params,
                            int n_states, bool counts_steps) {
  memset(g, 0, sizeof *g);
  g->params = calloc((size_t)n, sizeof *g->params);
  g->offset = calloc((size_t)n, sizeof *g->offset);
  g->items = calloc((size_t)n, sizeof *g->items);
  if (!g->params || !g->offset || !g->items) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  g->n = n;
  int64_t numel[N_BANKS] = {0, 0};
  for (int i = 0; i < n; i++) {
    g->params[i] = mx__retain(params[i]);
    g->offset[i] = numel[bank_of(params[i])];
    numel[bank_of(params[i])] += mx_numel(params[i]);
  }
  mx_device device = params[0]->device;
  for (int b = 0; b < N_BANKS; b++)
    for (int k = 0; k < n_states && numel[b] > 0; k++)
      if (!(g->state[b][k] = owned_zeros(fn, numel[b], b == BANK_F64 ? MX_F64 : MX_F32, device)))
        return mx_last_status();
  if (counts_steps && !(g->steps = owned_zeros(fn, n, MX_I64, device))) return mx_last_status();
  return MX_OK;
}

/* Appends a group to opt (its hyper-parameters already in *proto). */
static mx_status add_group(const char *fn, mx_optimizer *opt, int n, mx_tensor *const *params, const group *proto) {
  if (check_params(fn, opt, n, params) != MX_OK) return mx_last_status();
  if (opt->n_groups == 0) {
    opt->device = params[0]->device;
    if (!(opt->backend = mx__backend(opt->device))) return mx__error_prefix(fn);
  }
  group *grown = realloc(opt->groups, sizeof *grown * (size_t)(opt->n_groups + 1));
  if (!grown) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  opt->groups = grown;
  group *g = &opt->groups[opt->n_groups];
  bool sgd = opt->kind == KIND_SGD;
  int n_states = sgd ? (proto->sgd.momentum != 0) : 2 + proto->adam.amsgrad;
  mx_status status = group_init(fn, g, n, params, n_states, sgd ? n_states > 0 : true);
  if (status != MX_OK) {
    group_free(g);
    return status;
  }
  g->sgd = proto->sgd;
  g->adam = proto->adam;
  g->initial_lr = NAN;
  opt->n_groups++;
  opt->n_params += n;
  return MX_OK;
}

static mx_sgd_hparams sgd_hparams(const mx_sgd_opts *o) {
  return (mx_sgd_hparams){o->lr, o->momentum, o->dampening, o->weight_decay, o->nesterov, o->maximize};
}

static mx_adam_hparams adam_hparams(const mx_adam_opts *o, bool decoupled) {
  return (mx_adam_hparams){o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->amsgrad, o->maximize, decoupled};
}

static mx_optimizer *optimizer_new(const char *fn, opt_kind kind, int n, mx_tensor *const *params, const group *proto) {
  mx_optimizer *opt = calloc(1, sizeof *opt);
  if (!opt) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  opt->kind = kind;
  opt->sgd_defaults = proto->sgd;
  opt->adam_defaults = proto->adam;
  if (add_group(fn, opt, n, params, proto) != MX_OK) {
    mx_optimizer_free(opt);
    return NULL;
  }
  return opt;
}

mx_optimizer *mx_sgd_new(int n_params, mx_tensor *const *params, const mx_sgd_opts *opts) {
  mx_sgd_opts o = opts ? *opts : mx_sgd_defaults();
  if (check_sgd("mx_sgd_new", &o) != MX_OK) return NULL;
  group proto = {.sgd = sgd_hparams(&o)};
  return optimizer_new("mx_sgd_new", KIND_SGD, n_params, params, &proto);
}

static mx_optimizer *adam_new(const char *fn, opt_kind kind, int n_params, mx_tensor *const *params,
                              const mx_adam_opts *opts) {
  mx_adam_opts o = opts ? *opts : kind == KIND_ADAMW ? mx_adamw_defaults() : mx_adam_defaults();
  if (check_adam(fn, &o) != MX_OK) return NULL;
  group proto = {.adam = adam_hparams(&o, kind == KIND_ADAMW)};
  return optimizer_new(fn, kind, n_params, params, &proto);
}

mx_optimizer *mx_adam_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  return adam_new("mx_adam_new", KIND_ADAM, n_params, params, opts);
}

mx_optimizer *mx_adamw_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  return adam_new("mx_adamw_new", KIND_ADAMW, n_params, params, opts);
}

mx_status mx_sgd_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_sgd_opts *opts) {
  const char *fn = "mx_sgd_add_group";
  if (!opt) return mx__null_input(fn, "opt");
  if (opt->kind != KIND_SGD)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is %s; add its groups with mx_adam_add_group", fn,
                     kind_names[opt->kind]);
  group proto = {.sgd = opt->sgd_defaults};
  if (opts) {
    if (check_sgd(fn, opts) != MX_OK) return MX_INVALID_ARGUMENT;
    proto.sgd = sgd_hparams(opts);
  }
  return add_group(fn, opt, n_params, params, &proto);
}

mx_status mx_adam_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  const char *fn = "mx_adam_add_group";
  if (!opt) return mx__null_input(fn, "opt");
  if (opt->kind == KIND_SGD)
    return mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is SGD; add its groups with mx_sgd_add_group", fn);
  group proto = {.adam = opt->adam_defaults};
  if (opts) {
    if (check_adam(fn, opts) != MX_OK) return MX_INVALID_ARGUMENT;
    proto.adam = adam_hparams(opts, opt->kind == KIND_ADAMW);
  }
  return add_group(fn, opt, n_params, params, &proto);
}

void mx_optimizer_free(mx_optimizer *opt) {
  if (!opt) return;
  for (int g = 0; g < opt->n_groups; g++) group_free(&opt->groups[g]);
  free(opt->groups);
  free(opt);
}

/* --- properties ------------------------------------------------------------------- */

const char *mx_optimizer_name(const mx_optimizer *opt) {
  if (!opt) {
    mx__null_input("mx_optimizer_name", "opt");
    return NULL;
  }
  return kind_names[opt->kind];
}

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

static group *group_at(const char *fn, const mx_optimizer *opt, int i) {
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

double mx_optimizer_lr(const mx_optimizer *opt, int group_index) {
  const group *g = group_at("mx_optimizer_lr", opt, group_index);
  if (!g) return NAN;
  return opt->kind == KIND_SGD ? g->sgd.lr : g->adam.lr;
}

mx_status mx_optimizer_set_lr(mx_optimizer *opt, int group_index, double lr) {
  group *g = group_at("mx_optimizer_set_lr", opt, group_index);
  if (!g) return mx_last_status();
  if (check_lr("mx_optimizer_set_lr", lr) != MX_OK) return MX_INVALID_ARGUMENT;
  g->sgd.lr = g->adam.lr = lr;
  return MX_OK;
}

double mx_optimizer_initial_lr(const mx_optimizer *opt, int group_index) {
  const group *g = group_at("mx_optimizer_initial_lr", opt, group_index);
  return g ? g->initial_lr : NAN;
}

mx_status mx_optimizer_set_initial_lr(mx_optimizer *opt, int group_index, double lr) {
  group *g = group_at("mx_optimizer_set_initial_lr", opt, group_index);
  if (!g) return mx_last_status();
  if (check_lr("mx_optimizer_set_initial_lr", lr) != MX_OK) return MX_INVALID_ARGUMENT;
  g->initial_lr = lr;
  return MX_OK;
}

double mx_optimizer_momentum(const mx_optimizer *opt, int group_index) {
  const group *g = group_at("mx_optimizer_momentum", opt, group_index);
  if (!g) return NAN;
  return opt->kind == KIND_SGD ? g->sgd.momentum : g->adam.beta1;
}

/* A group made without momentum gets its momentum buffers (and step counts,
 * so its first step with momentum starts them) when it is given one, as
 * PyTorch's buffer is born on the first step that uses it. */
static mx_status add_momentum_state(const char *fn, const mx_optimizer *opt, group *g) {
  int64_t numel[N_BANKS] = {0, 0};
  for (int j = 0; j < g->n; j++) numel[bank_of(g->params[j])] += mx_numel(g->params[j]);
  mx_tensor *buffers[N_BANKS] = {NULL, NULL}, *steps = owned_zeros(fn, g->n, MX_I64, opt->device);
  bool ok = steps != NULL;
  for (int b = 0; b < N_BANKS && ok; b++)
    if (numel[b] > 0)
      ok = (buffers[b] = owned_zeros(fn, numel[b], b == BANK_F64 ? MX_F64 : MX_F32, opt->device)) != NULL;
  if (!ok) {
    for (int b = 0; b < N_BANKS; b++)
      if (buffers[b]) mx__decref(buffers[b]);
    if (steps) mx__decref(steps);
    return mx_last_status();
  }
  for (int b = 0; b < N_BANKS; b++) g->state[b][0] = buffers[b];
  g->steps = steps;
  return MX_OK;
}

mx_status mx_optimizer_set_momentum(mx_optimizer *opt, int group_index, double momentum) {
  const char *fn = "mx_optimizer_set_momentum";
  group *g = group_at(fn, opt, group_index);
  if (!g) return mx_last_status();
  if (opt->kind != KIND_SGD) {
    const mx_adam_hparams *h = &g->adam;
    mx_adam_opts o = {h->lr, momentum, h->beta2, h->eps, h->weight_decay, h->amsgrad, h->maximize};
    if (check_adam(fn, &o) != MX_OK) return MX_INVALID_ARGUMENT;
    g->adam.beta1 = momentum;
    return MX_OK;
  }
  const mx_sgd_hparams *h = &g->sgd;
  mx_sgd_opts o = {h->lr, momentum, h->dampening, h->weight_decay, h->nesterov, h->maximize};
  if (check_sgd(fn, &o) != MX_OK) return MX_INVALID_ARGUMENT;
  if (momentum != 0 && !g->steps && add_momentum_state(fn, opt, g) != MX_OK) return mx_last_status();
  g->sgd.momentum = momentum;
  return MX_OK;
}

/* Parameter i (group after group): its group and its index there. */
static group *locate(const char *fn, const mx_optimizer *opt, int i, int *j) {
  if (!opt) {
    mx__null_input(fn, "opt");
    return NULL;
  }
  if (i < 0 || i >= opt->n_params) {
    mx__error(MX_INDEX_ERROR, "%s: parameter %d is out of range (the optimizer has %d)", fn, i, opt->n_params);
    return NULL;
  }
  group *g = opt->groups;
  while (i >= g->n) i -= g++->n;
  *j = i;
  return g;
}

mx_tensor *mx_optimizer_param(const mx_optimizer *opt, int i) {
  int j;
  group *g = locate("mx_optimizer_param", opt, i, &j);
  return g ? g->params[j] : NULL;
}

mx_tensor *mx_optimizer_state(const mx_optimizer *opt, int i, const char *name) {
  const char *fn = "mx_optimizer_state";
  int j;
  group *g = locate(fn, opt, i, &j);
  if (!g) return NULL;
  if (!name) {
    mx__null_input(fn, "name");
    return NULL;
  }
  const mx_tensor *p = g->params[j];
  if (!strcmp(name, "step") && g->steps) return mx__tensor_view(g->steps, 0, NULL, NULL, j);
  for (int k = 0; k < MAX_STATES; k++) {
    const char *known = state_names[opt->kind != KIND_SGD][k];
    const mx_tensor *buffer = g->state[bank_of(p)][k];
    if (known && !strcmp(name, known) && buffer) {
      int64_t strides[MX_MAX_DIMS];
      mx__contiguous_strides(p->ndim, p->shape, strides);
      return mx__tensor_view(buffer, p->ndim, p->shape, strides, g->offset[j]);
    }
  }
  mx__error(MX_INVALID_ARGUMENT, "%s: this %s keeps no state '%s' for parameter %d", fn, kind_names[opt->kind], name,
            i);
  return NULL;
}

int mx_optimizer_state_names(const mx_optimizer *opt, int i, const char **names) {
  int j, n = 0;
  const group *g = locate("mx_optimizer_state_names", opt, i, &j);
  if (!g) return -1;
  if (g->steps) names[n++] = "step";
  for (int k = 0; k < MAX_STATES; k++)
    if (state_names[opt->kind != KIND_SGD][k] && g->state[bank_of(g->params[j])][k])
      names[n++] = state_names[opt->kind != KIND_SGD][k];
  return n;
}

/* --- hyper-parameters by group (param_groups) ---------------------------------------- */

/* Group i of an optimizer of the wanted kind (SGD or not). */
static group *group_of_kind(const char *fn, const mx_optimizer *opt, int i, const void *arg, bool sgd) {
  if (opt && !arg) {
    mx__null_input(fn, "opts");
    return NULL;
  }
  group *g = group_at(fn, opt, i);
  if (g && (opt->kind == KIND_SGD) != sgd) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is %s", fn, kind_names[opt->kind]);
    return NULL;
  }
  return g;
}

mx_status mx_optimizer_get_sgd_opts(const mx_optimizer *opt, int i, mx_sgd_opts *out) {
  const group *g = group_of_kind("mx_optimizer_get_sgd_opts", opt, i, out, true);
  if (!g) return mx_last_status();
  const mx_sgd_hparams *h = &g->sgd;
  *out = (mx_sgd_opts){h->lr, h->momentum, h->dampening, h->weight_decay, h->nesterov, h->maximize};
  return MX_OK;
}

mx_status mx_optimizer_get_adam_opts(const mx_optimizer *opt, int i, mx_adam_opts *out) {
  const group *g = group_of_kind("mx_optimizer_get_adam_opts", opt, i, out, false);
  if (!g) return mx_last_status();
  const mx_adam_hparams *h = &g->adam;
  *out = (mx_adam_opts){h->lr, h->beta1, h->beta2, h->eps, h->weight_decay, h->amsgrad, h->maximize};
  return MX_OK;
}

mx_status mx_optimizer_set_sgd_opts(mx_optimizer *opt, int i, const mx_sgd_opts *opts) {
  const char *fn = "mx_optimizer_set_sgd_opts";
  group *g = group_of_kind(fn, opt, i, opts, true);
  if (!g || check_sgd(fn, opts) != MX_OK) return mx_last_status();
  if (opts->momentum != 0 && !g->steps && add_momentum_state(fn, opt, g) != MX_OK) return mx_last_status();
  g->sgd = sgd_hparams(opts);
  return MX_OK;
}

mx_status mx_optimizer_set_adam_opts(mx_optimizer *opt, int i, const mx_adam_opts *opts) {
  const char *fn = "mx_optimizer_set_adam_opts";
  group *g = group_of_kind(fn, opt, i, opts, false);
  if (!g || check_adam(fn, opts) != MX_OK) return mx_last_status();
  if (opts->amsgrad != g->adam.amsgrad)
    return mx__error(MX_INVALID_ARGUMENT, "%s: group %d was made with amsgrad %s; it cannot change", fn, i,
                     g->adam.amsgrad ? "true" : "false");
  g->adam = adam_hparams(opts, opt->kind == KIND_ADAMW);
  return MX_OK;
}

/* --- steps ------------------------------------------------------------------------ */

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

static const float *flag_ptr(const mx_tensor *t) { return t ? (const float *)mx__kview_of(t).data : NULL; }

/* The items of a group's parameters that have a gradient; k counts
 * parameters across groups, for the messages. */
static mx_status collect(const char *fn, group *g, int *k) {
  g->n_items = 0;
  for (int j = 0; j < g->n; j++, (*k)++) {
    mx_tensor *p = g->params[j], *grad = mx_grad_of(p);
    if (!grad) continue;
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    if (grad->ndim != p->ndim || memcmp(grad->shape, p->shape, sizeof(int64_t) * (size_t)p->ndim))
      return mx__error(MX_SHAPE_ERROR, "%s: the grad of parameter %d has shape %s but the parameter %s", fn, *k,
                       mx__dims_str(a, grad->ndim, grad->shape), mx__dims_str(b, p->ndim, p->shape));
    if (grad->device != p->device)
      return mx__error(MX_DEVICE_ERROR, "%s: the grad of parameter %d is on %s but the parameter on %s", fn, *k,
                       mx_device_name(grad->device), mx_device_name(p->device));
    mx_optim_item *it = &g->items[g->n_items++];
    memset(it, 0, sizeof *it);
    it->param = mx__kview_of(p);
    it->grad = mx__kview_of(grad);
    int64_t state_size = p->dtype == MX_F64 ? 8 : 4;
    for (int s = 0; s < MAX_STATES; s++) {
      mx_tensor *buffer = g->state[bank_of(p)][s];
      if (buffer) it->state[s] = (char *)mx__kview_of(buffer).data + g->offset[j] * state_size;
    }
    if (g->steps) it->step = (int64_t *)mx__kview_of(g->steps).data + j;
  }
  return MX_OK;
}

static mx_status step(const char *fn, mx_optimizer *opt, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  if (!opt) return mx__null_input(fn, "opt");
  if (check_flag(fn, opt, found_inf, "found_inf") != MX_OK || check_flag(fn, opt, grad_scale, "grad_scale") != MX_OK)
    return mx_last_status();
  int k = 0; /* every gradient is checked before anything changes */
  for (int i = 0; i < opt->n_groups; i++)
    if (collect(fn, &opt->groups[i], &k) != MX_OK) return mx_last_status();
  for (int i = 0; i < opt->n_groups; i++) {
    group *g = &opt->groups[i];
    if (g->n_items == 0) continue;
    const float *inf = flag_ptr(found_inf), *scale = flag_ptr(grad_scale);
    mx_status status = opt->kind == KIND_SGD ? opt->backend->sgd_step(g->n_items, g->items, &g->sgd, inf, scale)
                                             : opt->backend->adam_step(g->n_items, g->items, &g->adam, inf, scale);
    if (status != MX_OK) return mx__error_prefix(fn);
    /* written in place, as far as the host knows (found_inf is read on the device) */
    for (int j = 0; j < g->n; j++)
      if (mx_grad_of(g->params[j])) mx__bump_version(g->params[j]);
  }
  return MX_OK;
}

mx_status mx_optimizer_step(mx_optimizer *opt) { return step("mx_optimizer_step", opt, NULL, NULL); }

mx_status mx_optimizer_step_amp(mx_optimizer *opt, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return step("mx_optimizer_step_amp", opt, found_inf, grad_scale);
}

mx_status mx_optimizer_zero_grad(mx_optimizer *opt, bool set_to_none) {
  if (!opt) return mx__null_input("mx_optimizer_zero_grad", "opt");
  for (int i = 0; i < opt->n_groups; i++) {
    group *g = &opt->groups[i];
    for (int j = 0; j < g->n; j++) {
      mx_tensor *grad = mx_grad_of(g->params[j]);
      if (!grad) continue;
      if (set_to_none) {
        mx_zero_grad(g->params[j]);
      } else if (mx_fill_(grad, 0) != MX_OK) {
        return mx__error_prefix("mx_optimizer_zero_grad");
      }
    }
  }
  return MX_OK;
}
