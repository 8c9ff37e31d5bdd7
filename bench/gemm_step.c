/* One square matrix product, timed: mixgrad's side of the GEMM row of
 * scripts/gpu-check (bench/gemm_step.py is torch.matmul's; issue #32 asks
 * for at least 0.95 of its speed at 4096 on a GPU).
 *
 *     gemm_step [--device cpu|cuda] [--n N] [--dtype f32|bf16|f16] [--warmup N] [--repeat N] [--calls N]
 *
 * Each timed sample is --calls products of two (N, N) randn matrices, then
 * a device synchronisation, over --calls. One JSON line on stdout:
 *
 *     {"impl":"mixgrad","bench":"matmul","device":"cuda","n":4096,"dtype":"bf16","times_ms":[...],"tflops":...}
 *
 * tflops from the median sample (2 N^3 FLOPs a product). */
#include <stdlib.h>
#include <string.h>

#include "bench/bench_util.h"
#include "mixgrad.h"

static int fail(const char *what) {
  fprintf(stderr, "gemm_step: %s: %s\n", what, mx_last_error());
  return 1;
}

static bool parse_count(const char *s, int64_t min, int64_t *out) {
  char *end;
  long long v = strtoll(s, &end, 10);
  if (*s == '\0' || *end != '\0' || v < min) return false;
  *out = v;
  return true;
}

int main(int argc, char **argv) {
  mx_device device = MX_CPU;
  mx_dtype dtype = MX_F32;
  const char *dtype_name = "f32";
  int64_t n = 1024, warmup = 3, repeat = 10, calls = 10;
  for (int i = 1; i < argc; i += 2) {
    const char *flag = argv[i], *value = i + 1 < argc ? argv[i + 1] : NULL;
    bool ok = value != NULL;
    if (ok && !strcmp(flag, "--device")) ok = !strcmp(value, "cuda") ? (device = MX_CUDA, true) : !strcmp(value, "cpu");
    else if (ok && !strcmp(flag, "--dtype")) {
      dtype_name = value;
      ok = !strcmp(value, "f32") || !strcmp(value, "bf16") || !strcmp(value, "f16");
      dtype = !strcmp(value, "bf16") ? MX_BF16 : !strcmp(value, "f16") ? MX_F16 : MX_F32;
    } else if (ok && !strcmp(flag, "--n")) ok = parse_count(value, 1, &n);
    else if (ok && !strcmp(flag, "--warmup")) ok = parse_count(value, 0, &warmup);
    else if (ok && !strcmp(flag, "--repeat")) ok = parse_count(value, 1, &repeat);
    else if (ok && !strcmp(flag, "--calls")) ok = parse_count(value, 1, &calls);
    else ok = false;
    if (!ok) {
      fprintf(stderr, "gemm_step: bad flag or value: %s %s\n"
                      "usage: gemm_step [--device cpu|cuda] [--n N] [--dtype f32|bf16|f16] [--warmup N] "
                      "[--repeat N] [--calls N]\n", flag, value ? value : "");
      return 2;
    }
  }
  mx_generator *gen = mx_generator_new(1);
  mx_tensor *a = mx_to_dtype(mx_randn(MX_SHAPE(n, n), MX_F32, device, gen), dtype);
  mx_tensor *b = mx_to_dtype(mx_randn(MX_SHAPE(n, n), MX_F32, device, gen), dtype);
  mx_generator_free(gen);
  if (!a || !b) return fail("the matrices");
  double *times = calloc((size_t)repeat, sizeof *times);
  if (!times) return fail("out of memory");
  for (int64_t s = -warmup; s < repeat; s++) {
    double start = bench_now_ms();
    for (int64_t c = 0; c < calls; c++) {
      mx_tensor *y = mx_matmul(a, b);
      if (!y) return fail("mx_matmul");
      mx_release(y);
    }
    if (mx_synchronize(device) != MX_OK) return fail("mx_synchronize");
    if (s >= 0) times[s] = (bench_now_ms() - start) / (double)calls;
  }
  double median = bench_median(times, (int)repeat);
  printf("{\"impl\":\"mixgrad\",\"bench\":\"matmul\",\"device\":\"%s\",\"n\":%lld,\"dtype\":\"%s\",",
         mx_device_name(device), (long long)n, dtype_name);
  bench_json_doubles(stdout, "times_ms", times, (int)repeat);
  printf(",\"tflops\":%.4g}\n", 2.0 * (double)n * (double)n * (double)n / (median * 1e-3) / 1e12);
  fprintf(stderr, "gemm_step: mixgrad %lldx%lld %s on %s: %.3f ms, %.1f TFLOP/s\n", (long long)n, (long long)n,
          dtype_name, mx_device_name(device), median, 2.0 * (double)n * (double)n * (double)n / (median * 1e-3) / 1e12);
  free(times);
  mx_release(a);
  mx_release(b);
  return 0;
}
