/* Clock, order statistics, memory and thread counts for the C benchmarks. */
#include "bench/bench_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <mixgrad.h>

double bench_now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double bench_median(const double *v, int n) {
  double *sorted = malloc((size_t)n * sizeof *sorted);
  if (!sorted) return NAN;
  memcpy(sorted, v, (size_t)n * sizeof *sorted);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_doubles);
  double m = n % 2 ? sorted[n / 2] : 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]);
  free(sorted);
  return m;
}

long bench_peak_rss_kb(void) {
  struct rusage u;
  return getrusage(RUSAGE_SELF, &u) == 0 ? u.ru_maxrss : -1;  /* Linux reports KiB */
}

long bench_current_rss_kb(void) {
  FILE *f = fopen("/proc/self/status", "r");
  if (!f) return -1;
  char line[256];
  long kb = -1;
  while (kb < 0 && fgets(line, sizeof line, f))
    if (!strncmp(line, "VmRSS:", 6)) kb = strtol(line + 6, NULL, 10);
  fclose(f);
  return kb;
}

int bench_threads(void) { return mx_num_threads(); }

void bench_json_doubles(FILE *f, const char *key, const double *v, int n) {
  fprintf(f, "\"%s\":[", key);
  for (int i = 0; i < n; i++) fprintf(f, "%s%.6g", i ? "," : "", v[i]);
  fputc(']', f);
}
