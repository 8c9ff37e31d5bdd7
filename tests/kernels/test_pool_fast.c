/* kernels/cpu/pool.c's 2x2 stride-2 max pooling (forward values and indices,
 * backward dx), row-major and channels-last, float32, bfloat16 and float16,
 * with and without ReLU on load, against a scalar reference written here:
 * odd planes (the untiled right column and bottom row), widths that leave
 * every vector tail, channel counts around a vector's width, inputs full of
 * NaN (several to a window, distinct payloads, signalling ones), signed
 * zeros, ties and infinities; all compared bit for bit. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/base.h"
#include "kernels/cpu/pool.h"

/* A small generator, seeded per case (xorshift64*). */
static uint64_t next_random(uint64_t *state) {
  *state ^= *state >> 12;
  *state ^= *state << 25;
  *state ^= *state >> 27;
  return *state * 2685821657736338717ull;
}

/* A float32 value drawn to make the search's rules matter: NaN (1 in 6, a
 * random payload, quiet or signalling, either sign), signed zeros, +-inf,
 * and small integers, so a window often holds ties. */
static float random_value(uint64_t *state) {
  uint64_t r = next_random(state);
  switch (r % 12) {
  case 0:
  case 1: return mx_bits_f32(0x7f800000u | (uint32_t)(r >> 40 & 0x7fffffu) | 1u << 16 | (uint32_t)(r >> 20 & 1) << 31);
  case 2: return -0.0f;
  case 3: return 0.0f;
  case 4: return -INFINITY;
  case 5: return INFINITY;
  default: return (float)((int)(r >> 33 & 7) - 3);
  }
}

static uint16_t to_bits16(float v, mx_dtype dt) {
  uint32_t bits = mx_f32_bits(v);
  if (dt == MX_BF16) return (uint16_t)(bits >> 16); /* keeps a signalling NaN signalling: v is a bfloat16 value */
  if ((bits & 0x7fffffffu) > 0x7f800000u) /* float16 NaN with the payload's top bits, quiet or not */
    return (uint16_t)((bits >> 16 & 0x8000u) | 0x7c00u | (bits >> 13 & 0x3ffu) | 1u);
  return mx_f32_to_f16(v);
}

static float load_value(const void *data, int64_t i, mx_dtype dt) {
  if (dt == MX_F32) return ((const float *)data)[i];
  uint16_t h = ((const uint16_t *)data)[i];
  return dt == MX_BF16 ? mx_bf16_to_f32(h) : mx_f16_to_f32(h);
}

/* The bits v is stored as in dt (a 16-bit NaN made quiet). */
static uint32_t stored_bits(float v, mx_dtype dt) {
  if (dt == MX_F32) return mx_f32_bits(v);
  return dt == MX_BF16 ? mx_f32_to_bf16(v) : mx_f32_to_f16(v);
}

typedef struct {
  int64_t N, C, H, W;
  bool channels_last;
} pool_shape;

/* Element (n, c, h, w)'s position in memory. */
static int64_t at(const pool_shape *s, int64_t H, int64_t W, int64_t n, int64_t c, int64_t h, int64_t w) {
  return s->channels_last ? ((n * H + h) * W + w) * s->C + c : ((n * s->C + c) * H + h) * W + w;
}

static mx_kview view_of(void *data, mx_dtype dt, const pool_shape *s, int64_t H, int64_t W) {
  mx_kview v = {.data = data, .dtype = dt, .ndim = 4, .shape = {s->N, s->C, H, W}};
  if (s->channels_last) mx__channels_last_strides(v.shape, v.strides);
  else {
    v.strides[3] = 1, v.strides[2] = W, v.strides[1] = H * W, v.strides[0] = s->C * H * W;
  }
  return v;
}

static mx_pool_params params_2x2(bool relu) {
  return (mx_pool_params){.spatial = 2, .kernel = {2, 2}, .stride = {2, 2}, .dilation = {1, 1}, .relu = relu};
}

static size_t size_of(mx_dtype dt) { return dt == MX_F32 ? 4 : 2; }

/* Bits of element i of a float32 or 16-bit buffer. */
static uint32_t bits_at(const void *data, int64_t i, mx_dtype dt) {
  return dt == MX_F32 ? mx_f32_bits(((const float *)data)[i]) : ((const uint16_t *)data)[i];
}

/* Forward: values and indices (uint8 offsets or int64 flat positions) against the search's rules: the window's
 * elements row-major, the first taken, then any larger or NaN one (the last NaN wins, a tie keeps the first); ReLU as
 * mx_relu_f32 (-0 and NaN stay); the max stored in the dtype (a 16-bit NaN made quiet). */
