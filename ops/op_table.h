/* The op table as C: the enum, the row struct, the dispatcher's entry
 * points, and the helpers op implementations share (internal). */
#ifndef MX_OPS_OP_TABLE_H
#define MX_OPS_OP_TABLE_H

#include "autograd/node.h"
#include "ops/ops.h"
#include "tensor/tensor_impl.h"

typedef enum {
#define MX_UNARY(E, name, policy, save, grad, ...) MX_OP_##E,
#define MX_BINARY(E, name, policy, save, grad, ...) MX_OP_##E,
#define MX_OP(E, name, inputs, n_out, policy, save, grad) MX_OP_##E,
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
  MX_OP_COUNT
} mx_op;

#define MX__MAX_OUTPUTS 4

/* The non-tensor arguments of a call; each op documents its use of them. */
typedef struct {
  double f[4];
  int64_t i[4];
  mx_shape shape;
  mx_dtype dtype;
  bool keepdim;
  mx_pool_params pool;
  mx_conv_params conv;
  void *ptr; /* dropout: the generator; to_dtype: the cast already made (mx__to_dtype_precomputed) */
} mx__args;

/* One call going through the dispatcher. */
typedef struct {
  mx_op op;
  int n_in;
  mx_tensor **in; /* after autocast */
  const mx__args *args;
  mx_tensor *out[MX__MAX_OUTPUTS];
} mx__call;

/* What a backward formula sees. */
typedef struct {
  mx_op op;
  const mx__args *args;
  mx__node *node;
  mx_tensor *const *grad_out; /* one per output, never NULL */
  mx_tensor **grad_in;        /* to fill, one per input (NULL: none) */
} mx__bw;

typedef mx_status (*mx__forward_fn)(mx__call *call);
typedef mx_status (*mx__backward_fn)(mx__bw *bw);

enum { MX__SAVE_NOTHING = 0, MX__SAVE_IN = 1, MX__SAVE_OUT = 2, MX__SAVE_IO = 3 };
typedef enum { MX__GRAD_FORMULA, MX__GRAD_NONE, MX__GRAD_BODY } mx__grad_kind;

typedef struct {
  const char *name;        /* "add" */
  const char *api_name;    /* "mx_add": how errors name it */
  const char *node_name;   /* "AddBackward" */
  const char *inputs;      /* "cond, a, b": the names of the tensor inputs */
  int n_out;
  mx_cast_policy policy;
  int save;
  mx__grad_kind grad;
  int code;                /* the kernel code of elementwise ops */
  mx__forward_fn forward;
  mx__backward_fn backward;
} mx__op_def;

extern const mx__op_def mx__ops[MX_OP_COUNT];

/* Declarations of every forward and backward named by the table. */
#define MX__DECL_FORMULA(name) mx_status mx__bwd_##name(mx__bw *bw);
#define MX__DECL_NONE(name)
#define MX__DECL_BODY(name)
#define MX_UNARY(E, name, policy, save, grad, ...) MX__DECL_##grad(name)
#define MX_BINARY(E, name, policy, save, grad, ...) MX__DECL_##grad(name)
#define MX_OP(E, name, inputs, n_out, policy, save, grad) mx_status mx__fwd_##name(mx__call *call); MX__DECL_##grad(name)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
mx_status mx__unary_forward(mx__call *call);
mx_status mx__binary_forward(mx__call *call);

/* The name of input i of op ("b" for mx_add's second). */
const char *mx__input_name(mx_op op, int i, char *buf, size_t size);

/* --- the dispatcher ------------------------------------------------------------------ */
/* Runs op on n_in inputs: check, autocast, autograd, kernel. out receives
 * the op's n_out outputs (new handles). */
mx_status mx__dispatch(mx_op op, int n_in, const mx_tensor *const *in, const mx__args *args, mx_tensor **out);
/* The common single-output cases; NULL on error. */
mx_tensor *mx__call1(mx_op op, const mx_tensor *a, const mx__args *args);
mx_tensor *mx__call2(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx__args *args);
mx_tensor *mx__call3(mx_op op, const mx_tensor *a, const mx_tensor *b, const mx_tensor *c, const mx__args *args);

/* The autocast layer, installed by amp/ when the library loads (NULL
 * without it). before may replace in[i] with casts, which belong to the
 * call's scope; after sees the outputs (for the trace). Neither runs while
 * mx__autocast_excluded is nonzero: inside the forward of an op (a
 * composite's body applies no policy of its own), in-place ops, and the
 * layer's own casts. */
typedef struct {
  mx_status (*before)(mx_op op, int n_in, mx_tensor **in, const mx__args *args);
  void (*after)(mx_op op, int n_out, mx_tensor *const *out, mx_status status);
  /* op's kernel runs dtype on float32 copies on device (mx__kernel_backend) */
  void (*via_f32)(mx_op op, mx_dtype dtype, mx_device device);
} mx__autocast_hooks;
extern const mx__autocast_hooks *mx__autocast;
extern _Thread_local int mx__autocast_excluded;

