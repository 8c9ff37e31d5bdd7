/* The optimizer tests' shared pieces: the fixed problem and the cases of
 * tests/fixtures/optim_fixtures.txt, parameters, gradients and snapshots. */
#ifndef MX_TESTS_OPTIM_CASES_H
#define MX_TESTS_OPTIM_CASES_H

#include <mixgrad.h>

#include "../ops/fixture_io.h"
#include "optim/optimizer.h"

#define OC_FIXTURES MX_FIXTURES_DIR "/optim_fixtures.txt"
#define OC_STEPS 20
#define OC_PARAMS 2 /* p0 (3, 4) and p1 (4,) */
#define OC_MAX_GROUPS 2

typedef enum { OC_SGD, OC_ADAM, OC_ADAMW } oc_kind;

/* One case: an optimizer over groups of the two parameters, the steps at
 * which a parameter has no gradient, and PyTorch's parameters after
 * OC_STEPS steps. */
typedef struct {
  char id[64];
  oc_kind kind;
  mx_dtype dtype;
  int n_groups, first[OC_MAX_GROUPS], count[OC_MAX_GROUPS];
  mx_sgd_opts sgd[OC_MAX_GROUPS];
  mx_adam_opts adam[OC_MAX_GROUPS];
  bool nograd[OC_PARAMS][OC_STEPS];
  fx_tensor result[OC_PARAMS];
} oc_case;

/* The cases in the file, or -1 when it cannot be read. */
int oc_count(void);
/* Case k, or the case named id; false when missing or malformed. */
bool oc_load(int k, oc_case *c);
bool oc_find(const char *id, oc_case *c);
void oc_free(oc_case *c);

/* New leaves with the problem's initial values, requiring grad, outside any
 * scope (mx_release them). */
void oc_params(mx_dtype dtype, mx_tensor *params[OC_PARAMS]);
void oc_params_on(mx_dtype dtype, mx_device device, mx_tensor *params[OC_PARAMS]);
/* The parameters' gradients become step's gradients times scale (none
 * where c, which may be NULL, says so), on the parameters' device. */
void oc_set_grads(mx_tensor *const params[OC_PARAMS], int step, double scale, const oc_case *c);
/* The case's optimizer over params (asserts success). */
mx_optimizer *oc_optimizer(const oc_case *c, mx_tensor *const params[OC_PARAMS]);
/* Steps [from, to) of the case: gradients, then mx_optimizer_step. */
void oc_run(mx_optimizer *opt, mx_tensor *const params[OC_PARAMS], const oc_case *c, int from, int to);
/* Expects the parameters to be PyTorch's after OC_STEPS steps, within a
 * relative 1e-6 (float32) or 1e-12 (float64). */
void oc_expect_results(const oc_case *c, mx_tensor *const params[OC_PARAMS]);
/* Replays case k (-1: the file could not be read) on device, its parameters there: OC_STEPS steps, then
 * oc_expect_results. */
void oc_replay(int k, mx_device device);

/* The bytes of every parameter and every piece of optimizer state, to
 * compare two moments bit for bit. */
typedef struct {
  size_t n;
  unsigned char *bytes;
} oc_snapshot;
oc_snapshot oc_snapshot_take(const mx_optimizer *opt);
void oc_snapshot_free(oc_snapshot *s);

#endif
