/* What the two case tables (op_cases_basic.c, op_cases_appended.c) are written with: shapes as initializers, the
 * function of a case's inputs each row names, constants in an input's dtype, backward ops as functions of their
 * inputs, and the row macros. Private to the tables; tests use op_cases.h. */
#ifndef MX_TESTS_OPS_OP_CASE_TABLE_H
#define MX_TESTS_OPS_OP_CASE_TABLE_H

#include "op_cases.h"

/* A shape as a constant initializer: SH(2, 3); SH0 is the 0-d shape. */
#define SH_N(...) SH_N_(__VA_ARGS__, 8, 7, 6, 5, 4, 3, 2, 1, 0)
#define SH_N_(a1, a2, a3, a4, a5, a6, a7, a8, n, ...) n
#define SH(...) {SH_N(__VA_ARGS__), {__VA_ARGS__}}
#define SH0 {0, {0}}

/* f_<name>(n, in, ctx): the op on in[0] (a), in[1] (b), in[2] (c). */
#define FN(name, expr)                                                          \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {          \
    (void)ctx;                                                                  \
    mx_tensor *a = in[0], *b = n > 1 ? in[1] : NULL, *c = n > 2 ? in[2] : NULL; \
    (void)a, (void)b, (void)c;                                                  \
    return (expr);                                                              \
  }

/* Indices and other constants are written out in the functions; make_fixtures.py uses the
 * same numbers. */
#define IDX(shape, ...) mx_from_data((const int64_t[]){__VA_ARGS__}, shape, MX_I64, MX_CPU)
#define LIST(...) ((mx_tensor *[]){__VA_ARGS__})
#define NLIST(...) (int)(sizeof LIST(__VA_ARGS__) / sizeof(mx_tensor *)), LIST(__VA_ARGS__)

/* float64 constants in like's dtype */
mx_tensor *op_case_constant(const mx_tensor *like, mx_shape shape, const double *v);
#define CONST(like, shape, ...) op_case_constant(like, shape, (const double[]){__VA_ARGS__})

/* A zero leaf that requires grad, in like's dtype (the input a gradient is taken for). */
mx_tensor *op_case_zero_leaf(mx_shape shape, const mx_tensor *like);

/* gy . d f(x) / d x, with a graph of its own when grad mode is on (as in gradgradcheck): the
 * backward ops (softmax_backward, max_pool_backward, conv_backward_data, ...) as functions of
 * their inputs, so gradcheck and the fixtures differentiate them. */
typedef mx_tensor *(*op_case_forward)(mx_tensor *x, mx_tensor *const *in);
mx_tensor *op_case_vjp(op_case_forward f, mx_tensor *x, mx_tensor *const *in, mx_tensor *gy);
#define VJP(name, forward, x_expr, gy_expr)                                 \
  static mx_tensor *fw_##name(mx_tensor *x, mx_tensor *const *in) {         \
    (void)in;                                                               \
    return (forward);                                                       \
  }                                                                         \
  static mx_tensor *f_##name(int n, mx_tensor *const *in, void *ctx) {      \
    (void)n, (void)ctx;                                                     \
    return op_case_vjp(fw_##name, (x_expr), in, (gy_expr));                 \
  }

/* normalisation: running statistics start at fixed values in x's dtype */
#define RUNNING_MEAN(x) CONST(x, MX_SHAPE(3), 0.5, -0.25, 1.0)
#define RUNNING_VAR(x) CONST(x, MX_SHAPE(3), 0.5, 2.0, 1.5)

#define GC OP_GRADCHECK
#define GG (OP_GRADCHECK | OP_GRADGRAD)
#define ANY DOM_ANY
#define POS DOM_POS
#define UNIT DOM_UNIT
#define AWAY DOM_AWAY
#define NONINT DOM_NONINT
#define BOOL DOM_BOOL
#define NF OP_NO_FIXTURE

/* name, inputs, shapes, domains, flags[, eps, atol, rtol] */
#define UN(name, dom, flags) {#name, f_##name, 1, {SH(2, 3)}, {dom}, flags, 0, 0, 0}
#define BIN(name, da, db, flags) {#name, f_##name, 2, {SH(2, 3), SH(3)}, {da, db}, flags, 0, 0, 0}
#define CASE1(name, s0, d0, flags) {#name, f_##name, 1, {s0}, {d0}, flags, 0, 0, 0}
#define CASE2(name, s0, d0, s1, d1, flags) {#name, f_##name, 2, {s0, s1}, {d0, d1}, flags, 0, 0, 0}
#define CASE3(name, s0, d0, s1, d1, s2, d2, flags) {#name, f_##name, 3, {s0, s1, s2}, {d0, d1, d2}, flags, 0, 0, 0}

/* The cases of the ops (unary through sorting), then those appended after them (losses, composites, fused ops).
 * op_case_at(k) counts through the first table, then the second: the fuzz corpus stores those indices, so a new
 * case goes at the end of op_cases_appended[]. */
extern const op_case op_cases_basic[], op_cases_appended[];
extern const int op_cases_basic_count, op_cases_appended_count;

#endif
