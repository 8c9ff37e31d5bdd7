/* SGD, Adam and AdamW against PyTorch: every case of tests/fixtures/optim_fixtures.txt, 20 steps. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "optim_cases.h"

ParameterizedTestParameters(optim_torch, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(oc_count(), &n); /* -1 for a missing file: the test reports it */
  return cr_make_param_array(int, ids, n);
}

ParameterizedTest(int *k, optim_torch, matches_pytorch) {
  oc_replay(*k, MX_CPU);
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
