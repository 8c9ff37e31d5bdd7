/* Kernel benchmarks, mixgrad's side (bench/kernels.py is PyTorch's; bench/run_kernels.py runs both in
 * turns and writes the tables): GEMM next to oneDNN's own matmul (the ceiling), convolutions forward and
 * backward, elementwise ops and casts next to memcpy (the copy bandwidth), softmax and cross-entropy, the
 * GradScaler's unscale and the optimizer steps, the dispatcher's cost per op on tiny tensors, and 2x2 max
 * pooling forward and backward.
 *
 *     kernels [--quick] [--only GROUP,...]     groups: gemm conv elementwise softmax amp dispatch pool
 *
 * One JSON line per measurement on stdout, the value from the median time:
 *
 *     {"impl":"mixgrad","bench":"matmul","shape":"1024x1024x1024","dtype":"bf16","threads":2,
 *      "times_ms":[...],"metric":"GFLOP/s","work":2.14748e+09,"value":123.4}
 *
 * work is what value counts (FLOPs, bytes read + written, or ops): GFLOP/s and GB/s are work / median
 * time, ns/op is median time / work. The first line ({"meta":...}) describes the build. Every shape and
 * repeat rule here is mirrored in kernels.py, so the two sides measure the same things. */
#include <mixgrad.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "mx_config.h"

#if MX_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#endif
#if MX_HAVE_OPENMP
#include <omp.h>
#endif

#ifndef KBENCH_BUILD
#define KBENCH_BUILD "unknown"
#endif

enum {
  GROUP_GEMM = 1,
  GROUP_CONV = 2,
  GROUP_ELEMENTWISE = 4,
  GROUP_SOFTMAX = 8,
  GROUP_AMP = 16,
  GROUP_DISPATCH = 32,
  GROUP_POOL = 64
};
static const char *const group_names[] = {"gemm", "conv", "elementwise", "softmax", "amp", "dispatch", "pool"};
enum { GROUP_COUNT = sizeof group_names / sizeof group_names[0] };

#define MAX_REPEATS 50

/* Repeats follow a time budget, so a 0.1 ms op gets many samples and a 30 s one a few: after the
 * warmup, as many as fit in budget_ms at the warmup's pace, within [min_repeats, max_repeats]. */
static struct {
  bool quick;
  unsigned groups;
  double budget_ms;
  int min_repeats, max_repeats;
} cfg = {false, ~0u, 1000, 3, MAX_REPEATS};

/* --- failing loudly: a benchmark that measured an error must not print a number ----------------- */

static void die(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fputs("kernels: ", stderr);
  vfprintf(stderr, fmt, ap);
  fputc('\n', stderr);
  va_end(ap);
  exit(1);
}

static mx_tensor *need(mx_tensor *t) {
  if (!t) die("%s", mx_last_error());
  return t;
}

static void ok(mx_status status) {
  if (status != MX_OK) die("%s", mx_last_error());
}

/* --- measuring and reporting ---------------------------------------------------------------------- */

/* What a measurement is called and what its value counts. */
typedef struct {
  const char *impl, *bench, *dtype, *metric, *mode; /* mode: NULL for none */
  char shape[96];
  double work; /* FLOPs, bytes or ops per timed call, by metric */
} result_id;

/* setup (may be NULL) runs untimed before each call of body. */
typedef struct {
  void (*setup)(void *ctx);
  void (*body)(void *ctx);
  void *ctx;
} workload;

static double timed_call(workload w) {
  if (w.setup) w.setup(w.ctx);
  double t0 = bench_now_ms();
  w.body(w.ctx);
  return bench_now_ms() - t0;
}

static double value_of(const result_id *id, double median_ms) {
  if (!strcmp(id->metric, "ns/op")) return median_ms * 1e6 / id->work;
  return id->work / (median_ms * 1e-3) / 1e9; /* GFLOP/s, GB/s */
}

static void emit(const result_id *id, const double *times, int n) {
  printf("{\"impl\":\"%s\",\"bench\":\"%s\",\"shape\":\"%s\",\"dtype\":\"%s\",", id->impl, id->bench, id->shape,
         id->dtype);
  if (id->mode) printf("\"mode\":\"%s\",", id->mode);
  printf("\"threads\":%d,", bench_threads());
  bench_json_doubles(stdout, "times_ms", times, n);
  printf(",\"metric\":\"%s\",\"work\":%.6g,\"value\":%.6g}\n", id->metric, id->work,
         value_of(id, bench_median(times, n)));
  fflush(stdout); /* a later crash keeps the lines before it */
}

