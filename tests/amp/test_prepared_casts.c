/* Prepared casts: the optimizer step writes each autocast weight's 16-bit
 * cast for the next step (tensor/tensor_impl.h). Training with them gives
 * the parameters bit for bit of training without; they are used; and they
 * are never used stale (in-place writes, exposed data, skipped steps, two
 * dtypes), freed with their weight and never written over. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <string.h>

#include "amp/amp_internal.h"
#include "amp_suite.h"
#include "tensor/tensor_impl.h"

enum { N_PARAMS = 4, STEPS = 6, BATCH = 8, IN = 12, HIDDEN = 40, OUT = 5 };

TestSuite(prepared_casts, .init = amp_suite_open, .fini = amp_suite_close);

/* A two-layer MLP's weights and biases, the same values for a seed. */
static void make_params(mx_tensor **p, uint64_t seed) {
  mx_manual_seed(seed);
  mx_scope *scope = mx_scope_begin();
  const mx_shape shapes[N_PARAMS] = {MX_SHAPE(HIDDEN, IN), MX_SHAPE(HIDDEN), MX_SHAPE(OUT, HIDDEN), MX_SHAPE(OUT)};
  for (int i = 0; i < N_PARAMS; i++) {
    p[i] = mx_keep(mx_mul_scalar(mx_randn(shapes[i], MX_F32, MX_CPU, NULL), 0.3));
    NOT_NULL(p[i]);
    OK(mx_set_requires_grad(p[i], true));
  }
  mx_scope_end(scope);
}

static void release_params(mx_tensor **p) {
  for (int i = 0; i < N_PARAMS; i++) mx_release(p[i]);
}

static mx_tensor *batch(int step, int which) {
  mx_manual_seed(1000 + 2 * (uint64_t)step + (uint64_t)which);
  return mx_randn(which ? MX_SHAPE(BATCH, OUT) : MX_SHAPE(BATCH, IN), MX_F32, MX_CPU, NULL);
}

/* The loss of step's batch, in a region of dtype (MX_F32: outside any;
 * in the caller's scope). */
static mx_tensor *loss_of(mx_tensor **p, int step, mx_dtype dtype) {
  if (dtype != MX_F32) OK(mx_autocast_begin(MX_CPU, dtype, true, true));
  mx_tensor *h = mx_relu(mx_linear(batch(step, 0), p[0], p[1]));
  mx_tensor *y = mx_linear(h, p[2], p[3]);
  mx_tensor *loss = mx_mse_loss(mx_to_dtype(y, MX_F32), batch(step, 1), MX_REDUCTION_MEAN);
  if (dtype != MX_F32) OK(mx_autocast_end());
  NOT_NULL(loss);
  return loss;
}

typedef enum { SGD_MOMENTUM, ADAM, ADAMW } kind;

