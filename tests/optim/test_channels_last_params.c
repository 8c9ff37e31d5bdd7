/* SGD and Adam on a channels-last parameter (mx_module_to_channels_last's
 * weights): the same values as on the row-major parameter, step for step,
 * with states laid out as the parameter (optim/sgd_adam.c walks parameter,
 * gradient and state in one memory order), whatever the gradient's layout. */
#include <criterion/criterion.h>
#include <string.h>

#include "mixgrad.h"

#define PS MX_SHAPE(8, 6, 3, 3)

typedef enum { SGD_PLAIN, SGD_MOMENTUM, ADAM_AMSGRAD } kind;

static mx_optimizer *make(kind k, mx_tensor *p) {
  if (k == ADAM_AMSGRAD) {
    mx_adam_opts o = mx_adam_defaults();
    o.lr = 0.01, o.weight_decay = 0.1, o.amsgrad = true;
    return mx_adam_new(1, &p, &o);
  }
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.1;
  if (k == SGD_MOMENTUM) o.momentum = 0.9, o.nesterov = true, o.weight_decay = 0.01;
  return mx_sgd_new(1, &p, &o);
}

/* a and b hold the same values element for element, whatever their layouts. */
static void expect_same(const mx_tensor *a, const mx_tensor *b, const char *what, int step) {
  mx_tensor *ac = mx_contiguous(a), *bc = mx_contiguous(b);
  cr_expect_eq(memcmp(mx_data_ptr(ac), mx_data_ptr(bc), (size_t)mx_numel(ac) * sizeof(float)), 0,
               "%s after step %d: the channels-last parameter's differs", what, step);
  mx_release(ac);
  mx_release(bc);
}

static void same_steps(kind k, bool channels_last_grad) {
  mx_generator *gen = mx_generator_new(21);
  mx_tensor *rm = mx_randn(PS, MX_F32, MX_CPU, gen), *cl = mx_to_channels_last(rm);
  cr_assert(mx_is_channels_last(cl));
  mx_set_requires_grad(rm, true);
  mx_set_requires_grad(cl, true);
  mx_optimizer *opt_rm = make(k, rm), *opt_cl = make(k, cl);
  cr_assert(opt_rm && opt_cl, "%s", mx_last_error());
  static const char *const states[3][3] = {{NULL}, {"momentum_buffer"}, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq"}};
  for (int step = 1; step <= 3; step++) {
    mx_tensor *g = mx_randn(PS, MX_F32, MX_CPU, gen), *g_cl = channels_last_grad ? mx_to_channels_last(g) : mx_clone(g);
    cr_assert_eq(mx_backward(rm, g, false), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_backward(cl, g_cl, false), MX_OK, "%s", mx_last_error());
    cr_expect_eq(mx_is_channels_last(mx_grad_of(cl)), channels_last_grad, "the gradient's layout as given");
    cr_assert_eq(mx_optimizer_step(opt_rm), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_optimizer_step(opt_cl), MX_OK, "%s", mx_last_error());
    expect_same(rm, cl, "the parameter", step);
    for (int s = 0; s < 3 && states[k][s]; s++) {
      mx_tensor *state = mx_optimizer_state(opt_cl, 0, states[k][s]);
      mx_tensor *row_major = mx_optimizer_state(opt_rm, 0, states[k][s]);
      cr_assert(state && row_major, "%s", states[k][s]);
      cr_expect(mx_is_channels_last(state), "%s lies as its parameter", states[k][s]);
      expect_same(row_major, state, states[k][s], step);
      mx_release(state);
      mx_release(row_major);
    }
    mx_zero_grad(rm);
    mx_zero_grad(cl);
    mx_release(g);
    mx_release(g_cl);
  }
  mx_generator_free(gen);
  mx_optimizer_free(opt_rm);
  mx_optimizer_free(opt_cl);
  mx_release(rm);
  mx_release(cl);
}

Test(optim_channels_last, sgd_plain) { same_steps(SGD_PLAIN, true); }
Test(optim_channels_last, sgd_nesterov_with_decay) { same_steps(SGD_MOMENTUM, true); }
Test(optim_channels_last, adam_amsgrad) { same_steps(ADAM_AMSGRAD, true); }
Test(optim_channels_last, sgd_momentum_with_a_row_major_gradient) { same_steps(SGD_MOMENTUM, false); }
Test(optim_channels_last, adam_with_a_row_major_gradient) { same_steps(ADAM_AMSGRAD, false); }