static void check_forward(const pool_shape *s, mx_dtype dt, bool relu, bool offsets, uint64_t seed) {
  const int64_t OH = s->H / 2, OW = s->W / 2, in_count = s->N * s->C * s->H * s->W, out_count = s->N * s->C * OH * OW;
  void *x = malloc((size_t)in_count * size_of(dt)), *y = malloc((size_t)out_count * size_of(dt) + 1);
  void *indices = malloc((size_t)out_count * (offsets ? 1 : 8) + 1);
  cr_assert(x && y && indices);
  uint64_t state = seed;
  for (int64_t i = 0; i < in_count; i++) {
    float v = random_value(&state);
    if (dt == MX_F32) ((float *)x)[i] = v;
    else ((uint16_t *)x)[i] = to_bits16(v, dt);
  }
  mx_kview xv = view_of(x, dt, s, s->H, s->W), yv = view_of(y, dt, s, OH, OW);
  mx_kview iv = view_of(indices, offsets ? MX_U8 : MX_I64, s, OH, OW);
  mx_pool_params p = params_2x2(relu);
  cr_assert_eq(mx__cpu_max_pool(&yv, &iv, &xv, &p), MX_OK);
  int64_t wrong = 0;
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t c = 0; c < s->C; c++)
      for (int64_t oh = 0; oh < OH; oh++)
        for (int64_t ow = 0; ow < OW; ow++) {
          float best = 0;
          int64_t where = 0;
          for (int64_t r = 0; r < 4; r++) {
            float v = load_value(x, at(s, s->H, s->W, n, c, 2 * oh + r / 2, 2 * ow + r % 2), dt);
            if (relu) v = mx_relu_f32(v);
            if (r == 0 || v > best || v != v) best = v, where = r;
          }
          uint32_t want_bits = stored_bits(best, dt);
          int64_t o = at(s, OH, OW, n, c, oh, ow);
          int64_t want_index = offsets ? where : (2 * oh + where / 2) * s->W + 2 * ow + where % 2;
          int64_t index = offsets ? ((const uint8_t *)indices)[o] : ((const int64_t *)indices)[o];
          uint32_t got_bits = bits_at(y, o, dt);
          if ((got_bits != want_bits || index != want_index) && wrong++ < 5)
            cr_expect_fail("%s%s %s (%lld,%lld,%lld,%lld)%s output (%lld,%lld,%lld,%lld): 0x%x index %lld, want 0x%x "
                           "index %lld",
                           mx_dtype_name(dt), relu ? " relu" : "", offsets ? "u8" : "i64", (long long)s->N,
                           (long long)s->C, (long long)s->H, (long long)s->W, s->channels_last ? " channels-last" : "",
                           (long long)n, (long long)c, (long long)oh, (long long)ow, got_bits, (long long)index,
                           want_bits, (long long)want_index);
        }
  cr_expect_eq(wrong, 0, "%s forward (%lld,%lld,%lld,%lld)%s: %lld outputs wrong", mx_dtype_name(dt), (long long)s->N,
               (long long)s->C, (long long)s->H, (long long)s->W, s->channels_last ? " channels-last" : "",
               (long long)wrong);
  free(x), free(y), free(indices);
}

/* Backward with uint8 offsets: dx is 0 + dy at each window's max (-0 becomes +0, a NaN quiet) and +0 everywhere
 * else, the untiled right column and bottom row included; dx starts as garbage, as the op's fresh buffer may. */
