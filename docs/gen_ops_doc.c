/* Writes docs/ops.md from the op table (ops/ops.def), so the table of every
 * op and its autocast policy is never out of date: the 'ops-doc' test runs
 * this and compares. Usage: gen_ops_doc [OUT.md] (stdout without). */
#include <mixgrad.h>
#include <stdio.h>

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
  return out == stdout || fclose(out) == 0 ? 0 : 1;
}
