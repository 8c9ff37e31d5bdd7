/* MX_AUTOCAST as amp/amp.h's example writes it, and the grad-mode blocks
 * (MX_NO_GRAD, MX_ENABLE_GRAD, MX_INFERENCE_MODE) likewise, compiled
 * (tests/amp/meson.build) at -O2 with -Werror=maybe-uninitialized: a
 * variable assigned in a block and used after it must not warn, since each
 * block always runs once. The build is the test; running it checks the
 * blocks ran and their modes ended. */
#include <mixgrad.h>
#include <stdio.h>

int main(void) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_ones(MX_SHAPE(2, 2), MX_F32, MX_CPU);
  mx_tensor *y;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { y = mx_matmul(x, x); }
  mx_tensor *a, *b, *c;
  MX_NO_GRAD { a = mx_relu(x); }
  MX_ENABLE_GRAD { b = mx_relu(x); }
  MX_INFERENCE_MODE { c = mx_relu(x); }
  int ok = y && mx_dtype_of(y) == MX_BF16 && mx_item(mx_sum(y, MX_ALL_DIMS, false)) == 8.0 && mx_autocast_depth() == 0;
  ok = ok && a && b && c && mx_is_inference(c) && !mx_is_inference(a) && mx_is_grad_enabled() &&
       !mx_is_inference_mode_enabled();
  if (!ok) fprintf(stderr, "autocast block: %s\n", y ? "wrong result" : mx_last_error());
  mx_scope_end(s);
  return ok ? 0 : 1;
}
