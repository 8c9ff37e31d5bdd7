/* The backward engine: runs a recorded graph in reverse topological order.
 *
 * Each node's incoming gradients collect in a buffer (one slot per output,
 * summed when several paths meet); a node runs once every node that feeds
 * it has run (Kahn's algorithm on dependency counts). Accumulators add into
 * their leaf's grad; captured inputs (mx_grad) keep their gradient instead.
 *
 * The dependency counts and buffers belong to the call, not to the nodes:
 * two threads may run backward through graphs that share nodes (a weight's
 * accumulator, at least), and each sees only its own counts and gradients.
 * Adding into a leaf's grad is serialised by the leaf's lock (node.c). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/node.h"
#include "kernels/base_internal.h"

/* What mx_grad asked for: the gradient arriving at (node, slot). */
typedef struct {
  mx__node *node;
  int slot;
  mx_tensor *grad;
} capture;

/* One reachable node's state in this call. */
typedef struct {
  mx__node *node;
  int64_t deps;       /* edges from nodes that have not run yet */
  mx_tensor **buffer; /* n_outputs slots in run_state.slots */
} node_state;

typedef struct {
  node_state *nodes; /* every reachable node, each once, in the order found */
  size_t count, capacity;
  uint32_t *index; /* open addressing: node -> 1 + its place in nodes, 0 empty */
  size_t index_size; /* a power of two, at least twice count */
  mx_tensor **slots; /* every node's buffer, in one block */
  uint32_t *ready;   /* nodes whose inputs are all in (places in nodes) */
  size_t ready_count, ready_capacity;
  capture *captures;
  int n_captures;
  bool create_graph, accumulate;
} run_state;

/* Backward passes running on this thread (one inside another under
 * create_graph hooks); autocast regions opened outside do not reach in. */
static _Thread_local int backward_depth;

int mx__backward_depth(void) { return backward_depth; }

const mx__grad_ops *mx__grad_ops_installed;

const mx__grad_ops *mx__grad_ops_for(const char *op) {
  if (!mx__grad_ops_installed)
    mx__error(MX_STATE_ERROR, "%s: no op of libmixgrad is linked in, so gradients cannot be summed or cast", op);
  return mx__grad_ops_installed;
}

static size_t hash_node(const mx__node *node, size_t size) {
  return (size_t)(((uintptr_t)node >> 4) * (uint64_t)0x9E3779B97F4A7C15u >> 32) & (size - 1);
}

/* The node's place in st->nodes, or -1 when this call has not seen it. */
static int64_t find(const run_state *st, const mx__node *node) {
  if (!st->index_size) return -1;
  for (size_t h = hash_node(node, st->index_size);; h = (h + 1) & (st->index_size - 1)) {
    uint32_t at = st->index[h];
    if (!at) return -1;
    if (st->nodes[at - 1].node == node) return at - 1;
  }
}

static bool grow_index(run_state *st) {
  size_t size = st->index_size ? 2 * st->index_size : 128;
  uint32_t *index = calloc(size, sizeof *index);
  if (!index) return false;
  for (size_t k = 0; k < st->count; k++) {
    size_t h = hash_node(st->nodes[k].node, size);
    while (index[h]) h = (h + 1) & (size - 1);
    index[h] = (uint32_t)k + 1;
  }
  free(st->index);
  st->index = index;
  st->index_size = size;
  return true;
}

/* Adds a node this call has not seen, with no dependencies yet. */
static bool add_node(run_state *st, mx__node *node) {
  if (st->count == st->capacity) {
    size_t capacity = st->capacity ? 2 * st->capacity : 64;
    if (capacity > UINT32_MAX - 1) return false;
    node_state *grown = realloc(st->nodes, capacity * sizeof *grown);
    if (!grown) return false;
    st->nodes = grown;
    st->capacity = capacity;
  }
  if (2 * (st->count + 1) > st->index_size && !grow_index(st)) return false;
  st->nodes[st->count] = (node_state){node, 0, NULL};
  size_t h = hash_node(node, st->index_size);
  while (st->index[h]) h = (h + 1) & (st->index_size - 1);
  st->index[h] = (uint32_t)++st->count;
  return true;
}

static bool push_ready(run_state *st, uint32_t k) {
  if (st->ready_count == st->ready_capacity) {
    size_t capacity = st->ready_capacity ? 2 * st->ready_capacity : 64;
    uint32_t *grown = realloc(st->ready, capacity * sizeof *grown);
    if (!grown) return false;
    st->ready = grown;
    st->ready_capacity = capacity;
  }
  st->ready[st->ready_count++] = k;
  return true;
}

