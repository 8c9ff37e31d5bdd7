/* The LR schedule API: names, base and initial lrs, ownership in chains, the optimizer's momentum setter, and
 * the error messages of bad arguments, steps and states, word for word. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_cases.h"
#include "tests/common/expect_error.h"

Test(schedule_api, names_and_read_outs) {
  sc_setup s;
  sc_build_optimizer("sgd", &s);
  mx_schedule *made[] = {
      mx_step_lr_new(s.opt, 3, 0.1),
      mx_multistep_lr_new(s.opt, 1, (const int64_t[]){4}, 0.1),
      mx_exponential_lr_new(s.opt, 0.9),
      mx_cosine_annealing_lr_new(s.opt, 10, 0),
      mx_linear_lr_new(s.opt, 0.5, 1, 4),
      mx_one_cycle_lr_new(
          s.opt, &(mx_one_cycle_opts){
                     .max_lr = 1, .total_steps = 10, .pct_start = 0.3, .div_factor = 25, .final_div_factor = 1e4})};
  const char *names[] = {"StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR", "OneCycleLR"};
  for (int k = 0; k < 6; k++) {
    cr_assert_not_null(made[k], "%s: %s", names[k], mx_last_error());
    cr_expect_str_eq(mx_schedule_name(made[k]), names[k]);
    cr_expect_eq(mx_schedule_last_epoch(made[k]), 0);
  }
  mx_schedule *chain = mx_chained_schedule_new(2, made);
  mx_schedule *seq = mx_sequential_lr_new(s.opt, 2, made + 2, (const int64_t[]){3});
  cr_expect_str_eq(mx_schedule_name(chain), "ChainedScheduler");
  cr_expect_str_eq(mx_schedule_name(seq), "SequentialLR");
  mx_schedule_free(chain);
  mx_schedule_free(seq);
  for (int k = 4; k < 6; k++) mx_schedule_free(made[k]);

  EXPECT_ERROR(mx_schedule_name(NULL), "mx_schedule_name: argument 's' is NULL");
  mx_clear_error();
  cr_expect_eq(mx_schedule_last_epoch(NULL), -1);
  cr_expect_str_eq(mx_last_error(), "mx_schedule_last_epoch: argument 's' is NULL");
  s.schedule = mx_step_lr_new(s.opt, 3, 0.1);
  mx_clear_error();
  cr_expect(isnan(mx_schedule_get_last_lr(s.schedule, 2)));
  cr_expect_str_eq(mx_last_error(), "mx_schedule_get_last_lr: group 2 is out of range (the StepLR has 2)");
  mx_clear_error();
  cr_expect(isnan(mx_schedule_base_lr(NULL, 0)));
  cr_expect_str_eq(mx_last_error(), "mx_schedule_base_lr: argument 's' is NULL");
  sc_teardown(&s);
}

/* The first schedule on a group records its lr as the initial lr; later schedules take it as their base lr
 * even when the lr has changed since; OneCycleLR sets it to max_lr / div_factor. */
Test(schedule_api, base_lrs_are_the_initial_lrs) {
  sc_setup s;
  sc_build_optimizer("adam", &s);
  cr_expect(isnan(mx_optimizer_initial_lr(s.opt, 0)));
  mx_schedule *warmup = mx_linear_lr_new(s.opt, 0.5, 1, 4);
  cr_assert_not_null(warmup, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_initial_lr(s.opt, 0), 0.1);
  cr_expect_eq(mx_optimizer_initial_lr(s.opt, 1), 0.0375);
  cr_expect_eq(mx_optimizer_lr(s.opt, 0), 0.1 * 0.5);
  mx_schedule *decay = mx_exponential_lr_new(s.opt, 0.5);
  cr_expect_eq(mx_schedule_base_lr(decay, 0), 0.1);
  cr_expect_eq(mx_schedule_base_lr(decay, 1), 0.0375);
  cr_expect_eq(mx_optimizer_lr(s.opt, 0), 0.1 * 0.5); /* its step 0 keeps the lr */
  mx_schedule_free(warmup);
  mx_schedule_free(decay);

  mx_one_cycle_opts o = mx_one_cycle_defaults(0.5, 10);
  s.schedule = mx_one_cycle_lr_new(s.opt, &o);
  cr_assert_not_null(s.schedule, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_initial_lr(s.opt, 1), 0.5 / 25);
  cr_expect_eq(mx_schedule_base_lr(s.schedule, 1), 0.5 / 25);
  sc_teardown(&s);
}

