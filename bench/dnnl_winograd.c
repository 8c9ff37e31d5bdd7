/* oneDNN's float32 convolutions on this CPU, direct against Winograd
 * (dnnl_convolution_direct and dnnl_convolution_winograd, each in the
 * layouts oneDNN picks), beside bfloat16's direct (oneDNN has no bfloat16
 * Winograd), for the CNN's and ResNet-9's 3x3 stride-1 geometries, in each
 * direction: milliseconds a call, the median of 20 after 5 warm-ups, and
 * the implementations oneDNN chose (bench/NOTES.md, rounds 29 and 30: why
 * kernels/cpu/dnnl_conv.c takes Winograd where it does).
 *
 *     OMP_NUM_THREADS=2 build/bench/dnnl_winograd */
#include <oneapi/dnnl/dnnl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

enum { FORWARD, BACKWARD_DATA, BACKWARD_WEIGHTS };

static double now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

/* The primitive descriptor of one direction under alg (NULL when oneDNN has none). */
static dnnl_primitive_desc_t describe(dnnl_engine_t engine, int kind, dnnl_alg_kind_t alg, dnnl_data_type_t dt,
                                      const int64_t shape[4], int64_t out_channels) {
  dnnl_dims_t xd = {shape[0], shape[1], shape[2], shape[3]}, wd = {out_channels, shape[1], 3, 3},
              yd = {shape[0], out_channels, shape[2], shape[3]}, one = {1, 1};
  dnnl_memory_desc_t x, w, y;
  dnnl_memory_desc_init_by_tag(&x, 4, xd, dt, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&w, 4, wd, dt, dnnl_format_tag_any);
  dnnl_memory_desc_init_by_tag(&y, 4, yd, dt, dnnl_format_tag_any);
  dnnl_convolution_desc_t forward, d;
  dnnl_primitive_desc_t hint = NULL, pd = NULL;
  if (dnnl_convolution_forward_desc_init(&forward, dnnl_forward_training, alg, &x, &w, NULL, &y, one, one, one) !=
          dnnl_success ||
      dnnl_primitive_desc_create(&hint, &forward, NULL, engine, NULL) != dnnl_success)
    return NULL;
  if (kind == FORWARD) return hint;
  dnnl_status_t s = kind == BACKWARD_DATA
                        ? dnnl_convolution_backward_data_desc_init(&d, alg, &x, &w, &y, one, one, one)
                        : dnnl_convolution_backward_weights_desc_init(&d, alg, &x, &w, NULL, &y, one, one, one);
  if (s == dnnl_success && dnnl_primitive_desc_create(&pd, &d, NULL, engine, hint) != dnnl_success) pd = NULL;
  dnnl_primitive_desc_destroy(hint);
  return pd;
}

/* Milliseconds a call (median of 20 after 5 warm-ups), -1 when oneDNN has no such convolution or it fails;
 * impl: what oneDNN chose. */