/* The repeat rule: as many calls as fit in the budget at a pace of `last` ms each. */
static int repeats_at(double last) {
  int repeats = last > 0 ? (int)(cfg.budget_ms / last) : cfg.max_repeats;
  return repeats < cfg.min_repeats ? cfg.min_repeats : repeats > cfg.max_repeats ? cfg.max_repeats : repeats;
}

static void measure(const result_id *id, workload w, int warmup) {
  double last = 0;
  for (int i = 0; i < warmup; i++) last = timed_call(w);
  int repeats = repeats_at(last);
  double times[MAX_REPEATS];
  for (int i = 0; i < repeats; i++) times[i] = timed_call(w);
  emit(id, times, repeats);
}

#if MX_HAVE_DNNL /* the one pair: a GEMM beside oneDNN's */
/* Two workloads compared with each other (mixgrad's GEMM and its ceiling), measured call by call in
 * turns, so a slow stretch of the machine slows both alike; which of the two goes first alternates, so
 * neither always runs in the cache the other left. Each gets the repeats the slower would get alone. */
static void measure_pair(const result_id *ids, const workload *w, int warmup) {
  double last[2] = {0, 0};
  for (int i = 0; i < warmup; i++)
    for (int k = 0; k < 2; k++) last[k] = timed_call(w[k]);
  int repeats = repeats_at(last[0] > last[1] ? last[0] : last[1]);
  double times[2][MAX_REPEATS];
  for (int i = 0; i < repeats; i++)
    for (int k = 0; k < 2; k++) {
      int which = (i + k) % 2;
      times[which][i] = timed_call(w[which]);
    }
  for (int k = 0; k < 2; k++) emit(&ids[k], times[k], repeats);
}
#endif

static const char *dtype_label(mx_dtype dtype) { return dtype == MX_BF16 ? "bf16" : dtype == MX_F16 ? "f16" : "f32"; }

static mx_tensor *randn_as(mx_shape shape, mx_dtype dtype) {
  mx_tensor *t = need(mx_randn(shape, MX_F32, MX_CPU, NULL));
  return dtype == MX_F32 ? t : need(mx_to_dtype(t, dtype));
}

/* --- one op per call, in a scope that frees its result (allocation included, as in PyTorch) ------ */

typedef struct {
  mx_tensor *(*unary)(const mx_tensor *);
  mx_tensor *(*binary)(const mx_tensor *, const mx_tensor *);
  mx_status (*unary_)(mx_tensor *);                    /* in place */
  mx_status (*binary_)(mx_tensor *, const mx_tensor *); /* in place */
  mx_tensor *a, *b;
  const mx_tensor *reset_from; /* in place: a is set back to this before each call (untimed) */
} op_ctx;

static void op_setup(void *p) {
  const op_ctx *c = p;
  ok(mx_copy_(c->a, c->reset_from));
}

static void op_body(void *p) {
  const op_ctx *c = p;
  mx_scope *s = mx_scope_begin();
  if (c->unary) need(c->unary(c->a));
  if (c->binary) need(c->binary(c->a, c->b));
  if (c->unary_) ok(c->unary_(c->a));
  if (c->binary_) ok(c->binary_(c->a, c->b));
  mx_scope_end(s);
}

static void measure_op(const result_id *id, op_ctx c, int warmup) {
  measure(id, (workload){c.reset_from ? op_setup : NULL, op_body, &c}, warmup);
}

/* --- 1. GEMM ------------------------------------------------------------------------------------ */

#if MX_HAVE_DNNL
/* oneDNN's matmul called directly: the ceiling for mixgrad's GEMM. Plain row-major operands, as mixgrad
 * passes contiguous tensors, the output in the inputs' dtype (bf16 accumulates in f32 inside oneDNN, as
 * mixgrad's bf16 matmul does), and the library's own scratchpad. */
typedef struct {
  dnnl_stream_t stream;
  dnnl_primitive_t primitive;
  dnnl_memory_t mem[3]; /* a, b, out */
} onednn_matmul;

static dnnl_engine_t onednn_engine(void) {
  static dnnl_engine_t engine;
  if (!engine && dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) die("oneDNN: no CPU engine");
  return engine;
}

static void onednn_ok(dnnl_status_t s, const char *what) {
  if (s != dnnl_success) die("oneDNN: %s failed (status %d)", what, (int)s);
}

