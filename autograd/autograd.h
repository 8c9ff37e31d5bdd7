/* Reverse-mode automatic differentiation.
 *
 *     mx_tensor *w = mx_randn(MX_SHAPE(3), MX_F32, MX_CPU, NULL);
 *     mx_set_requires_grad(w, true);
 *     mx_tensor *loss = mx_sum(mx_mul(w, w));      // records a graph
 *     mx_backward(loss, NULL, false);              // d loss / d w = 2 w
 *     mx_print(mx_grad_of(w));
 *
 * Every op whose inputs require grad records a node holding its backward
 * formula (written with mx ops, so gradients of gradients work) and the
 * tensors it saved. mx_backward runs the graph backwards and accumulates
 * into the leaves' grad; mx_grad returns gradients instead, optionally with
 * a graph of their own (create_graph) for higher derivatives. Grad mode is
 * per thread; MX_NO_GRAD { ... } turns recording off for a block.
 *
 * Threads. Several threads may each run forward and mx_backward (or mx_grad)
 * at once through graphs that share leaves, such as one weight used by a
 * forward pass on each thread: each call keeps its own bookkeeping, and the
 * gradients add into the leaf's grad one at a time (under the leaf's lock),
 * so the result is the sum of the calls' gradients, in some order. Grad
 * mode, autocast and scopes are per thread. Not safe while another thread
 * is running backward into the same leaf: reading or dropping its grad
 * (mx_grad_of, mx_zero_grad, an optimizer step), changing its
 * requires_grad, registering hooks, or changing the leaf in place. Hooks
 * on a shared leaf run on whichever thread's backward reaches them, so
 * they must be thread-safe themselves. Two backward passes through the
 * same recorded nodes (a forward computed once, then differentiated on two
 * threads) need retain_graph=true in both, and no create_graph.
 */
#ifndef MX_AUTOGRAD_AUTOGRAD_H
#define MX_AUTOGRAD_AUTOGRAD_H

#include "tensor/tensor.h"

MX_API_BEGIN

/* Leaf tensors only (those no recorded op made); floating dtypes only. */
mx_status mx_set_requires_grad(mx_tensor *t, bool requires_grad);
bool mx_requires_grad(const mx_tensor *t);
bool mx_is_leaf(const mx_tensor *t);
/* The accumulated gradient of a leaf, or NULL (borrowed: do not release). */
mx_tensor *mx_grad_of(const mx_tensor *t);
/* Drops the gradient (PyTorch's zero_grad(set_to_none=True)). */
void mx_zero_grad(mx_tensor *t);
/* A view of t's data outside the graph. */
mx_tensor *mx_detach(const mx_tensor *t);
/* The same, owned by no scope whatever scopes are open: the caller
 * releases it with mx_release (for saved-tensor hooks, below). */
mx_tensor *mx_detach_unscoped(const mx_tensor *t);
/* The name of the node that made t ("MulBackward"), or NULL for a leaf. */
const char *mx_grad_fn_name(const mx_tensor *t);

/* Backpropagates from t: grad is d(something)/dt, NULL meaning 1 for a
 * one-element t. Gradients add into the leaves' grad. The graph's saved
 * tensors are freed unless retain_graph; a second backward through a freed
 * graph is an error. */
mx_status mx_backward(mx_tensor *t, const mx_tensor *grad, bool retain_graph);

/* Gradients of outputs with respect to inputs, written to grads[i] (new
 * handles; NULL for an unused input when allow_unused). grad_outputs may be
 * NULL (ones for one-element outputs). With create_graph the results carry
 * a graph of their own, so they can be differentiated again. Leaves' grad
 * is untouched. */
mx_status mx_grad(int n_outputs, mx_tensor *const *outputs, int n_inputs, mx_tensor *const *inputs,
                  mx_tensor *const *grad_outputs, bool retain_graph, bool create_graph, bool allow_unused,
                  mx_tensor **grads);

