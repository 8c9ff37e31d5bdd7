/* Scalar math shared by the CPU and CUDA kernels.
 *
 * Everything here is a static inline function marked MX_HD (__host__
 * __device__ under nvcc), so the CPU test suite exercises the very arithmetic
 * the GPU runs: fp16/bf16 conversions, Philox random numbers, and the
 * strided index computation.
 *
 *     uint16_t h = mx_f32_to_f16(65519.0f);   // 0x7bff, 65504: rounds down
 *     uint16_t i = mx_f32_to_f16(65520.0f);   // 0x7c00, +inf: the tie goes up
 */
#ifndef MX_KERNELS_MATH_H
#define MX_KERNELS_MATH_H

#include <stdbool.h>
#include <stdint.h>
#include <math.h>
#include <string.h>

#include "kernels/base.h"
#include "kernels/cuda/hd.h"

MX_HD static inline uint32_t mx_f32_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}

MX_HD static inline float mx_bits_f32(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

/* --- float16 (IEEE 754 binary16), round to nearest even ------------------ */

MX_HD static inline uint16_t mx_f32_to_f16(float f) {
  uint32_t x = mx_f32_bits(f);
  uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
  uint32_t a = x & 0x7fffffffu;
  if (a > 0x7f800000u) /* NaN: keep it quiet, keep the top payload bits */
    return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
  if (a >= 0x477ff000u) /* >= 65520, the midpoint above 65504: inf */
    return (uint16_t)(sign | 0x7c00u);
  if (a >= 0x38800000u) { /* normal binary16: >= 2^-14 */
    a += 0xfffu + ((a >> 13) & 1u); /* round the 13 dropped bits to even */
    return (uint16_t)(sign | ((a - 0x38000000u) >> 13));
  }
  if (a <= 0x33000000u) /* <= 2^-25, half the smallest subnormal: zero */
    return sign;
  /* subnormal binary16: the value in units of 2^-24, rounded to even */
  uint32_t exponent = a >> 23;
  uint32_t mantissa = (a & 0x7fffffu) | 0x800000u;
  uint32_t shift = 126u - exponent; /* 14..23 */
  uint32_t result = mantissa >> shift;
  uint32_t rest = mantissa & ((1u << shift) - 1u);
  uint32_t half = 1u << (shift - 1u);
  if (rest > half || (rest == half && (result & 1u))) result++;
  return (uint16_t)(sign | result);
}

MX_HD static inline float mx_f16_to_f32(uint16_t h) {
  uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  uint32_t exponent = (h >> 10) & 0x1fu;
  uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1fu) /* inf, or NaN made quiet as IEEE 754 (and F16C) do */
    return mx_bits_f32(sign | 0x7f800000u | (mantissa << 13) | (mantissa ? 0x400000u : 0u));
  if (exponent != 0) return mx_bits_f32(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  if (mantissa == 0) return mx_bits_f32(sign);
  /* subnormal: mantissa * 2^-24 is exact in float32 */
  float magnitude = (float)mantissa * 5.9604644775390625e-8f;
  return mx_bits_f32(sign | mx_f32_bits(magnitude));
}

/* --- bfloat16: the top half of a float32, round to nearest even --------- */

MX_HD static inline uint16_t mx_f32_to_bf16(float f) {
  uint32_t x = mx_f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it quiet */
    return (uint16_t)((x >> 16) | 0x40u);
  x += 0x7fffu + ((x >> 16) & 1u);
  return (uint16_t)(x >> 16);
}

MX_HD static inline float mx_bf16_to_f32(uint16_t b) { return mx_bits_f32((uint32_t)b << 16); }

/* --- Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as
 * 1, 2, 3", SC'11): a counter-based generator, so element i of a fill draws
 * block (offset + i) independently on any device, in any order. --------- */

typedef struct {
  uint32_t v[4];
} mx_philox_block;

MX_HD static inline mx_philox_block mx_philox4x32_10(mx_philox_block ctr, uint64_t key64) {
  uint32_t k0 = (uint32_t)key64, k1 = (uint32_t)(key64 >> 32);
  for (int round = 0; round < 10; round++) {
    if (round) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint64_t p0 = (uint64_t)0xD2511F53u * ctr.v[0];
    uint64_t p1 = (uint64_t)0xCD9E8D57u * ctr.v[2];
    mx_philox_block next = {{(uint32_t)(p1 >> 32) ^ ctr.v[1] ^ k0, (uint32_t)p1,
                             (uint32_t)(p0 >> 32) ^ ctr.v[3] ^ k1, (uint32_t)p0}};
    ctr = next;
  }
  return ctr;
}

/* The block element `index` of a fill draws: counter = offset + index. */
MX_HD static inline mx_philox_block mx_philox_draw(uint64_t seed, uint64_t offset, uint64_t index) {
  uint64_t c = offset + index;
  mx_philox_block ctr = {{(uint32_t)c, (uint32_t)(c >> 32), 0u, 0u}};
  return mx_philox4x32_10(ctr, seed);
}

/* 53 random bits as a double in [0, 1). */
MX_HD static inline double mx_uniform53(uint32_t hi, uint32_t lo) {
  uint64_t bits = (((uint64_t)hi << 32) | lo) >> 11;
  return (double)bits * 0x1p-53;
}

/* A uniform in [0, 1) with as many bits as the target format holds
 * (24 for float32, 11 for float16, 8 for bfloat16, 53 for float64), so the
 * value never rounds up to 1 in that format. */
MX_HD static inline double mx_uniform_bits(mx_philox_block r, int mantissa_bits) {
  if (mantissa_bits > 32) return mx_uniform53(r.v[0], r.v[1]);
  return (double)(r.v[0] >> (32 - mantissa_bits)) * (1.0 / (double)(1ull << mantissa_bits));
}

/* A standard normal by Box-Muller from the block's four words. */
MX_HD static inline double mx_normal_from_block(mx_philox_block r) {
  double u1 = 1.0 - mx_uniform53(r.v[0], r.v[1]); /* (0, 1]: log is finite */
  double u2 = mx_uniform53(r.v[2], r.v[3]);
  return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}

/* --- one element of any dtype as a double, and back ------------------------ */

/* Exact for every dtype but int64 beyond 2^53. */
MX_HD static inline double mx_element_load(const void *p, mx_dtype dtype) {
  switch (dtype) {
  case MX_F32: return *(const float *)p;
  case MX_F64: return *(const double *)p;
  case MX_F16: return mx_f16_to_f32(*(const uint16_t *)p);
  case MX_BF16: return mx_bf16_to_f32(*(const uint16_t *)p);
  case MX_I64: return (double)*(const int64_t *)p;
  case MX_I32: return *(const int32_t *)p;
  case MX_U8: return *(const uint8_t *)p;
  case MX_BOOL: return *(const bool *)p;
  default: return 0;
  }
}

MX_HD static inline double mx__saturate(double v, double lo, double hi) {
  if (v != v) return 0; /* NaN */
  return v < lo ? lo : v > hi ? hi : v;
}

/* int64 arithmetic that wraps around on overflow (two's complement), as
 * PyTorch's integers do: a signed overflow in C is undefined. */
MX_HD static inline int64_t mx_wrap_add(int64_t x, int64_t y) { return (int64_t)((uint64_t)x + (uint64_t)y); }
MX_HD static inline int64_t mx_wrap_sub(int64_t x, int64_t y) { return (int64_t)((uint64_t)x - (uint64_t)y); }
MX_HD static inline int64_t mx_wrap_mul(int64_t x, int64_t y) { return (int64_t)((uint64_t)x * (uint64_t)y); }

/* v as an int64: truncated toward zero, saturated, NaN as 0. (A C cast of
 * a double outside int64's range is undefined.) Integer kernels take their
 * double parameters (a clamp's bounds, alpha) through it. */
MX_HD static inline int64_t mx_int_param(double v) {
  return v != v ? 0 : v >= 0x1p63 ? INT64_MAX : v <= -0x1p63 ? INT64_MIN : (int64_t)v;
}

/* Floats round to nearest even; integers truncate toward zero and saturate
 * (NaN becomes 0); bool is v != 0. */
MX_HD static inline void mx_element_store(void *p, mx_dtype dtype, double v) {
  switch (dtype) {
  case MX_F32: *(float *)p = (float)v; break;
  case MX_F64: *(double *)p = v; break;
  case MX_F16: *(uint16_t *)p = mx_f32_to_f16((float)v); break;
  case MX_BF16: *(uint16_t *)p = mx_f32_to_bf16((float)v); break;
  case MX_I64: *(int64_t *)p = mx_int_param(v); break;
  case MX_I32: *(int32_t *)p = (int32_t)mx__saturate(v, INT32_MIN, INT32_MAX); break;
  case MX_U8: *(uint8_t *)p = (uint8_t)mx__saturate(v, 0, 255); break;
  case MX_BOOL: *(bool *)p = v != 0; break;
  default: break;
  }
}

MX_HD static inline bool mx_dtype_floating(mx_dtype t) {
  return t == MX_F32 || t == MX_F64 || t == MX_F16 || t == MX_BF16;
}

/* One element converted between dtypes, as PyTorch does: between integer
 * types (bool included) exactly, wrapping like a C cast to the narrower
 * type; everything else through double (mx_element_store's rules). */
MX_HD static inline void mx_element_convert(void *dst, mx_dtype dst_type, const void *src, mx_dtype src_type) {
  if (mx_dtype_floating(dst_type) || mx_dtype_floating(src_type)) {
    mx_element_store(dst, dst_type, mx_element_load(src, src_type));
    return;
  }
  int64_t v = src_type == MX_I64 ? *(const int64_t *)src
              : src_type == MX_I32 ? *(const int32_t *)src
              : src_type == MX_U8 ? *(const uint8_t *)src
                                  : *(const bool *)src;
  switch (dst_type) {
  case MX_I64: *(int64_t *)dst = v; break;
  case MX_I32: *(int32_t *)dst = (int32_t)(uint32_t)(uint64_t)v; break; /* wraps */
  case MX_U8: *(uint8_t *)dst = (uint8_t)(uint64_t)v; break;
  case MX_BOOL: *(bool *)dst = v != 0; break;
  default: break;
  }
}

/* --- relu fused into batch norm's kernels: kernels/elementwise.def's RELU
 * and RELU_BACKWARD, one element at a time, so a fused kernel gives what
 * the two elementwise ops give. ------------------------------------------ */

/* relu: x < 0 ? 0 : x, so -0 and NaN stay as they are. */
MX_HD static inline float mx_relu_f32(float x) { return x < 0 ? 0.0f : x; }
MX_HD static inline double mx_relu_f64(double x) { return x < 0 ? 0.0 : x; }

/* relu of a float16 (bf16 false) or bfloat16 value's bits: the negative
 * numbers, 0x8001 up to -inf (NaNs lie above it), become +0. */
MX_HD static inline uint16_t mx_relu_half_bits(uint16_t h, bool bf16) {
  return h > 0x8000u && h <= (bf16 ? 0xff80u : 0xfc00u) ? 0 : h;
}

/* relu's backward: gradient g where relu's output y > 0, else 0; a NaN y
 * passes g (PyTorch's threshold_backward). */
MX_HD static inline float mx_relu_grad_f32(float g, float y) { return y <= 0 ? 0.0f : g; }
MX_HD static inline double mx_relu_grad_f64(double g, double y) { return y <= 0 ? 0.0 : g; }

/* v stored into p as dtype (a float dtype), then relu of what was stored:
 * relu after the rounding, as relu on the stored tensor sees it (a small
 * negative v rounds to -0 in 16 bits, which relu keeps). */
MX_HD static inline void mx_element_store_relu(void *p, mx_dtype dtype, double v) {
  switch (dtype) {
  case MX_F32: *(float *)p = mx_relu_f32((float)v); break;
  case MX_F64: *(double *)p = mx_relu_f64(v); break;
  case MX_F16: *(uint16_t *)p = mx_relu_half_bits(mx_f32_to_f16((float)v), false); break;
  case MX_BF16: *(uint16_t *)p = mx_relu_half_bits(mx_f32_to_bf16((float)v), true); break;
  default: break;
  }
}

/* --- batch norm's statistics in one pass ------------------------------------ */

/* The mean and biased variance of n values from s1 and s2, their sums of
 * v - k and of (v - k)^2 in double, k one of the values (the channel's
 * first): shifted by a value of the data, the squares hold no large mean
 * whose square the subtraction would cancel, so one pass is as good as
 * two. A variance rounded below 0 is 0; no values give NaN. */
MX_HD static inline void mx_moments_of(double k, double s1, double s2, double n, double *mean, double *var) {
  double shift = s1 / n, v = s2 / n - shift * shift;
  *mean = k + shift;
  *var = v < 0 ? 0 : v;
}

/* --- random fills: what element `index` of a fill takes ------------------ */

typedef enum { MX_RAND_UNIFORM, MX_RAND_NORMAL, MX_RAND_INT, MX_RAND_BERNOULLI } mx_rand_kind;

typedef struct {
  mx_rand_kind kind;
  double a, b;       /* uniform [a, b); normal mean a, std b; bernoulli p = a */
  int64_t low, high; /* randint [low, high) */
  uint64_t seed, offset;
} mx_rand_params;

/* Random bits a uniform draw keeps for each float format, so a value in
 * [0, 1) never rounds up to 1 when stored. */
MX_HD static inline int mx_mantissa_bits(mx_dtype dtype) {
  switch (dtype) {
  case MX_F64: return 53;
  case MX_F16: return 11;
  case MX_BF16: return 8;
  default: return 24;
  }
}

/* An integer in [low, high) (bias below 2^-32 for any range that fits). */
MX_HD static inline int64_t mx_rand_int(const mx_rand_params *p, uint64_t index) {
  mx_philox_block r = mx_philox_draw(p->seed, p->offset, index);
  uint64_t range = (uint64_t)p->high - (uint64_t)p->low; /* no overflow for huge ranges */
  uint64_t bits = ((uint64_t)r.v[0] << 32) | r.v[1];
  return p->low + (int64_t)(bits % range);
}

/* The value of element `index`; mantissa_bits is the target float format's
 * (see mx_uniform_bits). */
MX_HD static inline double mx_rand_sample(const mx_rand_params *p, uint64_t index, int mantissa_bits) {
  mx_philox_block r = mx_philox_draw(p->seed, p->offset, index);
  switch (p->kind) {
  case MX_RAND_UNIFORM: return p->a + (p->b - p->a) * mx_uniform_bits(r, mantissa_bits);
  case MX_RAND_NORMAL: return p->a + p->b * mx_normal_from_block(r);
  case MX_RAND_INT: return (double)mx_rand_int(p, index);
  case MX_RAND_BERNOULLI: return mx_uniform53(r.v[0], r.v[1]) < p->a ? 1.0 : 0.0;
  }
  return 0;
}

/* --- special functions ------------------------------------------------------ */

/* The inverse error function: Giles' single-precision approximation
 * ("Approximating the erfinv function", GPU Computing Gems, 2011) polished
 * by two Newton steps on erf, which brings it to double precision. */
MX_HD static inline double mx_scalar_erfinv(double y) {
  if (!(y > -1.0 && y < 1.0)) {
    if (y == 1.0) return INFINITY;
    if (y == -1.0) return -INFINITY;
    return NAN;
  }
  double w = -log((1.0 - y) * (1.0 + y)), p;
  if (w < 5.0) {
    w -= 2.5;
    p = 2.81022636e-08;
    p = 3.43273939e-07 + p * w;
    p = -3.5233877e-06 + p * w;
    p = -4.39150654e-06 + p * w;
    p = 0.00021858087 + p * w;
    p = -0.00125372503 + p * w;
    p = -0.00417768164 + p * w;
    p = 0.246640727 + p * w;
    p = 1.50140941 + p * w;
  } else {
    w = sqrt(w) - 3.0;
    p = -0.000200214257;
    p = 0.000100950558 + p * w;
    p = 0.00134934322 + p * w;
    p = -0.00367342844 + p * w;
    p = 0.00573950773 + p * w;
    p = -0.0076224613 + p * w;
    p = 0.00943887047 + p * w;
    p = 1.00167406 + p * w;
    p = 2.83297682 + p * w;
  }
  double x = p * y;
  for (int i = 0; i < 2; i++) /* d/dx erf(x) = 2/sqrt(pi) exp(-x^2) */
    x -= (erf(x) - y) / (1.1283791670955126 * exp(-x * x));
  return x;
}

/* Python's modulo: the result takes the sign of the divisor. */
MX_HD static inline double mx__fmod_floor_d(double x, double y) {
  double m = fmod(x, y);
  return m != 0 && ((m < 0) != (y < 0)) ? m + y : m;
}
MX_HD static inline float mx__fmod_floor_f(float x, float y) {
  float m = fmodf(x, y);
  return m != 0 && ((m < 0) != (y < 0)) ? m + y : m;
}
#ifdef __cplusplus
MX_HD static inline double mx_fmod_floor(double x, double y) { return mx__fmod_floor_d(x, y); }
MX_HD static inline float mx_fmod_floor(float x, float y) { return mx__fmod_floor_f(x, y); }
#else
#define mx_fmod_floor(x, y) _Generic((x), float: mx__fmod_floor_f, default: mx__fmod_floor_d)(x, y)
#endif

/* Integer power by squaring; negative exponents give 0 except for 1 and -1. */
MX_HD static inline int64_t mx_ipow(int64_t base, int64_t e) {
  if (e < 0) return base == 1 ? 1 : base == -1 ? (e % 2 ? -1 : 1) : 0;
  uint64_t result = 1, b = (uint64_t)base; /* unsigned: wraps like the GPU */
  while (e) {
    if (e & 1) result *= b;
    b *= b;
    e >>= 1;
  }
  return (int64_t)result;
}

/* --- strided indexing ------------------------------------------------------ */

/* The element offset of the linear (row-major) index, 0 <= linear < the
 * shape's product, in a strided view. What is left after the inner dims is
 * the first dim's index itself: a 1-d view (a flattened elementwise
 * operand) costs no division, which on a GPU is a long instruction sequence
 * for 64-bit integers. */
MX_HD static inline int64_t mx_strided_offset(int64_t linear, int ndim, const int64_t *shape,
                                              const int64_t *strides) {
  if (ndim <= 0) return 0;
  int64_t offset = 0;
  for (int d = ndim - 1; d > 0; d--) {
    offset += linear % shape[d] * strides[d];
    linear /= shape[d];
  }
  return offset + linear * strides[0];
}

/* --- AMP: loss scaling -------------------------------------------------------- */

/* The inverse of the loss scale as the unscale kernels use it: computed in
 * float64 and rounded once to float32 (PyTorch's
 * scale.double().reciprocal().float()). */
MX_HD static inline float mx_amp_inv_scale(float scale) { return (float)(1.0 / (double)scale); }

/* Whether a scaled gradient value is zero or subnormal in fp16 (|v| below
 * 2^-14): the values loss scaling exists to lift. */
MX_HD static inline bool mx_amp_underflows_f16(double v) { return v > -6.103515625e-05 && v < 6.103515625e-05; }

/* Counts a scaled gradient value into counts (infs, NaNs, float16
 * underflows); whether it is inf or NaN. */
MX_HD static inline bool mx_amp_tally(double v, int64_t counts[3]) {
  bool is_nan = v != v, is_inf = !is_nan && v - v != 0;
  counts[0] += is_inf;
  counts[1] += is_nan;
  counts[2] += mx_amp_underflows_f16(v);
  return is_inf || is_nan;
}

/* A scaled gradient value of the dtype unscaled as PyTorch's opmath does:
 * float64 in float64, the others in float32. */
MX_HD static inline double mx_amp_unscaled(double v, mx_dtype dtype, float inv_scale) {
  return dtype == MX_F64 ? v * (double)inv_scale : (double)((float)v * inv_scale);
}

/* Log2-magnitude histograms (amp/stats.h): one bin per binary exponent
 * of float32's range, 2^-149 (the smallest subnormal) to 2^127, then zero,
 * inf and NaN. Bin b holds the values with 2^(b + MX_AMP_HIST_EXP_MIN) <=
 * |v| < 2^(b + MX_AMP_HIST_EXP_MIN + 1); float64 values beyond float32's
 * range land in the first or last exponent bin. */
#define MX_AMP_HIST_EXP_MIN (-149)
#define MX_AMP_HIST_EXP_MAX 127
#define MX_AMP_HIST_ZERO (MX_AMP_HIST_EXP_MAX - MX_AMP_HIST_EXP_MIN + 1)
#define MX_AMP_HIST_INF (MX_AMP_HIST_ZERO + 1)
#define MX_AMP_HIST_NAN (MX_AMP_HIST_ZERO + 2)
#define MX_AMP_HIST_BINS (MX_AMP_HIST_ZERO + 3)

/* The bin of a float32 given by its bits: the exponent field, or for a
 * subnormal the position of its highest set bit (found by scaling it by
 * 2^64, exact, into the normal range). Branch-light, so loops vectorise. */
MX_HD static inline int mx_amp_hist_bin_f32(uint32_t bits) {
  uint32_t a = bits & 0x7fffffffu;
  if (a >= 0x7f800000u) return a > 0x7f800000u ? MX_AMP_HIST_NAN : MX_AMP_HIST_INF;
  if (a == 0) return MX_AMP_HIST_ZERO;
  if (a < 0x00800000u) /* subnormal: 2^-149 * a, a < 2^23 */
    return (int)(mx_f32_bits(mx_bits_f32(a) * 0x1p64f) >> 23) - 127 - 64 - MX_AMP_HIST_EXP_MIN;
  return (int)(a >> 23) - 127 - MX_AMP_HIST_EXP_MIN;
}

/* The bin of a float16 given by its bits: the exponent field, or for a
 * subnormal (m 2^-24) its float32 value's. */
MX_HD static inline int mx_amp_hist_bin_f16(uint16_t h) {
  uint32_t e5 = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e5 == 0x1fu) return m ? MX_AMP_HIST_NAN : MX_AMP_HIST_INF;
  if (e5 == 0) return m ? mx_amp_hist_bin_f32(mx_f32_bits((float)m * 0x1p-24f)) : MX_AMP_HIST_ZERO;
  return (int)e5 - 15 - MX_AMP_HIST_EXP_MIN;
}