static double time_convolution(dnnl_engine_t engine, dnnl_stream_t stream, int kind, dnnl_alg_kind_t alg,
                               dnnl_data_type_t dt, const int64_t shape[4], int64_t out_channels, char *impl,
                               size_t impl_size) {
  snprintf(impl, impl_size, "none");
  dnnl_primitive_desc_t pd = describe(engine, kind, alg, dt, shape, out_channels);
  if (!pd) return -1;
  const char *name = NULL;
  if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) == dnnl_success && name)
    snprintf(impl, impl_size, "%s", name);
  dnnl_query_t queries[4] = {kind == BACKWARD_DATA ? dnnl_query_diff_src_md : dnnl_query_src_md,
                             kind == BACKWARD_WEIGHTS ? dnnl_query_diff_weights_md : dnnl_query_weights_md,
                             kind == FORWARD ? dnnl_query_dst_md : dnnl_query_diff_dst_md, dnnl_query_scratchpad_md};
  int roles[4] = {kind == BACKWARD_DATA ? DNNL_ARG_DIFF_SRC : DNNL_ARG_SRC,
                  kind == BACKWARD_WEIGHTS ? DNNL_ARG_DIFF_WEIGHTS : DNNL_ARG_WEIGHTS,
                  kind == FORWARD ? DNNL_ARG_DST : DNNL_ARG_DIFF_DST, DNNL_ARG_SCRATCHPAD};
  dnnl_exec_arg_t args[4];
  dnnl_memory_t memory[4] = {NULL, NULL, NULL, NULL};
  bool ok = true;
  for (int i = 0; i < 4 && ok; i++) {
    const dnnl_memory_desc_t *md = dnnl_primitive_desc_query_md(pd, queries[i], 0);
    ok = md && dnnl_memory_create(&memory[i], md, engine, DNNL_MEMORY_ALLOCATE) == dnnl_success;
    args[i] = (dnnl_exec_arg_t){roles[i], memory[i]};
  }
  dnnl_primitive_t primitive = NULL;
  ok = ok && dnnl_primitive_create(&primitive, pd) == dnnl_success;
  double times[25], ms = -1;
  for (int i = 0; i < 25 && ok; i++) {
    double start = now_ms();
    ok = dnnl_primitive_execute(primitive, stream, 4, args) == dnnl_success && dnnl_stream_wait(stream) == dnnl_success;
    times[i] = now_ms() - start;
  }
  if (ok) {
    qsort(times + 5, 20, sizeof times[0], compare_doubles);
    ms = times[15];
  }
  if (primitive) dnnl_primitive_destroy(primitive);
  for (int i = 0; i < 4; i++)
    if (memory[i]) dnnl_memory_destroy(memory[i]);
  dnnl_primitive_desc_destroy(pd);
  return ms;
}

int main(void) {
  /* batch, in channels, side, out channels: the CNN's two convolutions, then ResNet-9's */
  static const int64_t geometry[][5] = {{128, 1, 28, 28, 32},  {128, 32, 14, 14, 64}, {64, 3, 32, 32, 64},
                                        {64, 64, 32, 32, 128},
                                        {64, 128, 16, 16, 128}, {64, 128, 16, 16, 256}, {64, 256, 8, 8, 512},
                                        {64, 512, 4, 4, 512}};
  static const char *const kind_name[3] = {"forward", "backward data", "backward weights"};
  dnnl_engine_t engine;
  dnnl_stream_t stream;
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success ||
      dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    fprintf(stderr, "dnnl_winograd: no oneDNN CPU engine\n");
    return 1;
  }
  printf("| geometry (N, C -> K, side) | direction | direct ms | Winograd ms | direct/Winograd | bf16 direct ms "
         "| bf16 direct/Winograd | implementations |\n"
         "|---|---|---|---|---|---|---|---|\n");
  for (size_t g = 0; g < sizeof geometry / sizeof geometry[0]; g++) {
    const int64_t *shape = geometry[g], out_channels = geometry[g][4];
    for (int kind = FORWARD; kind <= BACKWARD_WEIGHTS; kind++) {
      char direct_impl[128], winograd_impl[128], bf16_impl[128];
      double direct = time_convolution(engine, stream, kind, dnnl_convolution_direct, dnnl_f32, shape, out_channels,
                                       direct_impl, sizeof direct_impl);
      double winograd = time_convolution(engine, stream, kind, dnnl_convolution_winograd, dnnl_f32, shape,
                                         out_channels, winograd_impl, sizeof winograd_impl);
      double bf16 = time_convolution(engine, stream, kind, dnnl_convolution_direct, dnnl_bf16, shape, out_channels,
                                     bf16_impl, sizeof bf16_impl);
      printf("| %lld, %lld -> %lld, %lld | %s | %.3f | %.3f | %.2f | %.3f | %.2f | %s, %s, %s |\n",
             (long long)shape[0], (long long)shape[1], (long long)out_channels, (long long)shape[2], kind_name[kind],
             direct, winograd, direct > 0 && winograd > 0 ? direct / winograd : 0.0, bf16,
             bf16 > 0 && winograd > 0 ? bf16 / winograd : 0.0, direct_impl, winograd_impl, bf16_impl);
    }
  }
  dnnl_stream_destroy(stream);
  dnnl_engine_destroy(engine);
  return 0;
}