static onednn_matmul onednn_matmul_new(int64_t n, mx_dtype dtype, void *const data[3]) {
  dnnl_engine_t engine = onednn_engine();
  dnnl_data_type_t dt = dtype == MX_BF16 ? dnnl_bf16 : dnnl_f32;
  dnnl_dims_t dims = {n, n};
  onednn_matmul g;
  dnnl_primitive_desc_t pd;
#if DNNL_VERSION_MAJOR >= 3
  dnnl_memory_desc_t md;
  onednn_ok(dnnl_memory_desc_create_with_tag(&md, 2, dims, dt, dnnl_ab), "describing an operand");
  onednn_ok(dnnl_matmul_primitive_desc_create(&pd, engine, md, md, NULL, md, NULL), "the matmul descriptor");
  for (int r = 0; r < 3; r++) onednn_ok(dnnl_memory_create(&g.mem[r], md, engine, data[r]), "wrapping an operand");
  dnnl_memory_desc_destroy(md);
#else
  dnnl_memory_desc_t md;
  dnnl_matmul_desc_t desc;
  onednn_ok(dnnl_memory_desc_init_by_tag(&md, 2, dims, dt, dnnl_ab), "describing an operand");
  onednn_ok(dnnl_matmul_desc_init(&desc, &md, &md, NULL, &md), "the matmul descriptor");
  onednn_ok(dnnl_primitive_desc_create(&pd, &desc, NULL, engine, NULL), "the matmul primitive descriptor");
  for (int r = 0; r < 3; r++) onednn_ok(dnnl_memory_create(&g.mem[r], &md, engine, data[r]), "wrapping an operand");
#endif
  onednn_ok(dnnl_primitive_create(&g.primitive, pd), "creating the matmul");
  dnnl_primitive_desc_destroy(pd);
  onednn_ok(dnnl_stream_create(&g.stream, engine, dnnl_stream_default_flags), "the stream");
  return g;
}

static void onednn_matmul_free(onednn_matmul *g) {
  dnnl_stream_destroy(g->stream);
  dnnl_primitive_destroy(g->primitive);
  for (int r = 0; r < 3; r++) dnnl_memory_destroy(g->mem[r]);
}

static void onednn_matmul_body(void *p) {
  onednn_matmul *g = p;
  dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, g->mem[0]}, {DNNL_ARG_WEIGHTS, g->mem[1]}, {DNNL_ARG_DST, g->mem[2]}};
  onednn_ok(dnnl_primitive_execute(g->primitive, g->stream, 3, args), "executing the matmul");
  onednn_ok(dnnl_stream_wait(g->stream), "waiting");
}

/* Whether oneDNN runs bf16 on this CPU's own bf16 dot products (AVX512_BF16 or AMX), the rule mixgrad's
 * matmul follows (kernels/cpu/dnnl_common.c); without them mixgrad emulates bf16 as it does f16. */
static bool onednn_native_bf16(void) {
  dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
  return (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
}

/* mixgrad's matmul on a and b next to oneDNN's on the same values: on a and b themselves, or, for what
 * mixgrad emulates (f16, and bf16 without bf16 dot products), on their f32 copies, the ceiling the
 * emulation is held to. That ceiling is measured again beside the 16-bit calls and reported under their
 * label. */
static void gemm_against_ceiling(result_id id, int64_t n, mx_dtype dtype, mx_tensor *a, mx_tensor *b) {
  op_ctx mine = {.binary = mx_matmul, .a = a, .b = b};
  bool emulated = dtype == MX_F16 || (dtype == MX_BF16 && !onednn_native_bf16());
  mx_dtype ceiling_dtype = emulated ? MX_F32 : dtype;
  mx_tensor *ca = need(mx_to_dtype(a, ceiling_dtype)), *cb = need(mx_to_dtype(b, ceiling_dtype));
  mx_tensor *out = need(mx_empty(MX_SHAPE(n, n), ceiling_dtype, MX_CPU));
  void *data[3] = {mx_data_ptr(ca), mx_data_ptr(cb), mx_data_ptr(out)};
  onednn_matmul g = onednn_matmul_new(n, ceiling_dtype, data);
  result_id ids[2] = {id, id};
  ids[1].impl = "onednn";
  workload w[2] = {{NULL, op_body, &mine}, {NULL, onednn_matmul_body, &g}};
  measure_pair(ids, w, 1);
  onednn_matmul_free(&g);
}
#endif

static void bench_gemm(void) {
  static const int64_t full[] = {256, 512, 1024, 2048, 4096}, quick[] = {128, 256};
  const int64_t *sizes = cfg.quick ? quick : full;
  int count = cfg.quick ? 2 : 5;
  static const mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_F16};
  for (int i = 0; i < count; i++) {
    int64_t n = sizes[i];
    for (int d = 0; d < 3; d++) {
      mx_scope *s = mx_scope_begin();
      mx_tensor *a = randn_as(MX_SHAPE(n, n), dtypes[d]), *b = randn_as(MX_SHAPE(n, n), dtypes[d]);
      result_id id = {"mixgrad", "matmul", dtype_label(dtypes[d]), "GFLOP/s", NULL, "", 2.0 * n * n * n};
      snprintf(id.shape, sizeof id.shape, "%lldx%lldx%lld", (long long)n, (long long)n, (long long)n);
#if MX_HAVE_DNNL
      gemm_against_ceiling(id, n, dtypes[d], a, b);
#else
      measure_op(&id, (op_ctx){.binary = mx_matmul, .a = a, .b = b}, 1);
#endif
      mx_scope_end(s);
    }
  }
}