/* The bin of any value (float16, bfloat16 and float32 ones are exact in
 * double; float64 ones are binned by their own exponent). */
MX_HD static inline int mx_amp_hist_bin(double v) {
  if (v != v) return MX_AMP_HIST_NAN;
  double a = v < 0 ? -v : v;
  if (a == 0) return MX_AMP_HIST_ZERO;
  if (a - a != 0) return MX_AMP_HIST_INF;
  int e;
  frexp(a, &e); /* a = m 2^e, m in [0.5, 1): floor(log2 a) = e - 1 */
  e -= 1;
  if (e < MX_AMP_HIST_EXP_MIN) e = MX_AMP_HIST_EXP_MIN;
  if (e > MX_AMP_HIST_EXP_MAX) e = MX_AMP_HIST_EXP_MAX;
  return e - MX_AMP_HIST_EXP_MIN;
}

/* The bin of the element at p: from its bits for the 16- and 32-bit floats
 * (bfloat16 is a float32's top half), through double otherwise. */
MX_HD static inline int mx_amp_hist_bin_at(const void *p, mx_dtype dtype) {
  switch (dtype) {
  case MX_F32: return mx_amp_hist_bin_f32(*(const uint32_t *)p);
  case MX_F16: return mx_amp_hist_bin_f16(*(const uint16_t *)p);
  case MX_BF16: return mx_amp_hist_bin_f32((uint32_t)*(const uint16_t *)p << 16);
  default: return mx_amp_hist_bin(mx_element_load(p, dtype));
  }
}