Test(schedule_api, bad_arguments) {
  sc_setup s;
  sc_build_optimizer("sgd", &s);
  EXPECT_ERROR(mx_step_lr_new(NULL, 3, 0.1), "mx_step_lr_new: argument 'opt' is NULL");
  EXPECT_ERROR(mx_step_lr_new(s.opt, 0, 0.1), "mx_step_lr_new: invalid step_size 0 (must be > 0)");
  EXPECT_ERROR(mx_step_lr_new(s.opt, 2, NAN), "mx_step_lr_new: invalid gamma nan (must be finite and >= 0)");
  EXPECT_ERROR(mx_multistep_lr_new(s.opt, -1, NULL, 0.1),
                    "mx_multistep_lr_new: n_milestones is -1 (must be >= 0)");
  EXPECT_ERROR(mx_multistep_lr_new(s.opt, 2, NULL, 0.1), "mx_multistep_lr_new: argument 'milestones' is NULL");
  EXPECT_ERROR(mx_exponential_lr_new(s.opt, -0.5),
                    "mx_exponential_lr_new: invalid gamma -0.5 (must be finite and >= 0)");
  EXPECT_ERROR(mx_cosine_annealing_lr_new(s.opt, 0, 0),
                    "mx_cosine_annealing_lr_new: invalid t_max 0 (must be > 0)");
  EXPECT_ERROR(mx_cosine_annealing_lr_new(s.opt, 5, -1),
                    "mx_cosine_annealing_lr_new: invalid eta_min -1 (must be finite and >= 0)");
  EXPECT_ERROR(mx_linear_lr_new(s.opt, 0, 1, 5), "mx_linear_lr_new: invalid start_factor 0 (must be in (0, 1])");
  EXPECT_ERROR(mx_linear_lr_new(s.opt, 0.5, 1.5, 5),
                    "mx_linear_lr_new: invalid end_factor 1.5 (must be in [0, 1])");
  EXPECT_ERROR(mx_linear_lr_new(s.opt, 0.5, 1, 0), "mx_linear_lr_new: invalid total_iters 0 (must be > 0)");

  mx_one_cycle_opts o = mx_one_cycle_defaults(0.1, 0);
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, NULL), "mx_one_cycle_lr_new: argument 'opts' is NULL");
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o), "mx_one_cycle_lr_new: invalid total_steps 0 (must be > 0)");
  o = mx_one_cycle_defaults(0.1, 10);
  o.pct_start = 1.5;
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o), "mx_one_cycle_lr_new: invalid pct_start 1.5 (must be in [0, 1])");
  o = mx_one_cycle_defaults(0.1, 10);
  o.max_momentum = 1;
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o), "mx_one_cycle_lr_new: invalid max_momentum 1 (must be in [0, 1))");
  o = mx_one_cycle_defaults(0.1, 10);
  o.anneal_strategy = (mx_anneal_strategy)7;
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o),
                    "mx_one_cycle_lr_new: invalid anneal_strategy 7 (MX_ANNEAL_COS or MX_ANNEAL_LINEAR)");
  o = mx_one_cycle_defaults(0.1, 10);
  o.max_lrs = (const double[]){0.1, -2};
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o),
                    "mx_one_cycle_lr_new: invalid max_lr -2 for group 1 (must be finite and >= 0)");
  o = mx_one_cycle_defaults(0.1, 10);
  o.div_factor = 0;
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o),
                    "mx_one_cycle_lr_new: invalid div_factor 0 (must be finite and > 0)");
  /* pct_start 0.1 of 10 steps: the warm-up ends at step 0, where it starts (PyTorch divides by zero) */
  o = mx_one_cycle_defaults(0.1, 10);
  o.pct_start = 0.1;
  EXPECT_ERROR(mx_one_cycle_lr_new(s.opt, &o),
                    "mx_one_cycle_lr_new: OneCycleLR's phase 1 (steps 0 to 0) is empty; choose another pct_start");
  sc_teardown(&s);
}

