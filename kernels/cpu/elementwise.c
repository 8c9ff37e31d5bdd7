/* Elementwise kernels on the CPU: unary, binary (arithmetic and
 * comparisons) and where, over broadcast strided views. The functions
 * themselves are in kernels/elementwise.def, shared with CUDA. */
#include <string.h>
#include <tgmath.h>

#include "kernels/cpu/convert.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/strided.h"
#include "kernels/cpu/wide_clones.h"
#include "kernels/elementwise.h"
#include "kernels/math.h"

typedef struct {
  int code;
  double a, b;
} elementwise_ctx;

#define LOAD_F16(p) mx_f16_to_f32(*(const uint16_t *)(p))
#define STORE_F16(p, v) (*(uint16_t *)(p) = mx_f32_to_f16(v))
#define LOAD_BF16(p) mx_bf16_to_f32(*(const uint16_t *)(p))
#define STORE_BF16(p, v) (*(uint16_t *)(p) = mx__bf16_nearest(v))
#define LOAD_AS(type, p) (*(const type *)(p))
#define STORE_AS(type, p, v) (*(type *)(p) = (type)(v))

#define ROW_T float
#define ROW_LOAD(p) LOAD_AS(float, p)
#define ROW_STORE(p, v) STORE_AS(float, p, v)
#define ROW_SIZE 4
#define ROW_NAME f32
#define ROW_INT 0
#include "kernels/cpu/elementwise_rows.inc"

#define ROW_T double
#define ROW_LOAD(p) LOAD_AS(double, p)
#define ROW_STORE(p, v) STORE_AS(double, p, v)
#define ROW_SIZE 8
#define ROW_NAME f64
#define ROW_INT 0
#include "kernels/cpu/elementwise_rows.inc"

/* The 16-bit float rows are built for AVX-512 and AVX2 as well (MX_WIDE_CLONES). */

/* float16 goes through blocks (elementwise_rows.inc): F16C widens and
 * narrows them, and the float loop between runs at the clone's width. */
#define ROW_T float
#define ROW_LOAD(p) LOAD_F16(p)
#define ROW_STORE(p, v) STORE_F16(p, v)
#define ROW_SIZE 2
#define ROW_NAME f16
#define ROW_WIDEN(p, dst, n) mx__f16_to_f32_n((const uint16_t *)(p), dst, n)
#define ROW_NARROW(src, p, n) mx__f32_to_f16_n(src, (uint16_t *)(p), n)
#define ROW_CLONES MX_WIDE_CLONES
#define ROW_INT 0
#include "kernels/cpu/elementwise_rows.inc"

/* bfloat16 converts in a shift and a branch-free rounding, so its rows
 * vectorise converting element by element, with no blocks to stage: a bf16
 * add runs at the copy bandwidth (bench/NOTES.md, round 8). */
#define ROW_T float
#define ROW_LOAD(p) LOAD_BF16(p)
#define ROW_STORE(p, v) STORE_BF16(p, v)
#define ROW_SIZE 2
#define ROW_NAME bf16
#define ROW_CLONES MX_WIDE_CLONES
#define ROW_INT 0
#include "kernels/cpu/elementwise_rows.inc"

#define ROW_T int64_t
#define ROW_LOAD(p) LOAD_AS(int64_t, p)
#define ROW_STORE(p, v) STORE_AS(int64_t, p, v)
#define ROW_SIZE 8
#define ROW_NAME i64
#define ROW_INT 1
#include "kernels/cpu/elementwise_rows.inc"

#define ROW_T int64_t
#define ROW_LOAD(p) (int64_t) LOAD_AS(int32_t, p)
#define ROW_STORE(p, v) STORE_AS(int32_t, p, v)
#define ROW_SIZE 4
#define ROW_NAME i32
#define ROW_INT 1
#include "kernels/cpu/elementwise_rows.inc"

#define ROW_T int64_t
#define ROW_LOAD(p) (int64_t) LOAD_AS(uint8_t, p)
#define ROW_STORE(p, v) STORE_AS(uint8_t, p, v)
#define ROW_SIZE 1
#define ROW_NAME u8
#define ROW_INT 1
#include "kernels/cpu/elementwise_rows.inc"

#define ROW_T int64_t
#define ROW_LOAD(p) (int64_t) LOAD_AS(bool, p)
#define ROW_STORE(p, v) (*(bool *)(p) = (v) != 0)
#define ROW_SIZE 1
#define ROW_NAME b8
#define ROW_INT 1
#include "kernels/cpu/elementwise_rows.inc"

static const mx__row_fn unary_rows[MX_DTYPE_COUNT] = {
    [MX_F32] = unary_row_f32, [MX_F64] = unary_row_f64, [MX_F16] = unary_row_f16,
    [MX_BF16] = unary_row_bf16, [MX_I64] = unary_row_i64, [MX_I32] = unary_row_i32,
    [MX_U8] = unary_row_u8,   [MX_BOOL] = unary_row_b8,
};
static const mx__row_fn binary_rows[MX_DTYPE_COUNT] = {
    [MX_F32] = binary_row_f32, [MX_F64] = binary_row_f64, [MX_F16] = binary_row_f16,
    [MX_BF16] = binary_row_bf16, [MX_I64] = binary_row_i64, [MX_I32] = binary_row_i32,
    [MX_U8] = binary_row_u8,   [MX_BOOL] = binary_row_b8,
};


mx_status mx__cpu_unary(int code, const mx_kview *out, const mx_kview *in, double a, double b) {
  if (code < 0 || code >= MX_UN_COUNT || (!mx_dtype_is_floating(in->dtype) && !mx__unary_has_int(code)))
    return mx__error(MX_DTYPE_ERROR, "cpu unary kernel %d: no %s version", code, mx_dtype_name(in->dtype));
  elementwise_ctx ctx = {code, a, b};
  mx__cpu_foreach_row(out, in, unary_rows[in->dtype], &ctx);
  return MX_OK;
}

mx_status mx__cpu_binary(int code, const mx_kview *out, const mx_kview *x, const mx_kview *y, double alpha) {
  if (code < 0 || code >= MX_BIN_COUNT || (!mx_dtype_is_floating(x->dtype) && !mx__binary_has_int(code)))
    return mx__error(MX_DTYPE_ERROR, "cpu binary kernel %d: no %s version", code, mx_dtype_name(x->dtype));
  elementwise_ctx ctx = {code, alpha, 0};
  const mx_kview *views[3] = {out, x, y};
  mx__cpu_foreach(3, views, binary_rows[x->dtype], &ctx);
  return MX_OK;
}

static void where_row(const mx__row *row, void *vctx) {
  size_t size = *(const size_t *)vctx;
  for (int64_t k = 0; k < row->n; k++) {
    const char *pick = *(const bool *)(row->ptr[1] + k * row->step[1]) ? row->ptr[2] + k * row->step[2]
                                                                        : row->ptr[3] + k * row->step[3];
    memcpy(row->ptr[0] + k * row->step[0], pick, size);
  }
}

mx_status mx__cpu_where(const mx_kview *out, const mx_kview *cond, const mx_kview *x, const mx_kview *y) {
  size_t size = mx_dtype_size(out->dtype);
  const mx_kview *views[4] = {out, cond, x, y};
  mx__cpu_foreach(4, views, where_row, &size);
  return MX_OK;
}