/* GradScaler.update's rule (torch._amp_update_scale_) plus mixgrad's guard
 * rails. counters: steps seen, steps skipped, consecutive skips. */
typedef struct {
  double growth_factor, backoff_factor;
  int32_t growth_interval;
  double min_scale, max_scale; /* 0: no bound */
} mx_amp_update_params;

MX_HD static inline void mx_amp_update_scale(float *scale, int32_t *growth_tracker, float found_inf,
                                             const mx_amp_update_params *p, int64_t *counters) {
  double next = *scale;
  counters[0] += 1;
  if (found_inf != 0.0f) {
    next = (double)*scale * p->backoff_factor;
    *growth_tracker = 0;
    counters[1] += 1;
    counters[2] += 1;
  } else {
    int64_t successful = (int64_t)*growth_tracker + 1; /* a loaded tracker may sit at INT32_MAX */
    counters[2] = 0;
    if (successful == p->growth_interval) {
      float grown = (float)((double)*scale * p->growth_factor);
      if (grown - grown == 0.0f) next = grown; /* finite: grow, else keep the scale */
      *growth_tracker = 0;
    } else {
      *growth_tracker = successful > INT32_MAX ? INT32_MAX : (int32_t)successful;
    }
  }
  if (p->min_scale > 0 && next < p->min_scale) next = p->min_scale;
  if (p->max_scale > 0 && next > p->max_scale) next = p->max_scale;
  *scale = (float)next;
}