static mx_optimizer *optimizer(kind k, mx_tensor **p) {
  mx_optimizer *opt;
  if (k == SGD_MOMENTUM) {
    mx_sgd_opts o = {.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
    opt = mx_sgd_new(N_PARAMS, p, &o);
  } else {
    mx_adam_opts o = k == ADAM ? mx_adam_defaults() : mx_adamw_defaults();
    o.lr = 1e-2;
    opt = k == ADAM ? mx_adam_new(N_PARAMS, p, &o) : mx_adamw_new(N_PARAMS, p, &o);
  }
  cr_assert_not_null(opt, "%s", mx_last_error());
  return opt;
}

static void step(mx_optimizer *opt, mx_tensor **p, int s, mx_dtype dtype) {
  mx_scope *scope = mx_scope_begin();
  OK(mx_optimizer_zero_grad(opt, true));
  OK(mx_backward(loss_of(p, s, dtype), NULL, false));
  OK(mx_optimizer_step(opt));
  mx_scope_end(scope);
}

/* The casts served from prepared ones since the counter read before. */
static int64_t used_since(int64_t before) { return mx__amp_prepared_casts_used() - before; }

static void expect_same_bits(const mx_tensor *a, const mx_tensor *b, const char *what) {
  cr_assert_eq(mx_dtype_of(a), mx_dtype_of(b), "%s: dtype", what);
  cr_assert_eq(mx_numel(a), mx_numel(b), "%s: numel", what);
  cr_assert(mx_is_contiguous(a) && mx_is_contiguous(b), "%s: not contiguous", what);
  size_t bytes = (size_t)mx_numel(a) * mx_dtype_size(mx_dtype_of(a));
  /* kviews, not mx_data_ptr: that would mark the storage as written behind the version's back */
  cr_expect(!memcmp(mx__kview_of(a).data, mx__kview_of(b).data, bytes), "%s: the bits differ", what);
}

/* --- training: the same parameters, bit for bit, with the casts used ------------------------------------------ */

typedef struct {
  kind optimizer;
  mx_dtype dtype;
} train_case;

ParameterizedTestParameters(prepared_casts, training_matches_training_without) {
  static train_case cases[] = {
      {SGD_MOMENTUM, MX_BF16}, {SGD_MOMENTUM, MX_F16}, {ADAM, MX_BF16}, {ADAM, MX_F16}, {ADAMW, MX_BF16}};
  return cr_make_param_array(train_case, cases, sizeof cases / sizeof *cases);
}

/* Each step after the first takes all four weights' casts from the step
 * before (the counter), and the parameters end as they do with prepared
 * casts off. */
ParameterizedTest(train_case *c, prepared_casts, training_matches_training_without) {
  mx_tensor *on[N_PARAMS], *off[N_PARAMS];
  make_params(on, 7);
  make_params(off, 7);
  mx_optimizer *opt_on = optimizer(c->optimizer, on), *opt_off = optimizer(c->optimizer, off);
  int64_t before = mx__amp_prepared_casts_used();
  for (int s = 0; s < STEPS; s++) step(opt_on, on, s, c->dtype);
  cr_expect_eq(used_since(before), N_PARAMS * (STEPS - 1), "prepared casts used: %lld", (long long)used_since(before));
  mx__prepared_casts_set_enabled(false);
  before = mx__amp_prepared_casts_used();
  for (int s = 0; s < STEPS; s++) step(opt_off, off, s, c->dtype);
  mx__prepared_casts_set_enabled(true);
  cr_expect_eq(used_since(before), 0);
  for (int i = 0; i < N_PARAMS; i++) {
    expect_same_bits(on[i], off[i], "a parameter");
    cr_expect_null(atomic_load(&off[i]->cast_ready), "prepared casts off: none attached");
  }
  mx_optimizer_free(opt_on);
  mx_optimizer_free(opt_off);
  release_params(on);
  release_params(off);
}

/* --- what autocast serves is the ordinary cast -------------------------------------------------------------- */

/* After a step, the region's cached cast of each weight (served from the
 * prepared one) has the bits, layout, version and graph node of a fresh
 * mx_to_dtype, and its gradient reaches the weight in float32. */
Test(prepared_casts, served_cast_is_the_ordinary_cast) {
  mx_tensor *p[N_PARAMS];
  make_params(p, 11);
  mx_optimizer *opt = optimizer(ADAM, p);
  step(opt, p, 0, MX_F16);
  for (int i = 0; i < N_PARAMS; i++) cr_assert_not_null(atomic_load(&p[i]->cast_ready), "param %d: none attached", i);
  int64_t before = mx__amp_prepared_casts_used();
  OK(mx_optimizer_zero_grad(opt, true));
  OK(mx_autocast_begin(MX_CPU, MX_F16, true, true));
  mx_tensor *loss = mx_mse_loss(mx_to_dtype(mx_linear(batch(1, 0), p[0], p[1]), MX_F32),
                                mx_zeros(MX_SHAPE(BATCH, HIDDEN), MX_F32, MX_CPU), MX_REDUCTION_SUM);
  cr_expect_eq(used_since(before), 2);
  for (int i = 0; i < 2; i++) {
    mx_tensor *served = mx__cast_cache_find(p[i], MX_F16), *fresh = mx_to_dtype(p[i], MX_F16);
    cr_assert_not_null(served);
    cr_expect_null(atomic_load(&p[i]->cast_ready), "taken, not left attached");
    expect_same_bits(served, fresh, "the served cast");
    cr_expect(!memcmp(served->strides, fresh->strides, sizeof served->strides) && served->offset == fresh->offset);
    cr_expect_eq(mx_version(served), mx_version(fresh));
    cr_expect_str_eq(mx_grad_fn_name(served), mx_grad_fn_name(fresh));
    cr_expect(mx_requires_grad(served));
  }
  OK(mx_autocast_end());
  OK(mx_backward(loss, NULL, false));
  for (int i = 0; i < 2; i++) cr_expect_eq(mx_dtype_of(mx_grad_of(p[i])), MX_F32);
  mx_optimizer_free(opt);
  release_params(p);
}

/* --- never stale ---------------------------------------------------------------------------------------------- */

/* The casts a region serves for p: each equal to a fresh conversion. */
static void expect_fresh_casts(mx_tensor **p, mx_dtype dtype) {
  for (int i = 0; i < N_PARAMS; i++) {
    mx_tensor *served = mx__cast_cache_find(p[i], dtype);
    cr_assert_not_null(served, "param %d has no cached cast", i);
    MX_NO_GRAD { expect_same_bits(served, mx_to_dtype(p[i], dtype), "a served cast"); }
  }
}

/* Written in place between the step and the next forward (an in-place op,
 * a copy_, through mx_data_ptr): those weights are cast afresh. */
Test(prepared_casts, written_weight_is_cast_afresh) {
  mx_tensor *p[N_PARAMS];
  make_params(p, 13);
  mx_optimizer *opt = optimizer(SGD_MOMENTUM, p);
  step(opt, p, 0, MX_BF16);
  MX_NO_GRAD {
    OK(mx_mul_scalar_(p[0], 1.5));
    OK(mx_copy_(p[2], mx_full(MX_SHAPE(OUT, HIDDEN), 0.25, MX_F32, MX_CPU)));
  }
  float *bias = mx_data_ptr(p[3]);
  bias[0] = 3.0f; /* no version bump: the exposed data is never trusted */
  int64_t before = mx__amp_prepared_casts_used();
  mx_tensor *loss = loss_of(p, 1, MX_BF16);
  cr_expect_eq(used_since(before), 1, "only p[1] is unchanged: %lld used", (long long)used_since(before));
  OK(mx_autocast_begin(MX_CPU, MX_BF16, true, true)); /* the cache ended with loss_of's region: fill it again */
  mx_release(loss_of(p, 1, MX_BF16));
  expect_fresh_casts(p, MX_BF16);
  OK(mx_autocast_end());
  mx_release(loss);
  mx_optimizer_free(opt);
  release_params(p);
}

/* A step skipped on found_inf (the GradScaler's) writes no cast and
 * attaches none; the one the step before wrote and no forward took is
 * dropped (the host bumped the version, as it cannot see the flag), and
 * the next forward casts afresh, with the right values. */
Test(prepared_casts, skipped_step_attaches_nothing) {
  mx_tensor *p[N_PARAMS];
  make_params(p, 17);
  mx_optimizer *opt = optimizer(ADAM, p);
  step(opt, p, 0, MX_F16);
  mx_tensor *found_inf = mx_full(MX_SHAPE(1), 1.0, MX_F32, MX_CPU);
  for (int round = 0; round < 2; round++) { /* round 1: the step before was itself skipped */
    mx_scope *scope = mx_scope_begin();
    OK(mx_optimizer_zero_grad(opt, true));
    OK(mx_backward(loss_of(p, 1, MX_F16), NULL, false));
    uint64_t version = mx_version(p[0]);
    OK(mx_optimizer_step_amp(opt, found_inf, NULL));
    cr_expect_eq(mx_version(p[0]), version + 1);
    for (int i = 0; i < N_PARAMS; i++) cr_expect_null(atomic_load(&p[i]->cast_ready), "round %d, param %d", round, i);
    mx_scope_end(scope);
  }
  /* a prepared cast left untaken, then a skipped step: dropped */
  step(opt, p, 2, MX_F16);
  cr_assert_not_null(atomic_load(&p[0]->cast_ready));
  mx_scope *scope = mx_scope_begin();
  OK(mx_optimizer_zero_grad(opt, true));
  OK(mx_backward(loss_of(p, 2, MX_F32), NULL, false)); /* gradients without a region */
  OK(mx_optimizer_step_amp(opt, found_inf, NULL));
  cr_expect_null(atomic_load(&p[0]->cast_ready));
  int64_t before = mx__amp_prepared_casts_used();
  OK(mx_autocast_begin(MX_CPU, MX_F16, true, true));
  mx_release(loss_of(p, 3, MX_F16));
  expect_fresh_casts(p, MX_F16);
  OK(mx_autocast_end());
  cr_expect_eq(used_since(before), 0);
  mx_scope_end(scope);
  mx_release(found_inf);
  mx_optimizer_free(opt);
  release_params(p);
}

/* Weights used under both 16-bit dtypes in a step (a nested float16 region
 * in a bfloat16 one): the step prepares the dtype asked last, the other is
 * cast afresh, the served casts are right, and training ends as without. */
static void step_two_dtypes(mx_optimizer *opt, mx_tensor **p, int s, bool check) {
  mx_scope *scope = mx_scope_begin();
  OK(mx_optimizer_zero_grad(opt, true));
  OK(mx_autocast_begin(MX_CPU, MX_BF16, true, true));
  mx_tensor *a = loss_of(p, s, MX_BF16), *b = loss_of(p, s + 100, MX_F16);
  if (check) expect_fresh_casts(p, MX_BF16), expect_fresh_casts(p, MX_F16);
  OK(mx_autocast_end());
  OK(mx_backward(mx_add(a, b), NULL, false));
  OK(mx_optimizer_step(opt));
  mx_scope_end(scope);
}

Test(prepared_casts, weight_under_two_dtypes) {
  mx_tensor *on[N_PARAMS], *off[N_PARAMS];
  make_params(on, 19);
  make_params(off, 19);
  mx_optimizer *opt_on = optimizer(SGD_MOMENTUM, on), *opt_off = optimizer(SGD_MOMENTUM, off);
  int64_t before = mx__amp_prepared_casts_used();
  for (int s = 0; s < STEPS; s++) step_two_dtypes(opt_on, on, s, true);
  cr_expect_eq(used_since(before), N_PARAMS * (STEPS - 1), "the float16 casts: %lld", (long long)used_since(before));
  mx__prepared_casts_set_enabled(false);
  for (int s = 0; s < STEPS; s++) step_two_dtypes(opt_off, off, s, false);
  mx__prepared_casts_set_enabled(true);
  for (int i = 0; i < N_PARAMS; i++) expect_same_bits(on[i], off[i], "a parameter");
  mx_optimizer_free(opt_on);
  mx_optimizer_free(opt_off);
  release_params(on);
  release_params(off);
}

/* A weight autocast has not cast since the last step gets no cast from
 * the next (a float32 forward), and loses the one it had. */
Test(prepared_casts, only_weights_cast_since_the_last_step) {
  mx_tensor *p[N_PARAMS];
  make_params(p, 31);
  mx_optimizer *opt = optimizer(SGD_MOMENTUM, p);
  step(opt, p, 0, MX_BF16);
  for (int i = 0; i < N_PARAMS; i++) cr_assert_not_null(atomic_load(&p[i]->cast_ready));
  step(opt, p, 1, MX_F32);
  for (int i = 0; i < N_PARAMS; i++) cr_expect_null(atomic_load(&p[i]->cast_ready), "param %d", i);
  mx_optimizer_free(opt);
  release_params(p);
}

/* --- lifetimes -------------------------------------------------------------------------------------------------- */

/* A weight released with its prepared cast attached frees it: the live
 * tensors and bytes return to where they were (and ASan sees no leak). */
Test(prepared_casts, released_weight_frees_its_cast) {
  mx_memory_stats start = mx_memory_stats_get(MX_CPU);
  mx_tensor *p[N_PARAMS];
  make_params(p, 23);
  mx_optimizer *opt = optimizer(SGD_MOMENTUM, p);
  step(opt, p, 0, MX_BF16);
  step(opt, p, 1, MX_BF16);
  for (int i = 0; i < N_PARAMS; i++) cr_assert_not_null(atomic_load(&p[i]->cast_ready));
  mx_optimizer_free(opt);
  release_params(p);
  mx_memory_stats end = mx_memory_stats_get(MX_CPU);
  cr_expect_eq(end.live_tensors, start.live_tensors, "%lld tensors left",
               (long long)(end.live_tensors - start.live_tensors));
  cr_expect_eq(end.bytes_in_use, start.bytes_in_use);
}

/* A graph that saved the cast a step served keeps it: the next step writes
 * its cast into a new tensor, so a retained graph's second backward gives
 * the first's gradients. */
Test(prepared_casts, retained_graph_keeps_its_cast) {
  mx_tensor *p[N_PARAMS];
  make_params(p, 29);
  mx_optimizer *opt = optimizer(SGD_MOMENTUM, p);
  step(opt, p, 0, MX_BF16);
  int64_t before = mx__amp_prepared_casts_used();
  OK(mx_optimizer_zero_grad(opt, true));
  mx_tensor *loss = loss_of(p, 1, MX_BF16);
  cr_expect_eq(used_since(before), N_PARAMS);
  OK(mx_backward(loss, NULL, true));
  mx_tensor *first[N_PARAMS];
  for (int i = 0; i < N_PARAMS; i++) first[i] = mx_clone(mx_grad_of(p[i]));
  OK(mx_optimizer_step(opt)); /* writes the weights and their next casts */
  for (int i = 0; i < N_PARAMS; i++) cr_assert_not_null(atomic_load(&p[i]->cast_ready));
  OK(mx_optimizer_zero_grad(opt, true));
  OK(mx_backward(loss, NULL, false));
  for (int i = 0; i < N_PARAMS; i++) expect_same_bits(mx_grad_of(p[i]), first[i], "the second backward's gradient");
  mx_optimizer_free(opt);
  release_params(p);
}
