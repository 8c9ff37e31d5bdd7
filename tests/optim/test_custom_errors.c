/* The optimizer interface's rules, word for word: bad types, hyper-parameters
 * and state names, state registered in a step, hooks that fail (and what
 * is undone), and the built-ins seen through the same interface. */
#include <criterion/criterion.h>
#include <math.h>
#include <string.h>

#include "lion.h"
#include "tests/common/expect_error.h"

#define OK(call) cr_assert_eq((call), MX_OK, "%s", mx_last_error())

static mx_tensor *params[2];

static void setup(void) {
  for (int i = 0; i < 2; i++) {
    params[i] = mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU);
    mx_set_requires_grad(params[i], true);
  }
}

static void teardown(void) {
  for (int i = 0; i < 2; i++) mx_release(params[i]);
}

TestSuite(optim_custom_errors, .init = setup, .fini = teardown);

static mx_status no_op_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return MX_OK;
}

static int freed;
static void count_free(void *self) { freed++; }

static const mx_optimizer_hparam lr_only[] = {{.name = "lr"}};
static const double lr_value[] = {0.1};

Test(optim_custom_errors, bad_types) {
  EXPECT_ERROR(mx_optimizer_new(NULL, NULL, 1, params, lr_value), "mx_optimizer_new: argument 'type' is NULL");
  mx_optimizer_type t = {.name = "Bad", .n_hparams = 1, .hparams = lr_only, .free_self = count_free};
  freed = 0;
  EXPECT_ERROR(mx_optimizer_new(&t, &freed, 1, params, lr_value), "mx_optimizer_new: type 'Bad' has no step");
  cr_expect_eq(freed, 1, "free_self runs when mx_optimizer_new fails");
  t.step = no_op_step;
  t.name = "";
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, lr_value), "mx_optimizer_new: the type has no name");
  t.name = "Bad";
  t.n_hparams = 0;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, lr_value),
               "mx_optimizer_new: type 'Bad' has 0 hyper-parameters; it needs at least \"lr\"");
  const mx_optimizer_hparam no_lr[] = {{.name = "rate"}}, twice[] = {{.name = "lr"}, {.name = "lr"}},
                            dotted[] = {{.name = "lr"}, {.name = "beta.1"}}, flagged[] = {{.name = "lr", .flag = true}};
  t.n_hparams = 1, t.hparams = no_lr;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, lr_value),
               "mx_optimizer_new: type 'Bad' has no hyper-parameter \"lr\" (schedules set it)");
  t.hparams = flagged;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, lr_value),
               "mx_optimizer_new: type 'Bad' has no numeric hyper-parameter \"lr\" (schedules set it)");
  t.n_hparams = 2, t.hparams = twice;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, (double[]){0.1, 0.1}),
               "mx_optimizer_new: type 'Bad': hyper-parameters 0 and 1 are both named 'lr'");
  t.hparams = dotted;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, (double[]){0.1, 0.1}),
               "mx_optimizer_new: type 'Bad': hyper-parameter 1 is named 'beta.1'; names are letters, digits and "
               "'_', 1 to 63 of them");
  t.n_hparams = 1, t.hparams = lr_only, t.momentum = "beta1";
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, lr_value),
               "mx_optimizer_new: type 'Bad': momentum names 'beta1', which is not one of its numeric "
               "hyper-parameters");
  t.momentum = NULL;
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, NULL), "mx_optimizer_new: argument 'h' is NULL");
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 1, params, (double[]){-1}),
               "mx_optimizer_new: invalid learning rate -1 (must be >= 0)");
  EXPECT_ERROR(mx_optimizer_new(&t, NULL, 0, params, lr_value),
               "mx_optimizer_new: n_params is 0; a group needs at least one parameter");
  /* a valid one: no hooks but the step */
  mx_optimizer *opt = mx_optimizer_new(&t, NULL, 1, params, lr_value);
  cr_assert_not_null(opt, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_type_of(opt), &t);
  OK(mx_optimizer_add_group(opt, 1, params + 1, NULL));
  cr_expect_eq(mx_optimizer_lr(opt, 1), 0.1, "NULL: the values it was made with");
  cr_expect_eq(mx_optimizer_num_states(opt, 1), 0);
  mx_optimizer_free(opt);
}

