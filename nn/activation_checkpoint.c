/* Activation checkpointing: fn's saved tensors are dropped in forward (through
 * saved-tensor hooks) and recomputed in backward under the forward's autocast
 * and random state. */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "amp/amp.h"
#include "nn/activation_checkpoint.h"
#include "nn/nn_internal.h"
#include "tensor/tensor_impl.h"

static const char *const FN = "mx_activation_checkpoint";

/* The shape and dtype of a tensor fn saved, to check its recomputation. */
typedef struct {
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  mx_dtype dtype;
} saved_meta;

/* One checkpointed call: what recomputing it needs, and the recomputed
 * tensors until backward takes them. Held by the call while it runs and by
 * each tensor it packed; the graph's nodes hold those. */
typedef struct {
  atomic_long refs;
  mx_activation_checkpoint_fn fn;
  void *user;
  void (*free_user)(void *user);
  int n_inputs, n_outputs;
  /* the inputs, saved by a graph node of their own (through the enclosing
   * checkpoint's hooks when nested): the node's 0-element output owns it */
  mx_tensor *inputs_token;
  mx_function_ctx *inputs_ctx;
  mx_autocast_state autocast;
  int n_generators; /* generators[0] is the default one; none without rng state */
  mx_generator **generators;
  uint64_t (*rng_state)[2]; /* seed, offset of each at the forward's start */
  int n_packed;             /* tensors fn saved in forward */
  saved_meta *metas;        /* n_packed of them (capacity: metas_capacity) */
  int metas_capacity;
  mx_tensor **recomputed;   /* n_packed references, NULL once taken (or never made) */
  int n_recomputed;         /* tensors the running recomputation saved so far */
} frame;

/* What a checkpointed op's node holds in place of a saved tensor. */
typedef struct {
  frame *f;
  int index;
} packed_ref;

static void frame_decref(frame *f) {
  if (!f || atomic_fetch_sub(&f->refs, 1) != 1) return;
  for (int i = 0; f->recomputed && i < f->n_packed; i++) mx_release(f->recomputed[i]);
  if (f->inputs_token) mx__decref(f->inputs_token);
  if (f->free_user) f->free_user(f->user);
  free(f->recomputed);
  free(f->metas);
  free(f->generators);
  free(f->rng_state);
  free(f);
}

/* --- the forward's hooks: remember what was saved, keep nothing --------------------- */

static void *pack_forward(mx_tensor *t, void *ctx) {
  frame *f = ctx;
  if (f->n_packed == f->metas_capacity) {
    int capacity = f->metas_capacity ? 2 * f->metas_capacity : 16;
    saved_meta *grown = realloc(f->metas, sizeof *grown * (size_t)capacity);
    if (!grown) {
      mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", FN);
      return NULL;
    }
    f->metas = grown;
    f->metas_capacity = capacity;
  }
  packed_ref *ref = malloc(sizeof *ref);
  if (!ref) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", FN);
    return NULL;
  }
  saved_meta *m = &f->metas[f->n_packed];
  m->ndim = t->ndim;
  memcpy(m->shape, t->shape, sizeof m->shape);
  m->dtype = t->dtype;
  *ref = (packed_ref){f, f->n_packed++};
  atomic_fetch_add(&f->refs, 1);
  return ref;
}

static mx_tensor *unpack_forward(void *packed);

static void free_packed_forward(void *packed) {
  packed_ref *ref = packed;
  frame_decref(ref->f);
  free(ref);
}

static const mx_saved_tensor_hooks forward_hooks = {"mx_activation_checkpoint", pack_forward, unpack_forward,
                                                    free_packed_forward};

/* --- the recomputation's hooks: keep what fn saves, in order ------------------------- */

static char recomputed_token; /* what the recomputation's own nodes hold: they never run backward */

