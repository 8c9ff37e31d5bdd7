/* kernels/conv_cudnn_case.h: which convolutions the CUDA backend hands to
 * cuDNN, and the dims, padding, strides and dilations cuDNN is given. The
 * GPU suite checks the results; these checks run everywhere. */
#include <criterion/criterion.h>
#include <string.h>

#include "kernels/conv_cudnn_case.h"
#include "shape_view.h"

static mx_conv_params params(int spatial, int64_t stride, int64_t pad, int64_t dil, int64_t groups) {
  mx_conv_params p;
  memset(&p, 0, sizeof p);
  p.spatial = spatial, p.groups = groups;
  for (int j = 0; j < 3; j++) p.stride[j] = stride, p.padding[j] = pad, p.dilation[j] = dil;
  return p;
}

static void expect_ints(const int *got, const int *want, int n, const char *what) {
  for (int i = 0; i < n; i++) cr_expect_eq(got[i], want[i], "%s[%d]: %d, expected %d", what, i, got[i], want[i]);
}

/* (3, 4, 11) * (6, 4, 3), stride 2, padding 1 -> (3, 6, 6): cuDNN sees a
 * 2-d convolution of height 1, with nothing done along the height. */
Test(conv_cudnn_case, a_1d_convolution_is_2d_of_height_one) {
  mx_kview x = shape_view(MX_F16, 3, (int64_t[]){3, 4, 11}), w = shape_view(MX_F16, 3, (int64_t[]){6, 4, 3}),
           y = shape_view(MX_F16, 3, (int64_t[]){3, 6, 6});
  mx_conv_params p = params(1, 2, 1, 1, 1);
  mx_cudnn_conv_case c;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_DATA, &x, &w, &y, &p, &c));
  cr_expect_eq(c.nd, 4);
  cr_expect_eq(c.kind, MX_CONV_BACKWARD_DATA);
  cr_expect_eq(c.dtype, MX_F16);
  expect_ints(c.x, (int[]){3, 4, 1, 11}, 4, "x");
  expect_ints(c.w, (int[]){6, 4, 1, 3}, 4, "w");
  expect_ints(c.y, (int[]){3, 6, 1, 6}, 4, "y");
  expect_ints(c.pad, (int[]){0, 1}, 2, "pad");
  expect_ints(c.stride, (int[]){1, 2}, 2, "stride");
  expect_ints(c.dil, (int[]){1, 1}, 2, "dilation");
}

/* 3-d with two groups: five dims, the parameters in order. */
Test(conv_cudnn_case, a_3d_convolution_has_five_dims) {
  mx_kview x = shape_view(MX_BF16, 5, (int64_t[]){2, 4, 5, 6, 5});
  mx_kview w = shape_view(MX_BF16, 5, (int64_t[]){6, 2, 3, 3, 3});
  mx_kview y = shape_view(MX_BF16, 5, (int64_t[]){2, 6, 5, 6, 5});
  mx_conv_params p = params(3, 1, 1, 1, 2);
  p.padding[2] = 2, p.dilation[2] = 2;
  mx_cudnn_conv_case c;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c));
  cr_expect_eq(c.nd, 5);
  cr_expect_eq(c.groups, 2);
  expect_ints(c.x, (int[]){2, 4, 5, 6, 5}, 5, "x");
  expect_ints(c.w, (int[]){6, 2, 3, 3, 3}, 5, "w");
  expect_ints(c.pad, (int[]){1, 1, 2}, 3, "pad");
  expect_ints(c.dil, (int[]){1, 1, 2}, 3, "dilation");
}

/* Two makings of one case are the same key, bytewise; another stride is
 * another key. */
Test(conv_cudnn_case, equal_cases_are_equal_keys) {
  mx_kview x = shape_view(MX_F32, 4, (int64_t[]){8, 3, 9, 9}), w = shape_view(MX_F32, 4, (int64_t[]){4, 3, 3, 3}),
           y = shape_view(MX_F32, 4, (int64_t[]){8, 4, 9, 9});
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_cudnn_conv_case a, b;
  memset(&b, 0xff, sizeof b); /* whatever was there before is overwritten */
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &a));
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &b));
  cr_expect_eq(memcmp(&a, &b, sizeof a), 0);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_WEIGHT, &x, &w, &y, &p, &b));
  cr_expect_neq(memcmp(&a, &b, sizeof a), 0, "the kind is part of the key");
}