/* Finds every node reachable from the roots and counts, for each, the edges
 * pointing at it; then gives each its buffer. */
static mx_status collect(run_state *st, int n_roots, mx__node *const *roots) {
  for (int r = 0; r < n_roots; r++)
    if (find(st, roots[r]) < 0 && !add_node(st, roots[r])) goto oom;
  /* nodes[] doubles as the walk's stack: everything past `walked` is still to expand */
  for (size_t walked = 0; walked < st->count; walked++) {
    mx__node *n = st->nodes[walked].node;
    for (int i = 0; i < n->n_inputs; i++) {
      mx__node *next = n->next[i].node;
      if (!next) continue;
      int64_t k = find(st, next);
      if (k < 0) {
        if (!add_node(st, next)) goto oom;
        k = (int64_t)st->count - 1;
      }
      st->nodes[k].deps++;
    }
  }
  size_t n_slots = 0;
  for (size_t k = 0; k < st->count; k++) n_slots += (size_t)st->nodes[k].node->n_outputs;
  st->slots = calloc(n_slots + 1, sizeof *st->slots);
  if (!st->slots) return mx__error(MX_OUT_OF_MEMORY, "mx_backward: out of memory");
  mx_tensor **slot = st->slots;
  for (size_t k = 0; k < st->count; k++) {
    st->nodes[k].buffer = slot;
    slot += st->nodes[k].node->n_outputs;
  }
  return MX_OK;
oom:
  return mx__error(MX_OUT_OF_MEMORY, "mx_backward: out of memory walking the graph");
}

/* Adds grad into the buffer slot (taking a reference). */
static mx_status buffer_add(mx_tensor **buffer, int slot, mx_tensor *grad) {
  mx_tensor *old = buffer[slot];
  if (!old) {
    buffer[slot] = mx__retain(grad);
    return MX_OK;
  }
  mx_tensor *sum = mx__grad_ops_installed->add(old, grad);
  if (!sum) return mx_last_status();
  buffer[slot] = mx__retain(sum);
  mx__decref(old);
  return MX_OK;
}

/* Brings a gradient to the dtype and shape of what it differentiates:
 * casts inside an op and broadcasting make them differ. */
static mx_tensor *conform(mx_tensor *grad, const mx__meta *meta) {
  if (grad->dtype != meta->dtype && mx_dtype_is_floating(meta->dtype)) {
    grad = mx__grad_ops_installed->to_dtype(grad, meta->dtype);
    if (!grad) return NULL;
  }
  bool same = grad->ndim == meta->ndim && !memcmp(grad->shape, meta->shape, sizeof(int64_t) * (size_t)meta->ndim);
  if (!same) grad = mx__grad_ops_installed->sum_to(grad, mx_shape_of(meta->ndim, meta->shape));
  return grad;
}

static mx_tensor *run_hooks(mx__hook *hooks, int slot, mx_tensor *grad) {
  for (mx__hook *h = hooks; h && grad; h = h->next) {
    if (h->output_nr != slot) continue;
    mx_tensor *replaced = h->fn(grad, h->ctx);
    if (replaced) grad = replaced;
  }
  return grad;
}

/* A leaf's first gradient becomes its own memory, as PyTorch's
 * AccumulateGrad steals or clones it: optimizers and the GradScaler update
 * .grad in place, so it must neither share storage with another tensor (the
 * same gradient handed to two leaves by an add) nor be a broadcast view
 * (sum's gradient) whose one stored value stands for many. */
static mx_tensor *owned_grad(mx_tensor *grad) {
  bool alone = atomic_load(&grad->storage->refs) == 1;
  return alone && mx_is_contiguous(grad) ? mx_detach(grad) : mx__grad_ops_installed->clone(grad);
}

