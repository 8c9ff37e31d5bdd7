/* SGD, Adam and AdamW against PyTorch: every case of tests/fixtures/optim_fixtures.txt, 20 steps. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "optim_cases.h"

#define MAX_CASES 64
static int case_ids[MAX_CASES];

ParameterizedTestParameters(optim_torch, matches_pytorch) {
  int n = oc_count();
  if (n <= 0) { /* one case that reports the missing file */
    case_ids[0] = -1;
    return cr_make_param_array(int, case_ids, 1);
  }
  if (n > MAX_CASES) n = MAX_CASES;
  for (int k = 0; k < n; k++) case_ids[k] = k;
  return cr_make_param_array(int, case_ids, (size_t)n);
}

ParameterizedTest(int *k, optim_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s (run tests/fixtures/make_optim_fixtures.py)", OC_FIXTURES);
  oc_case c;
  cr_assert(oc_load(*k, &c), "case %d of %s does not parse", *k, OC_FIXTURES);
  mx_tensor *params[OC_PARAMS];
  oc_params(c.dtype, params);
  mx_optimizer *opt = oc_optimizer(&c, params);
  oc_run(opt, params, &c, 0, OC_STEPS);
  oc_expect_results(&c, params);
  mx_optimizer_free(opt);
  for (int i = 0; i < OC_PARAMS; i++) mx_release(params[i]);
  oc_free(&c);
}

/* The fixture holds what the brief of the suite promises: every optimizer
 * and option, two groups, float64, missing gradients. */
Test(optim_torch, fixture_covers_every_configuration) {
  static const char *const ids[] = {"sgd_plain", "sgd_momentum_dampening", "sgd_nesterov", "sgd_weight_decay",
                                    "sgd_maximize", "adam_plain", "adam_weight_decay", "adam_amsgrad",
                                    "adam_maximize", "adamw_plain", "adamw_amsgrad", "sgd_groups",
                                    "adam_groups", "sgd_nograd", "adam_nograd", "sgd_f64", "adam_f64"};
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    oc_case c;
    cr_expect(oc_find(ids[i], &c), "%s has no case %s", OC_FIXTURES, ids[i]);
    oc_free(&c);
  }
}