/* What the direct kernels keep: float64, a non-contiguous operand, an empty
 * one, and sizes past cuDNN's ints. */
Test(conv_cudnn_case, declines_what_the_direct_kernels_keep) {
  int64_t xs[4] = {2, 3, 9, 9}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 9, 9};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_cudnn_conv_case c;
  mx_kview x = shape_view(MX_F64, 4, xs), w = shape_view(MX_F64, 4, ws), y = shape_view(MX_F64, 4, ys);
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c), "float64");
  x = shape_view(MX_F32, 4, xs), w = shape_view(MX_F32, 4, ws), y = shape_view(MX_F32, 4, ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c), "the float32 case itself");
  mx_kview t = x;
  t.strides[2] = 1, t.strides[3] = 9; /* h and w swapped */
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &t, &w, &y, &p, &c), "a transposed input");
  mx_kview e = shape_view(MX_F32, 4, (int64_t[]){0, 3, 9, 9}), ey = shape_view(MX_F32, 4, (int64_t[]){0, 4, 9, 9});
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &e, &w, &ey, &p, &c), "an empty batch");
  mx_kview big = shape_view(MX_F32, 4, (int64_t[]){2, 3, 40000, 20000});
  mx_kview bigy = shape_view(MX_F32, 4, (int64_t[]){2, 4, 40000, 20000});
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &big, &w, &bigy, &p, &c), "4.8e9 elements");
  mx_conv_params far = p;
  far.padding[1] = (int64_t)INT_MAX + 1;
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &far, &c), "padding past an int");
}

static mx_kview channels_last_view(mx_dtype dtype, const int64_t shape[4]) {
  mx_kview v = shape_view(dtype, 4, shape);
  mx__channels_last_strides(shape, v.strides);
  return v;
}

/* Channels-last activations go to cuDNN as they lie, each described by its
 * own strides, and the case says so (the filter then goes KRSC). */
Test(conv_cudnn_case, channels_last_activations_keep_their_layout) {
  int64_t xs[4] = {2, 3, 5, 7}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 5, 7};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_kview x = channels_last_view(MX_F16, xs), w = shape_view(MX_F16, 4, ws), y = channels_last_view(MX_F16, ys);
  mx_cudnn_conv_case c, plain;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c));
  cr_expect_eq(c.x_channels_last, 1);
  cr_expect_eq(c.y_channels_last, 1);
  expect_ints(c.x, (int[]){2, 3, 5, 7}, 4, "x dims stay (N, C, H, W)");
  int strides[5];
  mx__cudnn_strides(c.nd, c.x, c.x_channels_last, strides);
  expect_ints(strides, (int[]){105, 1, 21, 3}, 4, "x strides");
  mx__cudnn_strides(c.nd, c.y, c.y_channels_last, strides);
  expect_ints(strides, (int[]){140, 1, 28, 4}, 4, "y strides");

  mx_kview row_major_y = shape_view(MX_F16, 4, ys); /* e.g. a gradient that arrived row-major */
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_DATA, &x, &w, &row_major_y, &p, &c));
  cr_expect_eq(c.x_channels_last, 1);
  cr_expect_eq(c.y_channels_last, 0);
  mx__cudnn_strides(c.nd, c.y, c.y_channels_last, strides);
  expect_ints(strides, (int[]){140, 35, 7, 1}, 4, "row-major y strides");

  mx_kview row_major_x = shape_view(MX_F16, 4, xs);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_DATA, &row_major_x, &w, &row_major_y, &p, &plain));
  cr_expect_neq(memcmp(&c, &plain, sizeof c), 0, "the layout is part of the algorithm's key");
}

/* An operand in both layouts (one channel, or a 1x1 image) takes the
 * channels-last layout of the others, so cuDNN is not given NCHW beside
 * NHWC; beside row-major operands it stays row-major. Its strides as cuDNN
 * is told them still address its memory: the dims of size 1 are the ones
 * whose strides differ. */
