/* Graph nodes, saved tensors, and the autograd state of each tensor. */
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "tensor/object_cache.h"

static void free_hooks(mx__hook *h) {
  while (h) {
    mx__hook *next = h->next;
    free(h);
    h = next;
  }
}

static void meta_free(mx__autograd_meta *meta) {
  if (meta->grad) mx__decref(meta->grad);
  if (meta->grad_fn) mx__node_decref(meta->grad_fn);
  free_hooks(meta->hooks);
  for (mx__post_hook *h = meta->post_hooks, *next; h; h = next) next = h->next, free(h);
  mx__object_free(meta, sizeof *meta);
}

mx__autograd_meta *mx__meta_of(mx_tensor *t) {
  if (!t->autograd) {
    t->autograd = mx__object_new(sizeof *t->autograd);
    if (!t->autograd) mx__error(MX_OUT_OF_MEMORY, "autograd: out of memory");
  }
  return t->autograd;
}

bool mx_requires_grad(const mx_tensor *t) {
  return t && t->autograd && (t->autograd->requires_grad || t->autograd->grad_fn);
}

bool mx__any_requires_grad(int n, mx_tensor *const *inputs) {
  if (!mx_is_grad_enabled()) return false;
  for (int i = 0; i < n; i++)
    if (mx_requires_grad(inputs[i])) return true;
  return false;
}

bool mx_is_leaf(const mx_tensor *t) { return t && !(t->autograd && t->autograd->grad_fn); }

mx_status mx_set_requires_grad(mx_tensor *t, bool requires_grad) {
  if (!t) return mx__null_input("mx_set_requires_grad", "t");
  if (!mx_is_leaf(t))
    return mx__error(MX_STATE_ERROR,
                     "mx_set_requires_grad: only leaf tensors can change requires_grad; this one was "
                     "made by %s (use mx_detach first)", t->autograd->grad_fn->name);
  if (requires_grad && mx_is_inference(t))
    return mx__error(MX_STATE_ERROR, "mx_set_requires_grad: an inference tensor (made in an MX_INFERENCE_MODE "
                     "block) cannot require grad; mx_clone it outside the block for a normal tensor");
  if (requires_grad && !mx_dtype_is_floating(t->dtype))
    return mx__error(MX_DTYPE_ERROR, "mx_set_requires_grad: only floating tensors can require grad, not %s",
                     mx_dtype_name(t->dtype));
  if (!requires_grad && !t->autograd) return MX_OK;
  mx__autograd_meta *meta = mx__meta_of(t);
  if (!meta) return MX_OUT_OF_MEMORY;
  meta->requires_grad = requires_grad;
  return MX_OK;
}

mx_tensor *mx_grad_of(const mx_tensor *t) { return t && t->autograd ? t->autograd->grad : NULL; }

void mx_zero_grad(mx_tensor *t) {
  if (!t || !t->autograd || !t->autograd->grad) return;
  mx__decref(t->autograd->grad);
  t->autograd->grad = NULL;
}

mx_tensor *mx_detach(const mx_tensor *t) {
  if (!t) {
    mx__null_input("mx_detach", "t");
    return NULL;
  }
  return mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset);
}

mx_tensor *mx_detach_unscoped(const mx_tensor *t) {
  mx_tensor *view = t ? mx_detach(t) : NULL;
  if (!view) {
    if (!t) mx__null_input("mx_detach_unscoped", "t");
    return NULL;
  }
  mx__retain(view);
  mx_release(view); /* out of its scope: what remains is a handle no scope owns */
  return view;
}

const char *mx_grad_fn_name(const mx_tensor *t) {
  return t && t->autograd && t->autograd->grad_fn ? t->autograd->grad_fn->name : NULL;
}

mx_status mx_register_hook(mx_tensor *t, mx_grad_hook hook, void *ctx) {
  if (!t) return mx__null_input("mx_register_hook", "t");
  if (!hook) return mx__null_input("mx_register_hook", "hook");
  if (!mx_requires_grad(t))
    return mx__error(MX_STATE_ERROR, "mx_register_hook: the tensor does not require grad");
  mx__hook *h = calloc(1, sizeof *h);
  if (!h) return mx__error(MX_OUT_OF_MEMORY, "mx_register_hook: out of memory");
  h->fn = hook;
  h->ctx = ctx;
  mx__autograd_meta *meta = t->autograd;
  if (meta->grad_fn) { /* on the producing node, for this output */
    h->output_nr = meta->output_nr;
    h->next = meta->grad_fn->hooks;
    meta->grad_fn->hooks = h;
  } else {
    h->next = meta->hooks;
    meta->hooks = h;
  }
  return MX_OK;
}

