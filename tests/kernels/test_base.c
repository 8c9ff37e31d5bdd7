/* dtype, device and status tables. */
#include <criterion/criterion.h>
#include <mixgrad.h>

Test(base, dtype_sizes_and_names) {
  cr_expect_eq(mx_dtype_size(MX_F32), 4);
  cr_expect_eq(mx_dtype_size(MX_F64), 8);
  cr_expect_eq(mx_dtype_size(MX_F16), 2);
  cr_expect_eq(mx_dtype_size(MX_BF16), 2);
  cr_expect_eq(mx_dtype_size(MX_I64), 8);
  cr_expect_eq(mx_dtype_size(MX_I32), 4);
  cr_expect_eq(mx_dtype_size(MX_U8), 1);
  cr_expect_eq(mx_dtype_size(MX_BOOL), 1);
  cr_expect_str_eq(mx_dtype_name(MX_BF16), "bfloat16");
  cr_expect_str_eq(mx_dtype_name((mx_dtype)99), "invalid dtype");
  cr_expect(mx_dtype_is_floating(MX_F16));
  cr_expect(!mx_dtype_is_floating(MX_I32));
}

Test(base, status_strings) {
  cr_expect_str_eq(mx_status_str(MX_OK), "success");
  cr_expect_str_eq(mx_status_str(MX_NO_CUDA_DEVICE), "no CUDA device");
  cr_expect_str_eq(mx_status_str((mx_status)1000), "unknown status");
}
