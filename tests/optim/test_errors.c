/* The optimizers' error messages: bad parameters, options, groups, indices and gradients, word for word. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "optim_cases.h"
#include "tests/common/expect_error.h"

static mx_tensor *params[OC_PARAMS];

static void setup(void) { oc_params(MX_F32, params); }

static void teardown(void) {
  for (int k = 0; k < OC_PARAMS; k++) mx_release(params[k]);
}

TestSuite(optim_errors, .init = setup, .fini = teardown);

Test(optim_errors, bad_parameter_lists) {
  EXPECT_ERROR(mx_sgd_new(2, NULL, NULL), "mx_sgd_new: argument 'params' is NULL");
  mx_tensor *with_null[2] = {params[0], NULL};
  EXPECT_ERROR(mx_adam_new(2, with_null, NULL), "mx_adam_new: argument 'params[1]' is NULL");
  EXPECT_ERROR(mx_adamw_new(0, params, NULL), "mx_adamw_new: n_params is 0; a group needs at least one parameter");

  mx_scope *s = mx_scope_begin();
  mx_tensor *ints[2] = {params[0], mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU)};
  EXPECT_ERROR(mx_sgd_new(2, ints, NULL), "mx_sgd_new: params[1] is int64; parameters must be floating");
  mx_tensor *made[1] = {mx_mul(params[0], params[0])};
  EXPECT_ERROR(mx_adam_new(1, made, NULL),
               "mx_adam_new: params[0] is not a leaf (made by MULBackward); only leaves can be optimized");
  mx_tensor *frozen[1] = {mx_ones(MX_SHAPE(2), MX_F32, MX_CPU)};
  EXPECT_ERROR(mx_sgd_new(1, frozen, NULL), "mx_sgd_new: params[0] does not require grad (see mx_set_requires_grad)");
  mx_tensor *twice[3] = {params[0], params[1], params[0]};
  EXPECT_ERROR(mx_sgd_new(3, twice, NULL), "mx_sgd_new: params[2] appears twice (it is already parameter 0)");
  mx_tensor *broadcast[1] = {mx_expand(mx_ones(MX_SHAPE(1), MX_F32, MX_CPU), MX_SHAPE(3))};
  cr_assert_eq(mx_set_requires_grad(broadcast[0], true), MX_OK, "%s", mx_last_error());
  EXPECT_ERROR(mx_sgd_new(1, broadcast, NULL),
               "mx_sgd_new: params[0] is a broadcast view (stride 0 in dim 0); its elements must be distinct");
  mx_scope_end(s);
}

Test(optim_errors, bad_options) {
  mx_sgd_opts s = mx_sgd_defaults();
  s.lr = -0.1;
  EXPECT_ERROR(mx_sgd_new(2, params, &s), "mx_sgd_new: invalid learning rate -0.1 (must be >= 0)");
  s.lr = NAN;
  EXPECT_ERROR(mx_sgd_new(2, params, &s), "mx_sgd_new: invalid learning rate nan (must be >= 0)");
  s = mx_sgd_defaults();
  s.momentum = -0.5;
  EXPECT_ERROR(mx_sgd_new(2, params, &s), "mx_sgd_new: invalid momentum -0.5 (must be >= 0)");
  s = mx_sgd_defaults();
  s.weight_decay = -1;
  EXPECT_ERROR(mx_sgd_new(2, params, &s), "mx_sgd_new: invalid weight_decay -1 (must be >= 0)");
  s = mx_sgd_defaults();
  s.nesterov = true;
  s.momentum = 0.9;
  s.dampening = 0.1;
  EXPECT_ERROR(mx_sgd_new(2, params, &s), "mx_sgd_new: nesterov momentum requires a momentum > 0 and zero dampening "
                                          "(momentum 0.9, dampening 0.1)");
  mx_adam_opts a = mx_adam_defaults();
  a.beta1 = 1;
  EXPECT_ERROR(mx_adam_new(2, params, &a), "mx_adam_new: invalid beta1 1 (must be in [0, 1))");
  a = mx_adam_defaults();
  a.beta2 = -0.1;
  EXPECT_ERROR(mx_adamw_new(2, params, &a), "mx_adamw_new: invalid beta2 -0.1 (must be in [0, 1))");
  a = mx_adam_defaults();
  a.eps = -1e-8;
  EXPECT_ERROR(mx_adam_new(2, params, &a), "mx_adam_new: invalid eps -1e-08 (must be >= 0)");
  a = mx_adamw_defaults();
  a.weight_decay = -0.01;
  EXPECT_ERROR(mx_adamw_new(2, params, &a), "mx_adamw_new: invalid weight_decay -0.01 (must be >= 0)");
}

Test(optim_errors, groups) {
  mx_optimizer *adam = mx_adam_new(1, params, NULL), *sgd = mx_sgd_new(1, params, NULL);
  cr_assert(adam && sgd, "%s", mx_last_error());
  mx_sgd_opts s = mx_sgd_defaults();
  EXPECT_STATUS_ERROR(mx_sgd_add_group(adam, 1, params + 1, &s),
               "mx_sgd_add_group: the optimizer is Adam; add its groups with mx_adam_add_group");
  EXPECT_STATUS_ERROR(mx_adam_add_group(sgd, 1, params + 1, NULL),
               "mx_adam_add_group: the optimizer is SGD; add its groups with mx_sgd_add_group");
  EXPECT_STATUS_ERROR(mx_sgd_add_group(NULL, 1, params + 1, NULL), "mx_sgd_add_group: argument 'opt' is NULL");
  EXPECT_STATUS_ERROR(mx_sgd_add_group(sgd, 2, params, NULL),
               "mx_sgd_add_group: params[0] appears twice (it is already parameter 0)");
  s.lr = -1;
  EXPECT_STATUS_ERROR(mx_sgd_add_group(sgd, 1, params + 1, &s),
               "mx_sgd_add_group: invalid learning rate -1 (must be >= 0)");
  cr_expect_eq(mx_optimizer_num_groups(sgd), 1, "failed additions add nothing");
  cr_expect_eq(mx_optimizer_num_params(sgd), 1);
  /* NULL options: the optimizer's own */
  mx_sgd_opts first = {.lr = 0.125, .momentum = 0.5};
  mx_optimizer *sgd2 = mx_sgd_new(1, params, &first);
  cr_assert_eq(mx_sgd_add_group(sgd2, 1, params + 1, NULL), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_lr(sgd2, 1), 0.125);
  mx_scope *scope = mx_scope_begin();
  cr_expect_not_null(mx_optimizer_state(sgd2, 1, "momentum_buffer"), "the momentum came along");
  mx_scope_end(scope);
  mx_optimizer_free(sgd2);
  mx_optimizer_free(adam);
  mx_optimizer_free(sgd);
}