Test(conv_cudnn_case, an_operand_in_both_layouts_takes_the_others) {
  int64_t xs[4] = {2, 1, 5, 7}, ws[4] = {4, 1, 3, 3}, ys[4] = {2, 4, 5, 7};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_kview x = shape_view(MX_F16, 4, xs), w = shape_view(MX_F16, 4, ws), y = channels_last_view(MX_F16, ys);
  mx_cudnn_conv_case c;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c), "a grayscale batch");
  cr_expect_eq(c.x_channels_last, 1);
  cr_expect_eq(c.w_channels_last, 1, "the one-channel filter needs no KRSC copy");
  cr_expect_eq(c.y_channels_last, 1);
  int strides[5];
  mx__cudnn_strides(c.nd, c.x, c.x_channels_last, strides);
  expect_ints(strides + 2, (int[]){7, 1}, 2, "x's row and column strides, as in its memory");
  cr_expect_eq(strides[0], 35, "x's image stride");

  mx_kview row_major_y = shape_view(MX_F16, 4, ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &row_major_y, &p, &c));
  cr_expect_eq(c.x_channels_last, 0, "beside row-major operands");
  cr_expect_eq(c.w_channels_last, 0);

  int64_t xs3[4] = {2, 3, 3, 3}, ws3[4] = {4, 3, 3, 3}, ys1[4] = {2, 4, 1, 1};
  mx_conv_params valid = params(2, 1, 0, 1, 1);
  mx_kview x3 = channels_last_view(MX_F16, xs3), w3 = shape_view(MX_F16, 4, ws3), y1 = shape_view(MX_F16, 4, ys1);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x3, &w3, &y1, &valid, &c), "a 1x1 output");
  cr_expect_eq(c.y_channels_last, 1);
  cr_expect_eq(c.w_channels_last, 0, "a filter in one layout keeps it");
}

/* A channels-last weight is taken as it lies (cuDNN's filter then needs no
 * KRSC copy beside a channels-last x), and its layout is part of the key; a
 * channels-last view where cuDNN is not given one (a gap between images) is
 * declined. */
Test(conv_cudnn_case, channels_last_weights_are_taken_gapped_views_declined) {
  int64_t xs[4] = {2, 3, 5, 7}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 5, 7};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_kview x = channels_last_view(MX_F32, xs), w = channels_last_view(MX_F32, ws), y = channels_last_view(MX_F32, ys);
  mx_cudnn_conv_case krsc, kcrs;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &krsc), "a channels-last weight");
  cr_expect_eq(krsc.w_channels_last, 1);
  mx_kview wide = x;
  wide.strides[0] *= 2; /* channels innermost, but a gap between images */
  cr_expect_not(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &wide, &w, &y, &p, &kcrs), "a gapped channels-last view");
  w = shape_view(MX_F32, 4, ws);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &kcrs), "a row-major weight");
  cr_expect_eq(kcrs.w_channels_last, 0);
  cr_expect_neq(memcmp(&krsc, &kcrs, sizeof krsc), 0, "the weight's layout is part of the algorithm's key");
}

/* The case carries the cuDNN settings in force when it is made, so an
 * algorithm chosen under one never serves the other: TF32 for float32 only
 * (16-bit cases run on tensor cores either way, so keep one key), the
 * determinism for every dtype. */
