/* Concurrent backward (issue #33, item 5): threads that each run forward and
 * backward through graphs sharing leaves must neither crash nor lose a
 * gradient.
 *
 * Each thread t trains loss = sum(relu(x_t @ W) @ V_t) for a number of
 * iterations, with W shared by all threads (or one per thread) and V_t its
 * own, in fp32 or under f16 or bf16 autocast (autocast state is per thread,
 * so each thread opens its own region). In a third arrangement relu(x W)
 * is computed once and every thread backpropagates through it (with
 * retain_graph) from a last layer of its own. The weights never change, so
 * every iteration of thread t adds the same gradient g_t, and the
 * accumulated gradient of W must be N * sum_t g_t, with g_t computed
 * single-threaded.
 *
 * The comparison is exact, not within rounding: the values are small dyadic
 * numbers (x in {-1, 0, 1}, weights in eighths, 4 x 4 x 8 shapes) chosen so
 * that every product and sum, in f16 and bf16 too, is exactly representable,
 * so the order in which threads add their gradients cannot change a bit.
 *
 * Bounded and seeded; MX_TEST_QUICK and valgrind run fewer iterations. */
#ifdef MX_TEST_NO_CRITERION
#include "tests/reliability/no_criterion.h" /* the ThreadSanitizer build */
#else
#include <criterion/criterion.h>
#endif
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mixgrad.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

#define BATCH 4
#define IN 4
#define HIDDEN 8
#define MAX_THREADS 4

static int iterations(void) {
  if (RUNNING_ON_VALGRIND) return 4; /* valgrind runs one thread at a time, slowly */
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0 ? 30 : 300;
}

/* A seeded LCG: the same values on every run and every libc. */
static uint32_t next_random(uint32_t *state) {
  *state = *state * 1664525u + 1013904223u;
  return *state >> 8;
}

/* Entries k / denominator with k uniform in [-range, range]. */
static mx_tensor *dyadic(mx_shape shape, int range, float denominator, uint32_t seed, bool requires_grad) {
  float values[BATCH * HIDDEN * IN];
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
  cr_assert_leq(n, (int64_t)(sizeof values / sizeof *values), "%lld values", (long long)n);
  for (int64_t i = 0; i < n; i++)
    values[i] = (float)((int)(next_random(&seed) % (uint32_t)(2 * range + 1)) - range) / denominator;
  mx_tensor *t = mx_from_data(values, shape, MX_F32, MX_CPU);
  cr_assert_not_null(t, "%s", mx_last_error());
  if (requires_grad) cr_assert_eq(mx_set_requires_grad(t, true), MX_OK, "%s", mx_last_error());
  return t;
}

/* One forward and backward; amp is MX_F32 for no autocast. With a shared
 * hidden layer (computed once, on another thread) only the last layer is
 * new, and the backward runs through the shared part with retain_graph. */
static mx_status step(mx_tensor *x, mx_tensor *w, mx_tensor *shared_hidden, mx_tensor *v, mx_dtype amp) {
  mx_scope *scope = mx_scope_begin();
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CPU, amp, amp != MX_F32, true) {
    mx_tensor *hidden = shared_hidden ? shared_hidden : mx_relu(mx_matmul(x, w));
    loss = mx_sum(mx_matmul(hidden, v), MX_ALL_DIMS, false);
  }
  mx_status status = loss ? mx_backward(loss, NULL, shared_hidden != NULL) : mx_last_status();
  mx_scope_end(scope);
  return status;
}

typedef struct {
  mx_tensor *x, *w, *hidden, *v;
  mx_dtype amp;
  int iterations;
  pthread_barrier_t *start;
  mx_status status;
  char error[256];
} worker;

static void *work(void *arg) {
  worker *k = arg;
  pthread_barrier_wait(k->start); /* all threads run their forwards at once */
  k->status = MX_OK;
  for (int i = 0; i < k->iterations && k->status == MX_OK; i++) k->status = step(k->x, k->w, k->hidden, k->v, k->amp);
  if (k->status != MX_OK) snprintf(k->error, sizeof k->error, "%s", mx_last_error());
  return NULL;
}

static void read_floats(const mx_tensor *t, float *out, size_t n) {
  cr_assert_not_null(t, "no gradient");
  cr_assert_eq(mx_numel(t), (int64_t)n, "%lld elements, expected %zu", (long long)mx_numel(t), n);
  cr_assert_eq(mx_to_host(t, out, n * sizeof *out), MX_OK, "%s", mx_last_error());
}

/* The gradients of one step on fresh copies of w and v, single-threaded. */
static void reference(mx_tensor *x, mx_tensor *w, mx_tensor *v, mx_dtype amp, float *gw, float *gv) {
  mx_tensor *w1 = mx_detach(w), *v1 = mx_detach(v); /* the same data, leaves of their own */
  cr_assert_eq(mx_set_requires_grad(w1, true), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_set_requires_grad(v1, true), MX_OK, "%s", mx_last_error());
  cr_assert_eq(step(x, w1, NULL, v1, amp), MX_OK, "%s", mx_last_error());
  read_floats(mx_grad_of(w1), gw, IN * HIDDEN);
  read_floats(mx_grad_of(v1), gv, HIDDEN);
  mx_release(w1);
  mx_release(v1);
}

static void check_sum(const char *what, int thread, const mx_tensor *grad, const float *expected, size_t n) {
  float got[IN * HIDDEN];
  read_floats(grad, got, n);
  for (size_t i = 0; i < n; i++)
    cr_assert_eq(got[i], expected[i], "%s (thread %d), element %zu: accumulated %.9g, expected %.9g", what, thread,
                 i, (double)got[i], (double)expected[i]);
}

