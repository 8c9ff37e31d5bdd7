/* Max and average pooling over 1, 2 or 3 spatial dims on the CPU, with
 * their backward kernels. Tensors are contiguous (N, C, *S), where missing
 * spatial dims count as size 1, so one loop nest serves every rank; or
 * channels-last (N, C, H, W), walked a pixel's row of C values at a time
 * (the end of this file). */
#include <math.h>
#include <string.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/pool.h"
#include "kernels/cpu/pool_avx512.h"
#include "kernels/cpu/pool_search.h"
#include "kernels/cpu/wide_clones.h"
#include "kernels/pool_geom.h"

/* Max pooling's indices come in two encodings, told apart by dtype (see
 * kernels/backend.h): uint8 holds the max's offset in its window, row-major
 * over the kernel; int64 holds its flat position in the input plane. The
 * two meet in mx_pool_window_corner + mx_pool_window_deltas[offset]. */
static void set_index(void *indices, int64_t i, int64_t flat, int64_t offset, bool offsets) {
  if (offsets) ((uint8_t *)indices)[i] = (uint8_t)offset;
  else ((int64_t *)indices)[i] = flat;
}


/* The channels-last kernels (the end of this file). */
static bool channels_last(const mx_kview *v);
static void max_pool_cl(const mx_pool_geom *g, const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                        bool relu);
static void max_pool_backward_cl(const mx_pool_geom *g, const mx_kview *dx, const mx_kview *dy,
                                 const mx_kview *indices);
static void avg_pool_cl(const mx_pool_geom *g, const mx_pool_params *params, const mx_kview *out, const mx_kview *x);
static void avg_pool_backward_cl(const mx_pool_geom *g, const mx_pool_params *params, const mx_kview *dx,
                                 const mx_kview *dy);

static bool is_2x2(const mx_pool_geom *g) {
  return g->k[1] == 2 && g->k[2] == 2 && g->s[1] == 2 && g->s[2] == 2 && g->p[1] == 0 && g->p[2] == 0 &&
         g->d[1] == 1 && g->d[2] == 1;
}

/* 16-bit planes search 2x2 windows in float32 blocks of this many inputs. */
enum { WIDE_BLOCK = 4096 };

/* The common case, a float32 or bfloat16 plane (D = 1), or a float16 one
 * with 2x2 windows and rows that fit a block: the search with typed loads
 * and little index arithmetic per output, several times faster than loading
 * every element as a double through its dtype. */
static bool planar(const mx_pool_geom *g, const mx_kview *x, const mx_kview *out) {
  if (g->in[0] != 1 || g->k[0] != 1 || x->dtype != out->dtype) return false;
  if (x->dtype == MX_F16) return is_2x2(g) && 2 * g->in[2] <= WIDE_BLOCK;
  return x->dtype == MX_F32 || x->dtype == MX_BF16;
}

static float load_f32_or_bf16(const void *x, int64_t i, bool bf16) {
  return bf16 ? mx_bf16_to_f32(((const uint16_t *)x)[i]) : ((const float *)x)[i];
}

static void store_f32_or_bf16(void *out, int64_t i, float v, bool bf16) {
  if (bf16) ((uint16_t *)out)[i] = mx_f32_to_bf16(v); /* exact: v is a bfloat16 value */
  else ((float *)out)[i] = v;
}

/* 2x2 windows with stride 2 and no padding, the CNNs' pooling: one row of
 * outputs from input rows top and top + W, four loads and three steps per
 * output. The max's offset in the window (0 to 3) is an int32 in the loop,
 * which lets it vectorise across the row (SSE2 has no 64-bit select on
 * float compares, and a uint8 store next to float selects stops GCC);
 * store_row_indices encodes the offsets afterwards. */
#define MX__MAX_POOL_ROW_2X2(name, type, load, store)                                                    \
  static void name(const type *restrict top, int64_t W, type *restrict out, int32_t *restrict offset, int64_t n) { \
    for (int64_t ow = 0; ow < n; ow++) {                                                             \
      float best = load(top[2 * ow]), b = load(top[2 * ow + 1]);                                     \
      float c = load(top[W + 2 * ow]), d = load(top[W + 2 * ow + 1]);                                \
      int32_t where = 0;                                                                             \
      MX__MAX_STEP(b, 1);                                                                            \
      MX__MAX_STEP(c, 2);                                                                            \
      MX__MAX_STEP(d, 3);                                                                            \
      out[ow] = store(best);                                                                         \
      offset[ow] = where;                                                                            \
    }                                                                                                \
  }
MX__MAX_POOL_ROW_2X2(max_pool_row_2x2_f32_search, float, mx__pool_f32_of_f32, mx__pool_f32_store)
MX__MAX_POOL_ROW_2X2(max_pool_row_2x2_bf16_search, uint16_t, mx__pool_f32_of_bf16, mx__pool_bf16_store)
MX__MAX_POOL_ROW_2X2(max_pool_row_2x2_f32_relu_search, float, mx__pool_relu_of_f32, mx__pool_f32_store)
MX__MAX_POOL_ROW_2X2(max_pool_row_2x2_bf16_relu_search, uint16_t, mx__pool_relu_of_bf16, mx__pool_bf16_store)

/* Indices o.. of a row of 2x2 windows whose first input is at first. */
static void store_row_indices(const int32_t *offset, int64_t n, void *indices, int64_t o, int64_t first, int64_t W,
                              bool offsets) {
  if (offsets) {
    uint8_t *u8 = (uint8_t *)indices + o;
    for (int64_t i = 0; i < n; i++) u8[i] = (uint8_t)offset[i];
  } else {
    int64_t *i64 = (int64_t *)indices + o;
    for (int64_t i = 0; i < n; i++) i64[i] = first + 2 * i + (offset[i] & 1) + (offset[i] >> 1) * W;
  }
}

