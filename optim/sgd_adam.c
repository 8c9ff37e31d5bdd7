/* SGD, Adam and AdamW as optimizer types: their hyper-parameters, their
 * state in contiguous buffers on the parameters' device (registered per
 * parameter as views), and the step that hands a group to the backend's
 * multi-tensor kernel. */
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "optim/optimizer_internal.h"

/* Each group's hyper-parameters, in the types' order. */
enum { SGD_LR, SGD_MOMENTUM, SGD_DAMPENING, SGD_WEIGHT_DECAY, SGD_NESTEROV, SGD_MAXIMIZE, SGD_N };
enum { ADAM_LR, ADAM_BETA1, ADAM_BETA2, ADAM_EPS, ADAM_WEIGHT_DECAY, ADAM_AMSGRAD, ADAM_MAXIMIZE, ADAM_N };

static const mx_optimizer_hparam sgd_hparams[SGD_N] = {
    {.name = "lr"}, {.name = "momentum"}, {.name = "dampening"}, {.name = "weight_decay"},
    {.name = "nesterov", .flag = true}, {.name = "maximize", .flag = true}};
static const mx_optimizer_hparam adam_hparams[ADAM_N] = {
    {.name = "lr"}, {.name = "beta1"}, {.name = "beta2"}, {.name = "eps"}, {.name = "weight_decay"},
    {.name = "amsgrad", .flag = true}, {.name = "maximize", .flag = true}};