static void *pack_recompute(mx_tensor *t, void *ctx) {
  frame *f = ctx;
  int i = f->n_recomputed++;
  if (i >= f->n_packed) return &recomputed_token; /* counted; the mismatch is reported after fn */
  mx_tensor *detached = mx_detach_unscoped(t); /* without the recomputation's graph */
  if (!detached) return NULL;
  mx_release(f->recomputed[i]);
  f->recomputed[i] = detached;
  return &recomputed_token;
}

static mx_tensor *unpack_recompute(void *packed) {
  mx__error(MX_STATE_ERROR, "%s: the recomputation's graph cannot run backward", FN);
  return NULL;
}

static void free_packed_recompute(void *packed) {}

static const mx_saved_tensor_hooks recompute_hooks = {"mx_activation_checkpoint", pack_recompute,
                                                      unpack_recompute, free_packed_recompute};

/* --- random state --------------------------------------------------------------------- */

static void rng_get(const frame *f, uint64_t (*state)[2]) {
  for (int g = 0; g < f->n_generators; g++) mx_generator_get_state(f->generators[g], &state[g][0], &state[g][1]);
}

static void rng_set(const frame *f, uint64_t (*state)[2]) {
  for (int g = 0; g < f->n_generators; g++) mx_generator_set_state(f->generators[g], state[g][0], state[g][1]);
}

/* --- recomputation ---------------------------------------------------------------------- */

/* The error of a failed recomputation, naming the checkpoint and keeping fn's message. */
static mx_status recompute_failed(mx_status status) {
  char cause[400];
  snprintf(cause, sizeof cause, "%s", mx_last_error());
  return mx__error(status, "%s: recomputing the checkpointed function in backward failed: %s", FN, cause);
}

/* Runs fn again as it ran in forward (inputs, autocast and random state,
 * grad mode on so that the same ops save the same tensors) and keeps
 * every tensor it saves. */
static mx_status recompute(frame *f) {
  int n_in = f->n_inputs, n_out = f->n_outputs;
  mx_tensor *inputs[n_in + 1], *outputs[n_out + 1];
  uint64_t now[f->n_generators + 1][2];
  bool grad = mx_set_grad_enabled(true);
  mx_scope *scope = mx_scope_begin();
  mx_status status = scope ? MX_OK : mx_last_status();
  for (int i = 0; i < n_in && status == MX_OK; i++) /* may recompute an enclosing checkpoint first */
    if (!(inputs[i] = mx_ctx_saved(f->inputs_ctx, i))) status = mx_last_status();
  if (status != MX_OK) {
    mx_scope_end(scope);
    mx_set_grad_enabled(grad);
    return status;
  }
  for (int i = 0; i < f->n_packed; i++) /* leftovers of an earlier recomputation */
    mx_release(f->recomputed[i]), f->recomputed[i] = NULL;
  f->n_recomputed = 0;
  rng_get(f, now);
  rng_set(f, f->rng_state);
  status = mx_autocast_begin_state(&f->autocast);
  bool region = status == MX_OK;
  if (status == MX_OK) status = mx_saved_tensor_hooks_push(&recompute_hooks, f);
  if (status == MX_OK) {
    memset(outputs, 0, sizeof outputs);
    status = f->fn(f->user, n_in, inputs, n_out, outputs);
    mx_saved_tensor_hooks_pop();
    if (status != MX_OK) status = recompute_failed(status);
  }
  if (region) mx_autocast_end();
  rng_set(f, now);
  mx_scope_end(scope); /* fn's outputs and the recomputation's graph */
  mx_set_grad_enabled(grad);
  if (status == MX_OK && f->n_recomputed != f->n_packed)
    status = mx__error(MX_STATE_ERROR, "%s: the recomputation in backward saved %d tensors for backward where the "
                       "forward saved %d: fn must run the same ops on the same inputs both times (did a flag it "
                       "reads, such as a module's training mode, change in between?)",
                       FN, f->n_recomputed, f->n_packed);
  return status;
}