enum { ROW_CHUNK = 1024 }; /* outputs per search, the offsets' stack buffer */

/* A row of n 2x2 windows from input rows top and top + W (float32, or
 * bfloat16 searched as is), in chunks of ROW_CHUNK; indices from o. relu:
 * the search sees relu of each input. */
static void max_pool_row_2x2(const void *top, int64_t W, void *out, void *indices, int64_t o, int64_t n, int64_t first,
                             bool offsets, bool bf16, bool relu) {
  int32_t offset[ROW_CHUNK];
  for (int64_t c = 0; c < n; c += ROW_CHUNK) {
    int64_t m = n - c < ROW_CHUNK ? n - c : ROW_CHUNK;
    const uint16_t *top16 = (const uint16_t *)top + 2 * c;
    const float *top32 = (const float *)top + 2 * c;
    if (bf16 && relu) max_pool_row_2x2_bf16_relu_search(top16, W, (uint16_t *)out + c, offset, m);
    else if (bf16) max_pool_row_2x2_bf16_search(top16, W, (uint16_t *)out + c, offset, m);
    else if (relu) max_pool_row_2x2_f32_relu_search(top32, W, (float *)out + c, offset, m);
    else max_pool_row_2x2_f32_search(top32, W, (float *)out + c, offset, m);
    store_row_indices(offset, m, indices, o + c, first + 2 * c, W, offsets);
  }
}

/* rows rows of n windows, each row's input pair 2 W past the last one's,
 * its outputs n past; first: top's flat position in the plane; readable:
 * the input elements from top that the AVX-512 loop (when the CPU has it
 * and the indices are offsets) may read. */
static void max_pool_rows_2x2(const void *top, int64_t W, void *out, void *indices, int64_t o, int64_t rows, int64_t n,
                              int64_t first, int64_t readable, bool offsets, bool bf16, bool relu) {
#ifdef MX__POOL_AVX512
  if (offsets && mx__pool_avx512()) {
    mx__pool_rows_2x2_avx512(top, W, out, (uint8_t *)indices + o, rows, n, readable, bf16, relu);
    return;
  }
#else
  (void)readable;
#endif
  const int64_t size = bf16 ? 2 : 4;
  for (int64_t r = 0; r < rows; r++)
    max_pool_row_2x2((const char *)top + 2 * r * W * size, W, (char *)out + r * n * size, indices, o + r * n, n,
                     first + 2 * r * W, offsets, bf16, relu);
}

/* bfloat16 and float16 planes go through float32 rows: a block of input
 * rows widened in one vectorised pass, the float32 search (its vector loop
 * covers more of a short row than the 16-bit one, which leaves a 14-wide
 * row to its scalar tail), the maxima narrowed back in one pass: exact,
 * since each is one of the inputs. bfloat16 rows wider than the block,
 * and every bfloat16 row where the AVX-512 search runs (it reads bfloat16
 * pairs as they are), search in bfloat16 (float16 ones are not planar). */
static void max_pool_plane_2x2_16bit(const mx_pool_geom *g, const uint16_t *x, uint16_t *out, void *indices,
                                     bool offsets, mx_dtype dt, bool relu) {
  const int64_t H = g->in[1], W = g->in[2], OW = g->out[2], OH = g->out[1];
  int64_t rows = WIDE_BLOCK / (2 * W);
#ifdef MX__POOL_AVX512
  if (dt == MX_BF16 && offsets && mx__pool_avx512()) rows = 0; /* its bfloat16 search needs no float32 rows */
#endif
  if (rows == 0) {
    max_pool_rows_2x2(x, W, out, indices, 0, OH, OW, 0, H * W, offsets, true, relu);
    return;
  }
  float in[WIDE_BLOCK], maxima[WIDE_BLOCK / 2];
  for (int64_t oh0 = 0; oh0 < OH; oh0 += rows) {
    int64_t n = OH - oh0 < rows ? OH - oh0 : rows;
    if (dt == MX_F16) mx__f16_to_f32_n(x + 2 * oh0 * W, in, 2 * n * W);
    else mx__bf16_to_f32_n(x + 2 * oh0 * W, in, 2 * n * W);
    max_pool_rows_2x2(in, W, maxima, indices, oh0 * OW, n, OW, 2 * oh0 * W, 2 * n * W, offsets, false, relu);
    if (dt == MX_F16) mx__f32_to_f16_n(maxima, out + oh0 * OW, n * OW);
    else mx__f32_to_bf16_n(maxima, out + oh0 * OW, n * OW);
  }
}

static void max_pool_plane_2x2(const mx_pool_geom *g, const void *x, void *out, void *indices, mx_dtype dt,
                               bool offsets, bool relu) {
  if (dt != MX_F32) {
    max_pool_plane_2x2_16bit(g, x, out, indices, offsets, dt, relu);
    return;
  }
  max_pool_rows_2x2(x, g->in[2], out, indices, 0, g->out[1], g->out[2], 0, g->in[1] * g->in[2], offsets, false, relu);
}

