/* The autocast cast cache: a weight used three times in a region is cast to
 * bfloat16 once; the cache empties when the outermost region ends; a weight
 * changed in place inside the region is cast afresh (the version rule).
 *
 *     build/examples/amp/cache
 */
#include <mixgrad.h>
#include <stdio.h>

static void stats(const char *when) {
  mx_autocast_cache_stats st = mx_autocast_cache_stats_get();
  printf("%-34s entries %lld, casts %lld, hits %lld\n", when, (long long)st.entries, (long long)st.casts,
         (long long)st.hits);
}

int main(void) {
  mx_manual_seed(0);
  mx_scope *scope = mx_scope_begin();
  /* A weight: a float32 leaf that requires grad. Only such tensors are
   * cached; x (no grad) is cast afresh at every use. */
  mx_tensor *w = mx_randn(MX_SHAPE(256, 256), MX_F32, MX_CPU, NULL);
  mx_set_requires_grad(w, true);
  mx_tensor *x = mx_randn(MX_SHAPE(2, 256), MX_F32, MX_CPU, NULL);
  mx_tensor *fresh = NULL;

  mx_amp_report_reset();
  stats("before the region:");
  mx_amp_trace(stdout);
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    /* three layers sharing one weight */
    mx_tensor *h = x;
    for (int i = 0; i < 3; i++) h = mx_tanh(mx_matmul(h, w));
    stats("after three uses of w:");

    MX_AUTOCAST(MX_CPU, MX_BF16, true, true) { /* a nested region shares the cache */
      mx_matmul(x, w);
    }
    stats("after a nested region ended:");

    /* an in-place change (as an optimizer step makes) bumps w's version, so
     * the cached bfloat16 copy is stale and the next use casts again */
    MX_NO_GRAD { mx_mul_scalar_(w, 0.5); }
    fresh = mx_matmul(x, w);
    stats("after w *= 0.5 and one more use:");
  }
  mx_amp_trace(NULL);
  stats("after the outermost region ended:");

  /* The fresh cast saw the new w: its result is float32's up to bfloat16
   * rounding. A stale cast of the old w would give twice the answer. */
  mx_tensor *exact = mx_matmul(x, w); /* outside the region: float32 */
  printf("after the change, max |bf16 result - f32 result| = %.3f; a stale cast would be off by %.1f\n",
         mx_item(mx_amax(mx_abs(mx_sub(mx_to_dtype(fresh, MX_F32), exact)), MX_ALL_DIMS, false)),
         mx_item(mx_amax(mx_abs(exact), MX_ALL_DIMS, false)));

  printf("\n");
  mx_amp_report(stdout);
  mx_scope_end(scope);
  return 0;
}