static mx_status accumulate_leaf(run_state *st, mx__node *acc, mx_tensor *grad) {
  mx_tensor *leaf = acc->leaf;
  grad = run_hooks(leaf->autograd ? leaf->autograd->hooks : NULL, 0, grad);
  if (!grad) return mx_last_status();
  for (int c = 0; c < st->n_captures; c++)
    if (st->captures[c].node == acc) st->captures[c].grad = mx__retain(grad);
  if (!st->accumulate) return MX_OK;
  /* Another thread's backward may be adding into the same leaf. The sum is
   * made outside the leaf's lock (an op, or freeing the old gradient's
   * graph, may take other leaves' locks) and stored only if no other sum
   * landed meanwhile; otherwise it is made again on the newer one. */
  mx__autograd_meta *meta = leaf->autograd;
  for (;;) {
    mx__leaf_lock(leaf);
    mx_tensor *old = meta->grad ? mx__retain(meta->grad) : NULL;
    mx__leaf_unlock(leaf);
    mx_tensor *total = old ? mx__grad_ops_installed->add(old, grad) : st->create_graph ? grad : owned_grad(grad);
    bool stored = false;
    if (total) {
      mx__leaf_lock(leaf);
      if ((stored = meta->grad == old)) meta->grad = mx__retain(total);
      mx__leaf_unlock(leaf);
    }
    if (old) mx__decref(old);
    if (stored && old) mx__decref(old); /* the leaf's reference to it */
    if (!total) return mx_last_status();
    if (!stored) continue;
    for (mx__post_hook *h = meta->post_hooks; h; h = h->next) h->fn(leaf, h->ctx);
    return MX_OK;
  }
}

static mx_status run_node(run_state *st, node_state *ns) {
  mx__node *n = ns->node;
  bool any = false;
  for (int k = 0; k < n->n_outputs; k++) any |= ns->buffer[k] != NULL;
  if (!any) return MX_OK; /* nothing flowed here: nothing flows on */
  mx_tensor *grads[n->n_outputs + 1];
  for (int k = 0; k < n->n_outputs; k++) {
    mx_tensor *g = ns->buffer[k];
    if (!g) g = mx_zeros(mx_shape_of(n->out_meta[k].ndim, n->out_meta[k].shape), n->out_meta[k].dtype,
                         n->out_meta[k].device);
    g = g ? run_hooks(n->hooks, k, g) : NULL;
    if (!g) return mx_last_status();
    grads[k] = g;
    for (int c = 0; c < st->n_captures && !n->leaf; c++) /* leaves: after their hooks, below */
      if (st->captures[c].node == n && st->captures[c].slot == k) st->captures[c].grad = mx__retain(g);
  }
  if (n->leaf) return accumulate_leaf(st, n, grads[0]);

  mx_tensor *grad_inputs[n->n_inputs + 1];
  memset(grad_inputs, 0, sizeof grad_inputs);
  mx_status status = n->apply(n, grads, grad_inputs);
  if (status != MX_OK) return status;
  for (int i = 0; i < n->n_inputs; i++) {
    mx__edge e = n->next[i];
    if (!e.node || !grad_inputs[i]) continue;
    mx_tensor *g = conform(grad_inputs[i], &n->in_meta[i]);
    if (!g) return mx_last_status();
    if ((status = buffer_add(st->nodes[find(st, e.node)].buffer, e.input_nr, g)) != MX_OK) return status;
  }
  return MX_OK;
}

static mx_status run(run_state *st, bool keep_graph) {
  for (size_t k = 0; k < st->count; k++)
    if (st->nodes[k].deps == 0 && !push_ready(st, (uint32_t)k))
      return mx__error(MX_OUT_OF_MEMORY, "mx_backward: out of memory");
  bool previous = mx_set_grad_enabled(st->create_graph);
  backward_depth++;
  mx_status status = MX_OK;
  while (st->ready_count && status == MX_OK) {
    node_state *ns = &st->nodes[st->ready[--st->ready_count]];
    mx__node *n = ns->node;
    mx_scope *scope = mx_scope_begin(); /* the node's temporaries */
    status = run_node(st, ns);
    mx_scope_end(scope);
    for (int k = 0; k < n->n_outputs; k++) {
      if (ns->buffer[k]) mx__decref(ns->buffer[k]);
      ns->buffer[k] = NULL;
    }
    if (!keep_graph && !n->leaf) mx__node_release(n);
    for (int i = 0; i < n->n_inputs && status == MX_OK; i++) {
      if (!n->next[i].node) continue;
      int64_t k = find(st, n->next[i].node);
      if (--st->nodes[k].deps == 0 && !push_ready(st, (uint32_t)k))
        status = mx__error(MX_OUT_OF_MEMORY, "mx_backward: out of memory");
    }
  }
  backward_depth--;
  mx_set_grad_enabled(previous);
  return status;
}

static void finish(run_state *st) {
  for (size_t k = 0; k < st->count; k++)
    for (int s = 0; st->nodes[k].buffer && s < st->nodes[k].node->n_outputs; s++)
      if (st->nodes[k].buffer[s]) mx__decref(st->nodes[k].buffer[s]);
  free(st->nodes);
  free(st->index);
  free(st->slots);
  free(st->ready);
}