/* --- optimizers: the update of one element ---------------------------------- */

/* Optimizer arithmetic runs at the precision of the optimizer's state:
 * float64 for float64 parameters, float32 for the others (f32, f16, bf16).
 * Each operation below is computed in double and rounded once by
 * mx_optim_round; for float32 that is the float32 operation bit for bit
 * (double carries more than 2 * 24 + 2 bits, so the double rounding is
 * innocuous for + - * / and sqrt). The functions thus redo PyTorch's
 * foreach=False tensor ops one by one, with each Python float hyper-parameter
 * rounded to the tensors' dtype as PyTorch does when it meets a tensor. */
MX_HD static inline double mx_optim_round(double v, bool f64) { return f64 ? v : (double)(float)v; }

/* A gradient value as an AMP step reads it: multiplied by the inverse loss
 * scale (mx_amp_inv_scale), in float64 for float64, else in float32 (what
 * GradScaler.unscale_ does to the gradient in place). */
MX_HD static inline double mx_optim_unscale(double g, float inv_scale, bool f64) {
  return f64 ? g * (double)inv_scale : (double)((float)g * inv_scale);
}

/* torch.optim.SGD's hyper-parameters. */
typedef struct {
  double lr, momentum, dampening, weight_decay;
  bool nesterov, maximize;
} mx_sgd_hparams;