mx_status mx_register_post_accumulate_grad_hook(mx_tensor *t, mx_post_accumulate_grad_hook hook, void *ctx) {
  const char *op = "mx_register_post_accumulate_grad_hook";
  if (!t) return mx__null_input(op, "t");
  if (!hook) return mx__null_input(op, "hook");
  if (!mx_requires_grad(t) || t->autograd->grad_fn)
    return mx__error(MX_STATE_ERROR, "%s: the tensor is not a leaf that requires grad", op);
  mx__post_hook *h = calloc(1, sizeof *h);
  if (!h) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  *h = (mx__post_hook){hook, ctx, t->autograd->post_hooks};
  t->autograd->post_hooks = h;
  return MX_OK;
}

void mx_remove_post_accumulate_grad_hook(mx_tensor *t, mx_post_accumulate_grad_hook hook, void *ctx) {
  if (!t || !t->autograd) return;
  for (mx__post_hook **at = &t->autograd->post_hooks; *at;) {
    mx__post_hook *h = *at;
    if (h->fn == hook && h->ctx == ctx) *at = h->next, free(h);
    else at = &h->next;
  }
}

/* --- leaf locks ------------------------------------------------------------------ */

/* A lock per leaf would grow every tensor's autograd state; a small table
 * hashed by address serves the few leaves a model has, and two leaves
 * sharing a lock only wait for each other's short critical sections. */
#define LEAF_LOCKS 64
static pthread_mutex_t leaf_locks[LEAF_LOCKS];

/* At load: the locks, and the tensor room's hook to free autograd state
 * (set once here: setting it on each use would be a data race between
 * threads, writing the same value, but a race all the same). */
__attribute__((constructor)) static void init(void) {
  for (int i = 0; i < LEAF_LOCKS; i++) pthread_mutex_init(&leaf_locks[i], NULL);
  mx__autograd_meta_free = meta_free;
}

static pthread_mutex_t *leaf_lock_of(const mx_tensor *leaf) {
  return &leaf_locks[((uintptr_t)leaf >> 6) % LEAF_LOCKS];
}

void mx__leaf_lock(const mx_tensor *leaf) { pthread_mutex_lock(leaf_lock_of(leaf)); }
void mx__leaf_unlock(const mx_tensor *leaf) { pthread_mutex_unlock(leaf_lock_of(leaf)); }

/* --- nodes ------------------------------------------------------------------------ */

/* A node and its four arrays are one allocation (every op that records
 * makes one): the arrays follow the struct, each at least one entry long. */
static size_t edges_bytes(int n_inputs) { return sizeof(mx__edge) * ((size_t)n_inputs + 1); }
static size_t meta_bytes(int n) { return sizeof(mx__meta) * ((size_t)n + 1); }
static size_t saved_bytes(int n_saved) { return sizeof(mx__saved) * ((size_t)n_saved + 1); }

static size_t node_bytes(int n_inputs, int n_outputs, int n_saved) {
  return sizeof(mx__node) + edges_bytes(n_inputs) + meta_bytes(n_inputs) + meta_bytes(n_outputs) +
         saved_bytes(n_saved);
}

mx__node *mx__node_new(const char *name, mx__node_apply apply, int n_inputs, int n_outputs, int n_saved) {
  _Static_assert(sizeof(mx__node) % 8 == 0 && sizeof(mx__edge) % 8 == 0 && sizeof(mx__meta) % 8 == 0 &&
                     _Alignof(mx__edge) <= 8 && _Alignof(mx__meta) <= 8 && _Alignof(mx__saved) <= 8,
                 "the carved arrays stay aligned");
  char *block = mx__object_new(node_bytes(n_inputs, n_outputs, n_saved));
  if (!block) {
    mx__error(MX_OUT_OF_MEMORY, "autograd: out of memory for a %s node", name);
    return NULL;
  }
  mx__node *n = (mx__node *)block;
  block += sizeof *n;
  n->next = (mx__edge *)block;
  n->in_meta = (mx__meta *)(block += edges_bytes(n_inputs));
  n->out_meta = (mx__meta *)(block += meta_bytes(n_inputs));
  n->saved = (mx__saved *)(block += meta_bytes(n_outputs));
  atomic_init(&n->refs, 1);
  n->name = name;
  n->apply = apply;
  n->n_inputs = n_inputs;
  n->n_outputs = n_outputs;
  n->n_saved = n_saved;
  return n;
}

mx__node *mx__node_retain(mx__node *node) {
  atomic_fetch_add(&node->refs, 1);
  return node;
}

void mx__node_release(mx__node *node) {
  for (int i = 0; i < node->n_saved; i++) {
    mx__saved *s = &node->saved[i];
    if (s->tensor) mx__decref(s->tensor);
    if (s->packed) s->hooks->free_packed(s->packed);
    if (s->producer) mx__node_decref(s->producer);
    s->tensor = NULL;
    s->packed = NULL;
    s->producer = NULL;
  }
  node->released = true;
}