static void max_pool_plane(const mx_pool_geom *g, const void *x, void *out, void *indices, mx_dtype dt, bool offsets,
                           bool relu) {
  if (is_2x2(g)) {
    max_pool_plane_2x2(g, x, out, indices, dt, offsets, relu);
    return;
  }
  bool bf16 = dt == MX_BF16; /* float16 planes are 2x2 */
  const int64_t H = g->in[1], W = g->in[2];
  for (int64_t oh = 0; oh < g->out[1]; oh++)
    for (int64_t ow = 0; ow < g->out[2]; ow++) {
      float best = -INFINITY;
      int64_t where = -1, offset = 0;
      for (int64_t kh = 0; kh < g->k[1]; kh++) {
        int64_t h = oh * g->s[1] - g->p[1] + kh * g->d[1];
        if (h < 0 || h >= H) continue;
        for (int64_t kw = 0; kw < g->k[2]; kw++) {
          int64_t w = ow * g->s[2] - g->p[2] + kw * g->d[2];
          if (w < 0 || w >= W) continue;
          float v = load_f32_or_bf16(x, h * W + w, bf16);
          if (relu) v = mx_relu_f32(v);
          int64_t was = where;
          if (where < 0) best = v, where = h * W + w;
          else MX__MAX_STEP(v, h * W + w);
          if (where != was) offset = kh * g->k[2] + kw;
        }
      }
      store_f32_or_bf16(out, oh * g->out[2] + ow, best, bf16);
      set_index(indices, oh * g->out[2] + ow, where < 0 ? 0 : where, offset, offsets);
    }
}

mx_status mx__cpu_max_pool(const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                           const mx_pool_params *params) {
  mx_pool_geom g = mx_pool_geom_of(x, out, params);
  if (channels_last(x)) {
    max_pool_cl(&g, out, indices, x, params->relu);
    return MX_OK;
  }
  int64_t in_plane = mx_pool_volume(g.in), out_plane = mx_pool_volume(g.out);
  size_t xs = mx_dtype_size(x->dtype), os = mx_dtype_size(out->dtype);
  bool offsets = indices->dtype == MX_U8;
  int64_t is = (int64_t)mx_dtype_size(indices->dtype);
  if (planar(&g, x, out)) {
    MX_PARALLEL_FOR(g.planes * out_plane * mx_pool_volume(g.k))
    for (int64_t pl = 0; pl < g.planes; pl++)
      max_pool_plane(&g, (const char *)x->data + pl * in_plane * (int64_t)xs,
                     (char *)out->data + pl * out_plane * (int64_t)os, (char *)indices->data + pl * out_plane * is,
                     x->dtype, offsets, params->relu);
    return MX_OK;
  }
  MX_PARALLEL_FOR(g.planes * out_plane * mx_pool_volume(g.k))
  for (int64_t pl = 0; pl < g.planes; pl++) {
    const char *xp = (const char *)x->data + pl * in_plane * (int64_t)xs;
    for (int64_t o = 0; o < out_plane; o++) {
      int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
      double best = -INFINITY;
      int64_t where = -1, offset = 0;
      MX_POOL_FOR_WINDOW(g, o0, o1, o2, {
        double v = mx_element_load(xp + flat * (int64_t)xs, x->dtype);
        if (params->relu) v = mx_relu_f64(v);
        if (where < 0 || v > best || isnan(v)) {
          best = v;
          where = flat;
          offset = (k0 * g.k[1] + k1) * g.k[2] + k2;
        }
      })
      mx_element_store((char *)out->data + (pl * out_plane + o) * (int64_t)os, out->dtype, best);
      set_index(indices->data, pl * out_plane + o, where < 0 ? 0 : where, offset, offsets);
    }
  }
  return MX_OK;
}

/* dx[flat] += dy[o]. Adding in float32 rounds as the generic path's add in
 * double does: the double sum of two floats rounds to the same float. When
 * windows are disjoint each sum is 0 + dy[o], exact, so bfloat16 needs no
 * rounding, only the quiet NaN (mx__pool_bf16_store), and nothing is read. */
static inline void scatter_one(char *dx, int64_t flat, const char *dy, int64_t o, mx_dtype dx_dtype,
                               mx_dtype dy_dtype, bool typed, bool disjoint) {
  if (typed && dx_dtype == MX_F32) {
    float *d = (float *)dx;
    d[flat] = (disjoint ? 0.0f : d[flat]) + ((const float *)dy)[o];
  } else if (typed) {
    uint16_t *d = (uint16_t *)dx;
    float sum = (disjoint ? 0.0f : mx_bf16_to_f32(d[flat])) + mx_bf16_to_f32(((const uint16_t *)dy)[o]);
    d[flat] = disjoint ? mx__pool_bf16_store(sum) : mx_f32_to_bf16(sum);
  } else {
    size_t size = mx_dtype_size(dx_dtype);
    char *target = dx + flat * (int64_t)size;
    double grad = mx_element_load(dy + o * (int64_t)mx_dtype_size(dy_dtype), dy_dtype);
    mx_element_store(target, dx_dtype, mx_element_load(target, dx_dtype) + grad);
  }
}

/* Zeroes what no window covers in a plane of H rows of W elements of size bytes whose windows cover the top left
 * rows x cols block: the rows' right ends, then the rows below. */
static void zero_uncovered(char *plane, int64_t H, int64_t W, int64_t rows, int64_t cols, int64_t size) {
  if (cols < W)
    for (int64_t h = 0; h < rows; h++) memset(plane + (h * W + cols) * size, 0, (size_t)((W - cols) * size));
  memset(plane + rows * W * size, 0, (size_t)((H - rows) * W * size));
}

/* The 2x2 stride-2 windows of one float32, bfloat16 or float16 plane
 * (D = 1) with offsets: the scatter with the offset decoded in place. The
 * windows are disjoint, so each store is 0 + dy (-0 becomes +0, a NaN
 * quiet) and nothing is read from dx. */
