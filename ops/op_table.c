/* The op table, generated from ops/ops.def, and the policy lookup. */
#include "ops/op_table.h"

#include <stdio.h>
#include <string.h>

#include "kernels/elementwise.h"

#define MX__FWD_FORMULA(name) mx__fwd_##name
#define MX__BWD_FORMULA(name) mx__bwd_##name
#define MX__BWD_NONE(name) NULL
#define MX__BWD_BODY(name) NULL
#define MX__SAVE(save) MX__SAVE_##save

const mx__op_def mx__ops[MX_OP_COUNT] = {
#define MX_UNARY(E, name, policy, save, grad, ...)                                                           \
  [MX_OP_##E] = {#name, "mx_" #name, #E "Backward", "x", 1, MX_CAST_##policy, MX__SAVE(save), MX__GRAD_##grad, MX_UN_##E, \
                 mx__unary_forward, MX__BWD_##grad(name)},
#define MX_BINARY(E, name, policy, save, grad, ...)                                                          \
  [MX_OP_##E] = {#name, "mx_" #name, #E "Backward", "a, b", 1, MX_CAST_##policy, MX__SAVE(save), MX__GRAD_##grad, MX_BIN_##E, \
                 mx__binary_forward, MX__BWD_##grad(name)},
#define MX_OP(E, name, inputs, n_out, policy, save, grad)                                               \
  [MX_OP_##E] = {#name, "mx_" #name, #E "Backward", inputs, n_out, MX_CAST_##policy, MX__SAVE(save), MX__GRAD_##grad, 0, \
                 mx__fwd_##name, MX__BWD_##grad(name)},
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};

/* Every row above filled its slot: a row missing from the enum or the
 * table would leave a NULL forward. */
static const char *const op_names[] = {
#define MX_UNARY(E, name, policy, save, grad, ...) #name,
#define MX_BINARY(E, name, policy, save, grad, ...) #name,
#define MX_OP(E, name, inputs, n_out, policy, save, grad) #name,
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};
_Static_assert(sizeof op_names / sizeof *op_names == MX_OP_COUNT, "one name per op");

const char *mx__input_name(mx_op op, int i, char *buf, size_t size) {
  const char *p = mx__ops[op].inputs;
  for (int k = 0; k < i && p; k++) {
    p = strchr(p, ',');
    if (p) p += 2; /* ", " */
  }
  if (!p) {
    snprintf(buf, size, "input %d", i);
    return buf;
  }
  size_t n = strcspn(p, ",");
  snprintf(buf, size, "%.*s", (int)n, p);
  return buf;
}

int mx_op_count(void) { return MX_OP_COUNT; }

const char *mx_op_name(int op) { return op >= 0 && op < MX_OP_COUNT ? mx__ops[op].name : "invalid op"; }

const char *mx_op_inputs(int op) { return op >= 0 && op < MX_OP_COUNT ? mx__ops[op].inputs : ""; }

bool mx_op_is_composite(int op) { return op >= 0 && op < MX_OP_COUNT && mx__ops[op].grad == MX__GRAD_BODY; }

const char *mx_op_gradient(int op) {
  if (op < 0 || op >= MX_OP_COUNT) return "none";
  switch (mx__ops[op].grad) {
  case MX__GRAD_FORMULA: return "formula";
  case MX__GRAD_BODY: return "composite";
  default: return "none";
  }
}

mx_cast_policy mx_op_policy(int op) { return op >= 0 && op < MX_OP_COUNT ? mx__ops[op].policy : MX_CAST_NONE; }

const char *mx_cast_policy_name(mx_cast_policy policy) {
  static const char *const names[] = {"none", "lower", "fp32", "promote", "banned"};
  return (unsigned)policy < sizeof names / sizeof *names ? names[policy] : "invalid policy";
}
