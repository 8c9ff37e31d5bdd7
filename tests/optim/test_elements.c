/* kernels/math.h's optimizer updates of one element: computed in double and rounded after each operation, they
 * are float32 arithmetic bit for bit (the claim behind matching PyTorch's float32 steps). */
#include <criterion/criterion.h>
#include <math.h>
#include <mixgrad.h>
#include <string.h>

/* A float of random sign, mantissa and exponent in [2^lo, 2^hi). */
static uint64_t state = 88172645463325252ull;
static float random_float(int lo, int hi) {
  state ^= state << 13, state ^= state >> 7, state ^= state << 17;
  float mantissa = 1.0f + (float)(state >> 41) * 0x1p-23f;
  float v = ldexpf(mantissa, lo + (int)((state >> 8) % (uint64_t)(hi - lo)));
  return state & 1 ? -v : v;
}

static bool same_bits(float a, double b) {
  float f = (float)b;
  return !memcmp(&a, &f, sizeof a) && (double)f == b;
}

/* Adam written with float variables, one PyTorch op per line. */
static float adam_f32(float p, float g, float *m, float *v, float *vmax, const mx_adam_hparams *h,
                      mx_adam_factors f) {
  g = g + (float)h->weight_decay * p;
  *m = *m * (float)h->beta1 + (float)(1 - h->beta1) * g;
  *v = *v * (float)h->beta2 + (float)(1 - h->beta2) * g * g;
  if (*vmax < *v) *vmax = *v;
  float denom = sqrtf(*vmax) / (float)f.bias_correction2_sqrt + (float)h->eps;
  return p + (float)-f.step_size * *m / denom;
}

Test(optim_elements, adam_in_double_is_float32_arithmetic) {
  mx_adam_hparams h = {.lr = 1e-3, .beta1 = 0.9, .beta2 = 0.999, .eps = 1e-8, .weight_decay = 0.01, .amsgrad = true};
  int wrong = 0;
  for (int i = 0; i < 200000; i++) {
    mx_adam_factors f = mx_adam_factors_of(&h, 1 + i % 50);
    float p = random_float(-20, 4), g = random_float(-30, 10);
    float m = random_float(-30, 5), v = fabsf(random_float(-60, 10)), vmax = fabsf(random_float(-60, 10));
    double md = m, vd = v, vmaxd = vmax;
    double got = mx_adam_update_element(p, g, &md, &vd, &vmaxd, &h, f, false);
    float want = adam_f32(p, g, &m, &v, &vmax, &h, f);
    if (!(same_bits(want, got) && same_bits(m, md) && same_bits(v, vd) && same_bits(vmax, vmaxd)) && wrong++ < 3)
      cr_expect(false, "p %a g %a: float32 gives %a, math.h %a", p, g, want, got);
  }
  cr_expect_eq(wrong, 0, "%d of 200000 updates differ from float32 arithmetic", wrong);
}

Test(optim_elements, sgd_in_double_is_float32_arithmetic) {
  mx_sgd_hparams h = {.lr = 0.1, .momentum = 0.9, .dampening = 0.1, .weight_decay = 1e-4, .nesterov = false};
  int wrong = 0;
  for (int i = 0; i < 200000; i++) {
    float p = random_float(-20, 4), g = random_float(-30, 10), buf = random_float(-30, 10);
    double bufd = buf;
    double got = mx_sgd_update_element(p, g, &bufd, false, &h, false);
    float d = g + (float)h.weight_decay * p;
    buf = buf * (float)h.momentum + (float)(1 - h.dampening) * d;
    float want = p + (float)-h.lr * buf;
    if (!(same_bits(want, got) && same_bits(buf, bufd)) && wrong++ < 3)
      cr_expect(false, "p %a g %a: float32 gives %a, math.h %a", p, g, want, got);
  }
  cr_expect_eq(wrong, 0, "%d of 200000 updates differ from float32 arithmetic", wrong);
}

/* float64 state: plain double arithmetic; a NaN in max_exp_avg_sq stays (torch.maximum). */
Test(optim_elements, adam_float64_and_nan) {
  mx_adam_hparams h = {.lr = 1e-2, .beta1 = 0.9, .beta2 = 0.99, .eps = 1e-8, .amsgrad = true};
  mx_adam_factors f = mx_adam_factors_of(&h, 1);
  cr_expect_eq(f.step_size, 1e-2 / (1 - 0.9));
  cr_expect_eq(f.bias_correction2_sqrt, sqrt(1 - 0.99));
  double m = 0, v = 0, vmax = 0;
  double p = mx_adam_update_element(1.0, 0.5, &m, &v, &vmax, &h, f, true);
  double m1 = (1 - 0.9) * 0.5, v1 = (1 - 0.99) * 0.5 * 0.5;
  cr_expect_eq(m, m1);
  cr_expect_eq(v, v1);
  cr_expect_eq(p, 1.0 + -f.step_size * m1 / (sqrt(v1) / f.bias_correction2_sqrt + 1e-8));
  vmax = NAN;
  mx_adam_update_element(1.0, 0.5, &m, &v, &vmax, &h, f, true);
  cr_expect(isnan(vmax), "max_exp_avg_sq lost its NaN");
  v = 0, vmax = 1;
  mx_adam_update_element(1.0, NAN, &m, &v, &vmax, &h, f, true);
  cr_expect(isnan(vmax), "a NaN exp_avg_sq did not reach max_exp_avg_sq");
}