mx_status mx__graph_leaves(const mx_tensor *root, int *n, mx_tensor ***leaves) {
  *n = 0;
  *leaves = NULL;
  mx__node *start = root->autograd ? root->autograd->grad_fn : NULL;
  if (!start && !mx_requires_grad(root)) return MX_OK;
  if (!start) { /* root is itself the one leaf */
    if (!(*leaves = malloc(sizeof **leaves))) return mx__error(MX_OUT_OF_MEMORY, "autograd: out of memory");
    (*leaves)[(*n)++] = (mx_tensor *)root;
    return MX_OK;
  }
  run_state st = {0};
  mx_status status = collect(&st, 1, &start);
  if (status == MX_OK && !(*leaves = malloc(sizeof **leaves * (st.count + 1))))
    status = mx__error(MX_OUT_OF_MEMORY, "autograd: out of memory walking the graph");
  for (size_t k = 0; k < st.count && status == MX_OK; k++)
    if (st.nodes[k].node->leaf) (*leaves)[(*n)++] = st.nodes[k].node->leaf;
  finish(&st);
  return status;
}

static int compare_pointers(const void *a, const void *b) {
  uintptr_t x = (uintptr_t)*(void *const *)a, y = (uintptr_t)*(void *const *)b;
  return (x > y) - (x < y);
}

int64_t mx_graph_saved_bytes(const mx_tensor *root) {
  if (!root) {
    mx__null_input("mx_graph_saved_bytes", "root");
    return -1;
  }
  mx__node *start = root->autograd ? root->autograd->grad_fn : NULL;
  if (!start) return 0;
  run_state st = {0};
  mx_status status = collect(&st, 1, &start);
  size_t n_saved = 0;
  for (size_t k = 0; k < st.count && status == MX_OK; k++) n_saved += (size_t)st.nodes[k].node->n_saved;
  const mx__storage **storages = status == MX_OK ? malloc(sizeof *storages * (n_saved + 1)) : NULL;
  if (status == MX_OK && !storages)
    status = mx__error(MX_OUT_OF_MEMORY, "mx_graph_saved_bytes: out of memory walking the graph");
  size_t n = 0;
  for (size_t k = 0; k < st.count && storages; k++)
    for (int i = 0; i < st.nodes[k].node->n_saved; i++)
      if (st.nodes[k].node->saved[i].tensor) storages[n++] = st.nodes[k].node->saved[i].tensor->storage;
  int64_t bytes = status == MX_OK ? 0 : -1;
  if (storages) qsort(storages, n, sizeof *storages, compare_pointers);
  for (size_t i = 0; i < n; i++)
    if (i == 0 || storages[i] != storages[i - 1]) bytes += (int64_t)storages[i]->bytes;
  free(storages);
  finish(&st);
  return bytes;
}

/* Where a tensor's gradient arrives: its producer's slot; for a leaf, the
 * accumulator reached through a node made for this run (held by a
 * reference, as another thread may drop the graphs that hold the leaf's
 * accumulator meanwhile). *made is that node, for the caller to drop. */
static mx__node *grad_target(mx_tensor *t, int *slot, mx__node **made) {
  mx__autograd_meta *meta = t->autograd;
  *slot = meta->grad_fn ? meta->output_nr : 0;
  *made = NULL;
  if (meta->grad_fn) return meta->grad_fn;
  *made = mx__node_new("LeafTarget", NULL, 1, 0, 0);
  if (!*made) return NULL;
  if (mx__node_connect(*made, 0, t) != MX_OK) return NULL;
  return (*made)->next[0].node;
}

static mx_status run_graph(const char *op, int n_roots, mx_tensor *const *roots, mx_tensor *const *root_grads,
                           bool keep_graph, bool create_graph, capture *captures, int n_captures, bool accumulate) {
  mx__node *nodes[n_roots + 1];
  int slots[n_roots + 1];
  mx__node *made[n_roots + 1]; /* nodes made to reach leaf roots' accumulators */
  memset(nodes, 0, sizeof nodes);
  memset(made, 0, sizeof made);
  mx_status status = mx__grad_ops_for(op) ? MX_OK : mx_last_status();
  for (int r = 0; r < n_roots && status == MX_OK; r++) {
    if (!mx_requires_grad(roots[r])) {
      status = mx__error(MX_STATE_ERROR,
                         "%s: output %d does not require grad and has no grad_fn (nothing to differentiate)", op, r);
      break;
    }
    nodes[r] = grad_target(roots[r], &slots[r], &made[r]);
    if (!nodes[r]) status = mx_last_status();
  }
  run_state st = {.captures = captures, .n_captures = n_captures, .create_graph = create_graph,
                  .accumulate = accumulate};
  if (status == MX_OK) status = collect(&st, n_roots, nodes);
  for (int r = 0; r < n_roots && status == MX_OK; r++)
    status = buffer_add(st.nodes[find(&st, nodes[r])].buffer, slots[r], root_grads[r]);
  if (status == MX_OK) status = run(&st, keep_graph);
  finish(&st);
  for (int r = 0; r < n_roots; r++)
    if (made[r]) mx__node_decref(made[r]);
  return status;
}

