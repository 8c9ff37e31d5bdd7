/* grid_sample for 2-d inputs as a composite: the sampling coordinates
 * from the grid with elementwise ops (PyTorch's CPU kernel's formulas:
 * unnormalize, then clip for border, reflect then clip for reflection),
 * the corners' pixels fetched with one gather each from the input
 * flattened to (N, C, H W), out-of-bounds corners read as 0. So it runs
 * wherever gather does and differentiates in input (gather's gradient)
 * and grid (through the bilinear weights) without a formula of its own.
 *
 * As PyTorch's kernel, the clip's gradient is 0 on the borders themselves
 * (a coordinate at 0 or size - 1 passes no gradient), and nearest's grid
 * gradient is 0 (here: the grid gets none). */
#include "ops/op_table.h"

#define OP "mx_grid_sample"

/* min(max(in, 0), size - 1) with gradient 1 strictly inside, 0 on and
 * beyond the borders; NaN goes to 0 (PyTorch's vectorised clip). */
static mx_tensor *clip(mx_tensor *in, int64_t size) {
  double max = (double)(size - 1);
  mx_tensor *inside = mx_logical_and(mx_gt_scalar(in, 0), mx_lt_scalar(in, max));
  mx_tensor *bound = in ? mx_masked_fill(mx_zeros_like(in), mx_ge_scalar(in, max), max) : NULL;
  return mx_where(inside, in, bound);
}

/* Reflects in about low and low + span (PyTorch's vectorised formula):
 * |in - low| folded by the period 2 span, then mirrored past span.
 * align_corners: low 0, span size - 1 (empty for size 1: 0); else low -0.5,
 * span size. */
static mx_tensor *reflect(mx_tensor *in, int64_t size, bool align_corners) {
  if (align_corners && size <= 1) return in ? mx_zeros_like(in) : NULL;
  double twice_span = align_corners ? 2.0 * (double)(size - 1) : 2.0 * (double)size;
  mx_tensor *abs_in = mx_abs(align_corners ? in : mx_add_scalar(in, 0.5));
  mx_tensor *double_flips = mx_trunc(mx_div_scalar(abs_in, twice_span));
  mx_tensor *extra = mx_sub(abs_in, mx_mul_scalar(double_flips, twice_span));
  mx_tensor *folded = mx_minimum(extra, mx_rsub_scalar(twice_span, extra));
  return align_corners ? folded : mx_sub_scalar(folded, 0.5);
}

/* The sampling coordinate along a dim of size `size` of grid values g. */
static mx_tensor *source_coordinate(mx_tensor *g, int64_t size, mx_grid_padding padding, bool align_corners) {
  mx_tensor *coord = align_corners ? mx_mul_scalar(mx_add_scalar(g, 1), (double)(size - 1) / 2)
                                   : mx_sub_scalar(mx_mul_scalar(mx_add_scalar(g, 1), (double)size / 2), 0.5);
  if (padding == MX_GRID_PAD_BORDER) return clip(coord, size);
  if (padding == MX_GRID_PAD_REFLECTION) return clip(reflect(coord, size, align_corners), size);
  return coord;
}

typedef struct {
  mx_tensor *flat;  /* the input as (N, C, H W) */
  int64_t n, c, h, w, h_out, w_out;
} sampler;

/* The pixels at integral coordinates (x, y) ((N, H_out, W_out), no graph)
 * as (N, C, H_out, W_out), 0 where outside the input. */
static mx_tensor *pixels(const sampler *s, mx_tensor *x, mx_tensor *y) {
  mx_tensor *inside = mx_logical_and(mx_logical_and(mx_ge_scalar(x, 0), mx_le_scalar(x, (double)(s->w - 1))),
                                     mx_logical_and(mx_ge_scalar(y, 0), mx_le_scalar(y, (double)(s->h - 1))));
  /* int64 flat indices y W + x, 0 outside (huge or NaN coordinates never reach the cast) */
  mx_tensor *outside = inside ? mx_logical_not(inside) : NULL;
  mx_tensor *xi = mx_to_dtype(mx_masked_fill(x, outside, 0), MX_I64);
  mx_tensor *yi = mx_to_dtype(mx_masked_fill(y, outside, 0), MX_I64);
  mx_tensor *linear = mx_add(mx_mul(yi, mx_scalar((double)s->w, MX_I64, MX_CPU)), xi);
  mx_tensor *index = mx_reshape(linear, MX_SHAPE(s->n, 1, s->h_out * s->w_out));
  index = mx_expand(index, MX_SHAPE(s->n, s->c, s->h_out * s->w_out));
  mx_tensor *values = mx_reshape(mx_gather(s->flat, 2, index), MX_SHAPE(s->n, s->c, s->h_out, s->w_out));
  return mx_masked_fill(values, outside ? mx_unsqueeze(outside, 1) : NULL, 0);
}

