/* What the C benchmarks share: a clock, order statistics, the process's
 * memory and threads, and the pieces of their one-line JSON results.
 *
 *     double t0 = bench_now_ms();
 *     ... the work ...
 *     times[i] = bench_now_ms() - t0;
 *     fprintf(stderr, "median %.3f ms\n", bench_median(times, n));
 *     bench_json_doubles(stdout, "times_ms", times, n);   // "times_ms":[1.234,...]
 */
#ifndef MX_BENCH_BENCH_UTIL_H
#define MX_BENCH_BENCH_UTIL_H

#include <stdio.h>

/* Milliseconds on the monotonic clock (an arbitrary origin: subtract). */
double bench_now_ms(void);

/* The median of v[0 .. n) (n >= 1; NAN when out of memory); v is left
 * untouched. */
double bench_median(const double *v, int n);

/* The process's peak resident set (getrusage's ru_maxrss), and its
 * resident set now (VmRSS from /proc/self/status; -1 when unreadable),
 * in KiB. */
long bench_peak_rss_kb(void);
long bench_current_rss_kb(void);

/* The threads the parallel loops use: mx_num_threads(), which follows
 * MX_NUM_THREADS, else OMP_NUM_THREADS (1 in a build without OpenMP). */
int bench_threads(void);

/* "key":[v0,v1,...] with enough digits to round-trip a timing. */
void bench_json_doubles(FILE *f, const char *key, const double *v, int n);

#endif