Test(schedule_api, bad_chains) {
  sc_setup s, t;
  sc_build_optimizer("sgd", &s);
  sc_build_optimizer("sgd", &t);
  mx_schedule *a = mx_step_lr_new(s.opt, 3, 0.5), *b = mx_exponential_lr_new(s.opt, 0.9);
  mx_schedule *other = mx_exponential_lr_new(t.opt, 0.9);
  EXPECT_ERROR(mx_chained_schedule_new(0, &a),
                    "mx_chained_schedule_new: n is 0; a ChainedScheduler needs at least one schedule");
  EXPECT_ERROR(mx_chained_schedule_new(1, NULL), "mx_chained_schedule_new: argument 'schedules' is NULL");
  EXPECT_ERROR(mx_chained_schedule_new(2, (mx_schedule *[]){a, NULL}),
                    "mx_chained_schedule_new: argument 'schedules[1]' is NULL");
  EXPECT_ERROR(mx_chained_schedule_new(2, (mx_schedule *[]){a, other}),
                    "mx_chained_schedule_new: schedules[1] works on another optimizer than schedules[0]");
  EXPECT_ERROR(mx_chained_schedule_new(3, (mx_schedule *[]){a, b, a}),
                    "mx_chained_schedule_new: schedules[2] appears twice (it is already schedules[0])");
  EXPECT_ERROR(mx_sequential_lr_new(s.opt, 2, (mx_schedule *[]){a, b}, NULL),
                    "mx_sequential_lr_new: argument 'milestones' is NULL");
  EXPECT_ERROR(mx_sequential_lr_new(t.opt, 1, &a, NULL),
                    "mx_sequential_lr_new: schedules[0] works on another optimizer than opt");
  mx_schedule *c = mx_cosine_annealing_lr_new(s.opt, 5, 0);
  EXPECT_ERROR(mx_sequential_lr_new(s.opt, 3, (mx_schedule *[]){a, b, c}, (const int64_t[]){6, 4}),
                    "mx_sequential_lr_new: milestones[1] is 4, below milestones[0] = 6");

  mx_schedule *chain = mx_chained_schedule_new(2, (mx_schedule *[]){a, b});
  cr_assert_not_null(chain, "%s", mx_last_error());
  EXPECT_ERROR(mx_chained_schedule_new(1, &a),
                    "mx_chained_schedule_new: schedules[0] already belongs to a ChainedScheduler");
  EXPECT_ERROR(mx_sequential_lr_new(s.opt, 2, (mx_schedule *[]){c, chain}, (const int64_t[]){3}),
                    "mx_sequential_lr_new: schedules[1] is a ChainedScheduler; SequentialLR takes plain schedules");
  /* a schedule a chain owns is freed with it, not alone */
  mx_clear_error();
  mx_schedule_free(a);
  cr_expect_str_eq(mx_last_error(), "mx_schedule_free: this StepLR belongs to a ChainedScheduler and is freed with it");
  cr_expect_eq(mx_schedule_step(chain), MX_OK, "%s", mx_last_error());
  mx_schedule_free(chain);
  mx_schedule_free(c);
  mx_schedule_free(other);
  sc_teardown(&s);
  sc_teardown(&t);
}