static void max_pool_backward_plane_2x2(const mx_pool_geom *g, void *dx, const void *dy, const uint8_t *offset,
                                        mx_dtype dt) {
  const int64_t W = g->in[2], OH = g->out[1], OW = g->out[2];
  memset(dx, 0, (size_t)(g->in[1] * W) * mx_dtype_size(dt)); /* plane by plane: the scatter finds it in cache */
  for (int64_t oh = 0, o = 0; oh < OH; oh++)
    for (int64_t ow = 0; ow < OW; ow++, o++) {
      int64_t flat = 2 * oh * W + 2 * ow + (offset[o] & 1) + (offset[o] >> 1) * W;
      if (dt == MX_BF16) ((uint16_t *)dx)[flat] = mx__pool_bf16_plus_zero(((const uint16_t *)dy)[o]);
      else if (dt == MX_F16) ((uint16_t *)dx)[flat] = mx__pool_f16_plus_zero(((const uint16_t *)dy)[o]);
      else ((float *)dx)[flat] = 0.0f + ((const float *)dy)[o];
    }
}

#ifdef MX__POOL_AVX512
/* The same with every element of the windows' block written once (0 + dy
 * at the max, +0 elsewhere) a row pair at a time, then the uncovered right
 * column and bottom row zeroed (the rows' last vectors may run into them). */
static void max_pool_backward_plane_2x2_avx512(const mx_pool_geom *g, void *dx, const void *dy, const uint8_t *offset,
                                               mx_dtype dt) {
  const int64_t H = g->in[1], W = g->in[2], OH = g->out[1], OW = g->out[2], size = (int64_t)mx_dtype_size(dt);
  mx__pool_rows_2x2_backward_avx512(dx, W, dy, offset, OH, OW, H * W, (int)(8 * size), dt == MX_BF16);
  zero_uncovered(dx, H, W, 2 * OH, 2 * OW, size);
}
#endif

mx_status mx__cpu_max_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_kview *indices,
                                    const mx_pool_params *params) {
  mx_pool_geom g = mx_pool_geom_of(dx, dy, params);
  if (channels_last(dx)) {
    max_pool_backward_cl(&g, dx, dy, indices);
    return MX_OK;
  }
  int64_t in_plane = mx_pool_volume(g.in), out_plane = mx_pool_volume(g.out);
  size_t size = mx_dtype_size(dx->dtype), dy_size = mx_dtype_size(dy->dtype);
  bool typed = dx->dtype == dy->dtype && (dx->dtype == MX_F32 || dx->dtype == MX_BF16);
  bool offsets = indices->dtype == MX_U8, disjoint = true;
  bool stores_typed = typed || (dx->dtype == MX_F16 && dy->dtype == MX_F16); /* the 2x2 path stores float16 too */
  bool windows_2x2 = stores_typed && offsets && g.in[0] == 1 && is_2x2(&g);
  for (int i = 0; i < 3; i++) disjoint &= g.s[i] >= (g.k[i] - 1) * g.d[i] + 1;
  int64_t delta[256];
  if (offsets) mx_pool_window_deltas(&g, delta); /* the op uses offsets for kernels of at most 256 */
  MX_PARALLEL_FOR(g.planes * out_plane)
  for (int64_t pl = 0; pl < g.planes; pl++) { /* planes never share elements */
    char *dp = (char *)dx->data + pl * in_plane * (int64_t)size;
    const char *gp = (const char *)dy->data + pl * out_plane * (int64_t)dy_size;
    const uint8_t *window_offsets = (const uint8_t *)indices->data + pl * out_plane;
    const int64_t *flat_indices = (const int64_t *)indices->data + pl * out_plane;
    if (windows_2x2) {
#ifdef MX__POOL_AVX512
      /* planes under 12 wide keep the memset and the scatter, faster there (one thread, float32, memset and
       * scatter against the AVX-512 rows: (32, 512, 8, 8) 0.27 ms against 0.42; 12 wide even; 14 wide 0.39
       * against 0.34) */
      if (g.out[2] >= 6 && mx__pool_avx512()) {
        max_pool_backward_plane_2x2_avx512(&g, dp, gp, window_offsets, dx->dtype);
        continue;
      }
#endif
      max_pool_backward_plane_2x2(&g, dp, gp, window_offsets, dx->dtype);
      continue;
    }
    memset(dp, 0, (size_t)in_plane * size); /* plane by plane: the scatter finds it in cache */
    int64_t o = 0;
    for (int64_t o0 = 0; o0 < g.out[0]; o0++)
      for (int64_t o1 = 0; o1 < g.out[1]; o1++) {
        int64_t corner = mx_pool_window_corner(&g, o0, o1, 0);
        for (int64_t o2 = 0; o2 < g.out[2]; o2++, o++) {
          int64_t flat = offsets ? corner + o2 * g.s[2] + delta[window_offsets[o]] : flat_indices[o];
          scatter_one(dp, flat, gp, o, dx->dtype, dy->dtype, typed, disjoint);
        }
      }
  }
  return MX_OK;
}

/* count_include_pad: the whole window (the padding counts); otherwise only
 * the elements inside the input. */
static double divisor(const mx_pool_geom *g, const mx_pool_params *params, int64_t o0, int64_t o1, int64_t o2) {
  if (params->count_include_pad) return (double)mx_pool_volume(g->k);
  double n = 0;
  MX_POOL_FOR_WINDOW(*g, o0, o1, o2, { (void)flat; n += 1; })
  return n > 0 ? n : 1;
}

mx_status mx__cpu_avg_pool(const mx_kview *out, const mx_kview *x, const mx_pool_params *params) {
  mx_pool_geom g = mx_pool_geom_of(x, out, params);
  if (channels_last(x)) {
    avg_pool_cl(&g, params, out, x);
    return MX_OK;
  }
  int64_t in_plane = mx_pool_volume(g.in), out_plane = mx_pool_volume(g.out);
  size_t xs = mx_dtype_size(x->dtype), os = mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(g.planes * out_plane * mx_pool_volume(g.k))
  for (int64_t pl = 0; pl < g.planes; pl++) {
    const char *xp = (const char *)x->data + pl * in_plane * (int64_t)xs;
    for (int64_t o = 0; o < out_plane; o++) {
      int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
      double sum = 0;
      MX_POOL_FOR_WINDOW(g, o0, o1, o2, { sum += mx_element_load(xp + flat * (int64_t)xs, x->dtype); })
      mx_element_store((char *)out->data + (pl * out_plane + o) * (int64_t)os, out->dtype,
                    sum / divisor(&g, params, o0, o1, o2));
    }
  }
  return MX_OK;
}