/* --- 2. convolution ------------------------------------------------------------------------------- */

/* The demos' layers: 3x3, stride 1, padding 1, no bias. A network's first layer (its input is data) gets
 * no input gradient in training, so its backward computes dW only; the others compute dX and dW. */
typedef struct {
  const char *model;
  int64_t n, c_in, hw, c_out;
  bool input_grad;
} conv_layer;

static const conv_layer conv_layers[] = {
    {"mnist", 128, 1, 28, 32, false},   {"mnist", 128, 32, 14, 64, true},   {"resnet9", 64, 3, 32, 64, false},
    {"resnet9", 64, 64, 32, 128, true}, {"resnet9", 64, 128, 16, 128, true}, {"resnet9", 64, 256, 8, 512, true},
};

typedef struct {
  mx_tensor *x, *w, *gy;
  bool backward;
} conv_ctx;

static void conv_setup(void *p) {
  conv_ctx *c = p;
  mx_zero_grad(c->x); /* set to none: every backward writes fresh gradients */
  mx_zero_grad(c->w);
}

static void conv_body(void *p) {
  const conv_ctx *c = p;
  mx_scope *s = mx_scope_begin();
  mx_tensor *y = need(mx_conv2d(c->x, c->w, NULL, MX_SHAPE(1), MX_SHAPE(1), MX_DEFAULT, 1));
  if (c->backward) ok(mx_backward(y, c->gy, false));
  mx_scope_end(s);
}

static void bench_conv_layer(const conv_layer *l, mx_dtype dtype) {
  int64_t n = cfg.quick ? 8 : l->n; /* quick: the same layers on a small batch */
  mx_scope *s = mx_scope_begin();
  conv_ctx c = {randn_as(MX_SHAPE(n, l->c_in, l->hw, l->hw), dtype), randn_as(MX_SHAPE(l->c_out, l->c_in, 3, 3), dtype),
                need(mx_ones(MX_SHAPE(n, l->c_out, l->hw, l->hw), dtype, MX_CPU)), false};
  double flops = 2.0 * n * l->c_out * l->hw * l->hw * l->c_in * 9;
  result_id id = {"mixgrad", "conv2d_fwd", dtype_label(dtype), "GFLOP/s", NULL, "", flops};
  snprintf(id.shape, sizeof id.shape, "%s %lldx%lldx%lldx%lld->%lld", l->model, (long long)n, (long long)l->c_in,
           (long long)l->hw, (long long)l->hw, (long long)l->c_out);
  measure(&id, (workload){NULL, conv_body, &c}, 2);

  ok(mx_set_requires_grad(c.w, true));
  if (l->input_grad) ok(mx_set_requires_grad(c.x, true));
  c.backward = true;
  id.bench = "conv2d_fwdbwd";
  id.work = flops * (l->input_grad ? 3 : 2); /* forward, dW, and dX when wanted: each as many FLOPs */
  measure(&id, (workload){conv_setup, conv_body, &c}, 2);
  mx_scope_end(s);
}

static void bench_conv(void) {
  for (size_t i = 0; i < sizeof conv_layers / sizeof conv_layers[0]; i++) {
    bench_conv_layer(&conv_layers[i], MX_F32);
    bench_conv_layer(&conv_layers[i], MX_BF16);
  }
}

/* --- 3. elementwise ops and casts, next to memcpy ------------------------------------------------- */

/* The copy bandwidth: memcpy between buffers touched beforehand (no page faults), on one thread and
 * split over the OpenMP threads the kernels use; the tables take the faster as the baseline. */
typedef struct {
  char *dst;
  const char *src;
  size_t bytes;
  bool threaded;
} copy_ctx;

