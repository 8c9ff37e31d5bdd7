/* The backend's supports() query and the dispatcher's use of it: each
 * answer, the two distinct "cannot" errors, and float32 fall-backs in the
 * AMP trace and report. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#include "../common/expect_error.h"
#include "kernels/cpu/dnnl.h"
#include "mx_config.h"
#include "ops/op_table.h"

static mx_status fake_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) { return MX_OK; }

/* float32 native, float16 on float32 copies, bfloat16 not on this machine,
 * float64 not built */
static mx_kernel_support fake_supports(mx_kernel kernel, mx_dtype dtype) {
  switch (dtype) {
  case MX_F16: return MX_KERNEL_VIA_F32;
  case MX_BF16: return MX_KERNEL_NOT_HERE;
  case MX_F64: return MX_KERNEL_NOT_BUILT;
  default: return MX_KERNEL_NATIVE;
  }
}

static const mx_backend fake = {.name = "fake", .device = MX_CPU, .matmul = fake_matmul, .supports = fake_supports};
static const mx_backend fake_without_query = {.name = "fake", .device = MX_CPU, .matmul = fake_matmul};

/* What mx_amp_report printed. */
static char *report_text(void) {
  char *text = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&text, &len);
  mx_amp_report(f);
  fclose(f);
  return text;
}

Test(supports, a_backend_answers_per_kernel_and_dtype) {
  cr_expect_eq(mx__backend_supports(&fake, MX_KERNEL_MATMUL, MX_F32), MX_KERNEL_NATIVE);
  cr_expect_eq(mx__backend_supports(&fake, MX_KERNEL_MATMUL, MX_F16), MX_KERNEL_VIA_F32);
  cr_expect_eq(mx__backend_supports(&fake, MX_KERNEL_MATMUL, MX_BF16), MX_KERNEL_NOT_HERE);
  cr_expect_eq(mx__backend_supports(&fake, MX_KERNEL_MATMUL, MX_F64), MX_KERNEL_NOT_BUILT);
  /* an empty slot is not built whatever supports() would say */
  cr_expect_eq(mx__backend_supports(&fake, MX_KERNEL_CONV_FORWARD, MX_F32), MX_KERNEL_NOT_BUILT);
  /* no query: every present kernel runs natively */
  cr_expect_eq(mx__backend_supports(&fake_without_query, MX_KERNEL_MATMUL, MX_BF16), MX_KERNEL_NATIVE);
  cr_expect_eq(mx__backend_supports(&fake_without_query, MX_KERNEL_SORT, MX_F32), MX_KERNEL_NOT_BUILT);
  cr_expect_str_eq(mx__kernel_name(MX_KERNEL_CONV_BACKWARD_WEIGHT), "conv_backward_weight");
}

Test(supports, the_two_cannots_are_distinct_errors_naming_the_op) {
  EXPECT_ERROR(mx__kernel_usable(MX_OP_MM, &fake, MX_KERNEL_MATMUL, MX_BF16),
               "mx_mm: this cpu cannot run the matmul kernel for bfloat16");
  cr_expect_eq(mx_last_status(), MX_NOT_SUPPORTED);
  EXPECT_ERROR(mx__kernel_usable(MX_OP_MM, &fake, MX_KERNEL_MATMUL, MX_F64),
               "mx_mm: this build of mixgrad has no matmul kernel for float64 on cpu");
  cr_expect_eq(mx_last_status(), MX_NOT_BUILT);
  EXPECT_ERROR(mx__kernel_usable(MX_OP_CONV, &fake, MX_KERNEL_CONV_FORWARD, MX_F32),
               "mx_conv: this build of mixgrad has no conv_forward kernel for float32 on cpu");
  cr_expect_eq(mx_last_status(), MX_NOT_BUILT);
  cr_expect_str_eq(mx_status_str(MX_NOT_SUPPORTED), "not supported on this machine");
  cr_expect_str_neq(mx_status_str(MX_NOT_SUPPORTED), mx_status_str(MX_NOT_BUILT));
}

Test(supports, a_float32_fall_back_runs_and_is_reported) {
  mx_amp_report_reset();
  mx_clear_error();
  cr_expect(mx__kernel_usable(MX_OP_MM, &fake, MX_KERNEL_MATMUL, MX_F16));
  cr_expect(mx__kernel_usable(MX_OP_MM, &fake, MX_KERNEL_MATMUL, MX_F16));
  cr_expect(mx__kernel_usable(MX_OP_MM, &fake, MX_KERNEL_MATMUL, MX_F32)); /* native: not counted */
  cr_expect_eq(mx_last_status(), MX_OK);
  char *text = report_text();
  cr_expect(strstr(text, "kernels via float32 (no native 16-bit kernel here): mm float16 x2\n"), "%s", text);
  free(text);
}

/* The CPU's answers follow the machine: bfloat16 products natively only
 * with oneDNN on a CPU with bf16 dot products, float16 always on float32
 * copies, and elementwise work in every dtype. */
Test(supports, the_cpu_answers_for_this_machine) {
  bool bf16_dots = MX_HAVE_DNNL && __builtin_cpu_supports("avx512bf16");
  const mx_backend *cpu = &mx__cpu_backend;
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_MATMUL, MX_BF16), bf16_dots ? MX_KERNEL_NATIVE : MX_KERNEL_VIA_F32);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_CONV_BACKWARD_DATA, MX_BF16),
               bf16_dots ? MX_KERNEL_NATIVE : MX_KERNEL_VIA_F32);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_MATMUL, MX_F16), MX_KERNEL_VIA_F32);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_CONV_FORWARD, MX_F16), MX_KERNEL_VIA_F32);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_MATMUL, MX_F32), MX_KERNEL_NATIVE);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_MATMUL, MX_F64), MX_KERNEL_NATIVE);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_UNARY, MX_F16), MX_KERNEL_NATIVE);
  cr_expect_eq(mx__backend_supports(cpu, MX_KERNEL_SOFTMAX, MX_BF16), MX_KERNEL_NATIVE);
  for (int k = 0; k < MX_KERNEL_COUNT; k++) /* every slot is filled on the CPU */
    cr_expect_neq(mx__backend_supports(cpu, (mx_kernel)k, MX_F32), MX_KERNEL_NOT_BUILT, "%s", mx__kernel_name(k));
}

/* A float16 matmul on the CPU: counted in the report, one trace line. */
Test(supports, a_cpu_float16_matmul_is_traced_once_and_counted) {
  char *trace = NULL;
  size_t len = 0;
  FILE *f = open_memstream(&trace, &len);
  mx_amp_trace(f);
  mx_amp_report_reset();
  mx_scope *scope = mx_scope_begin();
  mx_tensor *a = mx_ones(MX_SHAPE(2, 3), MX_F16, MX_CPU), *b = mx_ones(MX_SHAPE(3, 2), MX_F16, MX_CPU);
  mx_tensor *y1 = mx_mm(a, b), *y2 = mx_mm(a, b);
  cr_assert(y1 && y2, "%s", mx_last_error());
  cr_expect_eq(mx_item(mx_sum(y1, MX_ALL_DIMS, false)), 12.0); /* each of 4 entries is 3 */
  mx_amp_trace(NULL);
  fclose(f);
  const char *line = "amp: mm                   float16 on cpu runs via float32: no float16 kernel here (said once)\n";
  char *first = strstr(trace, line);
  cr_expect(first && !strstr(first + 1, line), "%s", trace);
  char *text = report_text();
  cr_expect(strstr(text, "mm float16 x2"), "%s", text);
  free(text);
  free(trace);
  mx_scope_end(scope);
}
