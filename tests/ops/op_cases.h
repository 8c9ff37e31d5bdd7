/* The op cases shared by the gradcheck and PyTorch-fixture tests: one row
 * per case, naming a function that builds the op from its inputs, the
 * inputs' shapes and the domain their values are drawn from. Adding a case
 * is one row at the end of op_cases_appended.c (and, for a PyTorch comparison, one row in
 * tests/fixtures/make_fixtures.py under the same name). */
#ifndef MX_TESTS_OPS_OP_CASES_H
#define MX_TESTS_OPS_OP_CASES_H

#include <mixgrad.h>

/* Where an input's values come from (gradcheck draws them from a seeded
 * generator; the fixture script uses the same ranges). */
typedef enum {
  DOM_ANY,    /* uniform in [-2, 2] */
  DOM_POS,    /* uniform in [0.5, 2.5] (log, sqrt, pow's base, ...) */
  DOM_UNIT,   /* uniform in [-0.9, 0.9] (asin, acos, erfinv, tan) */
  DOM_AWAY,   /* |x| in [0.3, 1.8], either sign: away from a kink or pole at 0 */
  DOM_NONINT, /* k + [0.1, 0.4] for k in -2..1: away from integers and halves */
  DOM_BOOL,   /* a bool tensor (a mask or condition; no gradient) */
} op_domain;

#define OP_MAX_IN 3

enum {
  OP_GRADCHECK = 1u << 0, /* differentiable: run mx_gradcheck */
  OP_GRADGRAD = 1u << 1,  /* also run mx_gradgradcheck */
  OP_NO_FIXTURE = 1u << 2, /* no line in tests/fixtures/ops_fixtures.txt: compared with PyTorch by its own suite's
                              fixtures (test_losses.c, test_composites.c, ...) or against float64 only */
};

typedef struct {
  const char *name;
  mx_gradcheck_fn fn;
  int n_in;
  mx_shape shape[OP_MAX_IN];
  op_domain domain[OP_MAX_IN];
  unsigned flags;
  double eps, atol, rtol; /* 0: the suite's defaults (1e-6, 1e-5, 1e-4) */
} op_case;

/* How many cases there are, and case k of them (0 <= k < op_case_count()). */
int op_case_count(void);
const op_case *op_case_at(int k);

/* The case named name, or NULL. */
const op_case *op_case_find(const char *name);

/* Run every n-th case of the parameterized suites: MX_TEST_OP_STRIDE, 1 by
 * default (valgrind, which starts a process per case, sets 12). */
int op_case_stride(void);
/* Keeps every op_case_stride()-th of n ids (in place); returns how many. */
int op_sample(int *ids, int n);
/* A Criterion parameter array of the sampled ids. */
#define OP_PARAMS(ids, n) cr_make_param_array(int, ids, (size_t)op_sample(ids, (int)(n)))

/* The row of ops.def a case exercises: the longest op name the case's name
 * starts with, followed by '_' or its end; -1 for cases of functions that
 * are no row of their own (max_all, split_first, ...). */
int op_case_row(const char *case_name);

/* A float64 tensor of shape drawn from domain with gen (bool for DOM_BOOL). */
mx_tensor *op_case_input(mx_shape shape, op_domain domain, mx_generator *gen);

#endif
