/* The LR schedules against PyTorch 1.13 (tests/fixtures/schedule_fixtures.txt): every lr and momentum of
 * every step, and the same sequences carried on through a state saved and set on a new schedule. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "schedule_cases.h"

/* Parameters cross into the test's process by value: no pointers. */
typedef struct {
  char id[48];
} case_id;

static struct criterion_test_params all_cases(void) {
  static case_id ids[64];
  cr_assert(sc_n_known <= 64);
  for (int k = 0; k < sc_n_known; k++) strcpy(ids[k].id, sc_known[k]);
  return cr_make_param_array(case_id, ids, (size_t)sc_n_known);
}

/* The optimizer's lr and momentum, and the schedule's last lr, against PyTorch's values after `step` steps. */
static void expect_step(const sc_setup *s, const sc_case *c, int step, const char *when) {
  for (int g = 0; g < SC_GROUPS; g++) {
    double lr = mx_optimizer_lr(s->opt, g), last = mx_schedule_get_last_lr(s->schedule, g);
    /* the one deviation: OneCycleLR's linear anneal overshoots below 0 at step total_steps, and stops at 0 here */
    double want = c->lr[g][step] < 0 ? 0 : c->lr[g][step];
    cr_expect(sc_close(lr, want), "%s%s: group %d's lr after step %d is %.17g, PyTorch's %.17g", c->id, when, g, step,
              lr, c->lr[g][step]);
    cr_expect(last == lr, "%s%s: get_last_lr of group %d after step %d is %.17g but the lr is %.17g", c->id, when, g,
              step, last, lr);
    if (c->has_momentum) {
      double m = mx_optimizer_momentum(s->opt, g);
      cr_expect(sc_close(m, c->momentum[g][step]), "%s%s: group %d's momentum after step %d is %.17g, PyTorch's %.17g",
                c->id, when, g, step, m, c->momentum[g][step]);
    }
  }
}

Test(schedule, every_fixture_case_is_known) {
  cr_assert_eq(sc_count(), sc_n_known, "%s has %d cases; the tests know %d", SC_FIXTURES, sc_count(), sc_n_known);
  sc_case *c = malloc(sizeof *c);
  for (int k = 0; k < sc_n_known; k++)
    cr_expect(sc_load(sc_known[k], c), "%s has no case %s", SC_FIXTURES, sc_known[k]);
  free(c);
}

ParameterizedTestParameters(schedule, matches_pytorch) { return all_cases(); }

/* The lrs (and momentums) right after the schedule is made and after each step are PyTorch's. */
ParameterizedTest(case_id *id, schedule, matches_pytorch) {
  sc_case *c = malloc(sizeof *c);
  cr_assert(sc_load(id->id, c), "%s has no case %s", SC_FIXTURES, id->id);
  sc_setup s;
  sc_build(id->id, &s);
  cr_expect_eq(mx_schedule_last_epoch(s.schedule), 0);
  expect_step(&s, c, 0, "");
  for (int step = 1; step <= c->steps; step++) {
    cr_assert_eq(mx_schedule_step(s.schedule), MX_OK, "%s: step %d: %s", c->id, step, mx_last_error());
    expect_step(&s, c, step, "");
  }
  cr_expect_eq(mx_schedule_last_epoch(s.schedule), c->steps);
  sc_teardown(&s);
  free(c);
}

ParameterizedTestParameters(schedule, state_round_trip_continues_the_sequence) { return all_cases(); }

/* After k steps the state is read, set on a schedule made anew (on a new optimizer), and that one goes on with
 * PyTorch's sequence from step k; k runs over the start, both sides of the milestones and the end. */
ParameterizedTest(case_id *id, schedule, state_round_trip_continues_the_sequence) {
  sc_case *c = malloc(sizeof *c);
  cr_assert(sc_load(id->id, c), "%s has no case %s", SC_FIXTURES, id->id);
  for (int k = 0; k <= c->steps; k += k < 10 ? 1 : 7) {
    sc_setup a, b;
    sc_build(id->id, &a);
    for (int step = 1; step <= k; step++) cr_assert_eq(mx_schedule_step(a.schedule), MX_OK, "%s", mx_last_error());
    int n = mx_schedule_state_size(a.schedule);
    cr_assert_gt(n, 0, "%s", mx_last_error());
    double *state = malloc(sizeof *state * (size_t)n);
    cr_assert_eq(mx_schedule_state_get(a.schedule, state, n), MX_OK, "%s", mx_last_error());
    sc_teardown(&a);

    sc_build(id->id, &b);
    cr_assert_eq(mx_schedule_state_set(b.schedule, state, n), MX_OK, "%s at %d: %s", c->id, k, mx_last_error());
    char when[32];
    snprintf(when, sizeof when, " (state set at %d)", k);
    cr_expect_eq(mx_schedule_last_epoch(b.schedule), (int64_t)state[1]);
    expect_step(&b, c, k, when);
    for (int step = k + 1; step <= c->steps; step++) {
      cr_assert_eq(mx_schedule_step(b.schedule), MX_OK, "%s%s: step %d: %s", c->id, when, step, mx_last_error());
      expect_step(&b, c, step, when);
    }
    sc_teardown(&b);
    free(state);
  }
  free(c);
}

/* The state's layout, as the header describes it. */
Test(schedule, state_layout) {
  sc_setup s;
  sc_build("one_cycle_cos_sgd", &s);
  cr_assert_eq(mx_schedule_step(s.schedule), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_schedule_state_size(s.schedule), 3 + 3 * SC_GROUPS);
  double state[3 + 3 * SC_GROUPS];
  cr_assert_eq(mx_schedule_state_get(s.schedule, state, 3 + 3 * SC_GROUPS), MX_OK, "%s", mx_last_error());
  cr_expect_eq(state[1], 1); /* last_epoch */
  cr_expect_eq(state[2], SC_GROUPS);
  for (int g = 0; g < SC_GROUPS; g++) {
    cr_expect_eq(state[3 + g], mx_schedule_base_lr(s.schedule, g));
    cr_expect_eq(state[3 + g], (g == 0 ? 0.4 : 0.1) / 20); /* max_lr / div_factor */
    cr_expect_eq(state[3 + SC_GROUPS + g], mx_optimizer_lr(s.opt, g));
    cr_expect_eq(state[3 + 2 * SC_GROUPS + g], mx_optimizer_momentum(s.opt, g));
  }
  sc_teardown(&s);

  sc_build("chain", &s); /* the chain's own part, the number of its schedules, then theirs */
  int n = mx_schedule_state_size(s.schedule);
  cr_expect_eq(n, (3 + 2 * SC_GROUPS + 1) + 3 * (3 + 2 * SC_GROUPS));
  double *chain = malloc(sizeof *chain * (size_t)n);
  cr_assert_eq(mx_schedule_state_get(s.schedule, chain, n), MX_OK, "%s", mx_last_error());
  cr_expect_eq(chain[3 + 2 * SC_GROUPS], 3);
  cr_expect_eq(chain[3 + 2 * SC_GROUPS + 2], 0); /* the LinearLR's last_epoch */
  free(chain);
  sc_teardown(&s);
}