Test(conv_cudnn_case, the_settings_are_part_of_the_key) {
  int64_t xs[4] = {2, 3, 9, 9}, ws[4] = {4, 3, 3, 3}, ys[4] = {2, 4, 9, 9};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_kview x = shape_view(MX_F32, 4, xs), w = shape_view(MX_F32, 4, ws), y = shape_view(MX_F32, 4, ys);
  mx_cudnn_conv_case exact, tf32, fast, half, half_tf32, half_fast;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &exact));
  cr_expect_eq(exact.allow_tf32, 0, "the default: no TF32");
  cr_expect_eq(exact.deterministic, 1, "the default: deterministic");
  mx_kview hx = shape_view(MX_F16, 4, xs), hw = shape_view(MX_F16, 4, ws), hy = shape_view(MX_F16, 4, ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &hx, &hw, &hy, &p, &half));

  mx_set_cudnn_allow_tf32(true);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &tf32));
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &hx, &hw, &hy, &p, &half_tf32));
  mx_set_cudnn_allow_tf32(false);
  cr_expect_eq(tf32.allow_tf32, 1);
  cr_expect_eq(tf32.deterministic, 1);
  cr_expect_neq(memcmp(&exact, &tf32, sizeof exact), 0, "TF32 is part of a float32 key");
  cr_expect_eq(half_tf32.allow_tf32, 0, "float16 does not depend on it");
  cr_expect_eq(memcmp(&half, &half_tf32, sizeof half), 0, "one float16 key either way");

  mx_set_cudnn_deterministic(false);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &fast));
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &hx, &hw, &hy, &p, &half_fast));
  mx_set_cudnn_deterministic(true);
  cr_expect_eq(fast.deterministic, 0);
  cr_expect_eq(fast.allow_tf32, 0);
  cr_expect_neq(memcmp(&exact, &fast, sizeof exact), 0, "the determinism is part of a float32 key");
  cr_expect_neq(memcmp(&half, &half_fast, sizeof half), 0, "and of a float16 one");
  cr_expect_eq(exact.benchmark, 0, "the default: cuDNN's heuristics");

  mx_cudnn_conv_case timed, half_timed;
  mx_set_cudnn_benchmark(true);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &timed));
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &hx, &hw, &hy, &p, &half_timed));
  mx_set_cudnn_benchmark(false);
  cr_expect_eq(timed.benchmark, 1);
  cr_expect_eq(timed.deterministic, 1, "the determinism holds under benchmarking");
  cr_expect_neq(memcmp(&exact, &timed, sizeof exact), 0, "benchmarking is part of a float32 key");
  cr_expect_neq(memcmp(&half, &half_timed, sizeof half), 0, "and of a float16 one");
}

/* Which of cuDNN's ranked answers is taken: deterministic, the first
 * usable deterministic one (else the first usable one); not, the first
 * usable one, as PyTorch with torch.backends.cudnn.deterministic off. */
Test(conv_cudnn_case, the_pick_honours_the_determinism) {
  mx_cudnn_conv_case c;
  memset(&c, 0, sizeof c);
  bool usable[5] = {false, true, true, true, true}, deterministic[5] = {true, false, false, true, true};
  bool no_winograd[5] = {false};
  c.deterministic = 1;
  cr_expect_eq(mx_cudnn_pick(&c, 5, usable, deterministic, no_winograd), 3, "the first usable deterministic answer");
  cr_expect_eq(mx_cudnn_pick(&c, 3, usable, deterministic, no_winograd), 1, "none deterministic: the first usable one");
  c.deterministic = 0;
  cr_expect_eq(mx_cudnn_pick(&c, 5, usable, deterministic, no_winograd), 1, "the first usable answer, deterministic or not");
  bool none[2] = {false, false};
  cr_expect_eq(mx_cudnn_pick(&c, 2, none, deterministic, no_winograd), -1, "nothing usable");
  c.deterministic = 1;
  cr_expect_eq(mx_cudnn_pick(&c, 2, none, deterministic, no_winograd), -1, "nothing usable");
}

/* A float32 3x3 convolution at stride 1 on FMA, ranked by the heuristics,
 * takes the usable (and, while deterministic, deterministic) Winograd
 * answer wherever the heuristics rank it; any other case keeps their order. */
Test(conv_cudnn_case, a_float32_3x3_convolution_prefers_winograd) {
  mx_kview x = shape_view(MX_F32, 4, (int64_t[]){2, 4, 6, 6}), w = shape_view(MX_F32, 4, (int64_t[]){8, 4, 3, 3}),
           y = shape_view(MX_F32, 4, (int64_t[]){2, 8, 6, 6});
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_cudnn_conv_case c;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_DATA, &x, &w, &y, &p, &c));
  bool usable[4] = {true, true, false, true}, deterministic[4] = {true, true, true, false};
  bool winograd[4] = {false, false, true, false}, late_winograd[4] = {false, true, false, false};
  cr_expect(mx_cudnn_prefers_winograd(&c));
  cr_expect_eq(mx_cudnn_pick(&c, 4, usable, deterministic, winograd), 0, "an unusable Winograd answer is passed over");
  cr_expect_eq(mx_cudnn_pick(&c, 4, usable, deterministic, late_winograd), 1, "Winograd first, wherever ranked");
  bool nondeterministic_winograd[4] = {false, false, false, true};
  cr_expect_eq(mx_cudnn_pick(&c, 4, usable, deterministic, nondeterministic_winograd), 0,
               "not a nondeterministic one while deterministic");
  c.deterministic = 0;
  cr_expect_eq(mx_cudnn_pick(&c, 4, usable, deterministic, nondeterministic_winograd), 3, "but without");

  mx_cudnn_conv_case other = c;
  other.allow_tf32 = 1;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "TF32: the heuristics rank tensor-core answers");
  other = c, other.dtype = MX_BF16;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "16-bit: tensor cores");
  other = c, other.benchmark = 1;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "timed: the fastest wins anyway");
  other = c, other.stride[1] = 2;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "stride 2");
  other = c, other.dil[0] = 2;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "dilation 2");
  other = c, other.w[2] = 5, other.w[3] = 5;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "a 5x5 filter: not measured");
  other = c, other.groups = 2;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "grouped");
  other = c, other.nd = 5;
  cr_expect_not(mx_cudnn_prefers_winograd(&other), "3-d");
  cr_expect_eq(mx_cudnn_pick(&other, 4, usable, deterministic, late_winograd), 0, "elsewhere the ranking stands");
}

