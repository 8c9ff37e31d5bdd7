/* The smallest mixgrad program: make tensors, view them, round them to the
 * 16-bit formats AMP uses, and look at memory. */
#include <mixgrad.h>
#include <stdio.h>

int main(void) {
  mx_manual_seed(0);
  mx_scope *s = mx_scope_begin();

  mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  mx_tensor *m = mx_reshape(a, MX_SHAPE(2, 3));
  printf("a 2x3 view of arange(6), transposed:\n");
  mx_print(mx_transpose(m, 0, 1));

  mx_tensor *x = mx_randn(MX_SHAPE(2, 4), MX_F32, MX_CPU, NULL);
  printf("\nrandn(2, 4) and the same values in float16 and bfloat16:\n");
  mx_print(x);
  mx_print(mx_to_dtype(x, MX_F16));
  mx_print(mx_to_dtype(x, MX_BF16));

  printf("\n65519 in float16: %g; 65520 in float16: %g\n",
         mx_item(mx_to_dtype(mx_scalar(65519, MX_F32, MX_CPU), MX_F16)),
         mx_item(mx_to_dtype(mx_scalar(65520, MX_F32, MX_CPU), MX_F16)));

  mx_tensor *gpu = mx_zeros(MX_SHAPE(2), MX_F32, MX_CUDA);
  if (!gpu) printf("cuda: %s\n", mx_last_error());
  mx_clear_error();

  mx_memory_stats st = mx_memory_stats_get(MX_CPU);
  printf("cpu memory: %lld bytes in use, peak %lld, %lld live tensors\n", (long long)st.bytes_in_use,
         (long long)st.peak_bytes, (long long)st.live_tensors);
  mx_scope_end(s);
  st = mx_memory_stats_get(MX_CPU);
  printf("after mx_scope_end: %lld bytes, %lld live tensors\n", (long long)st.bytes_in_use,
         (long long)st.live_tensors);
  return 0;
}
