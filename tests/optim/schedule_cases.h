/* The LR schedule tests' shared pieces: the cases of tests/fixtures/schedule_fixtures.txt, the optimizer and
 * schedules each is made of, and a relative comparison. */
#ifndef MX_TESTS_SCHEDULE_CASES_H
#define MX_TESTS_SCHEDULE_CASES_H

#include <mixgrad.h>

#define SC_FIXTURES MX_FIXTURES_DIR "/schedule_fixtures.txt"
#define SC_GROUPS 2
#define SC_MAX_STEPS 100
#define SC_RTOL 1e-12

/* PyTorch's lr (and momentum, when cycled) of each group after the schedule
 * was made (index 0) and after each of its steps. */
typedef struct {
  char id[48];
  int steps;
  bool has_momentum;
  double lr[SC_GROUPS][SC_MAX_STEPS + 1], momentum[SC_GROUPS][SC_MAX_STEPS + 1];
} sc_case;

/* The case named id (false when missing or malformed), and the number of cases in the file. */
bool sc_load(const char *id, sc_case *c);
int sc_count(void);

/* A case's optimizer and schedule, as the fixture script makes them: the optimizer over two groups of one
 * parameter each (lr 0.1 and 0.0375), SGD with momentum 0.9 or Adam. */
typedef struct {
  mx_tensor *params[SC_GROUPS];
  mx_optimizer *opt;
  mx_schedule *schedule;
} sc_setup;

/* The ids of the cases the tests know how to build (n_known of them). */
extern const char *const sc_known[];
extern const int sc_n_known;
/* Builds case id (asserts success); sc_teardown frees it all. */
void sc_build(const char *id, sc_setup *s);
/* Only the optimizer (no schedule): "sgd" or "adam". */
void sc_build_optimizer(const char *kind, sc_setup *s);
void sc_teardown(sc_setup *s);

/* |got - want| <= SC_RTOL |want| (both NaN, or the same infinity, count as equal). */
bool sc_close(double got, double want);

#endif
