/* Graph nodes and the per-tensor autograd state (internal to ops/ and
 * autograd/).
 *
 * A node is one recorded op: edges to the nodes that made its inputs (or to
 * the accumulator of a leaf), the tensors it saved for backward, and an
 * apply function that turns the gradients of its outputs into gradients of
 * its inputs. Non-leaf tensors own a reference to their node; nodes own
 * references to the nodes they point to. Saved outputs are kept as
 * detached views, so a node never owns the tensor that owns it. */
#ifndef MX_AUTOGRAD_NODE_H
#define MX_AUTOGRAD_NODE_H

#include "autograd/autograd.h"
#include "tensor/tensor_impl.h"

typedef struct mx__node mx__node;

/* grad_outputs[k] is never NULL (missing ones are zeros); the function sets
 * grad_inputs[i] to a new tensor, or leaves it NULL for no gradient. */
typedef mx_status (*mx__node_apply)(mx__node *node, mx_tensor *const *grad_outputs, mx_tensor **grad_inputs);

typedef struct {
  mx__node *node; /* NULL: this input needs no gradient */
  int input_nr;   /* which output of `node` the input was */
} mx__edge;

typedef struct {
  mx_tensor *tensor; /* NULL while packed */
  uint64_t version;
  bool is_output;
  int output_nr; /* for outputs: which one */
  /* packed by saved-tensor hooks: what pack returned (NULL once unpacked),
   * the hooks (kept after release, to name them in errors), and the
   * producer of a packed non-output (owned), to reconnect it under
   * create_graph */
  void *packed;
  const mx_saved_tensor_hooks *hooks;
  mx__node *producer;
  int producer_output_nr;
} mx__saved;

typedef struct {
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  mx_dtype dtype;
  mx_device device;
} mx__meta;

typedef struct mx__hook {
  int output_nr;
  mx_grad_hook fn;
  void *ctx;
  struct mx__hook *next;
} mx__hook;

struct mx__node {
  atomic_long refs;
  const char *name;
  mx__node_apply apply;
  void *payload; /* the op's arguments, or a custom function's context */
  void (*free_payload)(void *payload);
  int n_inputs, n_outputs, n_saved;
  mx__edge *next;    /* n_inputs */
  mx__meta *in_meta; /* n_inputs */
  mx__meta *out_meta;
  mx__saved *saved;
  bool released; /* saved tensors freed by a backward without retain_graph */
  mx_tensor *leaf; /* accumulators only: the leaf whose grad they fill */
  mx__hook *hooks; /* hooks on this node's outputs (non-leaf tensors) */
};

struct mx__autograd_meta {
  bool requires_grad; /* set by the user on a leaf */
  mx_tensor *grad;
  mx__node *grad_fn;
  int output_nr;
  mx__node *accumulator; /* not owned: the accumulator owns the leaf */
  mx__hook *hooks;       /* leaf hooks */
  struct mx__post_hook *post_hooks; /* leaf hooks after the grad is stored */
};

typedef struct mx__post_hook {
  mx_post_accumulate_grad_hook fn;
  void *ctx;
  struct mx__post_hook *next;
} mx__post_hook;

/* Whether an op on these inputs records a node: grad mode is on and an
 * input requires grad. */
bool mx__any_requires_grad(int n, mx_tensor *const *inputs);
mx__autograd_meta *mx__meta_of(mx_tensor *t); /* creates it if needed */

mx__node *mx__node_new(const char *name, mx__node_apply apply, int n_inputs, int n_outputs, int n_saved);
mx__node *mx__node_retain(mx__node *node);
void mx__node_decref(mx__node *node);
/* Points input i of node at the tensor's producer (or leaf accumulator). */
mx_status mx__node_connect(mx__node *node, int i, mx_tensor *input);
/* Makes node the producer of out as its output k. */
void mx__node_set_output(mx__node *node, int k, mx_tensor *out);
mx_status mx__node_save(mx__node *node, int slot, mx_tensor *t, bool is_output);
/* A saved tensor for backward (borrowed), or NULL with the error set when
 * the graph was freed or the tensor was modified in place since. */
mx_tensor *mx__node_saved(mx__node *node, int slot);
/* Frees the saved tensors (after a backward without retain_graph). */
void mx__node_release(mx__node *node);
void mx__meta_from(mx__meta *meta, const mx_tensor *t);
/* mx_function_apply for a wrapper of fn's callbacks (amp/'s custom_fwd):
 * the wrapper's state travels with the context and is freed with it
 * (also when the call fails); mx_ctx_user still answers user. */
mx_status mx__function_apply_wrapped(const mx_function *fn, void *user, void *wrapper,
                                     void (*free_wrapper)(void *wrapper), int n_inputs, mx_tensor *const *inputs,
                                     int n_outputs, mx_tensor **outputs);
void *mx__ctx_wrapper(mx_function_ctx *ctx);
/* The leaves (that require grad) a backward from root would reach, in a
 * new array the caller frees (the tensors are borrowed). */
mx_status mx__graph_leaves(const mx_tensor *root, int *n, mx_tensor ***leaves);
/* A leaf's grad and accumulator pointers, shared by the threads whose
 * graphs use the leaf, are read and changed under this lock (one of a
 * small table, picked by the leaf's address). Nothing that may take a
 * lock runs while it is held: no op, no release of a tensor or node. */
void mx__leaf_lock(const mx_tensor *leaf);
void mx__leaf_unlock(const mx_tensor *leaf);
/* How many backward passes are running on this thread. */
int mx__backward_depth(void);

/* The ops the engine runs on gradients: summing those that meet, casting
 * one to its input's dtype, summing a broadcast one back to its input's
 * shape, and copying a leaf's first one. ops/ sits on autograd/ (every op
 * records its node here), so autograd/ reaches back through this table,
 * which ops/dispatch.c installs when the library loads, and never includes
 * ops/: the two rooms stay a layer, not a circle. */
typedef struct {
  mx_tensor *(*add)(const mx_tensor *a, const mx_tensor *b);
  mx_tensor *(*to_dtype)(const mx_tensor *t, mx_dtype dtype);
  mx_tensor *(*sum_to)(const mx_tensor *t, mx_shape shape);
  mx_tensor *(*clone)(const mx_tensor *t);
} mx__grad_ops;
extern const mx__grad_ops *mx__grad_ops_installed;
/* The installed table, or NULL with an error naming op (a program linked
 * with the static archive and no op has none). */
const mx__grad_ops *mx__grad_ops_for(const char *op);

#endif