static void copy_body(void *p) {
  const copy_ctx *c = p;
  if (!c->threaded) {
    memcpy(c->dst, c->src, c->bytes);
    return;
  }
#if MX_HAVE_OPENMP
#pragma omp parallel
  {
    size_t parts = (size_t)omp_get_num_threads(), part = (size_t)omp_get_thread_num();
    size_t chunk = (c->bytes / parts + 63) / 64 * 64, lo = part * chunk;
    if (lo < c->bytes) memcpy(c->dst + lo, c->src + lo, chunk < c->bytes - lo ? chunk : c->bytes - lo);
  }
#else
  memcpy(c->dst, c->src, c->bytes);
#endif
}

static void bench_memcpy(int64_t n) {
  size_t bytes = (size_t)n * sizeof(float);
  char *src = malloc(bytes), *dst = malloc(bytes);
  if (!src || !dst) die("out of memory for the memcpy baseline");
  memset(src, 1, bytes);
  memset(dst, 0, bytes);
  result_id id = {"baseline", "memcpy_1t", "f32", "GB/s", NULL, "", 2.0 * (double)bytes};
  snprintf(id.shape, sizeof id.shape, "%lld", (long long)n);
  copy_ctx c = {dst, src, bytes, false};
  measure(&id, (workload){NULL, copy_body, &c}, 2);
  id.bench = "memcpy";
  c.threaded = true;
  measure(&id, (workload){NULL, copy_body, &c}, 2);
  free(src);
  free(dst);
}

static mx_tensor *to_bf16(const mx_tensor *x) { return mx_to_dtype(x, MX_BF16); }
static mx_tensor *to_f16(const mx_tensor *x) { return mx_to_dtype(x, MX_F16); }
static mx_tensor *to_f32(const mx_tensor *x) { return mx_to_dtype(x, MX_F32); }

static void bench_casts(int64_t n, mx_tensor *x32) {
  mx_scope *s = mx_scope_begin();
  const struct {
    const char *label;
    mx_tensor *from;
    mx_tensor *(*cast)(const mx_tensor *);
    double bytes_per_element; /* read + written */
  } casts[] = {
      {"f32->bf16", x32, to_bf16, 6},
      {"f32->f16", x32, to_f16, 6},
      {"bf16->f32", need(mx_to_dtype(x32, MX_BF16)), to_f32, 6},
      {"f16->f32", need(mx_to_dtype(x32, MX_F16)), to_f32, 6},
  };
  for (size_t i = 0; i < sizeof casts / sizeof casts[0]; i++) {
    result_id id = {"mixgrad", "cast", casts[i].label, "GB/s", NULL, "", casts[i].bytes_per_element * (double)n};
    snprintf(id.shape, sizeof id.shape, "%lld", (long long)n);
    measure_op(&id, (op_ctx){.unary = casts[i].cast, .a = casts[i].from}, 2);
  }
  mx_scope_end(s);
}

/* add, mul, relu (a fresh output each call: the allocation and its page faults count, as in
 * PyTorch), their in-place forms (no output to allocate; each call starts again from the same random
 * values, so relu_ keeps meeting negatives), and clone / copy_ (mixgrad's own copies, with and without
 * a fresh output). */
static void bench_elementwise_ops(int64_t n, mx_dtype dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = randn_as(MX_SHAPE(n), dtype), *b = randn_as(MX_SHAPE(n), dtype), *a0 = need(mx_clone(a));
  double size = dtype == MX_F32 ? 4 : 2;
  const struct {
    const char *bench;
    op_ctx op;
    int tensors; /* read + written */
  } ops[] = {
      {"add", {.binary = mx_add}, 3},     {"mul", {.binary = mx_mul}, 3},  {"relu", {.unary = mx_relu}, 2},
      {"add_", {.binary_ = mx_add_, .reset_from = a0}, 3}, {"relu_", {.unary_ = mx_relu_, .reset_from = a0}, 2},
      {"clone", {.unary = mx_clone}, 2},
      {"copy_", {.binary_ = mx_copy_}, 2},
  };
  for (size_t i = 0; i < sizeof ops / sizeof ops[0]; i++) {
    result_id id = {"mixgrad", ops[i].bench, dtype_label(dtype), "GB/s", NULL, "", ops[i].tensors * size * (double)n};
    snprintf(id.shape, sizeof id.shape, "%lld", (long long)n);
    op_ctx c = ops[i].op;
    c.a = a, c.b = b;
    measure_op(&id, c, 2);
  }
  mx_scope_end(s);
}

