/* The op cases of the op suite (tests/ops/op_cases.h: every op, each case
 * a function of its inputs with the other arguments fixed) on inputs the
 * bytes describe: any of the eight dtypes, the case's shape or another of
 * up to 4 dims (empty ones too), contiguous or a transposed, strided or
 * broadcast view, values with NaN, infinities, signed zeros and huge ones
 * planted, gradients wanted or not; grad mode on or off; autocast off, or
 * on in bfloat16 or float16. An op either returns a tensor whose every
 * element reads back, or NULL with an error that names an mx_ function; a
 * backward through a result is the same. Never a crash, never a leak. */
#include <stdio.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"
#include "op_cases.h"

/* The input's bytes, read from the front; past the end they read as 0. */
typedef struct {
  const uint8_t *data;
  size_t size, at;
} reader;

static unsigned byte(reader *r) { return r->at < r->size ? r->data[r->at++] : 0; }

static const mx_dtype dtypes[8] = {MX_F64, MX_F32, MX_BF16, MX_F16, MX_I64, MX_I32, MX_U8, MX_BOOL};

/* byte: which layout. 0-3: contiguous (the case's own inputs are); 4: the
 * last two dims swapped; 5: every other element along dim 0; 6: dim 0
 * broadcast from size 1. */
static mx_tensor *laid_out(mx_tensor *t, mx_shape shape, unsigned layout) {
  if (!t || shape.ndim == 0) return t;
  mx_shape s = shape;
  switch (layout % 8) {
  case 4:
    if (shape.ndim < 2) return t;
    s.d[shape.ndim - 1] = shape.d[shape.ndim - 2], s.d[shape.ndim - 2] = shape.d[shape.ndim - 1];
    return mx_transpose(mx_reshape(t, s), -1, -2);
  case 5:
    s.d[0] = 2 * shape.d[0];
    return mx_slice(mx_cat(2, (mx_tensor *[]){t, t}, 0), 0, 0, s.d[0], 2);
  case 6:
    s.d[0] = 1;
    return mx_expand(mx_narrow(t, 0, 0, shape.d[0] > 0 ? 1 : 0), shape);
  default: return t;
  }
}

static const double special[] = {NAN, INFINITY, -INFINITY, 0.0, -0.0, 1e30, -1e-30, 65504, 3e38, 7};

/* A tensor for an input of the case's shape `own`. The first byte: bits
 * 0-2 the dtype, bit 3 another shape (read next), bits 4-6 the layout,
 * bit 7 a gradient wanted (floats only). */
static mx_tensor *fuzz_input(reader *r, mx_shape own, mx_generator *g) {
  unsigned how = byte(r);
  mx_dtype dtype = dtypes[how & 7];
  mx_shape shape = own;
  if (how & 8) { /* another shape */
    shape.ndim = (int)(byte(r) % 5);
    for (int d = 0; d < shape.ndim; d++) shape.d[d] = byte(r) % 5;
  }
  mx_tensor *t = mx_to_dtype(mx_randn(shape, MX_F64, MX_CPU, g), dtype);
  for (unsigned k = byte(r) % 4; t && k > 0 && mx_numel(t) > 0; k--) { /* plant specials */
    unsigned at = byte(r), which = byte(r);
    mx_tensor *flat = mx_reshape(t, MX_SHAPE(-1));
    mx_tensor *v = mx_full(MX_SCALAR, special[which % 10], dtype, MX_CPU);
    mx_copy_(mx_select(flat, 0, (int64_t)(at % (unsigned)mx_numel(t))), v);
  }
  t = laid_out(t, shape, how >> 4);
  if (t && (how & 0x80) && mx_dtype_is_floating(dtype)) {
    t = mx_detach(t);
    mx_set_requires_grad(t, true);
  }
  return t;
}

/* Every element of t reads back (the bytes a view points at exist). */
static void read_back(const mx_tensor *t) {
  mx_tensor *c = mx_contiguous(t);
  mx_fuzz_check(c != NULL, "a result can be made contiguous");
  mx_fuzz_check(mx_numel(c) == 0 || mx_sum(mx_to_dtype(c, MX_F64), MX_ALL_DIMS, false) != NULL,
                "a result's elements read back");
}

static void expect_error_or(bool ok, const char *what) {
  if (ok) return;
  if (mx_last_status() == MX_OK || strncmp(mx_last_error(), "mx_", 3) != 0) fprintf(stderr, "fuzz: %s\n", what);
  mx_fuzz_check(mx_last_status() != MX_OK && strncmp(mx_last_error(), "mx_", 3) == 0,
                "a failed op sets an error naming an mx_ function");
  mx_clear_error();
}

bool mx_fuzz_ops(const uint8_t *data, size_t size) {
  reader r = {data, size, 0};
  mx_clear_error();
  unsigned index = byte(&r) << 8;
  index |= byte(&r);
  /* The kept inputs (fuzz/corpus/ops) store an index below the case count,
   * so cases appended at the end of op_cases_appended[] leave each pointing at the
   * case it was kept for; a case inserted earlier moves them. */
  const op_case *c = op_case_at(index % (unsigned)op_case_count());
  unsigned mode = byte(&r);
  mx_scope *scope = mx_scope_begin();
  mx_generator *g = mx_generator_new(mode);
  mx_tensor *in[OP_MAX_IN] = {0};
  for (int i = 0; i < c->n_in; i++) {
    in[i] = c->domain[i] == DOM_BOOL ? mx_gt(mx_randn(c->shape[i], MX_F64, MX_CPU, g), mx_scalar(0, MX_F64, MX_CPU))
                                     : fuzz_input(&r, c->shape[i], g);
    expect_error_or(in[i] != NULL, "making an input");
  }
  mx_generator_free(g);
  bool grad = mode & 1, previous = mx_set_grad_enabled(grad);
  bool autocast = mode & 2;
  if (autocast) mx_fuzz_check(mx_autocast_begin(MX_CPU, mode & 4 ? MX_F16 : MX_BF16, true, true) == MX_OK,
                              "autocast begins");
  mx_tensor *y = c->fn(c->n_in, in, NULL);
  if (autocast) mx_fuzz_check(mx_autocast_end() == MX_OK, "autocast ends");
  expect_error_or(y != NULL, c->name);
  if (y) {
    read_back(y);
    if (mx_requires_grad(y) && mx_dtype_is_floating(mx_dtype_of(y)))
      expect_error_or(mx_backward(mx_sum(y, MX_ALL_DIMS, false), NULL, false) == MX_OK, "the backward");
  }
  mx_set_grad_enabled(previous);
  mx_scope_end(scope);
  mx_clear_error();
  return y != NULL;
}