Test(optim_custom_errors, hyper_parameters) {
  EXPECT_ERROR(lion_new(1, params, &(lion_opts){.lr = 0.1, .beta1 = 2}),
               "mx_optimizer_new: invalid beta1 2 (must be in [0, 1])");
  mx_optimizer *opt = lion_new(1, params, NULL);
  cr_assert_not_null(opt, "%s", mx_last_error());
  mx_clear_error();
  cr_expect(isnan(mx_optimizer_get_hparam(opt, 0, "momentum")));
  cr_expect_str_eq(mx_last_error(), "mx_optimizer_get_hparam: Lion has no hyper-parameter 'momentum'");
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparam(opt, 0, "beta2", -0.5),
                      "mx_optimizer_set_hparam: invalid beta2 -0.5 (must be in [0, 1])");
  cr_expect_eq(mx_optimizer_get_hparam(opt, 0, "beta2"), 0.99, "a refused value changes nothing");
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparams(opt, 0, (double[]){-1, 0.9, 0.99, 0}),
                      "mx_optimizer_set_hparams: invalid learning rate -1 (must be >= 0)");
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparams(opt, 0, NULL), "mx_optimizer_set_hparams: argument 'h' is NULL");
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparams(opt, 1, (double[]){1, 0.9, 0.99, 0}),
                      "mx_optimizer_set_hparams: group 1 is out of range (the optimizer has 1)");
  EXPECT_ERROR(mx_optimizer_hparams(opt, 2), "mx_optimizer_hparams: group 2 is out of range (the optimizer has 1)");
  EXPECT_STATUS_ERROR(mx_sgd_add_group(opt, 1, params + 1, NULL),
                      "mx_sgd_add_group: the optimizer is Lion; add its groups with mx_optimizer_add_group");
  mx_sgd_opts so;
  EXPECT_STATUS_ERROR(mx_optimizer_get_sgd_opts(opt, 0, &so), "mx_optimizer_get_sgd_opts: the optimizer is Lion");
  mx_optimizer *sgd = mx_sgd_new(1, params + 1, NULL);
  EXPECT_STATUS_ERROR(lion_add_group(sgd, 1, params, NULL), "lion_add_group: the optimizer is SGD, not Lion");
  mx_optimizer_free(sgd);
  mx_optimizer_free(opt);
}

/* A flag is 0 or 1; a type without momentum refuses to have one set, and
 * OneCycleLR refuses to cycle it. */
static const mx_optimizer_hparam with_flag[] = {{.name = "lr"}, {.name = "centered", .flag = true}};
static const mx_optimizer_type plain = {.name = "Plain", .n_hparams = 2, .hparams = with_flag, .step = no_op_step};

Test(optim_custom_errors, flags_and_momentum) {
  EXPECT_ERROR(mx_optimizer_new(&plain, NULL, 1, params, (double[]){0.1, 0.5}),
               "mx_optimizer_new: centered is a flag (0 or 1), got 0.5");
  mx_optimizer *opt = mx_optimizer_new(&plain, NULL, 1, params, (double[]){0.1, 1});
  cr_assert_not_null(opt, "%s", mx_last_error());
  mx_clear_error();
  cr_expect(isnan(mx_optimizer_momentum(opt, 0)));
  cr_expect_str_eq(mx_last_error(),
                   "mx_optimizer_momentum: Plain has no momentum (its type names no momentum hyper-parameter)");
  EXPECT_STATUS_ERROR(mx_optimizer_set_momentum(opt, 0, 0.9), "mx_optimizer_set_momentum: Plain has no momentum (its "
                                                                "type names no momentum hyper-parameter)");
  mx_one_cycle_opts o = mx_one_cycle_defaults(1.0, 10);
  EXPECT_ERROR(mx_one_cycle_lr_new(opt, &o), "mx_one_cycle_lr_new: Plain has no momentum or beta1 to cycle; make it "
                                             "with cycle_momentum false");
  o.cycle_momentum = false;
  mx_schedule *cycle = mx_one_cycle_lr_new(opt, &o);
  cr_expect_not_null(cycle, "%s", mx_last_error());
  mx_schedule_free(cycle);
  mx_optimizer_free(opt);
}