mx_status mx__cpu_avg_pool_backward(const mx_kview *dx, const mx_kview *dy, const mx_pool_params *params) {
  mx_pool_geom g = mx_pool_geom_of(dx, dy, params);
  if (channels_last(dx)) {
    avg_pool_backward_cl(&g, params, dx, dy);
    return MX_OK;
  }
  int64_t in_plane = mx_pool_volume(g.in), out_plane = mx_pool_volume(g.out);
  size_t size = mx_dtype_size(dx->dtype);
  memset(dx->data, 0, (size_t)(g.planes * in_plane) * size);
  MX_PARALLEL_FOR(g.planes * out_plane * mx_pool_volume(g.k))
  for (int64_t pl = 0; pl < g.planes; pl++) {
    char *dp = (char *)dx->data + pl * in_plane * (int64_t)size;
    for (int64_t o = 0; o < out_plane; o++) {
      int64_t o2 = o % g.out[2], o1 = (o / g.out[2]) % g.out[1], o0 = o / (g.out[2] * g.out[1]);
      double grad = mx_element_load((const char *)dy->data + (pl * out_plane + o) * (int64_t)size, dy->dtype) /
                    divisor(&g, params, o0, o1, o2);
      MX_POOL_FOR_WINDOW(g, o0, o1, o2, {
        char *target = dp + flat * (int64_t)size;
        mx_element_store(target, dx->dtype, mx_element_load(target, dx->dtype) + grad);
      })
    }
  }
  return MX_OK;
}

/* --- channels-last ----------------------------------------------------------------------------- */

/* A channels-last view that is not also contiguous (C > 1 and planes of
 * more than one pixel, where the two orders differ). The op gives every
 * tensor of the call x's (dx's) layout, so that view decides for all:
 * element (n, c, h, w) lies at ((n H + h) W + w) C + c, each pixel's C
 * values in a row. The loops below run along those rows, which
 * vectorises, and do the row-major loops' arithmetic in their order for
 * each element, so the values are the same bits. Channels-last tensors
 * are 4-d: the geometry's first spatial dim is 1. */
static bool channels_last(const mx_kview *v) { return !mx__kview_is_contiguous(v) && mx__kview_is_channels_last(v); }

enum { CL_TILE = 64 }; /* channels a pixel's search or sum holds at a time */

/* The input pixel h W + w under window element (kh, kw) of output pixel
 * (oh, ow), or -1 where it lies in the padding. */
static int64_t window_pixel(const mx_pool_geom *g, int64_t oh, int64_t ow, int64_t kh, int64_t kw) {
  int64_t h = oh * g->s[1] - g->p[1] + kh * g->d[1], w = ow * g->s[2] - g->p[2] + kw * g->d[2];
  return h < 0 || h >= g->in[1] || w < 0 || w >= g->in[2] ? -1 : h * g->in[2] + w;
}

/* Channels c0 .. c0 + m of input pixel p as float32: in place, or
 * bfloat16 widened (exactly) into buf. */
static const float *pixel_f32(const void *image, int64_t p, int64_t C, int64_t c0, int64_t m, bool bf16,
                              float *buf) {
  if (!bf16) return (const float *)image + p * C + c0;
  mx__bf16_to_f32_n((const uint16_t *)image + p * C + c0, buf, m);
  return buf;
}

/* One output pixel of float32 or bfloat16 data, whose C values start at
 * element o of out and indices: max_pool_plane's search (MX__MAX_STEP)
 * across a tile of channels at once, each channel's max's offset in the
 * window an int32 (the kernel holds fewer than 2^31 elements). */
static void max_pool_pixel_cl(const mx_pool_geom *g, const void *image, int64_t C, int64_t oh, int64_t ow, void *out,
                              void *indices, int64_t o, bool bf16, bool offsets, bool relu) {
  for (int64_t c0 = 0; c0 < C; c0 += CL_TILE) {
    int64_t m = C - c0 < CL_TILE ? C - c0 : CL_TILE;
    float best[CL_TILE], buf[CL_TILE];
    int32_t where[CL_TILE];
    bool found = false;
    for (int64_t kh = 0; kh < g->k[1]; kh++)
      for (int64_t kw = 0; kw < g->k[2]; kw++) {
        int64_t p = window_pixel(g, oh, ow, kh, kw);
        if (p < 0) continue;
        const float *v = pixel_f32(image, p, C, c0, m, bf16, buf);
        if (relu) {
          for (int64_t c = 0; c < m; c++) buf[c] = mx__pool_relu_bits(v[c]);
          v = buf;
        }
        int32_t r = (int32_t)(kh * g->k[2] + kw);
        if (!found) { /* the window's first element inside the input */
          for (int64_t c = 0; c < m; c++) best[c] = v[c], where[c] = r;
          found = true;
          continue;
        }
        for (int64_t c = 0; c < m; c++) {
          uint32_t take = -(uint32_t)((v[c] > best[c]) | (v[c] != v[c]));
          best[c] = mx__pool_select_f32(take, v[c], best[c]);
          where[c] = take ? r : where[c];
        }
      }
    for (int64_t c = 0; !found && c < m; c++) best[c] = -INFINITY, where[c] = 0; /* a window all padding */
    if (bf16)
      for (int64_t c = 0; c < m; c++) ((uint16_t *)out)[o + c0 + c] = mx__pool_bf16_store(best[c]);
    else
      memcpy((float *)out + o + c0, best, (size_t)m * sizeof(float));
    if (offsets) {
      for (int64_t c = 0; c < m; c++) ((uint8_t *)indices)[o + c0 + c] = (uint8_t)where[c];
    } else {
      for (int64_t c = 0; c < m; c++) {
        int64_t kh = where[c] / g->k[2], kw = where[c] % g->k[2];
        int64_t h = oh * g->s[1] - g->p[1] + kh * g->d[1], w = ow * g->s[2] - g->p[2] + kw * g->d[2];
        ((int64_t *)indices)[o + c0 + c] = found ? h * g->in[2] + w : 0;
      }
    }
  }
}