static mx_tensor *unpack_forward(void *packed) {
  packed_ref *ref = packed;
  frame *f = ref->f;
  if (!f->recomputed) { /* fn has not returned: the forward is still packing */
    mx__error(MX_STATE_ERROR, "%s: a tensor saved inside the checkpointed function was needed before the function "
              "returned (a backward or mx_grad inside it?); differentiate outside the checkpointed function", FN);
    return NULL;
  }
  if (!f->recomputed[ref->index] && recompute(f) != MX_OK) return NULL;
  mx_tensor *t = f->recomputed[ref->index];
  f->recomputed[ref->index] = NULL;
  const saved_meta *m = &f->metas[ref->index];
  bool same =
      t->ndim == m->ndim && t->dtype == m->dtype && !memcmp(t->shape, m->shape, sizeof(int64_t) * (size_t)m->ndim);
  mx_tensor *out = NULL;
  if (same) {
    out = mx_detach(t); /* a handle for the node to take over */
  } else {
    char was[MX__DIMS_STR], now[MX__DIMS_STR];
    mx__error(MX_STATE_ERROR, "%s: saved tensor %d was recomputed as %s %s where the forward saved %s %s: fn must "
              "run the same ops on the same inputs both times", FN, ref->index, mx_dtype_name(t->dtype),
              mx__dims_str(now, t->ndim, t->shape), mx_dtype_name(m->dtype),
              mx__dims_str(was, m->ndim, m->shape));
  }
  mx_release(t);
  return out;
}

/* --- the inputs' node ------------------------------------------------------------------ */

/* in[0] is a 0-element leaf that requires grad, so the node is recorded
 * whatever the inputs; the rest are saved. No gradient ever reaches it. */
static mx_status inputs_forward(mx_function_ctx *ctx, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
  frame *f = mx_ctx_user(ctx);
  f->inputs_ctx = ctx;
  mx_status status = mx_ctx_save(ctx, n_in - 1, in + 1);
  if (status == MX_OK && !(out[0] = mx_detach(in[0]))) status = mx_last_status();
  return status;
}

static mx_status inputs_backward(mx_function_ctx *ctx, int n_out, mx_tensor *const *grad_out, int n_in,
                                 mx_tensor **grad_in) {
  return MX_OK;
}

static const mx_function inputs_function = {"ActivationCheckpoint", inputs_forward, inputs_backward};

static mx_status save_inputs(frame *f, int n_inputs, mx_tensor *const *inputs) {
  mx_tensor *all[n_inputs + 1];
  all[0] = mx_empty(MX_SHAPE(0), MX_F32, MX_CPU);
  if (!all[0]) return mx_last_status();
  memcpy(all + 1, inputs, sizeof *inputs * (size_t)n_inputs);
  mx_status status = mx_set_requires_grad(all[0], true);
  mx_tensor *token = NULL;
  if (status == MX_OK) status = mx_function_apply(&inputs_function, f, n_inputs + 1, all, 1, &token);
  if (status == MX_OK) {
    f->inputs_token = mx__retain(token);
    mx_release(token);
  }
  mx_release(all[0]);
  return status;
}

/* --- the call ---------------------------------------------------------------------------- */

