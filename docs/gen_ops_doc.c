/* Writes docs/ops.md from the op table (ops/ops.def), so the table of every
 * op and its autocast policy is never out of date: the 'ops-doc' test runs
 * this and compares. Usage: gen_ops_doc [OUT.md] (stdout without). */
#include <mixgrad.h>
#include <stdio.h>
#include <string.h>

/* The elementwise rows' signatures and doc lines, read from the table itself (the library keeps no doc strings). */
static const struct {
  const char *name, *tensors, *params, *doc;
} elementwise[] = {
#define MX_UNARY(E, name, policy, save, grad, domain, params, doc) {#name, "x", params, doc},
#define MX_BINARY(E, name, policy, save, grad, domain_a, domain_b, params, doc) {#name, "a, b", params, doc},
#define MX_OP(...)
#include "ops/ops.def"
#undef MX_UNARY
#undef MX_BINARY
#undef MX_OP
};

static const char *policy_text(mx_cast_policy p) {
  switch (p) {
  case MX_CAST_LOWER: return "lower (f16/bf16)";
  case MX_CAST_FP32: return "fp32";
  case MX_CAST_PROMOTE: return "promote (widest)";
  case MX_CAST_BANNED: return "banned";
  default: return "none";
  }
}

int main(int argc, char **argv) {
  FILE *out = argc > 1 ? fopen(argv[1], "w") : stdout;
  if (!out) {
    perror(argv[1]);
    return 1;
  }
  fprintf(out, "# mixgrad ops\n\n"
               "Generated from `ops/ops.def` by `docs/gen_ops_doc.c`; the `ops-doc` test fails when\n"
               "this file is out of date (`build/docs/gen_ops_doc docs/ops.md` rewrites it).\n\n"
               "**Autocast policy**: what the autocast layer does to an op's floating inputs: *lower*\n"
               "casts them to the autocast dtype, *fp32* to float32, *promote* to the widest\n"
               "floating type among them, *banned* refuses under autocast, *none* leaves them.\n"
               "**Kind**: a *primitive* has kernels of its own; a *composite* is written with other\n"
               "ops, runs wherever they run, and is differentiated through them.\n"
               "**Gradient**: *formula* is a backward written with ops (so it differentiates again).\n\n"
               "**Devices**: every op runs on the CPU and on CUDA. The CUDA backend has the memory,\n"
               "creation, random, copy and cast kernels, elementwise (unary, binary, comparisons,\n"
               "where), reductions, scans and sorts, matrix products (cuBLAS), softmax,\n"
               "gather/scatter/index, convolution (cuDNN; direct kernels for float64 and what cuDNN\n"
               "declines), pooling (direct kernels), batch norm's per-channel sums and\n"
               "scale-and-shift, and the AMP and optimizer kernels.\n\n"
               "| # | op | inputs | autocast policy | kind | gradient |\n"
               "|---|---|---|---|---|---|\n");
  for (int op = 0; op < mx_op_count(); op++)
    fprintf(out, "| %d | `%s` | %s | %s | %s | %s |\n", op, mx_op_name(op), mx_op_inputs(op),
            policy_text(mx_op_policy(op)), mx_op_is_composite(op) ? "composite" : "primitive", mx_op_gradient(op));
  int counts[5] = {0};
  for (int op = 0; op < mx_op_count(); op++) counts[mx_op_policy(op)]++;
  fprintf(out, "\n%d ops: %d lower, %d float32, %d promote, %d banned, %d none.\n", mx_op_count(),
          counts[MX_CAST_LOWER], counts[MX_CAST_FP32], counts[MX_CAST_PROMOTE], counts[MX_CAST_BANNED],
          counts[MX_CAST_NONE]);
  fprintf(out, "\n## Elementwise functions\n\n"
               "One per `MX_UNARY` / `MX_BINARY` row, written by the build from the row with its doc line\n"
               "(`ops/elementwise_api.h`); the parameters after the tensors are doubles.\n\n"
               "| function | computes |\n|---|---|\n");
  for (size_t i = 0; i < 2 * sizeof elementwise / sizeof *elementwise; i++) { /* the unary rows, then the binary */
    size_t k = i % (sizeof elementwise / sizeof *elementwise);
    if ((i < sizeof elementwise / sizeof *elementwise) != !strcmp(elementwise[k].tensors, "x")) continue;
    char params[128] = "";
    /* "alpha = 1" is fixed, not a parameter */
    if (elementwise[k].params[0] && !strchr(elementwise[k].params, '='))
      snprintf(params, sizeof params, ", %s", elementwise[k].params);
    fprintf(out, "| `mx_%s(%s%s)` | ", elementwise[k].name, elementwise[k].tensors, params);
    for (const char *c = elementwise[k].doc; *c; c++) fputs(*c == '|' ? "\\|" : (char[]){*c, 0}, out);
    fputs(" |\n", out);
  }
  return out == stdout || fclose(out) == 0 ? 0 : 1;
}