typedef enum {
  OWN_WEIGHTS,   /* nothing shared but the library */
  SHARED_WEIGHT, /* W shared, each thread its own input and graph */
  SHARED_GRAPH   /* relu(x W) computed once; each thread adds its own last layer */
} sharing;

static void run_threads(int threads, sharing mode, mx_dtype amp) {
  int n = iterations();
  bool shared_weight = mode != OWN_WEIGHTS;
  mx_tensor *x[MAX_THREADS], *w[MAX_THREADS], *v[MAX_THREADS];
  mx_tensor *shared = dyadic(MX_SHAPE(IN, HIDDEN), 8, 8, 1, true);
  for (int t = 0; t < threads; t++) {
    x[t] = dyadic(MX_SHAPE(BATCH, IN), 1, 1, mode == SHARED_GRAPH ? 100 : 100 + (uint32_t)t, false);
    w[t] = shared_weight ? shared : dyadic(MX_SHAPE(IN, HIDDEN), 8, 8, 200 + (uint32_t)t, true);
    v[t] = dyadic(MX_SHAPE(HIDDEN, 1), 8, 8, 300 + (uint32_t)t, true);
  }
  float gw[MAX_THREADS][IN * HIDDEN], gv[MAX_THREADS][HIDDEN];
  for (int t = 0; t < threads; t++) reference(x[t], w[t], v[t], amp, gw[t], gv[t]);
  mx_tensor *hidden = NULL;
  if (mode == SHARED_GRAPH) {
    mx_scope *scope = mx_scope_begin(); /* the temporaries; the graph keeps what it needs */
    MX_AUTOCAST(MX_CPU, amp, amp != MX_F32, true) { hidden = mx_keep(mx_relu(mx_matmul(x[0], shared))); }
    mx_scope_end(scope);
    cr_assert_not_null(hidden, "%s", mx_last_error());
  }

  pthread_barrier_t start;
  pthread_barrier_init(&start, NULL, (unsigned)threads);
  worker workers[MAX_THREADS];
  pthread_t ids[MAX_THREADS];
  for (int t = 0; t < threads; t++) {
    workers[t] =
        (worker){.x = x[t], .w = w[t], .hidden = hidden, .v = v[t], .amp = amp, .iterations = n, .start = &start};
    cr_assert_eq(pthread_create(&ids[t], NULL, work, &workers[t]), 0, "pthread_create failed");
  }
  for (int t = 0; t < threads; t++) pthread_join(ids[t], NULL);
  pthread_barrier_destroy(&start);
  for (int t = 0; t < threads; t++)
    cr_assert_eq(workers[t].status, MX_OK, "thread %d: %s", t, workers[t].error);

  float expected[IN * HIDDEN];
  for (int t = 0; t < threads; t++) { /* each thread's own gradients: n times its g_t */
    for (int i = 0; i < HIDDEN; i++) expected[i] = (float)n * gv[t][i];
    check_sum("V", t, mx_grad_of(v[t]), expected, HIDDEN);
    if (shared_weight) continue;
    for (int i = 0; i < IN * HIDDEN; i++) expected[i] = (float)n * gw[t][i];
    check_sum("W", t, mx_grad_of(w[t]), expected, IN * HIDDEN);
  }
  if (shared_weight) { /* the shared weight: every thread's, summed */
    for (int i = 0; i < IN * HIDDEN; i++) {
      expected[i] = 0;
      for (int t = 0; t < threads; t++) expected[i] += (float)n * gw[t][i];
    }
    check_sum("shared W", -1, mx_grad_of(shared), expected, IN * HIDDEN);
  }
  for (int t = 0; t < threads; t++) {
    mx_release(x[t]);
    mx_release(v[t]);
    if (!shared_weight) mx_release(w[t]);
  }
  mx_release(hidden);
  mx_release(shared);
}

Test(threads, two_threads_shared_weight_fp32) { run_threads(2, SHARED_WEIGHT, MX_F32); }
Test(threads, four_threads_shared_weight_fp32) { run_threads(4, SHARED_WEIGHT, MX_F32); }
Test(threads, two_threads_own_weights_fp32) { run_threads(2, OWN_WEIGHTS, MX_F32); }
Test(threads, four_threads_own_weights_fp32) { run_threads(4, OWN_WEIGHTS, MX_F32); }
Test(threads, four_threads_shared_graph_fp32) { run_threads(4, SHARED_GRAPH, MX_F32); }
Test(threads, two_threads_shared_weight_f16) { run_threads(2, SHARED_WEIGHT, MX_F16); }
Test(threads, four_threads_shared_weight_f16) { run_threads(4, SHARED_WEIGHT, MX_F16); }
Test(threads, four_threads_own_weights_f16) { run_threads(4, OWN_WEIGHTS, MX_F16); }
Test(threads, four_threads_shared_graph_f16) { run_threads(4, SHARED_GRAPH, MX_F16); }
Test(threads, two_threads_shared_weight_bf16) { run_threads(2, SHARED_WEIGHT, MX_BF16); }
Test(threads, four_threads_shared_weight_bf16) { run_threads(4, SHARED_WEIGHT, MX_BF16); }
Test(threads, four_threads_own_weights_bf16) { run_threads(4, OWN_WEIGHTS, MX_BF16); }
Test(threads, two_threads_shared_graph_bf16) { run_threads(2, SHARED_GRAPH, MX_BF16); }
