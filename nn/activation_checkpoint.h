/* Activation checkpointing (torch.utils.checkpoint, non-reentrant): trade
 * compute for memory by running part of a forward without keeping its
 * activations, and running it again in backward when they are needed.
 *
 *     static mx_status block(void *user, int n_in, mx_tensor *const *in, int n_out, mx_tensor **out) {
 *       mx_module *mlp = user;                             // Linear, GELU, Dropout, Linear
 *       out[0] = mx_module_forward(mlp, in[0]);
 *       return out[0] ? MX_OK : mx_last_status();
 *     }
 *     ...
 *     mx_tensor *h, *loss;
 *     MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
 *       mx_activation_checkpoint(block, mlp, 1, &x, 1, &h, NULL);   // h as block(x), without its insides
 *       loss = mx_mse_loss(h, target, MX_REDUCTION_MEAN);
 *     }
 *     mx_backward(loss, NULL, false);                      // block runs again here, then backward
 *
 * The graph is recorded as usual (so mx_backward, mx_grad and weights used
 * inside all work), but every tensor an op inside fn saves for backward is
 * dropped (see mx_saved_tensor_hooks in autograd/autograd.h) except the
 * weights, which are alive anyway. The first backward step that needs one
 * of them runs fn again on the same inputs under the forward's autocast
 * state (enabled and dtype per device type, cache flag) and random state
 * (the default generator and those named in the options), so dropout
 * draws the same masks, and the gradients are bit for bit those of the
 * uncheckpointed forward. Between the two runs the inputs must not change
 * in place, and fn must run the same ops (a module's training flag must
 * not change, say); a recomputation that saves other tensors than the
 * forward did is an error naming mx_activation_checkpoint.
 *
 * Supported: several inputs (up to MX_ACTIVATION_CHECKPOINT_MAX_INPUTS;
 * those that do not require grad too, integer indices included) and
 * outputs; checkpoints nested inside fn (an inner one keeps its inputs
 * through the outer one, so nothing inside the outer region stays alive);
 * mx_grad, retain_graph (the second backward reuses what the first
 * recomputed) and create_graph (recomputed tensors join the original
 * graph, so gradients of gradients work). With grad mode off fn just runs.
 * fn and user must stay valid until the graph is freed (options.free_user
 * can free user then). The generators' state is process-wide: do not draw
 * from them on another thread while a backward recomputes; and two threads
 * must not run backward through the same checkpointed graph at once. A
 * backward or mx_grad inside fn through fn's own ops is an error.
 */
#ifndef MX_NN_ACTIVATION_CHECKPOINT_H
#define MX_NN_ACTIVATION_CHECKPOINT_H

#include "autograd/autograd.h"
#include "nn/module.h"

MX_API_BEGIN

#define MX_ACTIVATION_CHECKPOINT_MAX_INPUTS 16

/* Writes n_outputs new handles to outputs from the inputs (borrowed), or
 * returns an error status. Called once in forward and again in backward. */
typedef mx_status (*mx_activation_checkpoint_fn)(void *user, int n_inputs, mx_tensor *const *inputs,
                                                 int n_outputs, mx_tensor **outputs);

/* Zero-initialised (or NULL): PyTorch's defaults. */
typedef struct {
  /* true: do not save and restore random state (PyTorch's
   * preserve_rng_state=False); dropout then draws new masks in backward */
  bool no_rng_state;
  /* generators fn draws from besides the default one (a Dropout module
   * made with its own), whose state is replayed too */
  int n_generators;
  mx_generator *const *generators;
  /* called with user once the graph no longer needs it (also when the
   * call fails); NULL: user is the caller's */
  void (*free_user)(void *user);
} mx_activation_checkpoint_options;

/* outputs = fn(inputs), recorded so that fn's saved tensors are recomputed
 * in backward instead of kept. On failure every outputs[k] is NULL. */
mx_status mx_activation_checkpoint(mx_activation_checkpoint_fn fn, void *user, int n_inputs,
                                   mx_tensor *const *inputs, int n_outputs, mx_tensor **outputs,
                                   const mx_activation_checkpoint_options *options);

/* A Sequential's forward with each run of layers_per_segment layers
 * checkpointed (torch.utils.checkpoint.checkpoint_sequential, by segment
 * length): the last segment runs normally, since backward needs its
 * activations at once. seq must outlive the graph. The output as
 * mx_module_forward(seq, x) gives it (a new handle), or NULL with the
 * error set. */
mx_tensor *mx_activation_checkpoint_sequential(mx_module *seq, int layers_per_segment, const mx_tensor *x,
                                               const mx_activation_checkpoint_options *options);

MX_API_END

#endif