static void bench_elementwise(void) {
  int64_t n = cfg.quick ? 1 << 20 : 16 << 20;
  bench_memcpy(n);
  bench_elementwise_ops(n, MX_F32);
  bench_elementwise_ops(n, MX_BF16);
  bench_elementwise_ops(n, MX_F16);
  mx_scope *s = mx_scope_begin();
  bench_casts(n, randn_as(MX_SHAPE(n), MX_F32));
  mx_scope_end(s);
}

/* --- 4. softmax and cross-entropy ------------------------------------------------------------------ */

static mx_tensor *softmax_rows(const mx_tensor *x) { return mx_softmax(x, 1); }
static mx_tensor *log_softmax_rows(const mx_tensor *x) { return mx_log_softmax(x, 1); }
static mx_tensor *cross_entropy_mean(const mx_tensor *logits, const mx_tensor *target) {
  return mx_cross_entropy(logits, target, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.0);
}

static void bench_softmax(void) {
  int64_t rows = cfg.quick ? 256 : 4096, classes = 1000;
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn_as(MX_SHAPE(rows, classes), MX_F32);
  mx_tensor *target = need(mx_randint(0, classes, MX_SHAPE(rows), MX_I64, MX_CPU, NULL));
  double bytes = 4.0 * rows * classes;
  result_id id = {"mixgrad", "softmax", "f32", "GB/s", NULL, "", 2 * bytes}; /* read x, write the result */
  snprintf(id.shape, sizeof id.shape, "%lldx%lld", (long long)rows, (long long)classes);
  measure_op(&id, (op_ctx){.unary = softmax_rows, .a = x}, 2);
  id.bench = "log_softmax";
  measure_op(&id, (op_ctx){.unary = log_softmax_rows, .a = x}, 2);
  id.bench = "cross_entropy";
  id.work = bytes + 8.0 * rows; /* the least it must touch: the logits and the targets, once */
  measure_op(&id, (op_ctx){.binary = cross_entropy_mean, .a = x, .b = target}, 2);
  mx_scope_end(s);
}

/* --- 5. the GradScaler's unscale and the optimizer steps ------------------------------------------- */

/* Gradients of ~16M f32 values over 4 tensors of unequal sizes (quick: 1M). */
#define AMP_TENSORS 4

typedef struct {
  mx_scaler *scaler;
  mx_optimizer *opt;
  bool checked;
} unscale_ctx;

/* One unscale per update, as the scaler demands; the update (a one-element kernel) is not timed. */
static void unscale_setup(void *p) {
  unscale_ctx *c = p;
  if (c->checked) ok(mx_scaler_update(c->scaler));
  c->checked = false;
}

static void unscale_body(void *p) {
  unscale_ctx *c = p;
  ok(mx_scaler_unscale(c->scaler, c->opt));
  c->checked = true;
}

static void step_body(void *p) { ok(mx_optimizer_step(p)); }

/* A scale of 1 that never grows keeps the gradients' values (no underflow into slow subnormals); the
 * kernel does the same work whatever the scale. */