static mx_status check_call(mx_activation_checkpoint_fn fn, int n_inputs, mx_tensor *const *inputs, int n_outputs,
                            mx_tensor **outputs, const mx_activation_checkpoint_options *options) {
  if (!fn) return mx__null_input(FN, "fn");
  if (n_outputs < 1 || !outputs)
    return !outputs ? mx__null_input(FN, "outputs")
                    : mx__error(MX_INVALID_ARGUMENT, "%s: n_outputs must be at least 1, got %d", FN, n_outputs);
  if (n_inputs < 0 || n_inputs > MX_ACTIVATION_CHECKPOINT_MAX_INPUTS)
    return mx__error(MX_INVALID_ARGUMENT, "%s: n_inputs must be in [0, %d], got %d (pass more through user)", FN,
                     MX_ACTIVATION_CHECKPOINT_MAX_INPUTS, n_inputs);
  if (n_inputs > 0 && !inputs) return mx__null_input(FN, "inputs");
  for (int i = 0; i < n_inputs; i++)
    if (!inputs[i]) {
      char arg[32];
      snprintf(arg, sizeof arg, "inputs[%d]", i);
      return mx__null_input(FN, arg);
    }
  if (options && options->n_generators < 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: options->n_generators must be >= 0, got %d", FN, options->n_generators);
  if (options && options->n_generators > 0 && !options->generators)
    return mx__error(MX_INVALID_ARGUMENT, "%s: options->n_generators is %d but options->generators is NULL", FN,
                     options->n_generators);
  for (int g = 0; options && g < options->n_generators; g++)
    if (!options->generators[g]) return mx__error(MX_INVALID_ARGUMENT, "%s: options->generators[%d] is NULL", FN, g);
  return MX_OK;
}

static frame *frame_new(mx_activation_checkpoint_fn fn, void *user, int n_inputs, int n_outputs,
                        const mx_activation_checkpoint_options *options) {
  frame *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  *f = (frame){.fn = fn, .user = user, .n_inputs = n_inputs, .n_outputs = n_outputs};
  atomic_init(&f->refs, 1);
  f->autocast = mx_autocast_state_get();
  bool rng = !options || !options->no_rng_state;
  f->n_generators = rng ? 1 + (options ? options->n_generators : 0) : 0;
  f->generators = calloc((size_t)f->n_generators + 1, sizeof *f->generators);
  f->rng_state = calloc((size_t)f->n_generators + 1, sizeof *f->rng_state);
  if (!f->generators || !f->rng_state) {
    frame_decref(f);
    return NULL;
  }
  if (rng) f->generators[0] = mx_default_generator();
  for (int g = 1; g < f->n_generators; g++) f->generators[g] = options->generators[g - 1];
  return f;
}

/* fn's status, and an error when it said MX_OK but left an output NULL. An
 * output that is one of the inputs becomes an alias made here, so that
 * every output is a handle of the current scope. */
static mx_status check_outputs(mx_status status, int n_inputs, mx_tensor *const *inputs, int n_outputs,
                               mx_tensor **outputs) {
  for (int k = 0; k < n_outputs && status == MX_OK; k++) {
    if (!outputs[k]) status = mx__error(MX_STATE_ERROR, "%s: fn returned MX_OK but left outputs[%d] NULL", FN, k);
    for (int i = 0; i < n_inputs && status == MX_OK; i++)
      if (outputs[k] == inputs[i] && !(outputs[k] = mx_reshape(inputs[i], mx_shape_get(inputs[i]))))
        status = mx_last_status();
  }
  return status;
}

/* fn's outputs in the caller's scope, its temporaries released: only the
 * graph keeps anything of the forward, and (with a frame, whose hooks drop
 * what fn's ops save) the graph keeps nothing of fn's. */
static mx_status run_forward(frame *f, mx_activation_checkpoint_fn fn, void *user, int n_inputs,
                             mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs) {
  mx_scope *scope = mx_scope_begin();
  if (!scope) return mx_last_status();
  mx_status status = MX_OK;
  if (f) {
    rng_get(f, f->rng_state);
    status = mx_saved_tensor_hooks_push(&forward_hooks, f);
  }
  if (status == MX_OK) {
    status = fn(user, n_inputs, inputs, n_outputs, outputs);
    if (f) mx_saved_tensor_hooks_pop();
  }
  status = check_outputs(status, n_inputs, inputs, n_outputs, outputs);
  for (int k = 0; k < n_outputs; k++)
    if (outputs[k] && (status != MX_OK || !mx_keep(outputs[k]))) outputs[k] = NULL;
  mx_scope_end(scope);
  return status;
}

mx_status mx_activation_checkpoint(mx_activation_checkpoint_fn fn, void *user, int n_inputs,
                                   mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs,
                                   const mx_activation_checkpoint_options *options) {
  for (int k = 0; outputs && k < n_outputs; k++) outputs[k] = NULL;
  void (*free_user)(void *) = options ? options->free_user : NULL;
  mx_status status = check_call(fn, n_inputs, inputs, n_outputs, outputs, options);
  if (status == MX_OK && !mx_is_grad_enabled()) /* no graph: nothing to drop */
    status = run_forward(NULL, fn, user, n_inputs, inputs, n_outputs, outputs);
  if (status != MX_OK || !mx_is_grad_enabled()) {
    if (free_user) free_user(user);
    return status;
  }
  frame *f = frame_new(fn, user, n_inputs, n_outputs, options);
  if (!f) {
    if (free_user) free_user(user);
    return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", FN);
  }
  f->free_user = free_user; /* the frame frees user from now on */
  status = save_inputs(f, n_inputs, inputs);
  if (status == MX_OK) status = run_forward(f, fn, user, n_inputs, inputs, n_outputs, outputs);
  if (status == MX_OK) f->recomputed = calloc((size_t)f->n_packed + 1, sizeof *f->recomputed);
  if (status == MX_OK && !f->recomputed) status = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", FN);
  if (status != MX_OK)
    for (int k = 0; k < n_outputs; k++) mx_release(outputs[k]), outputs[k] = NULL;
  frame_decref(f); /* the graph's nodes hold it now, if fn saved anything */
  return status;
}

/* --- Sequential ---------------------------------------------------------------------------- */

typedef struct {
  mx_module *seq;
  int start, end; /* children [start, end) */
} segment;

static mx_status run_segment(void *user, int n_inputs, mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs) {
  const segment *s = user;
  mx_tensor *y = inputs[0];
  for (int i = s->start; i < s->end && y; i++) y = mx_module_forward(mx_module_child(s->seq, i, NULL), y);
  outputs[0] = y;
  return y ? MX_OK : mx_last_status();
}

mx_tensor *mx_activation_checkpoint_sequential(mx_module *seq, int layers_per_segment, const mx_tensor *x,
                                               const mx_activation_checkpoint_options *options) {
  const char *fn = "mx_activation_checkpoint_sequential";
  if (!seq || !x) {
    mx__null_input(fn, !seq ? "seq" : "x");
    return NULL;
  }
  if (strcmp(mx_module_type_of(seq)->name, "Sequential") != 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the module is a %s, not a Sequential", fn, mx_module_type_of(seq)->name);
    return NULL;
  }
  if (layers_per_segment < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: layers_per_segment must be at least 1, got %d", fn, layers_per_segment);
    return NULL;
  }
  if (options && options->free_user) {
    mx__error(MX_INVALID_ARGUMENT, "%s: options->free_user must be NULL (the segments are this function's)", fn);
    return NULL;
  }
  int n = mx_module_num_children(seq);
  if (n == 0) return mx_reshape(x, mx_shape_get(x)); /* an empty Sequential is the identity */
  mx_activation_checkpoint_options opts = options ? *options : (mx_activation_checkpoint_options){0};
  opts.free_user = free;
  mx_scope *scope = mx_scope_begin(); /* the segments' outputs but the last */
  if (!scope) return NULL;
  mx_tensor *y = (mx_tensor *)x;
  for (int start = 0; start < n && y; start += layers_per_segment) {
    int end = n - start > layers_per_segment ? start + layers_per_segment : n;
    segment *s = malloc(sizeof *s);
    if (!s) {
      mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
      y = NULL;
      break;
    }
    *s = (segment){seq, start, end};
    mx_tensor *out = NULL;
    if (end == n) { /* the last segment: backward needs its activations first, so they are kept */
      run_segment(s, 1, &y, 1, &out);
      free(s);
    } else {
      mx_activation_checkpoint(run_segment, s, 1, &y, 1, &out, &opts);
    }
    y = out;
  }
  if (y) mx_keep(y);
  mx_scope_end(scope);
  return y;
}
