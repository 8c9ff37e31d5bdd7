/* The helpers of fused_case.h. */
#include "fused_case.h"

#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "ops/conv_pool.h"

/* t's bytes, malloc'ed. */
static void *bytes_of(const mx_tensor *t, size_t *size) {
  *size = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  void *buf = malloc(*size ? *size : 1);
  cr_assert(buf);
  cr_assert_eq(mx_to_host(t, buf, *size), MX_OK, "%s", mx_last_error());
  return buf;
}

void fused_case_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what, int k, mx_dtype dt) {
  cr_assert(a && b, "case %d %s (%s): %s", k, what, mx_dtype_name(dt), mx_last_error());
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "case %d %s", k, what);
  size_t na, nb;
  void *ba = bytes_of(a, &na), *bb = bytes_of(b, &nb);
  cr_expect(na == nb && !memcmp(ba, bb, na), "case %d %s (%s): fused and unfused differ", k, what, mx_dtype_name(dt));
  free(ba);
  free(bb);
}

mx_tensor *fused_case_leaf(mx_shape shape, mx_dtype dt, mx_generator *gen) {
  mx_tensor *u = mx_rand(shape, MX_F32, MX_CPU, gen);
  mx_tensor *t = mx_detach(mx_to_dtype(mx_sub_scalar(mx_mul_scalar(u, 2), 1), dt));
  cr_assert(t && mx_set_requires_grad(t, true) == MX_OK, "%s", mx_last_error());
  return t;
}

void fused_case_same_gradients(mx_tensor *const y[2], mx_tensor *x, mx_tensor *w, mx_tensor *b, mx_generator *gen,
                               int k, mx_dtype dt) {
  mx_tensor *r = mx_to_dtype(mx_randn(mx_shape_get(y[0]), MX_F32, MX_CPU, gen), mx_dtype_of(y[0]));
  mx_tensor *inputs[3] = {x, w, b}, *grads[2][3] = {{NULL}};
  int n_in = b ? 3 : 2;
  for (int f = 0; f < 2; f++) {
    mx_tensor *loss = mx_sum(mx_mul(y[f], r), MX_ALL_DIMS, false);
    cr_assert_eq(mx_grad(1, &loss, n_in, inputs, NULL, false, false, false, grads[f]), MX_OK, "%s", mx_last_error());
  }
  static const char *names[3] = {"grad of x", "grad of weight", "grad of bias"};
  for (int i = 0; i < n_in; i++) fused_case_same_bits(grads[0][i], grads[1][i], names[i], k, dt);
}

mx_tensor *fused_case_conv_pool(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  mx_tensor *y = NULL;
  mx__conv2d_max_pool_relu(in[0], in[1], in[2], MX_DEFAULT, MX_SHAPE(1), MX_DEFAULT, 1, MX_SHAPE(2), MX_DEFAULT,
                           MX_DEFAULT, MX_DEFAULT, &y, NULL);
  return y;
}