static void check_backward(const pool_shape *s, mx_dtype dt, uint64_t seed) {
  const int64_t OH = s->H / 2, OW = s->W / 2, in_count = s->N * s->C * s->H * s->W, out_count = s->N * s->C * OH * OW;
  void *dx = malloc((size_t)in_count * size_of(dt)), *dy = malloc((size_t)out_count * size_of(dt) + 1);
  uint8_t *offset = malloc((size_t)out_count + 1);
  cr_assert(dx && dy && offset);
  memset(dx, 0x5a, (size_t)in_count * size_of(dt));
  uint64_t state = seed;
  for (int64_t i = 0; i < out_count; i++) {
    float v = random_value(&state);
    if (dt == MX_F32) ((float *)dy)[i] = v;
    else ((uint16_t *)dy)[i] = to_bits16(v, dt);
    offset[i] = (uint8_t)(next_random(&state) % 4);
  }
  mx_kview dxv = view_of(dx, dt, s, s->H, s->W), dyv = view_of(dy, dt, s, OH, OW);
  mx_kview iv = view_of(offset, MX_U8, s, OH, OW);
  mx_pool_params p = params_2x2(false);
  cr_assert_eq(mx__cpu_max_pool_backward(&dxv, &dyv, &iv, &p), MX_OK);
  int64_t wrong = 0;
  for (int64_t n = 0; n < s->N; n++)
    for (int64_t c = 0; c < s->C; c++)
      for (int64_t h = 0; h < s->H; h++)
        for (int64_t w = 0; w < s->W; w++) {
          int64_t oh = h / 2, ow = w / 2;
          float want = 0.0f;
          if (oh < OH && ow < OW) {
            int64_t o = at(s, OH, OW, n, c, oh, ow);
            if (offset[o] == (h % 2) * 2 + w % 2) want = 0.0f + load_value(dy, o, dt);
          }
          uint32_t want_bits = stored_bits(want, dt);
          uint32_t got_bits = bits_at(dx, at(s, s->H, s->W, n, c, h, w), dt);
          if (got_bits != want_bits && wrong++ < 5)
            cr_expect_fail("%s backward (%lld,%lld,%lld,%lld)%s dx (%lld,%lld,%lld,%lld): 0x%x, want 0x%x",
                           mx_dtype_name(dt), (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W,
                           s->channels_last ? " channels-last" : "", (long long)n, (long long)c, (long long)h,
                           (long long)w, got_bits, want_bits);
        }
  cr_expect_eq(wrong, 0, "%s backward (%lld,%lld,%lld,%lld)%s: %lld elements wrong", mx_dtype_name(dt),
               (long long)s->N, (long long)s->C, (long long)s->H, (long long)s->W,
               s->channels_last ? " channels-last" : "", (long long)wrong);
  free(dx), free(dy), free(offset);
}

static const mx_dtype dtypes[] = {MX_F32, MX_BF16, MX_F16};

/* Widths around the vector loops' 8, 16 and 32 outputs, even and odd. */
static const int64_t widths[] = {1, 2, 3, 4, 17, 33, 34, 65, 66, 129};

Test(pool_fast, row_major_every_width) {
  uint64_t seed = 1;
  for (int d = 0; d < 3; d++)
    for (size_t w = 0; w < sizeof widths / sizeof *widths; w++)
      for (int64_t H = 1; H <= 4; H++) {
        pool_shape s = {2, 3, H + (int64_t)w % 2, widths[w], false};
        for (int relu = 0; relu < 2; relu++) check_forward(&s, dtypes[d], relu, true, seed++);
        check_forward(&s, dtypes[d], false, false, seed++);
        check_backward(&s, dtypes[d], seed++);
      }
}

/* Channel counts around the vector widths (16 float32, 32 16-bit values). */
static const int64_t channels[] = {1, 2, 3, 15, 16, 17, 31, 32, 33, 64, 65};

Test(pool_fast, channels_last_every_channel_count) {
  uint64_t seed = 1000;
  for (int d = 0; d < 3; d++)
    for (size_t c = 0; c < sizeof channels / sizeof *channels; c++) {
      pool_shape s = {2, channels[c], 5 + (int64_t)c % 2, 7 - (int64_t)c % 3, true};
      for (int relu = 0; relu < 2; relu++) check_forward(&s, dtypes[d], relu, true, seed++);
      check_forward(&s, dtypes[d], false, false, seed++);
      check_backward(&s, dtypes[d], seed++);
    }
}

/* Random shapes in both layouts (batch 1 to 3, planes 1 to 40 wide). */
Test(pool_fast, random_shapes) {
  uint64_t state = 77;
  int rounds = getenv("MX_TEST_QUICK") ? 20 : 80;
  for (int k = 0; k < rounds; k++) {
    pool_shape s = {1 + (int64_t)(next_random(&state) % 3), 1 + (int64_t)(next_random(&state) % 40),
                    1 + (int64_t)(next_random(&state) % 17), 1 + (int64_t)(next_random(&state) % 40),
                    next_random(&state) % 2 == 0};
    mx_dtype dt = dtypes[next_random(&state) % 3];
    check_forward(&s, dt, next_random(&state) % 2, true, 5000 + (uint64_t)k);
    check_backward(&s, dt, 9000 + (uint64_t)k);
  }
}

/* The CNN's shapes: (4, 32, 28, 28) and (4, 64, 14, 14), both layouts. */
Test(pool_fast, cnn_shapes) {
  const pool_shape shapes[] = {{4, 32, 28, 28, false}, {4, 64, 14, 14, false}, {4, 32, 28, 28, true},
                               {4, 64, 14, 14, true}};
  uint64_t seed = 20000;
  for (int d = 0; d < 2; d++)
    for (int k = 0; k < 4; k++) {
      for (int relu = 0; relu < 2; relu++) check_forward(&shapes[k], dtypes[d], relu, true, seed++);
      check_backward(&shapes[k], dtypes[d], seed++);
    }
}