static mx_scaler *unit_scaler(void) {
  mx_scaler_opts o = mx_scaler_defaults();
  o.init_scale = 1.0;
  o.growth_interval = 1 << 30;
  mx_scaler *scaler = mx_scaler_new(&o);
  if (!scaler) die("%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  need(mx_scaler_scale(scaler, need(mx_scalar(1.0, MX_F32, MX_CPU)))); /* sets the scale up */
  mx_scope_end(s);
  return scaler;
}

static void bench_amp(void) {
  const int64_t unit = cfg.quick ? 64 << 10 : 1 << 20, parts[AMP_TENSORS] = {8, 4, 3, 1};
  mx_scope *s = mx_scope_begin();
  mx_tensor *params[AMP_TENSORS], *loss = NULL;
  int64_t n = 0;
  for (int i = 0; i < AMP_TENSORS; i++) {
    params[i] = need(mx_full(MX_SHAPE(parts[i] * unit), 0.01, MX_F32, MX_CPU));
    ok(mx_set_requires_grad(params[i], true));
    mx_tensor *sum = need(mx_sum(params[i], MX_ALL_DIMS, false));
    loss = loss ? need(mx_add(loss, sum)) : sum;
    n += parts[i] * unit;
  }
  ok(mx_backward(loss, NULL, false)); /* gradients of ones, kept for every step */

  mx_sgd_opts so = mx_sgd_defaults();
  so.momentum = 0.9;
  mx_optimizer *sgd = mx_sgd_new(AMP_TENSORS, params, &so), *adam = mx_adam_new(AMP_TENSORS, params, NULL);
  if (!sgd || !adam) die("%s", mx_last_error());
  unscale_ctx u = {unit_scaler(), sgd, false};

  /* Bytes each pass must touch, 4 per f32 value: unscale reads and writes the gradient (2 x 4n); SGD
   * with momentum reads the gradient and reads and writes the parameter and the momentum buffer (5 x 4n);
   * Adam reads the gradient and reads and writes the parameter, exp_avg and exp_avg_sq (7 x 4n). */
  result_id id = {"mixgrad", "unscale", "f32", "GB/s", NULL, "", 2 * 4.0 * n};
  snprintf(id.shape, sizeof id.shape, "%lld in %d tensors", (long long)n, AMP_TENSORS);
  measure(&id, (workload){unscale_setup, unscale_body, &u}, 2);
  id.bench = "sgd_momentum";
  id.work = 5 * 4.0 * n;
  measure(&id, (workload){NULL, step_body, sgd}, 2);
  id.bench = "adam";
  id.work = 7 * 4.0 * n;
  measure(&id, (workload){NULL, step_body, adam}, 2);

  mx_scaler_free(u.scaler);
  mx_optimizer_free(sgd);
  mx_optimizer_free(adam);
  mx_scope_end(s);
}

/* --- 6. the dispatcher's cost per op --------------------------------------------------------------- */

/* ops adds of two 4-element tensors, in scopes of OPS_PER_SCOPE (a training step's many ops in one
 * scope), so the time is the dispatcher, the allocation and the release of tiny results. */
#define OPS_PER_SCOPE 100

typedef struct {
  mx_tensor *a, *b;
  int ops;
  bool autocast;
} dispatch_ctx;

static void tiny_adds(const dispatch_ctx *c) {
  for (int i = 0; i < c->ops / OPS_PER_SCOPE; i++) {
    mx_scope *s = mx_scope_begin();
    for (int k = 0; k < OPS_PER_SCOPE; k++) need(mx_add(c->a, c->b));
    mx_scope_end(s);
  }
}

static void dispatch_body(void *p) {
  const dispatch_ctx *c = p;
  if (!c->autocast) {
    tiny_adds(c);
    return;
  }
  bool entered = false;
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    entered = true;
    tiny_adds(c);
  }
  if (!entered) die("%s", mx_last_error());
}

static void bench_dispatch(void) {
  int ops = cfg.quick ? 10000 : 100000;
  static const char *const modes[] = {"autocast=off,grad=off", "autocast=off,grad=on", "autocast=bf16,grad=off",
                                      "autocast=bf16,grad=on"};
  for (int m = 0; m < 4; m++) {
    mx_scope *s = mx_scope_begin();
    dispatch_ctx c = {need(mx_ones(MX_SHAPE(4), MX_F32, MX_CPU)), need(mx_ones(MX_SHAPE(4), MX_F32, MX_CPU)), ops,
                      m >= 2};
    if (m % 2) {
      ok(mx_set_requires_grad(c.a, true));
      ok(mx_set_requires_grad(c.b, true));
    }
    result_id id = {"mixgrad", "dispatch_add", "f32", "ns/op", modes[m], "4", ops};
    measure(&id, (workload){NULL, dispatch_body, &c}, 2);
    mx_scope_end(s);
  }
}

/* --- 7. max pooling ------------------------------------------------------------------------------- */

/* The CNN's two poolings, 2x2 windows with stride 2, in both layouts: the forward (values, and the indices
 * backward needs: mixgrad's uint8 offsets in the window, PyTorch's int64 positions) and the forward with
 * `backward` to dx. GB/s counts the values only, each once: x read and y written, and for the backward dy
 * read and dx written too (the indices are left out, their sizes differ). */
static const int64_t pool_shapes[][4] = {{128, 32, 28, 28}, {128, 64, 14, 14}};

typedef struct {
  mx_tensor *x, *gy;
  bool backward;
} pool_ctx;

static void pool_setup(void *p) { mx_zero_grad(((pool_ctx *)p)->x); }

static void pool_body(void *p) {
  const pool_ctx *c = p;
  mx_scope *s = mx_scope_begin();
  mx_tensor *y = need(mx_max_pool(c->x, 2, MX_DIMS(2), MX_DIMS(2), MX_DIMS(0)));
  if (c->backward) ok(mx_backward(y, c->gy, false));
  mx_scope_end(s);
}