/* torch.optim.Adam's, and AdamW's with decoupled_decay. */
typedef struct {
  double lr, beta1, beta2, eps, weight_decay;
  bool amsgrad, maximize, decoupled_decay;
} mx_adam_hparams;

#define MX__R(x) mx_optim_round((x), f64)

/* SGD on one element of a parameter p with gradient g; returns p's new
 * value. With momentum, *buf is the element's momentum buffer: on the
 * parameter's first step (first) it becomes the direction itself, without
 * dampening, as PyTorch's buffer is born a clone of it. */
MX_HD static inline double mx_sgd_update_element(double p, double g, double *buf, bool first,
                                                 const mx_sgd_hparams *h, bool f64) {
  double d = h->maximize ? -g : g;
  if (h->weight_decay != 0) d = MX__R(d + MX__R(MX__R(h->weight_decay) * p)); /* d.add(p, alpha=wd) */
  if (h->momentum != 0) {
    /* buf.mul_(momentum).add_(d, alpha=1 - dampening) */
    *buf = first ? d : MX__R(MX__R(*buf * MX__R(h->momentum)) + MX__R(MX__R(1 - h->dampening) * d));
    d = h->nesterov ? MX__R(d + MX__R(MX__R(h->momentum) * *buf)) : *buf;
  }
  return MX__R(p + MX__R(MX__R(-h->lr) * d)); /* p.add_(d, alpha=-lr) */
}

