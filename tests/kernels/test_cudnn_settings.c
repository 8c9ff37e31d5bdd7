/* mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic and
 * mx_set_cudnn_benchmark: their defaults (exact float32, deterministic,
 * heuristics), that each keeps what was set without touching the others, and that they are the process's, not a thread's.
 * Each Criterion test is a fresh process, so each sees the defaults. */
#include <criterion/criterion.h>
#include <pthread.h>

#include <mixgrad.h>

Test(cudnn_settings, the_defaults_are_exact_float32_and_deterministic) {
  cr_expect_not(mx_cudnn_allow_tf32(), "TF32 is off until asked for (PyTorch's default is on)");
  cr_expect(mx_cudnn_deterministic(), "determinism is on until turned off (PyTorch's default is off)");
  cr_expect_not(mx_cudnn_benchmark(), "benchmarking is off until asked for, as PyTorch's");
}

Test(cudnn_settings, each_keeps_what_was_set) {
  mx_set_cudnn_allow_tf32(true);
  cr_expect(mx_cudnn_allow_tf32());
  cr_expect(mx_cudnn_deterministic(), "the other is unchanged");
  mx_set_cudnn_deterministic(false);
  cr_expect_not(mx_cudnn_deterministic());
  cr_expect(mx_cudnn_allow_tf32(), "the other is unchanged");
  mx_set_cudnn_benchmark(true);
  cr_expect(mx_cudnn_benchmark());
  cr_expect(mx_cudnn_allow_tf32() && !mx_cudnn_deterministic(), "the others are unchanged");
  mx_set_cudnn_allow_tf32(false);
  mx_set_cudnn_deterministic(true);
  cr_expect(mx_cudnn_benchmark(), "unchanged by the others");
  mx_set_cudnn_benchmark(false);
  cr_expect_not(mx_cudnn_allow_tf32());
  cr_expect(mx_cudnn_deterministic());
  cr_expect_not(mx_cudnn_benchmark());
}

static void *set_pytorch_defaults(void *unused) {
  (void)unused;
  mx_set_cudnn_allow_tf32(true);
  mx_set_cudnn_deterministic(false);
  mx_set_cudnn_benchmark(true);
  return NULL;
}

Test(cudnn_settings, a_setting_made_in_one_thread_holds_in_all) {
  pthread_t t;
  cr_assert_eq(pthread_create(&t, NULL, set_pytorch_defaults, NULL), 0);
  cr_assert_eq(pthread_join(t, NULL), 0);
  cr_expect(mx_cudnn_allow_tf32());
  cr_expect_not(mx_cudnn_deterministic());
  cr_expect(mx_cudnn_benchmark());
}