/* A step that cannot be taken changes nothing: past OneCycleLR's total_steps, or with the groups changed. */
Test(schedule_api, failed_steps_change_nothing) {
  sc_setup s;
  sc_build_optimizer("sgd", &s);
  s.schedule = mx_one_cycle_lr_new(
      s.opt,
      &(mx_one_cycle_opts){.max_lr = 1, .total_steps = 5, .pct_start = 0.5, .div_factor = 10, .final_div_factor = 10});
  cr_assert_not_null(s.schedule, "%s", mx_last_error());
  for (int k = 0; k < 5; k++) cr_assert_eq(mx_schedule_step(s.schedule), MX_OK, "%s", mx_last_error());
  double lr = mx_optimizer_lr(s.opt, 0);
  EXPECT_STATUS_ERROR(mx_schedule_step(s.schedule),
                      "mx_schedule_step: OneCycleLR tried to step 7 times; its total_steps is 5");
  cr_expect_eq(mx_optimizer_lr(s.opt, 0), lr);
  cr_expect_eq(mx_schedule_last_epoch(s.schedule), 5);
  sc_teardown(&s);

  sc_build_optimizer("adam", &s);
  s.schedule = mx_step_lr_new(s.opt, 1, 0.5);
  mx_tensor *extra = mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU);
  mx_set_requires_grad(extra, true);
  cr_assert_eq(mx_adam_add_group(s.opt, 1, &extra, NULL), MX_OK, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_schedule_step(s.schedule),
                      "mx_schedule_step: the optimizer has 3 groups but this StepLR was made for 2");
  cr_expect_eq(mx_optimizer_lr(s.opt, 0), 0.1);
  cr_expect_eq(mx_schedule_last_epoch(s.schedule), 0);
  EXPECT_STATUS_ERROR(mx_schedule_step(NULL), "mx_schedule_step: argument 's' is NULL");
  sc_teardown(&s);
  mx_release(extra);
}

Test(schedule_api, bad_states) {
  sc_setup s;
  sc_build("cosine", &s);
  for (int k = 0; k < 3; k++) mx_schedule_step(s.schedule);
  double state[64], good[64];
  int n = mx_schedule_state_size(s.schedule);
  cr_assert_eq(n, 7);
  EXPECT_STATUS_ERROR(
      mx_schedule_state_get(s.schedule, state, 6),
      "mx_schedule_state_get: the state of this CosineAnnealingLR has 7 values but there is room for 6");
  EXPECT_STATUS_ERROR(mx_schedule_state_get(s.schedule, NULL, 7), "mx_schedule_state_get: argument 'state' is NULL");
  cr_assert_eq(mx_schedule_state_get(s.schedule, good, n), MX_OK, "%s", mx_last_error());
  double lr = mx_optimizer_lr(s.opt, 0);

  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, good, 8),
                      "mx_schedule_state_set: the state has 8 values but this CosineAnnealingLR's has 7");
  sc_setup t;
  sc_build("exponential", &t);
  double other[7];
  cr_assert_eq(mx_schedule_state_get(t.schedule, other, 7), MX_OK, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, other, 7),
                      "mx_schedule_state_set: the state is ExponentialLR's, not this CosineAnnealingLR's");
  sc_teardown(&t);
  memcpy(state, good, sizeof good);
  state[0] = 99;
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, 7),
                      "mx_schedule_state_set: the state is not a schedule's (its kind is 99)");
  memcpy(state, good, sizeof good);
  state[1] = 2.5;
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, 7),
                      "mx_schedule_state_set: last_epoch 2.5 is not a whole number >= -1 for this CosineAnnealingLR");
  memcpy(state, good, sizeof good);
  state[5] = -0.1;
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, 7),
                      "mx_schedule_state_set: the last lr of group 0 is -0.1; it must be finite and >= 0");
  cr_expect_eq(mx_optimizer_lr(s.opt, 0), lr);
  cr_expect_eq(mx_schedule_last_epoch(s.schedule), 3);
  sc_teardown(&s);

  sc_build("one_cycle_cos_sgd", &s);
  n = mx_schedule_state_size(s.schedule);
  cr_assert_eq(mx_schedule_state_get(s.schedule, state, n), MX_OK, "%s", mx_last_error());
  state[1] = 61;
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, n),
                      "mx_schedule_state_set: last_epoch 61 is not a whole number in [-1, 60] for this OneCycleLR");
  state[1] = 3;
  state[3 + 2 * SC_GROUPS + 1] = 1;
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, n),
                      "mx_schedule_state_set: the momentum of group 1 is 1; it must be in [0, 1)");
  sc_teardown(&s);

  sc_build("chain", &s);
  n = mx_schedule_state_size(s.schedule);
  cr_assert_eq(mx_schedule_state_get(s.schedule, state, n), MX_OK, "%s", mx_last_error());
  state[3 + 2 * SC_GROUPS + 1 + 7 + 2] = 3; /* the cosine's group count */
  EXPECT_STATUS_ERROR(mx_schedule_state_set(s.schedule, state, n),
                      "mx_schedule_state_set: the state is for 3 groups but this CosineAnnealingLR has 2");
  sc_teardown(&s);
}