/* What Adam computes once per parameter and step, in float64 as Python
 * does: step_size = lr / (1 - beta1^step) and sqrt(1 - beta2^step), step
 * counting the step being taken (1 for the first). */
typedef struct {
  double step_size, bias_correction2_sqrt;
} mx_adam_factors;

MX_HD static inline mx_adam_factors mx_adam_factors_of(const mx_adam_hparams *h, int64_t step) {
  mx_adam_factors f;
  f.step_size = h->lr / (1 - pow(h->beta1, (double)step));
  f.bias_correction2_sqrt = sqrt(1 - pow(h->beta2, (double)step));
  return f;
}

/* Adam (or AdamW) on one element of a parameter p with gradient g; returns
 * p's new value. *m and *v are the element's exp_avg and exp_avg_sq; *vmax
 * its max_exp_avg_sq (amsgrad only). */
MX_HD static inline double mx_adam_update_element(double p, double g, double *m, double *v, double *vmax,
                                                  const mx_adam_hparams *h, mx_adam_factors f, bool f64) {
  if (h->maximize) g = -g;
  if (h->decoupled_decay)
    p = MX__R(p * MX__R(1 - h->lr * h->weight_decay)); /* p.mul_(1 - lr * wd) */
  else if (h->weight_decay != 0)
    g = MX__R(g + MX__R(MX__R(h->weight_decay) * p)); /* g.add(p, alpha=wd) */
  *m = MX__R(MX__R(*m * MX__R(h->beta1)) + MX__R(MX__R(1 - h->beta1) * g));         /* mul_, add_ */
  *v = MX__R(MX__R(*v * MX__R(h->beta2)) + MX__R(MX__R(MX__R(1 - h->beta2) * g) * g)); /* mul_, addcmul_ */
  double second = *v;
  if (h->amsgrad) {
    if (*vmax == *vmax && !(*vmax >= *v)) *vmax = *v; /* torch.maximum: a NaN wins */
    second = *vmax;
  }
  /* denom = (second.sqrt() / bias_correction2_sqrt).add_(eps);
   * p.addcdiv_(m, denom, value=-step_size) */
  double denom = MX__R(MX__R(MX__R(sqrt(second)) / MX__R(f.bias_correction2_sqrt)) + MX__R(h->eps));
  return MX__R(p + MX__R(MX__R(MX__R(-f.step_size) * *m) / denom));
}

