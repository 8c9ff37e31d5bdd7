/* Modules: layers with named parameters, buffers and children, like
 * torch.nn.Module.
 *
 *     mx_module *net = mx_sequential_new(3, (mx_module *[]){
 *         mx_linear_new(784, 512, true, gen), mx_relu_new(), mx_linear_new(512, 10, true, gen)});
 *     mx_tensor *logits = mx_module_forward(net, x);
 *     mx_module_train(net, false);                     // eval: dropout off, running stats
 *     mx_module_free(net);                             // its children and tensors too
 *
 * A custom module is a type (name, forward, optional free/extra) plus the
 * parameters, buffers and children it registers by name after
 * mx_module_new; its own data hangs off mx_module_self. Parameters are
 * leaves that require grad; buffers (running statistics) are not. Names of
 * nested tensors are dotted: "layer1.0.weight", as PyTorch's state_dict.
 * A module owns what it registers: the tensors (kept out of any scope) and
 * its children.
 */
#ifndef MX_NN_MODULE_H
#define MX_NN_MODULE_H

#include <stdio.h>

#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_module mx_module;

typedef struct {
  const char *name; /* "Linear" */
  /* the output for x, a new handle (NULL with the error set); training
   * mode via mx_module_is_training */
  mx_tensor *(*forward)(mx_module *m, const mx_tensor *x);
  /* frees mx_module_self's data (may be NULL: nothing to free) */
  void (*free_self)(void *self);
  /* the arguments as summaries print them, PyTorch's extra_repr:
   * "in_features=784, out_features=512, bias=True" (may be NULL) */
  void (*extra)(const mx_module *m, char *buf, size_t size);
  /* several tensors in and out (a recurrent cell with its carried state,
   * say): out[0..n_out) from in[0..n_in) (entries may be NULL where the
   * module allows it), new handles, or an error status. Optional: a type
   * has forward, forward_n or both. Declare types with designated
   * initializers ({.name = ..., .forward = ...}), so a field added later
   * needs no edit. */
  mx_status (*forward_n)(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out);
} mx_module_type;

/* A module of the type with its own data self (freed by free_self, also
 * when mx_module_new fails). New modules are in training mode. */
mx_module *mx_module_new(const mx_module_type *type, void *self);
/* Frees the module, its children and its tensors. Only a root is freed:
 * a module registered as a child belongs to its parent. */
void mx_module_free(mx_module *m);
void *mx_module_self(const mx_module *m);
const mx_module_type *mx_module_type_of(const mx_module *m);

/* Registration: the module takes the tensor (made a leaf that requires
 * grad for a parameter) or the child; names are unique per module (one
 * namespace for parameters, buffers and children), non-empty, without '.'.
 * The module takes what it is given even when registration fails (it is
 * released, or freed), except a tensor or child that already belongs to
 * its tree or (for a child) to another one. A tensor belongs to one module. */
mx_status mx_module_add_parameter(mx_module *m, const char *name, mx_tensor *t);
mx_status mx_module_add_buffer(mx_module *m, const char *name, mx_tensor *t);
mx_status mx_module_add_child(mx_module *m, const char *name, mx_module *child);

/* Direct members by name (borrowed; NULL when absent); a dotted name
 * ("layer1.0.weight") reaches into the children. */
mx_tensor *mx_module_get_parameter(const mx_module *m, const char *name);
mx_tensor *mx_module_get_buffer(const mx_module *m, const char *name);
mx_module *mx_module_get_child(const mx_module *m, const char *name);
int mx_module_num_children(const mx_module *m);
mx_module *mx_module_child(const mx_module *m, int i, const char **name);

/* Runs the type's forward (or its forward_n with one input and one output).
 * Its temporaries are released when it returns; the result belongs to the
 * caller's scope. A failure names the layer:
 * "mx_module_forward: layer 1.conv (Conv2d): mx_conv2d: ...". */
mx_tensor *mx_module_forward(mx_module *m, const mx_tensor *x);
/* The same for several tensors in and out, through the type's forward_n (or
 * its forward, for one of each): temporaries released, every output in the
 * caller's scope, a failure naming the layer as mx_module_forward's do. On
 * failure every out[i] is NULL. */
mx_status mx_module_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out);
/* A hook called after every successful forward of m or a module below it
 * (PyTorch's forward hooks, for the whole tree at once), with the module's
 * dotted name below m ("" for m itself), its type's name and its output
 * (out[0] of a forward_n). One per module: a new one replaces it; NULL
 * removes it. amp/stats.h's mx_amp_stats_output_hook is one. */
typedef void (*mx_module_output_hook)(const char *name, const char *type, const mx_tensor *out, void *ctx);
void mx_module_set_output_hook(mx_module *m, mx_module_output_hook hook, void *ctx);
/* train/eval for the module and all its children */
void mx_module_train(mx_module *m, bool training);
bool mx_module_is_training(const mx_module *m);

/* Every parameter (or buffer) of the module and its children, depth
 * first in registration order (PyTorch's named_parameters and
 * named_buffers), with dotted names that stay valid until the module is
 * freed. Borrowed. */
int mx_module_num_parameters(const mx_module *m);
mx_tensor *mx_module_parameter(const mx_module *m, int i, const char **name);
int mx_module_num_buffers(const mx_module *m);
mx_tensor *mx_module_buffer(const mx_module *m, int i, const char **name);
/* Moves every parameter and buffer to device in place, like torch's
 * module.to(device): the handles stay (the module, and whoever holds them,
 * see the move), their data becomes a contiguous copy there, and their
 * gradients are dropped. Views of the old data keep it. On a failure
 * nothing has moved. Make optimizers after the move: their state lives
 * where the parameters were when they were made. */
mx_status mx_module_to(mx_module *m, mx_device device);
/* Lays every 4-d parameter and buffer out channels-last in place, like
 * torch's module.to(memory_format=torch.channels_last): a convolution's
 * (C_out, C_in, kH, kW) weight then lies as (C_out, kH, kW, C_in), the
 * layout cuDNN's tensor-core kernels read beside channels-last activations
 * (mx_to_channels_last), so a step copies no weight into it; the weight's
 * gradient comes in the same layout. Values, shapes and handles stay;
 * gradients are dropped; on a failure nothing has changed. Make optimizers
 * after it, as after mx_module_to. */
mx_status mx_module_to_channels_last(mx_module *m);
/* Elements over all parameters. */
int64_t mx_module_parameter_count(const mx_module *m);
/* The module and all its descendants, depth first in registration order:
 * module 0 is m itself, named "". Borrowed. */
int mx_module_num_modules(const mx_module *m);
mx_module *mx_module_module(const mx_module *m, int i, const char **name);

/* Prints a table of the module's layers like torchsummary: each
 * descendant's dotted name, type and arguments, its output shape for an
 * input of input_shape (zeros of the first parameter's dtype and device;
 * float32 on the CPU without parameters; "-" for a layer never called) and
 * its own parameter count (the root gets a row for parameters of its own),
 * then the totals. The forward runs in eval mode without grad; each
 * module's mode is restored. */
mx_status mx_module_summary(mx_module *m, mx_shape input_shape, FILE *f);
/* The same for a given input x (int64 indices for an Embedding). */
mx_status mx_module_summary_input(mx_module *m, const mx_tensor *x, FILE *f);

MX_API_END

#endif