void mx__node_decref(mx__node *node) {
  /* Long chains (an RNN unrolled over thousands of steps) would recurse
   * deeply; free iteratively along first edges and recurse on the rest. */
  while (node && atomic_fetch_sub(&node->refs, 1) == 1) {
    mx__node *first = NULL;
    for (int i = 0; i < node->n_inputs; i++) {
      if (!node->next[i].node) continue;
      if (!first) first = node->next[i].node;
      else mx__node_decref(node->next[i].node);
    }
    mx__node_release(node);
    if (node->leaf) {
      mx__leaf_lock(node->leaf);
      /* a forward on another thread may have replaced the dying accumulator already */
      if (node->leaf->autograd && node->leaf->autograd->accumulator == node) node->leaf->autograd->accumulator = NULL;
      mx__leaf_unlock(node->leaf);
      mx__decref(node->leaf);
    }
    free_hooks(node->hooks);
    if (node->free_payload) node->free_payload(node->payload);
    mx__object_free(node, node_bytes(node->n_inputs, node->n_outputs, node->n_saved)); /* its arrays with it */
    node = first;
  }
}

void mx__meta_from(mx__meta *meta, const mx_tensor *t) {
  meta->ndim = t->ndim;
  memcpy(meta->shape, t->shape, sizeof meta->shape);
  meta->dtype = t->dtype;
  meta->device = t->device;
}

static mx_status accumulate_apply(mx__node *node, mx_tensor *const *grad_outputs, mx_tensor **grad_inputs) {
  return MX_OK; /* the engine handles accumulators itself */
}

/* Takes a reference unless the count already reached zero (the node is
 * being freed by another thread, which clears the leaf's pointer to it
 * under the leaf's lock before freeing it). */
static bool retain_if_alive(mx__node *node) {
  long refs = atomic_load(&node->refs);
  while (refs > 0)
    if (atomic_compare_exchange_weak(&node->refs, &refs, refs + 1)) return true;
  return false;
}

/* The leaf's accumulator: one per leaf while any graph uses it (threads
 * running forwards through the same weight share it). */
static mx__node *accumulator_of(mx_tensor *leaf) {
  mx__autograd_meta *meta = leaf->autograd;
  mx__leaf_lock(leaf);
  mx__node *acc = meta->accumulator;
  if (!acc || !retain_if_alive(acc)) {
    acc = mx__node_new("AccumulateGrad", accumulate_apply, 0, 1, 0);
    if (acc) {
      acc->leaf = mx__retain(leaf);
      mx__meta_from(&acc->out_meta[0], leaf);
      meta->accumulator = acc;
    }
  }
  mx__leaf_unlock(leaf);
  return acc;
}

mx_status mx__node_connect(mx__node *node, int i, mx_tensor *input) {
  mx__meta_from(&node->in_meta[i], input);
  if (!mx_requires_grad(input)) return MX_OK;
  mx__autograd_meta *meta = input->autograd;
  if (meta->grad_fn) {
    node->next[i] = (mx__edge){mx__node_retain(meta->grad_fn), meta->output_nr};
    return MX_OK;
  }
  mx__node *acc = accumulator_of(input);
  if (!acc) return MX_OUT_OF_MEMORY;
  node->next[i] = (mx__edge){acc, 0};
  return MX_OK;
}

void mx__node_set_output(mx__node *node, int k, mx_tensor *out) {
  mx__autograd_meta *meta = mx__meta_of(out);
  if (!meta) return;
  if (meta->grad_fn) mx__node_decref(meta->grad_fn);
  meta->grad_fn = mx__node_retain(node);
  meta->output_nr = k;
  mx__meta_from(&node->out_meta[k], out);
}

/* --- saved-tensor hooks ------------------------------------------------------------ */

enum { MAX_SAVED_HOOKS = 64 };
typedef struct {
  const mx_saved_tensor_hooks *hooks;
  void *ctx;
} pushed_hooks;
static _Thread_local pushed_hooks hook_stack[MAX_SAVED_HOOKS];
static _Thread_local int hook_depth;

mx_status mx_saved_tensor_hooks_push(const mx_saved_tensor_hooks *hooks, void *ctx) {
  if (!hooks || !hooks->pack || !hooks->unpack || !hooks->free_packed)
    return mx__null_input("mx_saved_tensor_hooks_push", !hooks ? "hooks" : "hooks->pack, unpack or free_packed");
  if (hook_depth == MAX_SAVED_HOOKS)
    return mx__error(MX_STATE_ERROR, "mx_saved_tensor_hooks_push: more than %d hooks pushed on this thread",
                     MAX_SAVED_HOOKS);
  hook_stack[hook_depth++] = (pushed_hooks){hooks, ctx};
  return MX_OK;
}