/* Hooks run on the gradient of t when it is computed; a hook may return a
 * replacement (a new tensor) or NULL to keep the gradient as it is. */
typedef mx_tensor *(*mx_grad_hook)(mx_tensor *grad, void *ctx);
mx_status mx_register_hook(mx_tensor *t, mx_grad_hook hook, void *ctx);
/* Runs after a backward has stored a new gradient into leaf t's grad
 * (PyTorch's register_post_accumulate_grad_hook): mx_grad_of(t) is up to
 * date, on the thread running the backward (mx_grad, which fills no grad,
 * runs none). DDP starts its all-reduces from it. Leaves only. */
typedef void (*mx_post_accumulate_grad_hook)(mx_tensor *t, void *ctx);
mx_status mx_register_post_accumulate_grad_hook(mx_tensor *t, mx_post_accumulate_grad_hook hook, void *ctx);
/* Removes the hooks registered on t with this hook and ctx. */
void mx_remove_post_accumulate_grad_hook(mx_tensor *t, mx_post_accumulate_grad_hook hook, void *ctx);

/* Grad mode, per thread. mx_set_grad_enabled returns the previous mode. */
bool mx_is_grad_enabled(void);
bool mx_set_grad_enabled(bool enabled);

/* MX_NO_GRAD { ... }: a block without recording; the previous mode comes
 * back however the block is left (break and return included). The block
 * runs exactly once (its flag starts as a constant, so the compiler sees
 * that variables assigned in it are set). */
typedef struct {
  bool previous, once;
} mx_grad_guard;
void mx__grad_guard_end(mx_grad_guard *guard);
#define MX__GLUE_(a, b) a##b
#define MX__GLUE(a, b) MX__GLUE_(a, b)
#define MX__GUARD MX__GLUE(mx__guard_, __LINE__) /* nested blocks get their own */
#define MX__GRAD_MODE(enabled)                                                                          \
  for (mx_grad_guard MX__GUARD __attribute__((cleanup(mx__grad_guard_end))) = {                        \
           .previous = mx_set_grad_enabled(enabled), .once = true};                                    \
       MX__GUARD.once; MX__GUARD.once = false)
#define MX_NO_GRAD MX__GRAD_MODE(false)
#define MX_ENABLE_GRAD MX__GRAD_MODE(true)

/* Inference mode (torch.inference_mode), per thread: MX_INFERENCE_MODE { ... }
 * runs its block with grad mode off and makes every tensor created in it an
 * inference tensor: in-place writes to it bump no version counter, and it
 * can never enter a graph: an op that would record it for backward, or
 * mx_set_requires_grad on it, fails with an error naming the op (mx_clone
 * it outside the block for a normal tensor). Views of an inference tensor
 * are inference tensors. Both modes come back however the block is left.
 * (mx_is_inference and mx_is_inference_mode_enabled: tensor/tensor.h.) */
typedef struct {
  bool previous_grad, previous_inference, once;
} mx_inference_guard;
void mx__inference_guard_end(mx_inference_guard *guard);
#define MX_INFERENCE_MODE                                                                                \
  for (mx_inference_guard MX__GUARD __attribute__((cleanup(mx__inference_guard_end))) = {              \
           .previous_grad = mx_set_grad_enabled(false), .previous_inference = mx__inference_mode_set(true), \
           .once = true};                                                                               \
       MX__GUARD.once; MX__GUARD.once = false)

/* --- custom functions (torch.autograd.Function) ------------------------------- */
typedef struct mx_function_ctx mx_function_ctx;
/* forward: computes outputs from inputs (with ops: no graph is recorded
 * inside) and may save tensors for backward. */
typedef mx_status (*mx_function_forward)(mx_function_ctx *ctx, int n_inputs, mx_tensor *const *inputs,
                                         int n_outputs, mx_tensor **outputs);
/* backward: writes one gradient per input (NULL when it has none) from the
 * gradients of the outputs. Runs with grad mode on when the caller asked
 * for create_graph. */