/* The same for the other dtypes (float64, float16), an element at a time
 * through double as the general row-major loop does. */
static void max_pool_pixel_cl_general(const mx_pool_geom *g, const char *image, int64_t C, int64_t oh, int64_t ow,
                                      char *out, void *indices, int64_t o, mx_dtype dt, bool offsets, bool relu) {
  int64_t size = (int64_t)mx_dtype_size(dt);
  for (int64_t c = 0; c < C; c++) {
    double best = -INFINITY;
    int64_t where = -1, offset = 0;
    for (int64_t kh = 0; kh < g->k[1]; kh++)
      for (int64_t kw = 0; kw < g->k[2]; kw++) {
        int64_t p = window_pixel(g, oh, ow, kh, kw);
        if (p < 0) continue;
        double v = mx_element_load(image + (p * C + c) * size, dt);
        if (relu) v = mx_relu_f64(v);
        if (where < 0 || v > best || isnan(v)) {
          best = v;
          where = p;
          offset = kh * g->k[2] + kw;
        }
      }
    mx_element_store(out + (o + c) * size, dt, best);
    set_index(indices, o + c, where < 0 ? 0 : where, offset, offsets);
  }
}

/* 2x2 windows with stride 2 and no padding, the CNNs' pooling: channels
 * c0 .. c0 + n of one output pixel from the four input rows a, b (a's
 * right), c (below a) and d, four loads and three steps per output as
 * max_pool_row_2x2's, the offset an int32 so the loop vectorises. */
#define MX__MAX_POOL_PIXEL_2X2(name, type, load, store)                                                       \
  MX_WIDE_CLONES static void name(const type *restrict a, const type *restrict b, const type *restrict c_,   \
                   const type *restrict d, type *restrict out, int32_t *restrict offset, int64_t n) {        \
    for (int64_t i = 0; i < n; i++) {                                                                        \
      float best = load(a[i]), vb = load(b[i]), vc = load(c_[i]), vd = load(d[i]);                          \
      int32_t where = 0;                                                                                     \
      MX__MAX_STEP(vb, 1);                                                                                   \
      MX__MAX_STEP(vc, 2);                                                                                   \
      MX__MAX_STEP(vd, 3);                                                                                   \
      out[i] = store(best);                                                                                  \
      offset[i] = where;                                                                                     \
    }                                                                                                        \
  }
MX__MAX_POOL_PIXEL_2X2(max_pool_pixel_2x2_f32, float, mx__pool_f32_of_f32, mx__pool_f32_store)
MX__MAX_POOL_PIXEL_2X2(max_pool_pixel_2x2_bf16, uint16_t, mx__pool_f32_of_bf16, mx__pool_bf16_store)
MX__MAX_POOL_PIXEL_2X2(max_pool_pixel_2x2_f32_relu, float, mx__pool_relu_of_f32, mx__pool_f32_store)
MX__MAX_POOL_PIXEL_2X2(max_pool_pixel_2x2_bf16_relu, uint16_t, mx__pool_relu_of_bf16, mx__pool_bf16_store)

/* Output pixel (oh, ow) of 2x2 windows, its C values from element o of
 * out and indices, in chunks of ROW_CHUNK channels. */
static void max_pool_pixel_cl_2x2(const mx_pool_geom *g, const void *image, int64_t C, int64_t oh, int64_t ow,
                                  void *out, void *indices, int64_t o, bool bf16, bool offsets, bool relu) {
  int32_t offset[ROW_CHUNK];
  const int64_t W = g->in[2], first = 2 * oh * W + 2 * ow; /* the window's first pixel */
  const int64_t size = bf16 ? 2 : 4;
  for (int64_t c0 = 0; c0 < C; c0 += ROW_CHUNK) {
    int64_t n = C - c0 < ROW_CHUNK ? C - c0 : ROW_CHUNK, at = first * C + c0;
    /* the prefetcher falls behind the two rows (MX__POOL_PREFETCH_AHEAD) */
    const char *ahead = (const char *)image + at * size + MX__POOL_PREFETCH_AHEAD;
    for (int64_t byte = 0; byte < 2 * n * size; byte += 64) { /* a prefetch never faults, even past the end */
      __builtin_prefetch(ahead + byte);
      __builtin_prefetch(ahead + W * C * size + byte);
    }
    if (bf16) {
      const uint16_t *a = (const uint16_t *)image + at;
      (relu ? max_pool_pixel_2x2_bf16_relu : max_pool_pixel_2x2_bf16)(a, a + C, a + W * C, a + W * C + C,
                                                                     (uint16_t *)out + o + c0, offset, n);
    } else {
      const float *a = (const float *)image + at;
      (relu ? max_pool_pixel_2x2_f32_relu : max_pool_pixel_2x2_f32)(a, a + C, a + W * C, a + W * C + C,
                                                                   (float *)out + o + c0, offset, n);
    }
    if (offsets)
      for (int64_t i = 0; i < n; i++) ((uint8_t *)indices)[o + c0 + i] = (uint8_t)offset[i];
    else
      for (int64_t i = 0; i < n; i++)
        ((int64_t *)indices)[o + c0 + i] = first + (offset[i] & 1) + (offset[i] >> 1) * W;
  }
}