static mx_status check(const mx_tensor *input, const mx_tensor *grid, int mode, int padding) {
  char a[MX__DIMS_STR], b[MX__DIMS_STR];
  if (mode != MX_GRID_BILINEAR && mode != MX_GRID_NEAREST)
    return mx__error(MX_INVALID_ARGUMENT, OP ": unknown mode %d (expected bilinear or nearest)", mode);
  if (padding != MX_GRID_PAD_ZEROS && padding != MX_GRID_PAD_BORDER && padding != MX_GRID_PAD_REFLECTION)
    return mx__error(MX_INVALID_ARGUMENT, OP ": unknown padding mode %d (expected zeros, border or reflection)",
                     padding);
  if (input->ndim != 4)
    return mx__error(MX_SHAPE_ERROR, OP ": input must be 4-d (N, C, H_in, W_in), got shape %s",
                     mx__dims_str(a, input->ndim, input->shape));
  if (grid->ndim != 4 || grid->shape[3] != 2)
    return mx__error(MX_SHAPE_ERROR, OP ": grid must be (N, H_out, W_out, 2), got shape %s",
                     mx__dims_str(a, grid->ndim, grid->shape));
  if (input->shape[0] != grid->shape[0])
    return mx__error(MX_SHAPE_ERROR, OP ": input %s and grid %s have different batch sizes (%lld != %lld)",
                     mx__dims_str(a, input->ndim, input->shape), mx__dims_str(b, grid->ndim, grid->shape),
                     (long long)input->shape[0], (long long)grid->shape[0]);
  if (input->shape[2] == 0 || input->shape[3] == 0)
    return mx__error(MX_SHAPE_ERROR, OP ": input %s has an empty spatial dim",
                     mx__dims_str(a, input->ndim, input->shape));
  if (!mx_dtype_is_floating(input->dtype) || input->dtype != grid->dtype)
    return mx__error(MX_DTYPE_ERROR, OP ": input and grid must have one floating dtype, got %s and %s",
                     mx_dtype_name(input->dtype), mx_dtype_name(grid->dtype));
  return MX_OK;
}

mx_status mx__fwd_grid_sample(mx__call *c) {
  mx_tensor *input = c->in[0], *grid = c->in[1];
  int mode = (int)c->args->i[0], padding = (int)c->args->i[1];
  bool align_corners = c->args->keepdim;
  if (check(input, grid, mode, padding)) return mx_last_status();
  sampler s = {.n = input->shape[0], .c = input->shape[1], .h = input->shape[2], .w = input->shape[3],
               .h_out = grid->shape[1], .w_out = grid->shape[2]};
  s.flat = mx_reshape(input, MX_SHAPE(s.n, s.c, s.h * s.w));
  mx_tensor *x = source_coordinate(mx_select(grid, 3, 0), s.w, padding, align_corners);
  mx_tensor *y = source_coordinate(mx_select(grid, 3, 1), s.h, padding, align_corners);
  if (!s.flat || !x || !y) return mx_last_status();

  if (mode == MX_GRID_NEAREST) { /* rounds halves to even, as nearbyint */
    mx_tensor *xd = mx_detach(x), *yd = mx_detach(y);
    return OUT0(c, pixels(&s, mx_round(xd), mx_round(yd)));
  }

  /* bilinear: the corners west/east, north/south and PyTorch's weights */
  mx_tensor *x_w = mx_floor(x), *y_n = mx_floor(y);
  mx_tensor *w = mx_sub(x, x_w), *n = mx_sub(y, y_n);
  mx_tensor *e = mx_rsub_scalar(1, w), *so = mx_rsub_scalar(1, n);
  mx_shape weight_shape = MX_SHAPE(s.n, 1, s.h_out, s.w_out);
  mx_tensor *nw = mx_reshape(mx_mul(so, e), weight_shape), *ne = mx_reshape(mx_mul(so, w), weight_shape);
  mx_tensor *sw = mx_reshape(mx_mul(n, e), weight_shape), *se = mx_reshape(mx_mul(n, w), weight_shape);
  mx_tensor *xw = mx_detach(x_w), *yn = mx_detach(y_n);
  mx_tensor *xe = mx_add_scalar(xw, 1), *ys = mx_add_scalar(yn, 1);
  mx_tensor *out = mx_mul(pixels(&s, xw, yn), nw);
  out = mx_add(out, mx_mul(pixels(&s, xe, yn), ne));
  out = mx_add(out, mx_mul(pixels(&s, xw, ys), sw));
  return OUT0(c, mx_add(out, mx_mul(pixels(&s, xe, ys), se)));
}

mx_tensor *mx_grid_sample(const mx_tensor *input, const mx_tensor *grid, mx_grid_mode mode, mx_grid_padding padding,
                          bool align_corners) {
  return mx__call2(MX_OP_GRID_SAMPLE, input, grid, &(mx__args){.i = {mode, padding}, .keepdim = align_corners});
}