/* OneCycleLR on an SGD made without momentum gives it one, and its buffers with it: the first step with
 * momentum starts the buffer at the gradient, as PyTorch's does. Adam's beta1 is its momentum. */
Test(schedule_api, momentum_setter) {
  mx_tensor *p = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  mx_set_requires_grad(p, true);
  mx_sgd_opts o = mx_sgd_defaults();
  o.lr = 0.5;
  mx_optimizer *opt = mx_sgd_new(1, &p, &o);
  mx_clear_error();
  cr_expect_null(mx_optimizer_state(opt, 0, "momentum_buffer"));
  mx_one_cycle_opts c = mx_one_cycle_defaults(1.0, 10);
  mx_schedule *s = mx_one_cycle_lr_new(opt, &c);
  cr_assert_not_null(s, "%s", mx_last_error());
  double m = mx_optimizer_momentum(opt, 0), lr = mx_optimizer_lr(opt, 0);
  cr_expect_float_eq(m, 0.95, 1e-15);
  mx_scope *scope = mx_scope_begin();
  cr_assert_eq(mx_backward(mx_sum(mx_mul_scalar(p, 2.0), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s",
               mx_last_error());
  cr_assert_eq(mx_optimizer_step(opt), MX_OK, "%s", mx_last_error());
  mx_tensor *buffer = mx_optimizer_state(opt, 0, "momentum_buffer");
  cr_assert_not_null(buffer, "%s", mx_last_error());
  cr_expect_eq(mx_at(buffer, MX_SHAPE(0)), 2.0);
  cr_expect_eq(mx_at(p, MX_SHAPE(1)), (float)(1 - (float)lr * 2.0f));
  mx_scope_end(scope);
  mx_schedule_free(s);

  EXPECT_STATUS_ERROR(mx_optimizer_set_momentum(opt, 0, -0.1),
                      "mx_optimizer_set_momentum: invalid momentum -0.1 (must be >= 0)");
  EXPECT_STATUS_ERROR(mx_optimizer_set_momentum(opt, 1, 0.5),
                      "mx_optimizer_set_momentum: group 1 is out of range (the optimizer has 1)");
  mx_optimizer_free(opt);

  opt = mx_adam_new(1, &p, NULL);
  cr_expect_eq(mx_optimizer_momentum(opt, 0), 0.9);
  cr_expect_eq(mx_optimizer_set_momentum(opt, 0, 0.8), MX_OK, "%s", mx_last_error());
  cr_expect_eq(mx_optimizer_momentum(opt, 0), 0.8);
  EXPECT_STATUS_ERROR(mx_optimizer_set_momentum(opt, 0, 1.0),
                      "mx_optimizer_set_momentum: invalid beta1 1 (must be in [0, 1))");
  EXPECT_STATUS_ERROR(mx_optimizer_set_initial_lr(opt, 0, -1),
                      "mx_optimizer_set_initial_lr: invalid learning rate -1 (must be >= 0)");
  mx_optimizer_free(opt);
  mx_release(p);
}
