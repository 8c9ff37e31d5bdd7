/* Creation functions. */
#include <criterion/criterion.h>
#include <mixgrad.h>

Test(create, zeros_ones_full) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *z = mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU);
  mx_tensor *f = mx_full(MX_SHAPE(4), 2.5, MX_F16, MX_CPU);
  cr_assert_not_null(z);
  cr_expect_eq(mx_numel(z), 6);
  cr_expect_eq(mx_at(z, MX_SHAPE(1, 2)), 0.0);
  cr_expect_eq(mx_at(f, MX_SHAPE(3)), 2.5);
  mx_scope_end(s);
}