/* A float32 3x3 convolution on FMA with channels-last activations runs on
 * row-major copies (cuDNN's Winograd is NCHW only); a 16-bit one, or one
 * with a row-major operand, keeps its layout. */
Test(conv_cudnn_case, float32_channels_last_winograd_cases_run_in_nchw) {
  int64_t xs[4] = {2, 8, 6, 6}, ws[4] = {4, 8, 3, 3}, ys[4] = {2, 4, 6, 6};
  mx_conv_params p = params(2, 1, 1, 1, 1);
  mx_kview x = channels_last_view(MX_F32, xs), w = shape_view(MX_F32, 4, ws), y = channels_last_view(MX_F32, ys);
  mx_cudnn_conv_case c;
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_WEIGHT, &x, &w, &y, &p, &c));
  cr_expect(mx_cudnn_runs_in_nchw(&c));
  mx_kview row_major_y = shape_view(MX_F32, 4, ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_BACKWARD_DATA, &x, &w, &row_major_y, &p, &c));
  cr_expect_not(mx_cudnn_runs_in_nchw(&c), "a row-major gradient: cuDNN takes the mixed layouts as they are");
  mx_kview row_major_x = shape_view(MX_F32, 4, xs);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &row_major_x, &w, &row_major_y, &p, &c));
  cr_expect_not(mx_cudnn_runs_in_nchw(&c), "already row-major");
  mx_kview hx = channels_last_view(MX_F16, xs), hw = shape_view(MX_F16, 4, ws), hy = channels_last_view(MX_F16, ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &hx, &hw, &hy, &p, &c));
  cr_expect_not(mx_cudnn_runs_in_nchw(&c), "16-bit: NHWC is what its tensor cores want");
  mx_conv_params strided = params(2, 2, 1, 1, 1);
  int64_t half_ys[4] = {2, 4, 3, 3};
  mx_kview small_y = channels_last_view(MX_F32, half_ys);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &small_y, &strided, &c));
  cr_expect_not(mx_cudnn_runs_in_nchw(&c), "stride 2: no Winograd");
  mx_set_cudnn_benchmark(true);
  cr_assert(mx_cudnn_conv_case_of(MX_CONV_FORWARD, &x, &w, &y, &p, &c));
  mx_set_cudnn_benchmark(false);
  cr_expect(mx_cudnn_runs_in_nchw(&c), "timed too: NHWC has no algorithm as fast");
  cr_expect_not(mx_cudnn_prefers_winograd(&c), "but timing picks");
}

/* FMA arithmetic whatever cuDNN answers: float32 unless TF32 is allowed;
 * 16-bit cases never (they run on tensor cores). */
Test(conv_cudnn_case, float32_keeps_fma_unless_tf32_is_allowed) {
  mx_cudnn_conv_case c;
  memset(&c, 0, sizeof c);
  c.dtype = MX_F32;
  cr_expect(mx_cudnn_fma_only(&c));
  c.allow_tf32 = 1;
  cr_expect_not(mx_cudnn_fma_only(&c));
  c.dtype = MX_BF16, c.allow_tf32 = 0;
  cr_expect_not(mx_cudnn_fma_only(&c));
}