typedef mx_status (*mx_function_backward)(mx_function_ctx *ctx, int n_outputs, mx_tensor *const *grad_outputs,
                                          int n_inputs, mx_tensor **grad_inputs);
typedef struct {
  const char *name;
  mx_function_forward forward;
  mx_function_backward backward;
} mx_function;

mx_status mx_function_apply(const mx_function *fn, void *user, int n_inputs, mx_tensor *const *inputs,
                            int n_outputs, mx_tensor **outputs);
mx_status mx_ctx_save(mx_function_ctx *ctx, int n, mx_tensor *const *tensors);
/* The i-th saved tensor (borrowed), checked against in-place changes. */
mx_tensor *mx_ctx_saved(mx_function_ctx *ctx, int i);
void *mx_ctx_user(mx_function_ctx *ctx);
bool mx_ctx_needs_input_grad(mx_function_ctx *ctx, int i);

/* --- saved-tensor hooks (torch.autograd.graph.saved_tensors_hooks) --------------- */
/* While hooks are pushed on a thread, a tensor an op saves for backward is
 * handed to pack instead of being kept; backward asks unpack for it, once
 * per node (the node keeps what unpack returns until it is released), and
 * free_packed drops what was packed. A leaf that requires grad (a weight)
 * is always kept as it is: its gradient accumulator keeps it alive anyway.
 * Saved outputs reach pack as detached views. Activation checkpointing
 * (nn/activation_checkpoint.h) is built on these hooks.
 *
 * pack(t, ctx): returns what stands for t (never NULL on success; NULL with
 *   the error set fails the op that saved t). t is borrowed.
 * unpack(packed): t again (its values), as a new handle the node takes over,
 *   or NULL with the error set. Under create_graph the node connects it to
 *   the graph t belonged to, so gradients of gradients work.
 * name: names the hooks in errors ("mx_activation_checkpoint").
 * The struct must outlive every graph recorded while it is pushed (a
 * static const one does). Hooks nest; the innermost one packs. */
/* pack runs inside the saving op's scope; a tensor it keeps must be one no
 * scope owns, such as mx_detach_unscoped(t) (released by free_packed). */
typedef struct {
  const char *name;
  void *(*pack)(mx_tensor *t, void *ctx);
  mx_tensor *(*unpack)(void *packed);
  void (*free_packed)(void *packed);
} mx_saved_tensor_hooks;
mx_status mx_saved_tensor_hooks_push(const mx_saved_tensor_hooks *hooks, void *ctx);
/* Pops the innermost hooks (an error when none are pushed). */
mx_status mx_saved_tensor_hooks_pop(void);

/* The bytes of storage the saved tensors of root's graph keep alive (each
 * storage once, whether a saved tensor is a view or not; leaves included;
 * packed tensors not), or -1 with the error set. A measure of what a
 * forward pass costs in memory until backward frees it. */
int64_t mx_graph_saved_bytes(const mx_tensor *root);

/* --- gradient checking ---------------------------------------------------------- */
/* A function of n float64 inputs with one output, for gradcheck. */
typedef mx_tensor *(*mx_gradcheck_fn)(int n_inputs, mx_tensor *const *inputs, void *ctx);
/* Compares analytic gradients (mx_grad) with central finite differences for
 * every input that requires grad. Inputs must be float64. fn runs with grad
 * mode on in both, whatever the caller's mode, so a function that takes
 * gradients itself (a gradient penalty) can be checked. Returns MX_OK or
 * MX_STATE_ERROR with a message naming the input, element, both values. */
mx_status mx_gradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx, double eps,
                       double atol, double rtol);
/* The same for the gradients of fn (with a random grad_output), checked by
 * differentiating through them again. */
mx_status mx_gradgradcheck(mx_gradcheck_fn fn, int n_inputs, mx_tensor *const *inputs, void *ctx,
                           double eps, double atol, double rtol);

MX_API_END

#endif