Test(optim_errors, indices_and_null_optimizers) {
  mx_optimizer *opt = mx_sgd_new(2, params, NULL);
  cr_assert_not_null(opt, "%s", mx_last_error());
  mx_clear_error();
  cr_expect(isnan(mx_optimizer_lr(opt, 1)));
  cr_expect_str_eq(mx_last_error(), "mx_optimizer_lr: group 1 is out of range (the optimizer has 1)");
  EXPECT_STATUS_ERROR(mx_optimizer_set_lr(opt, -1, 0.1),
               "mx_optimizer_set_lr: group -1 is out of range (the optimizer has 1)");
  EXPECT_STATUS_ERROR(mx_optimizer_set_lr(opt, 0, -0.1),
                      "mx_optimizer_set_lr: invalid learning rate -0.1 (must be >= 0)");
  cr_expect_eq(mx_optimizer_lr(opt, 0), 1e-3, "a refused lr changes nothing");
  EXPECT_ERROR(mx_optimizer_param(opt, 2), "mx_optimizer_param: parameter 2 is out of range (the optimizer has 2)");
  EXPECT_ERROR(mx_optimizer_state(opt, 0, NULL), "mx_optimizer_state: argument 'name' is NULL");
  EXPECT_ERROR(mx_optimizer_state(opt, 0, "momentum_buffer"),
               "mx_optimizer_state: this SGD keeps no state 'momentum_buffer' for parameter 0");
  EXPECT_ERROR(mx_optimizer_state(opt, 0, "step"),
               "mx_optimizer_state: this SGD keeps no state 'step' for parameter 0");
  EXPECT_STATUS_ERROR(mx_optimizer_step(NULL), "mx_optimizer_step: argument 'opt' is NULL");
  EXPECT_STATUS_ERROR(mx_optimizer_step_amp(NULL, NULL, NULL), "mx_optimizer_step_amp: argument 'opt' is NULL");
  EXPECT_STATUS_ERROR(mx_optimizer_zero_grad(NULL, true), "mx_optimizer_zero_grad: argument 'opt' is NULL");
  EXPECT_ERROR(mx_optimizer_name(NULL), "mx_optimizer_name: argument 'opt' is NULL");
  EXPECT_ERROR(mx_optimizer_num_groups(NULL), "mx_optimizer_num_groups: argument 'opt' is NULL");
  EXPECT_ERROR(mx_optimizer_num_params(NULL), "mx_optimizer_num_params: argument 'opt' is NULL");
  EXPECT_ERROR(mx_optimizer_param(NULL, 0), "mx_optimizer_param: argument 'opt' is NULL");
  mx_optimizer_free(NULL);
  mx_optimizer_free(opt);
}

/* A gradient that does not fit its parameter (a hook replaced it) fails the
 * step before any parameter moves. */
static mx_tensor *wrong_shape(mx_tensor *grad, void *ctx) { return mx_zeros(MX_SHAPE(5), MX_F32, MX_CPU); }

Test(optim_errors, gradient_shape) {
  mx_optimizer *opt = mx_sgd_new(2, params, NULL);
  cr_assert_eq(mx_register_hook(params[1], wrong_shape, NULL), MX_OK, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *loss = mx_add(mx_sum(params[0], MX_ALL_DIMS, false), mx_sum(params[1], MX_ALL_DIMS, false));
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  mx_scope_end(s);
  cr_assert_eq(mx_numel(mx_grad_of(params[1])), 5);
  oc_snapshot before = oc_snapshot_take(opt);
  EXPECT_STATUS_ERROR(mx_optimizer_step(opt),
               "mx_optimizer_step: the grad of parameter 1 has shape [5] but the parameter [4]");
  oc_snapshot after = oc_snapshot_take(opt);
  cr_expect(!memcmp(before.bytes, after.bytes, before.n), "parameter 0 moved");
  oc_snapshot_free(&before);
  oc_snapshot_free(&after);
  mx_optimizer_free(opt);
}
