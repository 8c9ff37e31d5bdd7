/* A oneDNN convolution (dnnl_conv.c) whose y operand, the forward's output or the backward's diff_dst, stays in
 * the primitive's own layout in a buffer of the caller's, never a view: for kernels that produce or consume that
 * operand themselves (dnnl_conv_pool.c pools the forward's output and scatters the backward's diff_dst). */
#ifndef MX_KERNELS_CPU_DNNL_CONV_PLAN_H
#define MX_KERNELS_CPU_DNNL_CONV_PLAN_H

#include "kernels/base_internal.h"
#include "kernels/cpu/conv.h"

typedef enum { MX__DNNL_CONV_FORWARD, MX__DNNL_CONV_BACKWARD_DATA, MX__DNNL_CONV_BACKWARD_WEIGHTS } mx__dnnl_conv_kind;

typedef struct {
  void *entry;  /* the cached primitive, held until mx__dnnl_conv_plan_end */
  void *thread; /* the calling thread's stream and workspace */
  int kind;
  /* y's layout, a 4-d (N, C, H, W): channels per block, the element (n, c, h, w) at
   * (((n ceil(C / block) + c / block) H + h) W + w) block + c % block: 1 (abcd), C (nhwc), 4, 8 or 16 (aBcd4b ...,
   * the channels padded to a whole block with zeros); 0: another layout */
  int64_t block;
  size_t bytes;   /* y's bytes in that layout */
  mx_dtype y_dtype; /* y's elements there: x's dtype, or float32 for bfloat16 operands on a CPU without bf16 dot
                     * products and for float16 ones, computed by a float32 primitive (mx__dnnl_conv_in_f32's),
                     * whose bias and diff_bias are float32 too */
} mx__dnnl_conv_plan;

/* The primitive of kind for the operands in their roles: x (or dx), w (or dw), y (or dy), whose shapes, strides
 * and dtype pick it as the plain calls would, bfloat16 without bf16 dot products and float16 as conv.c's float32
 * primitives (float16 weights must come in float32, as conv.c passes them; y's data is never read: a view of the
 * tensor an unfused convolution would have had; backward weights may write a float32 dw, and diff_bias, for 16-bit
 * x and y: a chunk's sums);
 * bias: whether the forward adds one or the backward weights write diff_bias. MX_NOT_BUILT or MX_NOT_SUPPORTED (no
 * error set) where oneDNN declines; MX_BACKEND_ERROR on a failure. */
mx_status mx__dnnl_conv_plan_begin(mx__dnnl_conv_plan *plan, mx__dnnl_conv_kind kind, const mx_kview *x,
                                   const mx_kview *w, const mx_kview *y, bool bias, const mx_conv_params *p);
/* Runs it with y at y_prim, in the plan's layout (plan->bytes), the other operands and bias (NULL: none) in their
 * views, reordered and kept as the plain calls do. */
mx_status mx__dnnl_conv_plan_run(const mx__dnnl_conv_plan *plan, const mx_kview *x, const mx_kview *w,
                                 const mx_kview *y, const mx_kview *bias, void *y_prim);
void mx__dnnl_conv_plan_end(mx__dnnl_conv_plan *plan);
/* Whether two plans' y layouts are one (one buffer serves both). */
bool mx__dnnl_conv_plans_share_y(const mx__dnnl_conv_plan *a, const mx__dnnl_conv_plan *b);
/* Whether the primitive reads x in x's own layout (no reorder, nothing kept). */
bool mx__dnnl_conv_plan_reads_x_as_is(const mx__dnnl_conv_plan *plan);

#endif