/* --- state --------------------------------------------------------------------------------------- */

/* Registers "late" in its step: refused. */
static mx_status late_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return mx_optimizer_add_state(opt, 0, "late", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU));
}

static const mx_optimizer_type late = {.name = "Late", .n_hparams = 1, .hparams = lr_only, .step = late_step};

Test(optim_custom_errors, state_names_and_registration) {
  mx_optimizer *opt = mx_optimizer_new(&late, NULL, 2, params, lr_value);
  cr_assert_not_null(opt, "%s", mx_last_error());
  OK(mx_optimizer_add_state(opt, 1, "buf_0", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)));
  EXPECT_STATUS_ERROR(mx_optimizer_add_state(opt, 1, "buf_0", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)),
                      "mx_optimizer_add_state: parameter 1 already has a state 'buf_0'");
  EXPECT_STATUS_ERROR(mx_optimizer_add_state(opt, 1, "exp avg", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)),
                      "mx_optimizer_add_state: state 'exp avg' of parameter 1: names are letters, digits and '_', 1 "
                      "to 63 of them");
  EXPECT_STATUS_ERROR(mx_optimizer_add_state(opt, 2, "x", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)),
                      "mx_optimizer_add_state: parameter 2 is out of range (the optimizer has 2)");
  EXPECT_STATUS_ERROR(mx_optimizer_add_state(opt, 0, "x", NULL), "mx_optimizer_add_state: argument 't' is NULL");
  cr_expect_eq(mx_optimizer_num_states(opt, 1), 1);
  EXPECT_ERROR(mx_optimizer_state_name(opt, 1, 1),
               "mx_optimizer_state_name: state 1 of parameter 1 is out of range (it has 1)");
  EXPECT_ERROR(mx_optimizer_state(opt, 0, "buf_0"), "mx_optimizer_state: this Late keeps no state 'buf_0' for "
                                                      "parameter 0");
  mx_scope *s = mx_scope_begin();
  OK(mx_backward(mx_sum(params[0], MX_ALL_DIMS, false), NULL, false));
  mx_scope_end(s);
  EXPECT_STATUS_ERROR(mx_optimizer_step(opt),
                      "mx_optimizer_step: mx_optimizer_add_state: state 'late' of parameter 0 registered during a "
                      "step of Late; register state in init_group or update_group, so that a new optimizer holds "
                      "what a checkpoint restores");
  cr_expect_eq(mx_optimizer_num_states(opt, 0), 0);
  EXPECT_ERROR(mx_optimizer_grad(params[1], NULL), "mx_optimizer_grad: the parameter has no gradient");
  mx_zero_grad(params[0]);
  mx_optimizer_free(opt);
}

/* --- failing hooks ------------------------------------------------------------------------------- */

/* init_group registers a state and fails on its second group; update_group
 * registers one and refuses lr 1; the step fails without a message. */
static mx_status failing_init(mx_optimizer *opt, int group, const char *fn) {
  int first = mx_optimizer_group_first(opt, group);
  OK(mx_optimizer_add_state(opt, first, "buf", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)));
  return group == 0 ? MX_OK : mx_optimizer_error(MX_INVALID_ARGUMENT, "%s: no second group", fn);
}

static mx_status failing_update(mx_optimizer *opt, int group, const double *h, const char *fn) {
  OK(mx_optimizer_add_state(opt, 0, "extra", mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU)));
  return h[0] == 1 ? mx_optimizer_error(MX_INVALID_ARGUMENT, "%s: not lr 1", fn) : MX_OK;
}

