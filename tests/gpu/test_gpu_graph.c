/* CUDA graphs on a GPU: an MLP's training step under f16 autocast with a
 * GradScaler and Adam captured once and replayed N times ends where N eager
 * steps end, an overflowing batch included (skipped on the device, the scale
 * halved); and a step the graph cannot hold fails the capture with a message
 * naming it. Skips without a GPU (tests/kernels/test_cuda_graph.c checks the
 * API's errors there). */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "compare.h"

#define IN 16
#define HIDDEN 32
#define OUT 4
#define BATCH 8
#define WARMUP 2
#define REPLAYS 6
#define OVERFLOW_AT 3 /* the replay whose batch overflows float16 */
#define INIT_SCALE 1024 /* low enough that batches of randn never overflow float16 in this model */

/* One replica of the model with its optimizer, scaler and static tensors. */
typedef struct {
  mx_tensor *w1, *b1, *w2, *b2;
  mx_optimizer *opt;
  mx_scaler *scaler;
  mx_tensor *x, *y; /* the step's inputs, on the device: copied into, never replaced */
  mx_tensor *loss;  /* the last step's loss (a static output once captured) */
} replica;

static mx_tensor *param(mx_shape shape, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *cpu = mx_mul_scalar(mx_randn(shape, MX_F32, MX_CPU, gen), 0.3);
  mx_generator_free(gen);
  mx_tensor *p = mx_keep(mx_to_device(cpu, MX_CUDA));
  cr_assert_not_null(p, "%s", mx_last_error());
  cr_assert_eq(mx_set_requires_grad(p, true), MX_OK, "%s", mx_last_error());
  return p;
}