/* The gradient each root starts with: the given one, or ones. */
static mx_tensor *root_grad(const char *op, mx_tensor *t, const mx_tensor *given) {
  if (given) {
    if (given->ndim != t->ndim || memcmp(given->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim)) {
      char a[MX__DIMS_STR], b[MX__DIMS_STR];
      mx__error(MX_SHAPE_ERROR, "%s: gradient of shape %s given for a tensor of shape %s", op,
                mx__dims_str(a, given->ndim, given->shape), mx__dims_str(b, t->ndim, t->shape));
      return NULL;
    }
    return (mx_tensor *)given;
  }
  if (mx_numel(t) != 1) {
    char a[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "%s: a gradient can be implied only for a one-element output, not shape %s; "
              "pass one", op, mx__dims_str(a, t->ndim, t->shape));
    return NULL;
  }
  return mx_ones_like(t);
}

mx_status mx_backward(mx_tensor *t, const mx_tensor *grad, bool retain_graph) {
  if (!t) return mx__null_input("mx_backward", "t");
  mx_scope *scope = mx_scope_begin();
  mx_tensor *g = root_grad("mx_backward", t, grad);
  mx_status status = g ? run_graph("mx_backward", 1, &t, &g, retain_graph, false, NULL, 0, true)
                       : mx_last_status();
  mx_scope_end(scope);
  return status;
}

mx_status mx_grad(int n_outputs, mx_tensor *const *outputs, int n_inputs, mx_tensor *const *inputs,
                  mx_tensor *const *grad_outputs, bool retain_graph, bool create_graph, bool allow_unused,
                  mx_tensor **grads) {
  if (!outputs || !inputs || !grads) return mx__null_input("mx_grad", !outputs ? "outputs" : !inputs ? "inputs" : "grads");
  for (int i = 0; i < n_outputs; i++)
    if (!outputs[i]) return mx__null_input("mx_grad", "outputs[i]");
  for (int i = 0; i < n_inputs; i++) {
    grads[i] = NULL;
    if (!inputs[i]) return mx__null_input("mx_grad", "inputs[i]");
    if (!mx_requires_grad(inputs[i]))
      return mx__error(MX_STATE_ERROR, "mx_grad: input %d does not require grad", i);
  }
  capture caps[n_inputs + 1];
  memset(caps, 0, sizeof caps); /* a failure before the captures are set up drops none */
  mx_scope *scope = mx_scope_begin();
  mx_tensor *starts[n_outputs + 1];
  mx_status status = MX_OK;
  for (int r = 0; r < n_outputs && status == MX_OK; r++) {
    starts[r] = root_grad("mx_grad", outputs[r], grad_outputs ? grad_outputs[r] : NULL);
    if (!starts[r]) status = mx_last_status();
  }
  /* leaves get an accumulator for the run so their gradient can be caught */
  mx__node *holders[n_inputs + 1];
  memset(holders, 0, sizeof holders);
  for (int i = 0; i < n_inputs && status == MX_OK; i++) {
    caps[i].node = grad_target(inputs[i], &caps[i].slot, &holders[i]);
    if (!caps[i].node) status = mx_last_status();
  }
  if (status == MX_OK)
    status = run_graph("mx_grad", n_outputs, outputs, starts, retain_graph, create_graph, caps, n_inputs, false);
  for (int i = 0; i < n_inputs; i++) {
    if (holders[i]) mx__node_decref(holders[i]);
    if (status != MX_OK) continue;
    if (!caps[i].grad && !allow_unused) {
      status = mx__error(MX_STATE_ERROR, "mx_grad: input %d was not used in the graph of the outputs; "
                         "pass allow_unused=true to get NULL for it", i);
      continue;
    }
    grads[i] = caps[i].grad;
  }
  mx_scope_end(scope);
  for (int i = 0; i < n_inputs; i++) {
    if (status != MX_OK) { /* drop what was caught */
      if (caps[i].grad) mx__decref(caps[i].grad);
      grads[i] = NULL;
    } else if (grads[i]) {
      /* the engine's reference becomes the caller's handle */
      mx__scope_adopt(grads[i]);
    }
  }
  return status;
}