#undef MX__R

/* Element k of an optimizer state buffer (float64 or float32). */
MX_HD static inline double mx_optim_state_load(const void *state, int64_t k, bool f64) {
  return f64 ? ((const double *)state)[k] : (double)((const float *)state)[k];
}

MX_HD static inline void mx_optim_state_store(void *state, int64_t k, bool f64, double v) {
  if (f64)
    ((double *)state)[k] = v;
  else
    ((float *)state)[k] = (float)v;
}

/* The kernels' entry: the update of element k of a parameter (value p,
 * gradient g) with its state at index k of the state buffers; returns p's
 * new value. SGD's buffer is NULL without momentum, Adam's state holds
 * exp_avg, exp_avg_sq and max_exp_avg_sq (NULL without amsgrad). */
MX_HD static inline double mx_sgd_step_element(void *buf, int64_t k, double p, double g, bool first,
                                               const mx_sgd_hparams *h, bool f64) {
  double b = buf ? mx_optim_state_load(buf, k, f64) : 0;
  p = mx_sgd_update_element(p, g, &b, first, h, f64);
  if (buf) mx_optim_state_store(buf, k, f64, b);
  return p;
}

MX_HD static inline double mx_adam_step_element(void *const *state, int64_t k, double p, double g,
                                                const mx_adam_hparams *h, mx_adam_factors f, bool f64) {
  double m = mx_optim_state_load(state[0], k, f64), v = mx_optim_state_load(state[1], k, f64);
  double vmax = state[2] ? mx_optim_state_load(state[2], k, f64) : 0;
  p = mx_adam_update_element(p, g, &m, &v, &vmax, h, f, f64);
  mx_optim_state_store(state[0], k, f64, m);
  mx_optim_state_store(state[1], k, f64, v);
  if (state[2]) mx_optim_state_store(state[2], k, f64, vmax);
  return p;
}

#endif