/* Batch i on the CPU: the overflowing one holds 1e30, inf in float16. */
static void batch(int i, mx_tensor **x, mx_tensor **y) {
  mx_generator *gen = mx_generator_new(100 + (uint64_t)i);
  *x = mx_randn(MX_SHAPE(BATCH, IN), MX_F32, MX_CPU, gen);
  *y = mx_randn(MX_SHAPE(BATCH, OUT), MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  if (i == OVERFLOW_AT) cr_assert_eq(mx_set(*x, MX_SHAPE(0, 0), 1e30), MX_OK, "%s", mx_last_error());
}

static void make_replica(replica *r) {
  memset(r, 0, sizeof *r);
  mx_scope *s = mx_scope_begin();
  r->w1 = param(MX_SHAPE(IN, HIDDEN), 1), r->b1 = param(MX_SHAPE(HIDDEN), 2);
  r->w2 = param(MX_SHAPE(HIDDEN, OUT), 3), r->b2 = param(MX_SHAPE(OUT), 4);
  mx_scope_end(s);
  mx_tensor *params[] = {r->w1, r->b1, r->w2, r->b2};
  mx_adam_opts o = mx_adam_defaults();
  o.lr = 1e-2;
  r->opt = mx_adam_new(4, params, &o);
  mx_scaler_opts so = mx_scaler_defaults();
  so.init_scale = INIT_SCALE;
  so.growth_interval = 1000; /* no growth in this run: only the overflow moves the scale */
  r->scaler = mx_scaler_new(&so);
  r->x = mx_zeros(MX_SHAPE(BATCH, IN), MX_F32, MX_CUDA);
  r->y = mx_zeros(MX_SHAPE(BATCH, OUT), MX_F32, MX_CUDA);
  cr_assert(r->opt && r->scaler && r->x && r->y, "%s", mx_last_error());
}

static void free_replica(replica *r) {
  mx_optimizer_free(r->opt);
  mx_scaler_free(r->scaler);
  mx_tensor *all[] = {r->w1, r->b1, r->w2, r->b2, r->x, r->y, r->loss};
  for (int i = 0; i < COUNT(all); i++) mx_release(all[i]);
}

static void load_batch(replica *r, int i) {
  mx_tensor *x, *y;
  batch(i, &x, &y);
  cr_assert_eq(mx_copy_(r->x, x), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_copy_(r->y, y), MX_OK, "%s", mx_last_error());
  mx_release(x), mx_release(y);
}

/* The whole step, with no host read: the scaler's skip is decided on the device. */
static mx_status mlp_step(void *ctx) {
  replica *r = ctx;
  mx_status status = mx_optimizer_zero_grad(r->opt, true);
  mx_scope *s = mx_scope_begin();
  mx_tensor *loss = NULL;
  MX_AUTOCAST(MX_CUDA, MX_F16, true, true) {
    mx_tensor *h = mx_relu(mx_add(mx_matmul(r->x, r->w1), r->b1));
    loss = mx_mse_loss(mx_add(mx_matmul(h, r->w2), r->b2), r->y, MX_REDUCTION_MEAN);
  }
  if (status == MX_OK && !loss) status = mx_last_status();
  if (status == MX_OK) status = mx_backward(mx_scaler_scale(r->scaler, loss), NULL, false);
  if (status == MX_OK) status = mx_scaler_step(r->scaler, r->opt, NULL);
  if (status == MX_OK) status = mx_scaler_update(r->scaler);
  if (status == MX_OK) {
    mx_release(r->loss);
    r->loss = mx_keep(mx_detach(loss));
  }
  mx_scope_end(s);
  return status;
}

static float *params_on_host(const replica *r, size_t *n) {
  const mx_tensor *ps[] = {r->w1, r->b1, r->w2, r->b2};
  size_t total = 0;
  for (int i = 0; i < 4; i++) total += (size_t)mx_numel(ps[i]);
  float *all = malloc(total * sizeof *all);
  size_t at = 0;
  for (int i = 0; i < 4; i++) {
    size_t count = (size_t)mx_numel(ps[i]);
    cr_assert_eq(mx_to_host(ps[i], all + at, count * sizeof *all), MX_OK, "%s", mx_last_error());
    at += count;
  }
  *n = total;
  return all;
}

/* Parameters within 1e-5 relative (1e-7 absolute near zero): the same
 * kernels run in the same order on the same data, but cuBLAS may pick
 * another algorithm for a captured product, so bits may differ. */
static void expect_params_close(const replica *eager, const replica *graphed, const char *when) {
  size_t n, m;
  float *a = params_on_host(eager, &n), *b = params_on_host(graphed, &m);
  cr_assert_eq(n, m);
  for (size_t i = 0; i < n; i++)
    cr_expect(fabsf(a[i] - b[i]) <= fmaxf(1e-5f * fmaxf(fabsf(a[i]), fabsf(b[i])), 1e-7f),
              "%s: parameter element %zu: eager %.9g, graph %.9g", when, i, a[i], b[i]);
  free(a), free(b);
}

Test(gpu_graph, replays_match_eager_steps_through_an_overflow) {
  require_gpu();
  replica eager, graphed;
  make_replica(&eager);
  make_replica(&graphed);

  /* the warm-up steps are real steps, on batch 0 */
  load_batch(&eager, 0);
  for (int i = 0; i < WARMUP; i++) cr_assert_eq(mlp_step(&eager), MX_OK, "%s", mx_last_error());
  load_batch(&graphed, 0);
  mx_cuda_graph *g = mx_cuda_graph_capture(mlp_step, &graphed, WARMUP);
  cr_assert_not_null(g, "%s", mx_last_error());
  cr_expect_not(mx_cuda_graph_capturing());
  expect_params_close(&eager, &graphed, "after the warm-up (the capture itself runs nothing)");

  double init_scale = INIT_SCALE;
  for (int i = 1; i <= REPLAYS; i++) {
    size_t n;
    float *before = i == OVERFLOW_AT ? params_on_host(&graphed, &n) : NULL;
    load_batch(&eager, i);
    cr_assert_eq(mlp_step(&eager), MX_OK, "%s", mx_last_error());
    load_batch(&graphed, i);
    cr_assert_eq(mx_cuda_graph_replay(g), MX_OK, "%s", mx_last_error());
    char when[64];
    snprintf(when, sizeof when, "after replay %d", i);
    expect_params_close(&eager, &graphed, when);
    if (before) { /* skipped on the device: not one parameter moved, and the scale halved */
      size_t m;
      float *after = params_on_host(&graphed, &m);
      cr_expect_eq(memcmp(before, after, n * sizeof *after), 0, "the overflowing step changed the parameters");
      free(before), free(after);
    }
    double want = i < OVERFLOW_AT ? init_scale : init_scale / 2;
    cr_expect_eq(mx_scaler_get_scale(graphed.scaler), want, "%s: scale %g, expected %g", when,
                 mx_scaler_get_scale(graphed.scaler), want);
    cr_expect_eq(mx_scaler_get_scale(eager.scaler), want);
    if (i != OVERFLOW_AT) { /* the static loss output holds this replay's loss */
      double a = mx_item(eager.loss), b = mx_item(graphed.loss);
      cr_expect(fabs(a - b) <= 1e-5 * fabs(a), "%s: loss eager %.9g, graph %.9g", when, a, b);
    }
  }
  mx_scaler_stats st = mx_scaler_stats_get(graphed.scaler);
  cr_expect_eq(st.skipped, 1, "skipped steps: %lld", (long long)st.skipped);
  cr_expect_eq(st.updates, WARMUP + REPLAYS);

  mx_cuda_graph_free(g);
  mx_clear_error();
  cr_expect_eq(mx_cuda_graph_replay(g), MX_STATE_ERROR, "a freed graph is refused");
  cr_expect_str_eq(mx_last_error(),
                   "mx_cuda_graph_replay: the graph was freed (or was not made by mx_cuda_graph_capture)");
  free_replica(&eager);
  free_replica(&graphed);
}

/* A step that reads a value on the host cannot be captured. */
static mx_status reads_on_host(void *ctx) {
  replica *r = ctx;
  mx_status status = mlp_step(r);
  double v = status == MX_OK ? mx_item(r->loss) : NAN;
  return isnan(v) ? mx_last_status() : MX_OK;
}

Test(gpu_graph, a_host_read_in_the_step_fails_the_capture_naming_it) {
  require_gpu();
  replica r;
  make_replica(&r);
  load_batch(&r, 0);
  mx_clear_error();
  cr_assert_null(mx_cuda_graph_capture(reads_on_host, &r, 1));
  cr_expect_eq(mx_last_status(), MX_STATE_ERROR, "%s", mx_last_error());
  cr_expect_not_null(strstr(mx_last_error(), "mx_cuda_graph_capture: the step failed while it was captured: "),
                     "%s", mx_last_error());
  /* mx_item converts to float64 on the device, then copies those 8 bytes */
  cr_expect_not_null(strstr(mx_last_error(), "cuda: copying from the device to the host (8 bytes) while a CUDA graph "
                                             "is being captured: a graph cannot hold"), "%s", mx_last_error());
  cr_expect_not(mx_cuda_graph_capturing());
  /* the stream left capture mode: eager work runs again */
  cr_expect_eq(mlp_step(&r), MX_OK, "%s", mx_last_error());
  cr_expect(isfinite(mx_item(r.loss)), "%s", mx_last_error());
  free_replica(&r);
}

static mx_status cpu_only(void *ctx) {
  (void)ctx;
  mx_tensor *t = mx_ones(MX_SHAPE(4), MX_F32, MX_CPU);
  mx_release(t);
  return t ? MX_OK : mx_last_status();
}

Test(gpu_graph, a_step_without_cuda_work_is_refused) {
  require_gpu();
  mx_clear_error();
  cr_assert_null(mx_cuda_graph_capture(cpu_only, NULL, 0));
  cr_expect_str_eq(mx_last_error(), "mx_cuda_graph_capture: the captured step launched no CUDA work (are its tensors "
                                    "on the CPU?): a CUDA graph replays work on CUDA tensors only");
}

/* A convolution as a step's first CUDA work (no warm-up): cuDNN's handle and the case's plan are made inside the
 * capture, the handle in relaxed capture mode (kernels/cuda/conv_cudnn.cu). Each replay then convolves whatever the
 * static input holds, as an eager call does. In a process of its own (Criterion's), this is cuDNN's first call. */
typedef struct {
  mx_tensor *x, *w, *y; /* static: y receives conv2d(x, w) */
} conv_step_ctx;

static mx_status conv_step(void *ctx) {
  conv_step_ctx *c = ctx;
  mx_scope *s = mx_scope_begin();
  mx_tensor *y = mx_conv2d(c->x, c->w, NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
  mx_status status = y ? mx_copy_(c->y, y) : mx_last_status();
  mx_scope_end(s);
  return status;
}

Test(gpu_graph, a_convolution_captured_without_warm_up_replays_on_new_inputs) {
  require_gpu();
  mx_generator *gen = mx_generator_new(77);
  mx_scope *s = mx_scope_begin();
  conv_step_ctx c = {mx_keep(mx_zeros(MX_SHAPE(2, 3, 8, 8), MX_F32, MX_CUDA)),
                     mx_keep(mx_to_device(mx_randn(MX_SHAPE(4, 3, 3, 3), MX_F32, MX_CPU, gen), MX_CUDA)),
                     mx_keep(mx_zeros(MX_SHAPE(2, 4, 8, 8), MX_F32, MX_CUDA))};
  mx_scope_end(s);
  cr_assert(c.x && c.w && c.y, "%s", mx_last_error());
  mx_cuda_graph *g = mx_cuda_graph_capture(conv_step, &c, 0);
  cr_assert_not_null(g, "%s", mx_last_error());
  for (int i = 0; i < 2; i++) {
    s = mx_scope_begin();
    mx_tensor *x = mx_randn(MX_SHAPE(2, 3, 8, 8), MX_F32, MX_CPU, gen);
    cr_assert_eq(mx_copy_(c.x, x), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_cuda_graph_replay(g), MX_OK, "%s", mx_last_error());
    mx_tensor *want = mx_conv2d(x, mx_to_device(c.w, MX_CPU), NULL, MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1);
    char why[256]; /* float32 sums of 27 terms of about 1, in other orders: 1e-5 of the larger of the values and 1 */
    size_t n = differences(want, c.y, 1e-5, 1.0, why, sizeof why);
    cr_expect_eq(n, 0, "replay %d against the CPU: %zu elements differ; the first, %s", i, n, why);
    mx_scope_end(s);
  }
  mx_cuda_graph_free(g);
  mx_generator_free(gen);
  mx_release(c.x), mx_release(c.w), mx_release(c.y);
}
