/* The nn room's internal helpers: errors, owned tensors, the forward observer, layer constructors' plumbing. */
#ifndef MX_NN_NN_INTERNAL_H
#define MX_NN_NN_INTERNAL_H

#include "kernels/base_internal.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "ops/ops.h"
#include "tensor/scope.h"

/* Called by mx_module_forward after each successful forward (summaries record output shapes with it). */
typedef void (*mx__module_observer)(mx_module *m, const mx_tensor *out, void *ctx);
/* Installs an observer for this thread (NULL: none) and returns the previous one through *prev / *prev_ctx. */
void mx__module_observe(mx__module_observer fn, void *ctx, mx__module_observer *prev, void **prev_ctx);

/* Whether running m's forward is watched from outside: an observer on this thread, or an output hook on m or an
 * ancestor. A Sequential fuses no child that is watched, so hooks see every child's output as before. */
bool mx__module_observed(const mx_module *m);

/* Fusion in Sequential (nn/container.c): the forward of a module followed by the plain ReLU module, as one call
 * that gives relu(forward) bit for bit (conv2d_relu for a Conv2d). A kind that can fuse answers with its fused
 * forward for a module of its kind, NULL for any other (the fusing kinds are listed in container.c; a field in
 * mx_module_type would change the public struct's size). */
typedef mx_tensor *(*mx__forward_relu_fn)(mx_module *m, const mx_tensor *x);
mx__forward_relu_fn mx__conv_forward_relu(const mx_module *m);
mx__forward_relu_fn mx__batch_norm_forward_relu(const mx_module *m); /* BatchNorm1d/2d/3d: batch_norm_relu */
mx__forward_relu_fn mx__linear_forward_relu(const mx_module *m);     /* Linear: linear_relu */
/* A ReLU followed by a MaxPool (1d/2d/3d) in Sequential: the pool's forward of relu(x) as one call (max_pool_relu),
 * bit for bit; NULL for a module that is not a MaxPool. It takes precedence over the fusion of the ReLU with the
 * module before it. */
mx__forward_relu_fn mx__max_pool_relu_forward(const mx_module *m);
/* The parameters of a MaxPool (1d/2d/3d) module as given, for a fused forward that pools; false (nothing set) for
 * any other module. */
bool mx__max_pool_params(const mx_module *m, int *spatial, mx_shape *kernel, mx_shape *stride, mx_shape *padding,
                         mx_shape *dilation);
/* A Conv2d, a ReLU and a MaxPool2d in turn in Sequential: the three as one call (conv2d_max_pool_relu), bit for bit;
 * NULL unless conv is a Conv2d and pool a 2-d MaxPool. It takes precedence over the ReLU's fusions with either. */
typedef mx_tensor *(*mx__conv_pool_fn)(mx_module *conv, mx_module *pool, const mx_tensor *x);
mx__conv_pool_fn mx__conv_max_pool_relu_forward(const mx_module *conv, const mx_module *pool);
/* Whether m is the ReLU module (mx_relu_new). */
bool mx__module_is_relu(const mx_module *m);

/* Elements of the module's own parameters (not its children's), and of those that require grad. */
int64_t mx__module_own_parameter_count(const mx_module *m, int64_t *trainable);

/* A new module of type whose self is a zeroed block of `size` bytes (the type's free_self is then free), or
 * NULL with the error set. */
mx_module *mx__module_alloc(const mx_module_type *type, size_t size);

/* Frees m unless it belongs to a tree (silently: the pending error stays). NULL is ignored. */
void mx__module_free_orphan(mx_module *m);

/* A float32 CPU tensor of shape registered as parameter `name` of m, or t registered as buffer `name` (the
 * module takes it); the tensor (borrowed), or NULL with the error set. */
mx_tensor *mx__add_parameter(mx_module *m, const char *name, mx_shape shape);
mx_tensor *mx__add_buffer(mx_module *m, const char *name, mx_tensor *t);
/* Fills parameter w and bias b (may be NULL) from U(-1/sqrt(fan_in), 1/sqrt(fan_in)) by w's fan_in:
 * kaiming_uniform_(a = sqrt(5)) and the bias rule of Linear's and Conv's reset_parameters. */
mx_status mx__init_fan_in_uniform(mx_tensor *w, mx_tensor *b, mx_generator *gen);

/* Python's repr of a float ("0.1", "1e-05", "1.0") and "True"/"False", for the extra strings. */
void mx__float_repr(char *buf, size_t size, double v);
const char *mx__bool_repr(bool b);
/* Python's repr of a tuple of ints ("(3, 3)", "(3,)"), or of an int for a one-value list unless always_tuple. */
void mx__list_repr(char *buf, size_t size, mx_shape s, bool always_tuple);
/* Appends printf-formatted text to buf (of size bytes) after what it holds. */
void mx__append(char *buf, size_t size, const char *fmt, ...) MX__PRINTF(3, 4);

/* Checks a spatial argument list (one value, or one per dim of `spatial`, or empty when empty_ok) whose values
 * are >= min; names fn and what in the error. */
mx_status mx__check_list(const char *fn, const char *what, mx_shape s, int spatial, int64_t min, bool empty_ok);
/* The list with one value per dim of `spatial` (an empty list gives def everywhere). */
mx_shape mx__expand_list(mx_shape s, int spatial, int64_t def);

#endif