static void max_pool_cl(const mx_pool_geom *g, const mx_kview *out, const mx_kview *indices, const mx_kview *x,
                        bool relu) {
  const int64_t N = x->shape[0], C = x->shape[1], OH = g->out[1], OW = g->out[2];
  const int64_t image = g->in[1] * g->in[2] * C, size = (int64_t)mx_dtype_size(x->dtype);
  bool offsets = indices->dtype == MX_U8;
  bool typed = (x->dtype == MX_F32 || x->dtype == MX_BF16) && g->k[1] * g->k[2] <= INT32_MAX;
  bool windows_2x2 = is_2x2(g);
#ifdef MX__POOL_AVX512
  bool f16 = x->dtype == MX_F16 && out->dtype == MX_F16; /* the vector loop's only float16 path */
  bool wide = (typed || f16) && windows_2x2 && offsets && mx__pool_avx512();
#endif
  MX_PARALLEL_FOR(N * OH * OW * C * mx_pool_volume(g->k))
  for (int64_t row = 0; row < N * OH; row++) { /* a row of output pixels */
    int64_t n = row / OH, oh = row % OH;
    const char *xn = (const char *)x->data + n * image * size;
#ifdef MX__POOL_AVX512
    if (wide) {
      mx__pool_cl_row_2x2_avx512(xn + 2 * oh * g->in[2] * C * size, g->in[2], C, OW,
                                 (char *)out->data + row * OW * C * size, (uint8_t *)indices->data + row * OW * C,
                                 (int)(8 * size), x->dtype == MX_BF16, relu);
      continue;
    }
#endif
    for (int64_t ow = 0; ow < OW; ow++) {
      int64_t o = (row * OW + ow) * C;
      if (typed && windows_2x2)
        max_pool_pixel_cl_2x2(g, xn, C, oh, ow, out->data, indices->data, o, x->dtype == MX_BF16, offsets, relu);
      else if (typed)
        max_pool_pixel_cl(g, xn, C, oh, ow, out->data, indices->data, o, x->dtype == MX_BF16, offsets, relu);
      else max_pool_pixel_cl_general(g, xn, C, oh, ow, out->data, indices->data, o, x->dtype, offsets, relu);
    }
  }
}

/* Disjoint windows with offsets: dx's row at the window's element r takes
 * 0 + dy where a channel's max came from r (scatter_one's and
 * max_pool_backward_plane_2x2's value), the rest stays +0: a select across
 * the row. */
MX_WIDE_CLONES static void select_row(void *dx, const void *dy, const uint8_t *offset, int r, int64_t C, mx_dtype dt) {
  if (dt == MX_F32) {
    for (int64_t c = 0; c < C; c++)
      ((float *)dx)[c] = mx__pool_select_f32(-(uint32_t)(offset[c] == r), 0.0f + ((const float *)dy)[c], 0.0f);
    return;
  }
  bool bf16 = dt == MX_BF16;
  for (int64_t c = 0; c < C; c++) {
    uint16_t d = ((const uint16_t *)dy)[c];
    ((uint16_t *)dx)[c] = offset[c] == r ? (bf16 ? mx__pool_bf16_plus_zero(d) : mx__pool_f16_plus_zero(d)) : 0;
  }
}

static void max_pool_backward_cl(const mx_pool_geom *g, const mx_kview *dx, const mx_kview *dy,
                                 const mx_kview *indices) {
  const int64_t N = dx->shape[0], C = dx->shape[1], OH = g->out[1], OW = g->out[2];
  const int64_t in_pixels = g->in[1] * g->in[2], out_pixels = OH * OW;
  const int64_t size = (int64_t)mx_dtype_size(dx->dtype), dy_size = (int64_t)mx_dtype_size(dy->dtype);
  bool typed = dx->dtype == dy->dtype && (dx->dtype == MX_F32 || dx->dtype == MX_BF16);
  bool offsets = indices->dtype == MX_U8, disjoint = true;
  for (int i = 0; i < 3; i++) disjoint &= g->s[i] >= (g->k[i] - 1) * g->d[i] + 1;
  /* the row-major loops' float16 2x2 path stores 0 + dy on the bits too */
  bool f16_2x2 = dx->dtype == MX_F16 && dy->dtype == MX_F16 && is_2x2(g);
  bool select = offsets && disjoint && (typed || f16_2x2);
  /* windows that tile the image (kernel = stride, no padding or dilation): the selects write every pixel they
   * cover, so only the uncovered right and bottom edges need zeroing, not the whole image first */
  bool tiles = select && g->k[1] == g->s[1] && g->k[2] == g->s[2] && g->p[1] == 0 && g->p[2] == 0 && g->d[1] == 1 &&
               g->d[2] == 1;
  int64_t delta[256];
  if (offsets) mx_pool_window_deltas(g, delta);
#ifdef MX__POOL_AVX512
  bool wide = tiles && is_2x2(g) && mx__pool_avx512(); /* a row of output pixels a call, dx's rows written once */
#endif
  MX_PARALLEL_FOR(N * out_pixels * C)
  for (int64_t n = 0; n < N; n++) { /* images never share elements */
    char *dn = (char *)dx->data + n * in_pixels * C * size;
    if (tiles) zero_uncovered(dn, g->in[1], g->in[2] * C, OH * g->k[1], OW * g->k[2] * C, size);
    else memset(dn, 0, (size_t)(in_pixels * C * size));
    const char *gn = (const char *)dy->data + n * out_pixels * C * dy_size;
    const uint8_t *window_offsets = (const uint8_t *)indices->data + n * out_pixels * C;
    const int64_t *flat_indices = (const int64_t *)indices->data + n * out_pixels * C;
#ifdef MX__POOL_AVX512
    if (wide) {
      for (int64_t oh = 0; oh < OH; oh++)
        mx__pool_cl_row_2x2_backward_avx512(dn + 2 * oh * g->in[2] * C * size, g->in[2], C, OW,
                                            gn + oh * OW * C * dy_size, window_offsets + oh * OW * C,
                                            (int)(8 * size), dx->dtype == MX_BF16);
      continue;
    }
#endif
    for (int64_t oh = 0, q = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++, q++) {
        if (select) {
          for (int64_t kh = 0; kh < g->k[1]; kh++)
            for (int64_t kw = 0; kw < g->k[2]; kw++) {
              int64_t p = window_pixel(g, oh, ow, kh, kw);
              if (p >= 0)
                select_row(dn + p * C * size, gn + q * C * dy_size, window_offsets + q * C, (int)(kh * g->k[2] + kw),
                           C, dx->dtype);
            }
          continue;
        }
        int64_t corner = mx_pool_window_corner(g, 0, oh, ow);
        for (int64_t c = 0; c < C; c++) {
          int64_t flat = offsets ? corner + delta[window_offsets[q * C + c]] : flat_indices[q * C + c];
          scatter_one(dn, flat * C + c, gn, q * C + c, dx->dtype, dy->dtype, typed, disjoint);
        }
      }
  }
}