/* --- helpers for op implementations ------------------------------------------------- */
/* A C scalar as a 0-d float64 CPU tensor that does not widen dtypes. */
mx_tensor *mx__wrap_scalar(double value);
/* PyTorch's result type of the inputs (wrapped scalars and 0-d tensors
 * count less than dimensioned tensors). */
mx_dtype mx__result_type(int n, mx_tensor *const *in);
/* The broadcast shape of the inputs, or an error naming op. */
mx_status mx__broadcast_shape(const char *op, int n, mx_tensor *const *in, mx_shape *out);
/* t's kernel view broadcast to shape (stride 0 along broadcast dims). */
mx_kview mx__kview_broadcast(const mx_tensor *t, mx_shape shape);
/* t converted to dtype and on device (t itself when already so; else a
 * new tensor in the scope). For 0-d CPU tensors moving to a GPU too. */
mx_tensor *mx__prepare(mx_tensor *t, mx_dtype dtype, mx_device device);
/* The backend for the call's device, or NULL with the error set. */
const mx_backend *mx__backend_of(mx_op op, mx_device device);
/* The backend of device when its kernel runs on dtype, asked before an op
 * allocates anything (the backend's supports()): NULL with an error naming
 * the op when this build has no such kernel (MX_NOT_BUILT) or this machine
 * cannot run it (MX_NOT_SUPPORTED). A kernel that runs a 16-bit dtype on
 * float32 copies is noted in the AMP trace and report. */
const mx_backend *mx__kernel_backend(mx_op op, mx_device device, mx_kernel kernel, mx_dtype dtype);
/* The same question put to a given backend: false with the error set. */
bool mx__kernel_usable(mx_op op, const mx_backend *be, mx_kernel kernel, mx_dtype dtype);

/* Saved tensors inside a backward formula (NULL + error if unusable). */
mx_tensor *mx__saved_in(mx__bw *bw, int i);
mx_tensor *mx__saved_out(mx__bw *bw, int k);
bool mx__needs_grad(mx__bw *bw, int i);
/* The shape of input i as recorded. */
mx_shape mx__in_shape(mx__bw *bw, int i);

/* Shorthands for the op files. In a forward: OUT0 makes an expression the
 * call's one output. In a backward formula: G is the output's gradient,
 * GRAD(i, expr) sets input i's when it needs one (failing on NULL). */
#define OUT0(c, expr) (((c)->out[0] = (expr)) ? MX_OK : mx_last_status())
#define G (bw->grad_out[0])
#define GRAD(i, expr)                                                                     \
  do {                                                                                    \
    if (mx__needs_grad(bw, i) && !(bw->grad_in[i] = (expr))) return mx_last_status();     \
  } while (0)

/* mx_to_dtype(t, cast's dtype) whose output is a new handle on cast, which
 * the caller vouches holds t's values in that dtype, bit for bit (amp/'s
 * prepared casts): the same graph node, without the conversion. */
mx_tensor *mx__to_dtype_precomputed(const mx_tensor *t, mx_tensor *cast);

/* Sums t down to shape (the inverse of broadcasting). */
mx_tensor *mx__sum_to(const mx_tensor *t, mx_shape shape);
/* Every dim of an ndim-d (N, C, ...) tensor but the channels (1): what a
 * per-channel sum reduces. */
mx_shape mx__all_but_channels(int ndim);

/* Pooling (ops/pooling.c), for the ops that pool inside them (conv2d_max_pool_relu): the output shape of pooling
 * an input of shape in, or an error naming op; whether max pooling's indices can be offsets in the window (uint8:
 * a kernel of at most 256 elements and no dilation, so that every window holds an input element, the padding
 * being at most half the kernel); and g (the input's shape) gathered at the maxima the indices name: the adjoint
 * of max_pool_backward's scatter. */
mx_status mx__pooled_shape(const char *op, mx_shape in, const mx_pool_params *p, mx_shape *out);
bool mx__window_offsets_fit(const mx_pool_params *p);
mx_tensor *mx__max_pool_gather(const mx_tensor *g, const mx_tensor *indices, const mx_pool_params *p, mx_shape in);

/* Whether mx_cross_entropy's case is its fused primitive's (ops/cross_entropy_fused.c): an (N, C) floating input,
 * (N) int64 class indices, no weight, no label smoothing, on a device whose backend has the kernels. */
bool mx__cross_entropy_indices_fits(const mx_tensor *input, const mx_tensor *target, const mx_tensor *weight,
                                    double label_smoothing);

#endif