static void bench_pool_case(const int64_t *shape, mx_dtype dtype, bool channels_last) {
  int64_t n = cfg.quick ? 8 : shape[0], c = shape[1], h = shape[2], w = shape[3];
  mx_scope *s = mx_scope_begin();
  pool_ctx ctx = {randn_as(MX_SHAPE(n, c, h, w), dtype), need(mx_ones(MX_SHAPE(n, c, h / 2, w / 2), dtype, MX_CPU)),
                  false};
  if (channels_last) ctx.x = need(mx_to_channels_last(ctx.x)), ctx.gy = need(mx_to_channels_last(ctx.gy));
  double size = dtype == MX_F32 ? 4 : 2, in_bytes = size * (double)(n * c * h * w), out_bytes = in_bytes / 4;
  result_id id = {"mixgrad", "max_pool2d_fwd", dtype_label(dtype), "GB/s", channels_last ? "channels_last" : "nchw",
                  "", in_bytes + out_bytes};
  snprintf(id.shape, sizeof id.shape, "%lldx%lldx%lldx%lld", (long long)n, (long long)c, (long long)h, (long long)w);
  measure(&id, (workload){NULL, pool_body, &ctx}, 2);

  ok(mx_set_requires_grad(ctx.x, true));
  ctx.backward = true;
  id.bench = "max_pool2d_fwdbwd";
  id.work = 2 * (in_bytes + out_bytes);
  measure(&id, (workload){pool_setup, pool_body, &ctx}, 2);
  mx_scope_end(s);
}

static void bench_pool(void) {
  for (size_t i = 0; i < sizeof pool_shapes / sizeof pool_shapes[0]; i++)
    for (int d = 0; d < 2; d++)
      for (int layout = 0; layout < 2; layout++) bench_pool_case(pool_shapes[i], d ? MX_BF16 : MX_F32, layout);
}

/* --- main ------------------------------------------------------------------------------------------- */

static unsigned parse_groups(const char *list) {
  unsigned groups = 0;
  char buf[256];
  snprintf(buf, sizeof buf, "%s", list);
  for (char *name = strtok(buf, ","); name; name = strtok(NULL, ",")) {
    unsigned before = groups;
    for (int g = 0; g < GROUP_COUNT; g++)
      if (!strcmp(name, group_names[g])) groups |= 1u << g;
    if (groups == before) die("unknown group '%s' (gemm conv elementwise softmax amp dispatch pool)", name);
  }
  return groups;
}

static const char *onednn_isa(void) {
#if MX_HAVE_DNNL
  switch (dnnl_get_effective_cpu_isa()) {
  case dnnl_cpu_isa_avx2: return "avx2";
  case dnnl_cpu_isa_avx512_core: return "avx512_core";
  case dnnl_cpu_isa_avx512_core_vnni: return "avx512_core_vnni";
  case dnnl_cpu_isa_avx512_core_bf16: return "avx512_core_bf16";
  case dnnl_cpu_isa_avx512_core_amx: return "avx512_core_amx";
  default: return "other";
  }
#else
  return "none";
#endif
}

/* The dtype of oneDNN's GEMM that bf16 is held to. */
static const char *bf16_ceiling(void) {
#if MX_HAVE_DNNL
  return onednn_native_bf16() ? "bf16" : "f32";
#else
  return "none";
#endif
}

int main(int argc, char **argv) {
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "--quick"))
      cfg.quick = true;
    else if (!strcmp(argv[i], "--only") && i + 1 < argc)
      cfg.groups = parse_groups(argv[++i]);
    else
      die("usage: kernels [--quick] [--only gemm,conv,elementwise,softmax,amp,dispatch,pool]");
  }
  if (cfg.quick) cfg.budget_ms = 50, cfg.min_repeats = 2, cfg.max_repeats = 5;
  mx_manual_seed(0);
  printf("{\"meta\":\"mixgrad\",\"version\":\"%s\",\"build\":\"%s\",\"threads\":%d,\"onednn\":%s,"
         "\"onednn_isa\":\"%s\",\"bf16_ceiling\":\"%s\",\"quick\":%s}\n",
         MX_VERSION, KBENCH_BUILD, bench_threads(), MX_HAVE_DNNL ? "true" : "false", onednn_isa(),
         bf16_ceiling(), cfg.quick ? "true" : "false");
  if (cfg.groups & GROUP_GEMM) bench_gemm();
  if (cfg.groups & GROUP_CONV) bench_conv();
  if (cfg.groups & GROUP_ELEMENTWISE) bench_elementwise();
  if (cfg.groups & GROUP_SOFTMAX) bench_softmax();
  if (cfg.groups & GROUP_AMP) bench_amp();
  if (cfg.groups & GROUP_DISPATCH) bench_dispatch();
  if (cfg.groups & GROUP_POOL) bench_pool();
  return 0;
}