mx_status mx_saved_tensor_hooks_pop(void) {
  if (hook_depth == 0) return mx__error(MX_STATE_ERROR, "mx_saved_tensor_hooks_pop: no hooks are pushed");
  hook_depth--;
  return MX_OK;
}

mx_status mx__node_save(mx__node *node, int slot, mx_tensor *t, bool is_output) {
  /* an output is kept as a detached view: the node must not own its owner */
  mx_tensor *kept = is_output ? mx__tensor_view(t, t->ndim, t->shape, t->strides, t->offset) : t;
  if (!kept) return mx_last_status();
  int output_nr = is_output && t->autograd ? t->autograd->output_nr : 0;
  bool weight = mx_is_leaf(t) && mx_requires_grad(t);
  if (hook_depth == 0 || weight) {
    mx__retain(kept); /* the node's reference */
    if (is_output) mx_release(kept); /* the view's handle was only ours */
    node->saved[slot] =
        (mx__saved){.tensor = kept, .version = mx_version(t), .is_output = is_output, .output_nr = output_nr};
    return MX_OK;
  }
  const pushed_hooks *top = &hook_stack[hook_depth - 1];
  void *packed = top->hooks->pack(kept, top->ctx);
  if (is_output) mx_release(kept);
  if (!packed)
    return mx_last_status() != MX_OK ? mx_last_status()
                                     : mx__error(MX_STATE_ERROR, "%s: pack failed", top->hooks->name);
  mx__saved saved = {.is_output = is_output, .output_nr = output_nr, .packed = packed, .hooks = top->hooks};
  if (!is_output && mx_requires_grad(t)) { /* a non-leaf: its producer, for create_graph */
    saved.producer = mx__node_retain(t->autograd->grad_fn);
    saved.producer_output_nr = t->autograd->output_nr;
  }
  node->saved[slot] = saved;
  return MX_OK;
}

/* A packed saved tensor back from its hooks, kept by the node from now on. */
static mx_tensor *unpack(mx__saved *s) {
  mx_tensor *t = s->hooks->unpack(s->packed);
  if (!t) {
    if (mx_last_status() == MX_OK) mx__error(MX_STATE_ERROR, "%s: unpack failed", s->hooks->name);
    return NULL;
  }
  s->tensor = mx__retain(t);
  mx_release(t); /* the handle becomes the node's reference */
  s->version = mx_version(s->tensor);
  s->hooks->free_packed(s->packed);
  s->packed = NULL;
  return s->tensor;
}

mx_tensor *mx__node_saved(mx__node *node, int slot) {
  if (node->released) {
    const char *packed_by = NULL;
    for (int i = 0; i < node->n_saved && !packed_by; i++)
      if (node->saved[i].hooks) packed_by = node->saved[i].hooks->name;
    mx__error(MX_STATE_ERROR,
              "mx_backward: trying to backward through the graph a second time (the saved tensors of %s%s%s%s "
              "were freed by the first backward); pass retain_graph=true the first time",
              node->name, packed_by ? ", packed by " : "", packed_by ? packed_by : "", packed_by ? "," : "");
    return NULL;
  }
  mx__saved *s = &node->saved[slot];
  if (s->packed && !unpack(s)) return NULL;
  if (!s->tensor) return NULL;
  uint64_t now = mx_version(s->tensor);
  if (now != s->version) {
    char dims[MX__DIMS_STR];
    mx__error(MX_STATE_ERROR,
              "mx_backward: a tensor needed for gradient computation has been modified by an in-place "
              "operation: the %s %s saved by %s is at version %llu; expected version %llu",
              mx_dtype_name(s->tensor->dtype), mx__dims_str(dims, s->tensor->ndim, s->tensor->shape), node->name,
              (unsigned long long)now, (unsigned long long)s->version);
    return NULL;
  }
  if (!mx_is_grad_enabled() || (!s->is_output && !s->producer)) return s->tensor;
  /* Differentiating through a saved output (create_graph): hand out a view
   * whose producer is this node again, as PyTorch's SavedVariable does; an
   * unpacked non-output gets its own producer back. It belongs to the
   * current scope. */
  mx_tensor *view = mx__tensor_view(s->tensor, s->tensor->ndim, s->tensor->shape, s->tensor->strides,
                                    s->tensor->offset);
  if (view && mx__meta_of(view)) {
    if (s->is_output) mx__node_set_output(node, s->output_nr, view);
    else mx__node_set_output(s->producer, s->producer_output_nr, view);
  }
  return view;
}