/* PyTorch's names, in mx_optim_item's state order. */
static const char *const sgd_states[] = {"momentum_buffer"};
static const char *const adam_states[] = {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"};

/* The built-ins' own data: the backend and a step's items, with their
 * parameters and the casts asked of the step (cast_of[k]: the tensor of
 * casts[k], an internal reference until it is attached; NULL: none). */
typedef struct {
  const mx_backend *backend;
  mx_optim_item *items;
  mx_tensor **param_of, **cast_of;
  mx_optim_cast *casts;
  int capacity;
} builtin;

static void builtin_free(void *self) {
  builtin *b = self;
  if (b) free(b->items), free(b->param_of), free(b->cast_of), free(b->casts);
  free(b);
}

mx_sgd_opts mx_sgd_defaults(void) { return (mx_sgd_opts){.lr = 1e-3}; }

mx_adam_opts mx_adam_defaults(void) { return (mx_adam_opts){.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8}; }

mx_adam_opts mx_adamw_defaults(void) {
  mx_adam_opts o = mx_adam_defaults();
  o.weight_decay = 1e-2;
  return o;
}

/* --- checks (the lr is checked before) ---------------------------------------------------------- */

static mx_status check_sgd(const double *h, const char *fn) {
  if (!(h[SGD_MOMENTUM] >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid momentum %g (must be >= 0)", fn, h[SGD_MOMENTUM]);
  if (!(h[SGD_WEIGHT_DECAY] >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid weight_decay %g (must be >= 0)", fn, h[SGD_WEIGHT_DECAY]);
  if (h[SGD_NESTEROV] != 0 && (h[SGD_MOMENTUM] <= 0 || h[SGD_DAMPENING] != 0))
    return mx__error(MX_INVALID_ARGUMENT,
                     "%s: nesterov momentum requires a momentum > 0 and zero dampening (momentum %g, dampening %g)",
                     fn, h[SGD_MOMENTUM], h[SGD_DAMPENING]);
  return MX_OK;
}

static mx_status check_adam(const double *h, const char *fn) {
  if (!(h[ADAM_EPS] >= 0)) return mx__error(MX_INVALID_ARGUMENT, "%s: invalid eps %g (must be >= 0)", fn, h[ADAM_EPS]);
  if (!(h[ADAM_BETA1] >= 0 && h[ADAM_BETA1] < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid beta1 %g (must be in [0, 1))", fn, h[ADAM_BETA1]);
  if (!(h[ADAM_BETA2] >= 0 && h[ADAM_BETA2] < 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid beta2 %g (must be in [0, 1))", fn, h[ADAM_BETA2]);
  if (!(h[ADAM_WEIGHT_DECAY] >= 0))
    return mx__error(MX_INVALID_ARGUMENT, "%s: invalid weight_decay %g (must be >= 0)", fn, h[ADAM_WEIGHT_DECAY]);
  return MX_OK;
}

/* --- state ------------------------------------------------------------------------------------- */

/* State is float32 for f32, f16 and bf16 parameters and float64 for f64
 * ones (kernels/backend.h, mx_optim_item): a group keeps one buffer per
 * kind of state and state dtype. */
enum { BANK_F32, BANK_F64, N_BANKS };

static int bank_of(const mx_tensor *p) { return p->dtype == MX_F64 ? BANK_F64 : BANK_F32; }

/* A 4-d parameter laid out channels-last and not also row-major (sizes of 1 can make it both). */
static bool laid_channels_last(const mx_tensor *p) {
  mx_kview v = mx__kview_of(p);
  return p->ndim == 4 && mx__kview_is_channels_last(&v) && !mx__kview_is_contiguous(&v);
}

/* v's dims in the order of a channels-last tensor's memory, (N, H, W, C):
 * walked row-major, it goes through channels-last memory in order. */
static mx_kview in_nhwc_order(mx_kview v) {
  static const int order[4] = {0, 2, 3, 1};
  mx_kview p = v;
  for (int d = 0; d < 4; d++) p.shape[d] = v.shape[order[d]], p.strides[d] = v.strides[order[d]];
  return p;
}
/* Registers, for every parameter of the group, "step" (an int64 count,
 * 0-d) and the n named states (zeros with its shape) as views of buffers
 * shared by the group, each laid out as its parameter: row-major, or
 * channels-last for a channels-last one (mx_module_to_channels_last), so
 * that the kernels walk parameter, gradient and state in one memory order
 * (collect). */
static mx_status register_state(mx_optimizer *opt, int group, int n, const char *const *names) {
  const mx__optim_group *g = &opt->groups[group];
  int64_t numel[N_BANKS] = {0, 0};
  for (int j = 0; j < g->n; j++) numel[bank_of(opt->params[g->first + j])] += mx_numel(opt->params[g->first + j]);
  mx_scope *scope = mx_scope_begin(); /* the buffers' own handles go at its end; the views keep them */
  if (!scope) return mx_last_status();
  mx_tensor *steps = mx_zeros(MX_SHAPE(g->n), MX_I64, opt->device), *banks[N_BANKS][3] = {{NULL}};
  mx_status status = steps ? MX_OK : mx_last_status();
  for (int b = 0; b < N_BANKS && status == MX_OK; b++)
    for (int k = 0; k < n && numel[b] > 0 && status == MX_OK; k++)
      if (!(banks[b][k] = mx_zeros(MX_SHAPE(numel[b]), b == BANK_F64 ? MX_F64 : MX_F32, opt->device)))
        status = mx_last_status();
  int64_t offset[N_BANKS] = {0, 0};
  for (int j = 0; j < g->n && status == MX_OK; j++) {
    const mx_tensor *p = opt->params[g->first + j];
    int64_t strides[MX_MAX_DIMS];
    if (laid_channels_last(p)) mx__channels_last_strides(p->shape, strides);
    else mx__contiguous_strides(p->ndim, p->shape, strides);
    status = mx_optimizer_add_state(opt, g->first + j, "step", mx__tensor_view(steps, 0, NULL, NULL, j));
    for (int k = 0; k < n && status == MX_OK; k++)
      status = mx_optimizer_add_state(opt, g->first + j, names[k],
                                      mx__tensor_view(banks[bank_of(p)][k], p->ndim, p->shape, strides,
                                                      offset[bank_of(p)]));
    offset[bank_of(p)] += mx_numel(p);
  }
  mx_scope_end(scope);
  return status;
}

/* The backend of the optimizer's device, found with its first group. */
static mx_status find_backend(mx_optimizer *opt, int group, const char *fn) {
  builtin *b = mx_optimizer_self(opt);
  if (group == 0 && !(b->backend = mx__backend(opt->device))) return mx__error_prefix(fn);
  return MX_OK;
}

/* A group made with momentum has its buffers (and step counts) from the
 * start; one given a momentum later gets them then, as PyTorch's buffer is
 * born on the first step that uses it. */
static mx_status sgd_init_group(mx_optimizer *opt, int group, const char *fn) {
  if (find_backend(opt, group, fn) != MX_OK) return mx_last_status();
  if (opt->groups[group].h[SGD_MOMENTUM] == 0) return MX_OK;
  return register_state(opt, group, 1, sgd_states) == MX_OK ? MX_OK : mx__error_prefix(fn);
}

static mx_status sgd_update_group(mx_optimizer *opt, int group, const double *h, const char *fn) {
  bool has_buffers = mx__optimizer_find_state(opt, opt->groups[group].first, "step") != NULL;
  if (h[SGD_MOMENTUM] == 0 || has_buffers) return MX_OK;
  return register_state(opt, group, 1, sgd_states) == MX_OK ? MX_OK : mx__error_prefix(fn);
}

static mx_status adam_init_group(mx_optimizer *opt, int group, const char *fn) {
  if (find_backend(opt, group, fn) != MX_OK) return mx_last_status();
  int n = opt->groups[group].h[ADAM_AMSGRAD] != 0 ? 3 : 2;
  return register_state(opt, group, n, adam_states) == MX_OK ? MX_OK : mx__error_prefix(fn);
}

static mx_status adam_update_group(mx_optimizer *opt, int group, const double *h, const char *fn) {
  double was = opt->groups[group].h[ADAM_AMSGRAD];
  if (h[ADAM_AMSGRAD] != was)
    return mx__error(MX_INVALID_ARGUMENT, "%s: group %d was made with amsgrad %s; it cannot change", fn, group,
                     was != 0 ? "true" : "false");
  return MX_OK;
}

/* --- steps ------------------------------------------------------------------------------------- */

static const float *flag_ptr(const mx_tensor *t) { return t ? (const float *)mx__kview_of(t).data : NULL; }

static mx_status grow(builtin *b, int n) {
  if (n <= b->capacity) return MX_OK;
  mx_optim_item *items = realloc(b->items, sizeof *items * (size_t)n);
  if (items) b->items = items;
  mx_tensor **param_of = realloc(b->param_of, sizeof *param_of * (size_t)n);
  if (param_of) b->param_of = param_of;
  mx_tensor **cast_of = realloc(b->cast_of, sizeof *cast_of * (size_t)n);
  if (cast_of) b->cast_of = cast_of;
  mx_optim_cast *casts = realloc(b->casts, sizeof *casts * (size_t)n);
  if (casts) b->casts = casts;
  if (!items || !param_of || !cast_of || !casts) return mx__error(MX_OUT_OF_MEMORY, "out of memory");
  b->capacity = n;
  return MX_OK;
}

/* A new tensor for the step to write p's cast into, when autocast cast p
 * since the last step (mx__prepared_cast_asked), the backend writes casts
 * and p is a dense float32 tensor walked row-major; NULL with no error:
 * none. A new one every step, never an earlier cast written over: a graph
 * or the user may still hold that. Held by an internal reference, in no
 * scope. */
static mx_tensor *new_cast(const builtin *b, mx_tensor *p, bool row_major_walk, mx_status *status) {
  mx_dtype dtype = mx__prepared_cast_asked(p);
  if (dtype == MX_DTYPE_COUNT || !b->backend->optim_casts || p->dtype != MX_F32 || !row_major_walk ||
      !mx_is_contiguous(p))
    return NULL;
  mx_tensor *cast = mx__tensor_alloc("optimizer step", mx_shape_get(p), dtype, p->device);
  if (!cast) {
    *status = mx_last_status();
    return NULL;
  }
  mx__retain(cast);
  mx_release(cast);
  return cast;
}

/* Hands each stepped parameter the cast its step wrote (after its version
 * bump: the cast is of the data at the new version) in place of its earlier
 * one, stale now; a step skipped on found_inf or failed attaches none. */
static void attach_casts(builtin *b, int n, bool stepped) {
  for (int k = 0; k < n; k++) {
    mx_tensor *cast = b->cast_of[k];
    b->cast_of[k] = NULL;
    bool written = cast && stepped && b->casts[k].written;
    if (written) mx__bump_version(cast); /* written once, as mx_to_dtype's copy writes its output */
    if (cast && !written) mx__decref(cast);
    mx__prepared_cast_set(b->param_of[k], written ? cast : NULL);
  }
}

/* The items of the group's parameters that have a gradient (n of them):
 * the kernel's views of the parameter, its gradient and its state, and
 * where it writes the parameter's cast. */
static mx_status collect(mx_optimizer *opt, int group, int n_states, const char *const *names, int *n) {
  builtin *b = mx_optimizer_self(opt);
  const mx__optim_group *g = &opt->groups[group];
  *n = 0;
  if (grow(b, g->n) != MX_OK) return mx_last_status();
  mx_status status = MX_OK;
  for (int i = g->first; i < g->first + g->n && status == MX_OK; i++) {
    mx_tensor *p = opt->params[i], *grad = mx_grad_of(p);
    if (!grad) continue;
    int j = (*n)++;
    mx_optim_item *it = &b->items[j];
    memset(it, 0, sizeof *it);
    it->param = mx__kview_of(p);
    it->grad = mx__kview_of(grad);
    for (int k = 0; k < n_states; k++) {
      const mx_tensor *state = mx__optimizer_find_state(opt, i, names[k]);
      if (state) it->state[k] = mx__kview_of(state).data;
    }
    /* The kernels give element k of the walk state element k: the walk
     * follows the states' memory (the parameter's when it has none), so a
     * channels-last parameter with channels-last states is one run of
     * memory, and its gradient too when it lies alike. */
    const mx_tensor *first_state = n_states > 0 ? mx__optimizer_find_state(opt, i, names[0]) : NULL;
    bool nhwc_walk = laid_channels_last(first_state ? first_state : p);
    if (nhwc_walk) {
      it->param = in_nhwc_order(it->param);
      it->grad = in_nhwc_order(it->grad);
    }
    const mx_tensor *steps = mx__optimizer_find_state(opt, i, "step");
    if (steps) it->step = mx__kview_of(steps).data;
    b->param_of[j] = p;
    b->cast_of[j] = new_cast(b, p, !nhwc_walk, &status);
    if (!b->cast_of[j]) continue;
    b->casts[j] = (mx_optim_cast){.data = mx__kview_of(b->cast_of[j]).data, .dtype = b->cast_of[j]->dtype};
    it->cast = &b->casts[j];
  }
  if (status != MX_OK) attach_casts(b, *n, false);
  return status;
}

/* Marks the group's parameters that stepped as written in place (as far as
 * the host knows: found_inf is read on the device). */
static void bump_versions(mx_optimizer *opt, int group) {
  const mx__optim_group *g = &opt->groups[group];
  for (int i = g->first; i < g->first + g->n; i++)
    if (mx_grad_of(opt->params[i])) mx__bump_version(opt->params[i]);
}

static mx_status sgd_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  int n;
  if (collect(opt, group, 1, sgd_states, &n) != MX_OK) return mx_last_status();
  const double *h = opt->groups[group].h;
  mx_sgd_hparams hp = {h[SGD_LR], h[SGD_MOMENTUM], h[SGD_DAMPENING], h[SGD_WEIGHT_DECAY], h[SGD_NESTEROV] != 0,
                       h[SGD_MAXIMIZE] != 0};
  builtin *b = mx_optimizer_self(opt);
  mx_status status = b->backend->sgd_step(n, b->items, &hp, flag_ptr(found_inf), flag_ptr(grad_scale));
  if (status == MX_OK) bump_versions(opt, group);
  attach_casts(b, n, status == MX_OK);
  return status;
}

static mx_status adam_step_with(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale,
                                bool decoupled) {
  int n;
  if (collect(opt, group, 3, adam_states, &n) != MX_OK) return mx_last_status();
  const double *h = opt->groups[group].h;
  mx_adam_hparams hp = {h[ADAM_LR],           h[ADAM_BETA1],          h[ADAM_BETA2],          h[ADAM_EPS],
                        h[ADAM_WEIGHT_DECAY], h[ADAM_AMSGRAD] != 0, h[ADAM_MAXIMIZE] != 0, decoupled};
  builtin *b = mx_optimizer_self(opt);
  mx_status status = b->backend->adam_step(n, b->items, &hp, flag_ptr(found_inf), flag_ptr(grad_scale));
  if (status == MX_OK) bump_versions(opt, group);
  attach_casts(b, n, status == MX_OK);
  return status;
}

static mx_status adam_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return adam_step_with(opt, group, found_inf, grad_scale, false);
}

static mx_status adamw_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return adam_step_with(opt, group, found_inf, grad_scale, true);
}

/* --- the types --------------------------------------------------------------------------------- */

static const mx_optimizer_type sgd_type = {
    .name = "SGD", .n_hparams = SGD_N, .hparams = sgd_hparams, .momentum = "momentum", .check = check_sgd,
    .init_group = sgd_init_group, .update_group = sgd_update_group, .step = sgd_step, .free_self = builtin_free};
static const mx_optimizer_type adam_type = {
    .name = "Adam", .n_hparams = ADAM_N, .hparams = adam_hparams, .momentum = "beta1", .check = check_adam,
    .init_group = adam_init_group, .update_group = adam_update_group, .step = adam_step, .free_self = builtin_free};
static const mx_optimizer_type adamw_type = {
    .name = "AdamW", .n_hparams = ADAM_N, .hparams = adam_hparams, .momentum = "beta1", .check = check_adam,
    .init_group = adam_init_group, .update_group = adam_update_group, .step = adamw_step, .free_self = builtin_free};

static void sgd_values(const mx_sgd_opts *o, double *h) {
  double values[SGD_N] = {o->lr, o->momentum, o->dampening, o->weight_decay, o->nesterov, o->maximize};
  memcpy(h, values, sizeof values);
}

static void adam_values(const mx_adam_opts *o, double *h) {
  double values[ADAM_N] = {o->lr, o->beta1, o->beta2, o->eps, o->weight_decay, o->amsgrad, o->maximize};
  memcpy(h, values, sizeof values);
}

static mx_optimizer *builtin_new(const char *fn, const mx_optimizer_type *type, int n, mx_tensor *const *params,
                                 const double *h) {
  builtin *b = calloc(1, sizeof *b);
  if (!b) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  return mx__optimizer_new(fn, type, b, n, params, h);
}

mx_optimizer *mx_sgd_new(int n_params, mx_tensor *const *params, const mx_sgd_opts *opts) {
  mx_sgd_opts o = opts ? *opts : mx_sgd_defaults();
  double h[SGD_N];
  sgd_values(&o, h);
  return builtin_new("mx_sgd_new", &sgd_type, n_params, params, h);
}

static mx_optimizer *adam_new(const char *fn, const mx_optimizer_type *type, int n_params, mx_tensor *const *params,
                              const mx_adam_opts *opts) {
  mx_adam_opts o = opts ? *opts : type == &adamw_type ? mx_adamw_defaults() : mx_adam_defaults();
  double h[ADAM_N];
  adam_values(&o, h);
  return builtin_new(fn, type, n_params, params, h);
}

mx_optimizer *mx_adam_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  return adam_new("mx_adam_new", &adam_type, n_params, params, opts);
}

mx_optimizer *mx_adamw_new(int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  return adam_new("mx_adamw_new", &adamw_type, n_params, params, opts);
}

static bool is_sgd(const mx_optimizer *opt) { return opt->type == &sgd_type; }
static bool is_adam(const mx_optimizer *opt) { return opt->type == &adam_type || opt->type == &adamw_type; }

mx_status mx_sgd_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_sgd_opts *opts) {
  const char *fn = "mx_sgd_add_group";
  if (!opt) return mx__null_input(fn, "opt");
  if (!is_sgd(opt))
    return mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is %s; add its groups with %s", fn, opt->type->name,
                     is_adam(opt) ? "mx_adam_add_group" : "mx_optimizer_add_group");
  double h[SGD_N];
  if (opts) sgd_values(opts, h);
  return mx__optimizer_add_group(fn, opt, n_params, params, opts ? h : NULL);
}

mx_status mx_adam_add_group(mx_optimizer *opt, int n_params, mx_tensor *const *params, const mx_adam_opts *opts) {
  const char *fn = "mx_adam_add_group";
  if (!opt) return mx__null_input(fn, "opt");
  if (!is_adam(opt))
    return mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is %s; add its groups with %s", fn, opt->type->name,
                     is_sgd(opt) ? "mx_sgd_add_group" : "mx_optimizer_add_group");
  double h[ADAM_N];
  if (opts) adam_values(opts, h);
  return mx__optimizer_add_group(fn, opt, n_params, params, opts ? h : NULL);
}

/* --- hyper-parameters as options (param_groups) ------------------------------------------------- */

/* Group i of an optimizer of the wanted kind (SGD or Adam/AdamW). */
static const mx__optim_group *group_of_kind(const char *fn, const mx_optimizer *opt, int i, const void *arg,
                                            bool sgd) {
  if (opt && !arg) {
    mx__null_input(fn, "opts");
    return NULL;
  }
  const mx__optim_group *g = mx__optimizer_group(fn, opt, i);
  if (g && (sgd ? !is_sgd(opt) : !is_adam(opt))) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the optimizer is %s", fn, opt->type->name);
    return NULL;
  }
  return g;
}

mx_status mx_optimizer_get_sgd_opts(const mx_optimizer *opt, int i, mx_sgd_opts *out) {
  const mx__optim_group *g = group_of_kind("mx_optimizer_get_sgd_opts", opt, i, out, true);
  if (!g) return mx_last_status();
  const double *h = g->h;
  *out = (mx_sgd_opts){h[SGD_LR], h[SGD_MOMENTUM], h[SGD_DAMPENING], h[SGD_WEIGHT_DECAY], h[SGD_NESTEROV] != 0,
                       h[SGD_MAXIMIZE] != 0};
  return MX_OK;
}

mx_status mx_optimizer_get_adam_opts(const mx_optimizer *opt, int i, mx_adam_opts *out) {
  const mx__optim_group *g = group_of_kind("mx_optimizer_get_adam_opts", opt, i, out, false);
  if (!g) return mx_last_status();
  const double *h = g->h;
  *out = (mx_adam_opts){h[ADAM_LR],           h[ADAM_BETA1],          h[ADAM_BETA2],         h[ADAM_EPS],
                        h[ADAM_WEIGHT_DECAY], h[ADAM_AMSGRAD] != 0, h[ADAM_MAXIMIZE] != 0};
  return MX_OK;
}

mx_status mx_optimizer_set_sgd_opts(mx_optimizer *opt, int i, const mx_sgd_opts *opts) {
  const char *fn = "mx_optimizer_set_sgd_opts";
  if (!group_of_kind(fn, opt, i, opts, true)) return mx_last_status();
  double h[SGD_N];
  sgd_values(opts, h);
  return mx__optimizer_set_hparams(fn, opt, i, h);
}

mx_status mx_optimizer_set_adam_opts(mx_optimizer *opt, int i, const mx_adam_opts *opts) {
  const char *fn = "mx_optimizer_set_adam_opts";
  if (!group_of_kind(fn, opt, i, opts, false)) return mx_last_status();
  double h[ADAM_N];
  adam_values(opts, h);
  return mx__optimizer_set_hparams(fn, opt, i, h);
}