static mx_status silent_step(mx_optimizer *opt, int group, const mx_tensor *found_inf, const mx_tensor *grad_scale) {
  return MX_INVALID_ARGUMENT;
}

static const mx_optimizer_type failing = {.name = "Failing", .n_hparams = 1, .hparams = lr_only,
                                          .init_group = failing_init, .update_group = failing_update,
                                          .step = silent_step};

Test(optim_custom_errors, failing_hooks_change_nothing) {
  mx_optimizer *opt = mx_optimizer_new(&failing, NULL, 1, params, lr_value);
  cr_assert_not_null(opt, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_optimizer_add_group(opt, 1, params + 1, NULL), "mx_optimizer_add_group: no second group");
  cr_expect_eq(mx_optimizer_num_groups(opt), 1, "the group is gone with its state");
  cr_expect_eq(mx_optimizer_num_params(opt), 1);
  EXPECT_STATUS_ERROR(mx_optimizer_set_lr(opt, 0, 1), "mx_optimizer_set_lr: not lr 1");
  cr_expect_eq(mx_optimizer_lr(opt, 0), 0.1);
  cr_expect_eq(mx_optimizer_num_states(opt, 0), 1, "what update_group registered is dropped");
  OK(mx_optimizer_set_lr(opt, 0, 0.5));
  cr_expect_eq(mx_optimizer_num_states(opt, 0), 2);
  cr_expect_str_eq(mx_optimizer_state_name(opt, 0, 1), "extra");
  mx_scope *s = mx_scope_begin();
  OK(mx_backward(mx_sum(params[0], MX_ALL_DIMS, false), NULL, false));
  mx_scope_end(s);
  EXPECT_STATUS_ERROR(mx_optimizer_step(opt),
                      "mx_optimizer_step: Failing's step failed on group 0 without saying why");
  mx_zero_grad(params[0]);
  mx_optimizer_free(opt);
}

/* --- the built-ins through the same interface ---------------------------------------------------- */

Test(optim_custom_errors, builtins_are_types_like_any_other) {
  mx_optimizer *sgd = mx_sgd_new(1, params, &(mx_sgd_opts){.lr = 0.5, .nesterov = false});
  const mx_optimizer_type *t = mx_optimizer_type_of(sgd);
  cr_assert_eq(t->n_hparams, 6);
  const char *names[] = {"lr", "momentum", "dampening", "weight_decay", "nesterov", "maximize"};
  for (int k = 0; k < 6; k++) cr_expect_str_eq(t->hparams[k].name, names[k]);
  cr_expect(t->hparams[4].flag && !t->hparams[3].flag);
  cr_expect_str_eq(t->momentum, "momentum");
  cr_expect_eq(mx_optimizer_num_states(sgd, 0), 0);
  OK(mx_optimizer_set_hparam(sgd, 0, "momentum", 0.9)); /* the buffers come with it */
  cr_expect_eq(mx_optimizer_num_states(sgd, 0), 2);
  cr_expect_str_eq(mx_optimizer_state_name(sgd, 0, 1), "momentum_buffer");
  mx_sgd_opts o;
  OK(mx_optimizer_get_sgd_opts(sgd, 0, &o));
  cr_expect_eq(o.momentum, 0.9);
  mx_optimizer_free(sgd);

  mx_optimizer *adam = mx_adam_new(1, params, NULL);
  cr_expect_eq(mx_optimizer_get_hparam(adam, 0, "beta2"), 0.999);
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparam(adam, 0, "amsgrad", 1),
                      "mx_optimizer_set_hparam: group 0 was made with amsgrad false; it cannot change");
  EXPECT_STATUS_ERROR(mx_optimizer_set_hparam(adam, 0, "amsgrad", 2),
                      "mx_optimizer_set_hparam: amsgrad is a flag (0 or 1), got 2");
  mx_optimizer_free(adam);
}