/* Elements c0 .. c0 + m of a row added into sum in double, as the row-major
 * loop adds them (16-bit values widened exactly through float32). */
static void add_row(double *sum, const char *row, int64_t c0, int64_t m, mx_dtype dt) {
  float buf[CL_TILE];
  if (dt == MX_F64) {
    for (int64_t c = 0; c < m; c++) sum[c] += ((const double *)row)[c0 + c];
    return;
  }
  const float *v = (const float *)row + c0;
  if (dt == MX_BF16) mx__bf16_to_f32_n((const uint16_t *)row + c0, buf, m), v = buf;
  else if (dt == MX_F16) mx__f16_to_f32_n((const uint16_t *)row + c0, buf, m), v = buf;
  for (int64_t c = 0; c < m; c++) sum[c] += v[c];
}

static void avg_pool_cl(const mx_pool_geom *g, const mx_pool_params *params, const mx_kview *out, const mx_kview *x) {
  const int64_t N = x->shape[0], C = x->shape[1], OH = g->out[1], OW = g->out[2];
  const int64_t image = g->in[1] * g->in[2] * C, size = (int64_t)mx_dtype_size(x->dtype);
  const int64_t os = (int64_t)mx_dtype_size(out->dtype);
  MX_PARALLEL_FOR(N * OH * OW * C * mx_pool_volume(g->k))
  for (int64_t row = 0; row < N * OH; row++) {
    int64_t n = row / OH, oh = row % OH;
    const char *xn = (const char *)x->data + n * image * size;
    for (int64_t ow = 0; ow < OW; ow++) {
      int64_t o = (row * OW + ow) * C;
      double div = divisor(g, params, 0, oh, ow);
      for (int64_t c0 = 0; c0 < C; c0 += CL_TILE) {
        int64_t m = C - c0 < CL_TILE ? C - c0 : CL_TILE;
        double sum[CL_TILE] = {0};
        for (int64_t kh = 0; kh < g->k[1]; kh++)
          for (int64_t kw = 0; kw < g->k[2]; kw++) {
            int64_t p = window_pixel(g, oh, ow, kh, kw);
            if (p >= 0) add_row(sum, xn + p * C * size, c0, m, x->dtype);
          }
        for (int64_t c = 0; c < m; c++)
          mx_element_store((char *)out->data + (o + c0 + c) * os, out->dtype, sum[c] / div);
      }
    }
  }
}

static void avg_pool_backward_cl(const mx_pool_geom *g, const mx_pool_params *params, const mx_kview *dx,
                                 const mx_kview *dy) {
  const int64_t N = dx->shape[0], C = dx->shape[1], OH = g->out[1], OW = g->out[2];
  const int64_t in_pixels = g->in[1] * g->in[2], out_pixels = OH * OW, size = (int64_t)mx_dtype_size(dx->dtype);
  MX_PARALLEL_FOR(N * out_pixels * C * mx_pool_volume(g->k))
  for (int64_t n = 0; n < N; n++) { /* images never share elements */
    char *dn = (char *)dx->data + n * in_pixels * C * size;
    memset(dn, 0, (size_t)(in_pixels * C * size));
    const char *gn = (const char *)dy->data + n * out_pixels * C * size;
    for (int64_t oh = 0, q = 0; oh < OH; oh++)
      for (int64_t ow = 0; ow < OW; ow++, q++) {
        double div = divisor(g, params, 0, oh, ow);
        for (int64_t c0 = 0; c0 < C; c0 += CL_TILE) {
          int64_t m = C - c0 < CL_TILE ? C - c0 : CL_TILE;
          double grad[CL_TILE];
          for (int64_t c = 0; c < m; c++) grad[c] = mx_element_load(gn + (q * C + c0 + c) * size, dy->dtype) / div;
          for (int64_t kh = 0; kh < g->k[1]; kh++)
            for (int64_t kw = 0; kw < g->k[2]; kw++) {
              int64_t p = window_pixel(g, oh, ow, kh, kw);
              if (p < 0) continue;
              char *target = dn + (p * C + c0) * size;
              if (dx->dtype == MX_F32) {
                for (int64_t c = 0; c < m; c++) ((float *)target)[c] = (float)(((float *)target)[c] + grad[c]);
                continue;
              }
              for (int64_t c = 0; c < m; c++) {
                char *element = target + c * size;
                mx_element_store(element, dx->dtype, mx_element_load(element, dx->dtype) + grad[c]);
              }
            }
        }
      }
  }
}
