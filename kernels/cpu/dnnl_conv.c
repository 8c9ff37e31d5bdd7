/* oneDNN convolution primitives (forward, with or without a ReLU post-op;
 * backward data, backward weights), created once per shape and reused:
 * direct, or Winograd for the 3x3 convolutions it speeds up (float32,
 * and bfloat16 computed in float32: winograd_fits). On a CPU without bf16
 * dot products bfloat16, and float16 everywhere, run on float32 primitives
 * whose reorders convert them (mx__dnnl_conv_in_f32, called by conv.c a
 * block of samples at a time).
 *
 * The primitives choose their own layouts (format_any: blocked, e.g.
 * nChw16c), and operands whose layout differs from the view's are reordered
 * on the way in and out (16-bit activations by mixgrad's own transpose,
 * channel_blocks.h); that is faster than asking oneDNN to work on the
 * views' plain strides (see LAYOUT below). Channels-last activations are
 * the exception: the primitives read and write them as they are (nhwc),
 * weights alone in a layout of the primitive's choosing, so a CNN kept
 * channels-last runs no activation reorder. Reordered inputs are kept for
 * the next convolution that reads the same operand (see "kept" below), so a
 * weight or an activation read by two kernels is reordered once. Every
 * primitive runs with a user-provided scratchpad from the thread's workspace
 * (dnnl_common.h, shared with matmul), so the cached primitives can run on
 * any thread, at once on several. */
#include "kernels/cpu/dnnl.h"
#include "kernels/cpu/dnnl_conv_plan.h"

#include <stdatomic.h>
#include <string.h>

#include "kernels/cpu/channel_blocks.h"
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/host_cache.h"
#include "kernels/cpu/parallel.h"
#include "mx_config.h"

#if MX_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>

enum { ROLE_X, ROLE_W, ROLE_Y }; /* src (or diff_src), weights (or diff), dst (or diff) */
enum { KIND_FWD, KIND_BWD_DATA, KIND_BWD_WEIGHTS };

static const char *kind_name[] = {"forward", "backward data", "backward weights"};
static const int output_role[] = {ROLE_Y, ROLE_X, ROLE_W};
/* execution argument of each role, per kind */
static const int exec_arg[3][3] = {
    {DNNL_ARG_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DST},
    {DNNL_ARG_DIFF_SRC, DNNL_ARG_WEIGHTS, DNNL_ARG_DIFF_DST},
    {DNNL_ARG_SRC, DNNL_ARG_DIFF_WEIGHTS, DNNL_ARG_DIFF_DST},
};

/* Layouts: LAYOUT_ANY lets each primitive pick its layouts (blocked, e.g.
 * nChw16c) and reorders the operands; LAYOUT_USER describes the views' own
 * strides to the convolution (oneDNN then runs im2col + GEMM on plain
 * layouts). Measured on a ResNet-9's layers (batch 64; 3->64 and 64->128 at
 * 32x32, 128->256 at 16x16; 2 Zen 5 cores), LAYOUT_ANY with its reorders is
 * as fast or faster everywhere (f32 up to 2.2x, bf16 about 2x) but for the
 * gradient of an input with few channels (3: an image), where the blocked
 * layout pads the channels to 16 and LAYOUT_USER is 3-7x faster.
 * LAYOUT_NHWC, for the convolutions whose activations come channels-last
 * (conv_key.nhwc), describes both activations as nhwc and leaves the
 * weights to the primitive: oneDNN's direct kernels read nhwc without a
 * reorder, bf16 at the blocked layout's speed and f32 within about 10%
 * (oneDNN 2.6, measured). An activation given row-major there is reordered. */
enum { LAYOUT_ANY, LAYOUT_USER, LAYOUT_NHWC };

static int preferred_layout(int kind, dnnl_dim_t in_channels) {
  return kind == KIND_BWD_DATA && in_channels < 16 ? LAYOUT_USER : LAYOUT_ANY;
}

typedef mx__dnnl_md md_t;
#define MD_NONE MX__DNNL_MD_NONE

/* --- the two API generations ------------------------------------------------------ */
/* md[ROLE_*] and bias (NULL: none): the forward's, or the backward weights' diff_bias. */
#if DNNL_VERSION_MAJOR >= 3
static dnnl_status_t conv_pd(dnnl_primitive_desc_t *pd, int kind, dnnl_alg_kind_t alg, const md_t *md,
                             const md_t *bias, const dnnl_dims_t strides, const dnnl_dims_t dil,
                             const dnnl_dims_t pad_l, const dnnl_dims_t pad_r, const_dnnl_primitive_desc_t hint,
                             const_dnnl_primitive_attr_t attr) {
  dnnl_engine_t engine = mx__dnnl_engine();
  switch (kind) {
  case KIND_FWD:
    return dnnl_convolution_forward_primitive_desc_create(pd, engine, dnnl_forward_training, alg,
                                                          md[ROLE_X], md[ROLE_W], bias ? *bias : NULL, md[ROLE_Y],
                                                          strides, dil, pad_l, pad_r, attr);
  case KIND_BWD_DATA:
    return dnnl_convolution_backward_data_primitive_desc_create(pd, engine, alg, md[ROLE_X],
                                                                md[ROLE_W], md[ROLE_Y], strides, dil, pad_l, pad_r,
                                                                hint, attr);
  default:
    return dnnl_convolution_backward_weights_primitive_desc_create(pd, engine, alg, md[ROLE_X],
                                                                   md[ROLE_W], bias ? *bias : NULL, md[ROLE_Y],
                                                                   strides, dil, pad_l, pad_r, hint, attr);
  }
}
static dnnl_status_t reorder_pd(dnnl_primitive_desc_t *pd, const md_t *from, const md_t *to) {
  return dnnl_reorder_primitive_desc_create(pd, *from, mx__dnnl_engine(), *to, mx__dnnl_engine(), mx__dnnl_attr());
}
#else
static dnnl_status_t conv_pd(dnnl_primitive_desc_t *pd, int kind, dnnl_alg_kind_t alg, const md_t *md,
                             const md_t *bias, const dnnl_dims_t strides, const dnnl_dims_t dil,
                             const dnnl_dims_t pad_l, const dnnl_dims_t pad_r, const_dnnl_primitive_desc_t hint,
                             const_dnnl_primitive_attr_t attr) {
  dnnl_convolution_desc_t desc;
  dnnl_status_t s;
  switch (kind) {
  case KIND_FWD:
    s = dnnl_dilated_convolution_forward_desc_init(&desc, dnnl_forward_training, alg, &md[ROLE_X],
                                                   &md[ROLE_W], bias, &md[ROLE_Y], strides, dil, pad_l, pad_r);
    break;
  case KIND_BWD_DATA:
    s = dnnl_dilated_convolution_backward_data_desc_init(&desc, alg, &md[ROLE_X], &md[ROLE_W],
                                                         &md[ROLE_Y], strides, dil, pad_l, pad_r);
    break;
  default:
    s = dnnl_dilated_convolution_backward_weights_desc_init(&desc, alg, &md[ROLE_X], &md[ROLE_W],
                                                            bias, &md[ROLE_Y], strides, dil, pad_l, pad_r);
    break;
  }
  return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &desc, attr, mx__dnnl_engine(), hint);
}
static dnnl_status_t reorder_pd(dnnl_primitive_desc_t *pd, const md_t *from, const md_t *to) {
  return dnnl_reorder_primitive_desc_create(pd, from, mx__dnnl_engine(), to, mx__dnnl_engine(), mx__dnnl_attr());
}
#endif

/* --- the cache ----------------------------------------------------------------------- */

typedef struct {
  int kind;
  mx_dtype dtype;                        /* the activations' */
  mx_dtype w_dtype;                      /* the weights' and the bias's: dtype, or float32 gradients of bfloat16
                                          * activations (backward weights), summed over chunks of a batch */
  int bias;                              /* forward: whether it adds one; backward weights: whether it writes
                                          * the bias's gradient (diff_bias) too */
  int threads;                           /* oneDNN sizes a primitive's work split for the threads it was made on */
  int relu;                              /* forward: whether a ReLU post-op follows */
  int nhwc;                              /* 2-d, an activation channels-last: LAYOUT_NHWC */
  int winograd;                          /* winograd_fits: tried with Winograd first */
  int in_f32;                            /* 16-bit operands computed by a float32 primitive (the reorders
                                          * convert them), a float32 bias: mx__dnnl_conv_in_f32 */
  int nd[3];                             /* per role; weights get a groups dim when groups > 1 */
  dnnl_dims_t dims[3], strides[3];       /* per role, as oneDNN sees them: up to (G, O, I, D, H, W) */
  dnnl_dims_t stride, dil, pad_l, pad_r; /* spatial, oneDNN's conventions */
} conv_key;

typedef struct {
  dnnl_primitive_t primitive; /* NULL: none needed (the layouts agree), or channel_blocks */
  bool channel_blocks;        /* 16-bit plain <-> blocks of 16 channels: mixgrad's transpose, not oneDNN's */
  bool f32_blocks;            /* those blocks float32 (a float32 primitive's): converted on the way */
  md_t scratch_md;
  size_t scratch_size;
} step;

/* Whether role r goes through the workspace in the primitive's layout. */
static bool moved(const step *reorder) { return reorder->primitive || reorder->channel_blocks; }

typedef struct {
  conv_key key;
  dnnl_primitive_t primitive; /* NULL: oneDNN has no kernel for this */
  bool winograd;              /* the primitive is oneDNN's Winograd, not direct */
  dnnl_primitive_desc_t hint; /* the forward descriptor a backward one was made with */
  md_t user_md[3], prim_md[3], scratch_md;
  md_t bias_md; /* the forward's bias, a plain vector; MD_NONE without one */
  size_t prim_size[3], scratch_size;
  step reorder[3]; /* user -> primitive layout for inputs, back for the output */
} conv_entry;

static void entry_clear(void *p) {
  conv_entry *e = p;
  if (e->primitive) dnnl_primitive_destroy(e->primitive);
  if (e->hint) dnnl_primitive_desc_destroy(e->hint);
  for (int r = 0; r < 3; r++) {
    mx__dnnl_md_free(e->user_md[r]);
    mx__dnnl_md_free(e->prim_md[r]);
    if (e->reorder[r].primitive) dnnl_primitive_destroy(e->reorder[r].primitive);
    mx__dnnl_md_free(e->reorder[r].scratch_md);
  }
  mx__dnnl_md_free(e->scratch_md);
  mx__dnnl_md_free(e->bias_md);
  memset(e, 0, sizeof *e);
}

/* Whether oneDNN's float32 Winograd (F(4x4, 3x3): jit_wino_4x3 on AVX-512)
 * is tried before direct: float32 throughout, 2-d, a 3x3 filter at stride 1
 * and dilation 1, one group, 16 input channels or more, activations not
 * channels-last (its kernels read the blocked layout only, and a
 * channels-last CNN is kept free of activation reorders). Measured by
 * bench/dnnl_winograd on the CNN's and ResNet-9's layers: 1.4-3.0x direct's
 * speed, where direct already runs at the machine's float32 ceiling; with
 * 1 or 3 input channels 3-10x slower (bench/NOTES.md, round 30). Its
 * transforms round in proportion to the terms' magnitudes rather than the
 * sum's, as cuDNN's Winograd does on the GPU. oneDNN has no bfloat16
 * Winograd, and its bfloat16 direct kernels are slower than float32's
 * Winograd from 64 input channels and 8x8 outputs (1.1-1.5x on the ResNet's
 * layers; bfloat16 direct is faster at the CNN's 32 channels, and even at
 * 4x4 outputs): bfloat16 operands of those geometries are converted to
 * float32 by the reorders into the primitive's layout and back (a pass
 * each, as bfloat16's own reorders), and the primitive runs in float32. Not
 * with a bias (a float32 primitive takes a float32 one; the ResNet's
 * convolutions have none), and a plan declines them (plan_begin). */
static bool winograd_geometry(bool nhwc, const dnnl_dim_t *w_dims, const mx_conv_params *p) {
  if (nhwc || p->spatial != 2 || p->groups != 1) return false;
  for (int j = 0; j < 2; j++) /* weights (O, I, H, W) */
    if (w_dims[2 + j] != 3 || p->stride[j] != 1 || p->dilation[j] != 1) return false;
  return w_dims[1] >= 16;
}

static bool winograd_fits(const conv_key *key, const mx_conv_params *p) {
  bool f32 = (key->dtype == MX_F32 && key->w_dtype == MX_F32) || key->in_f32,
       bf16 = key->dtype == MX_BF16 && !key->bias && key->dims[ROLE_W][1] >= 64 &&
              key->dims[ROLE_Y][2] * key->dims[ROLE_Y][3] >= 64;
  return (f32 || bf16) && winograd_geometry(key->nhwc, key->dims[ROLE_W], p);
}

/* Whether an activation is channels-last and not row-major as well (one
 * channel or one pixel: the other operand decides): LAYOUT_NHWC's. */
static bool nhwc_activation(const mx_kview *v, const mx_conv_params *p) {
  return p->spatial == 2 && mx__kview_is_channels_last(v) && !mx__kview_is_contiguous(v);
}

/* Fills the key from the views in their roles; false when oneDNN cannot
 * describe them (a stride that is zero or negative). */
static bool make_key(conv_key *key, int kind, const mx_kview *const *v, bool bias, bool relu, bool in_f32,
                     const mx_conv_params *p) {
  memset(key, 0, sizeof *key);
  key->kind = kind;
  key->in_f32 = in_f32;
  key->dtype = v[ROLE_X]->dtype;
  key->w_dtype = v[ROLE_W]->dtype;
  /* a 16-bit x's weight gradient may sum in float32, and a float32 primitive may take float32 weights */
  bool half = key->dtype == MX_BF16 || key->dtype == MX_F16;
  if (key->w_dtype != key->dtype && !(half && key->w_dtype == MX_F32 && (kind == KIND_BWD_WEIGHTS || in_f32)))
    return false;
  key->bias = bias;
  key->threads = mx__cpu_threads_here();
  key->relu = relu;
  for (int r = 0; r < 3; r++) key->nhwc |= r != ROLE_W && nhwc_activation(v[r], p);
  int64_t G = p->groups;
  for (int r = 0; r < 3; r++) {
    const mx_kview *view = v[r];
    int n = view->ndim, at = 0;
    if (r == ROLE_W && G > 1) { /* (C_out, ...) as (G, C_out/G, ...) */
      key->dims[r][0] = G;
      key->strides[r][0] = view->strides[0] * (view->shape[0] / G);
      key->dims[r][1] = view->shape[0] / G;
      key->strides[r][1] = view->strides[0];
      at = 2;
      for (int d = 1; d < n; d++, at++) key->dims[r][at] = view->shape[d], key->strides[r][at] = view->strides[d];
    } else {
      for (int d = 0; d < n; d++, at++) key->dims[r][at] = view->shape[d], key->strides[r][at] = view->strides[d];
    }
    key->nd[r] = at;
    /* size-1 dims get the strides of a dense layout, so plain layouts are
     * recognised as such; the channels-last activations of a LAYOUT_NHWC
     * convolution get channels-last's, so that they match its nhwc ones */
    if (key->nhwc && r != ROLE_W && mx__kview_is_channels_last(view)) {
      mx__channels_last_strides(key->dims[r], key->strides[r]);
      continue;
    }
    for (int d = at - 1; d >= 0; d--) {
      if (key->dims[r][d] == 1)
        key->strides[r][d] = d == at - 1 ? 1 : key->strides[r][d + 1] * key->dims[r][d + 1];
      else if (key->strides[r][d] <= 0)
        return false;
    }
  }
  for (int j = 0; j < p->spatial; j++) {
    int64_t in = v[ROLE_X]->shape[2 + j], out = v[ROLE_Y]->shape[2 + j], K = v[ROLE_W]->shape[2 + j];
    int64_t s = p->stride[j], pad = p->padding[j], dil = p->dilation[j];
    /* the right padding that makes oneDNN's size formula give `out` exactly;
     * rounded up to 0 (the extra zeros are out of every window's reach when
     * less than a stride), impossible when x is larger still (backward data
     * with output_padding >= stride) */
    int64_t pad_r = (out - 1) * s + (K - 1) * dil + 1 - in - pad;
    if (pad_r + s <= 0) return false;
    key->stride[j] = s;
    key->dil[j] = dil - 1;
    key->pad_l[j] = pad;
    key->pad_r[j] = pad_r > 0 ? pad_r : 0;
  }
  key->winograd = winograd_fits(key, p);
  return true;
}

static mx_status fail(int kind, const char *what, dnnl_status_t s) {
  return mx__error(MX_BACKEND_ERROR, "mx_conv: oneDNN %s convolution: %s failed (%s)", kind_name[kind], what,
                   dnnl_status2str(s));
}

/* Whether role r's reorder is mx__to/from_channel_blocks16 (or their
 * float32 forms, *f32 set): a bf16 activation, or an f16 one of a float32
 * primitive (not the weights, not in a LAYOUT_NHWC convolution, whose
 * activations are nhwc) in a dense view, channels a multiple of 16, and the
 * primitive's layout exactly their blocks (nChw16c and its 1-d and 3-d
 * forms), in bf16 or, for a primitive computing in float32, f32. oneDNN 2.6
 * reorders bf16 with a generic kernel, at half the bytes per second of its
 * f32 one, converts to bf16 on a CPU without bf16 instructions at a quarter
 * of the f32 one's, and converts f16 with its reference code. */
static bool channel_blocks_fit(const conv_key *key, int r, const md_t *prim, bool *f32) {
  static const dnnl_format_tag_t tags[6] = {[3] = dnnl_aBc16b, [4] = dnnl_aBcd16b, [5] = dnnl_aBcde16b};
  int nd = key->nd[r];
  bool half = key->dtype == MX_BF16 || (key->dtype == MX_F16 && key->in_f32); /* float16: float32 blocks only */
  if (!half || key->nhwc || r == ROLE_W || nd < 3 || nd > 5 || key->dims[r][1] % 16) return false;
  dnnl_dim_t dense = 1;
  for (int d = nd - 1; d >= 0; dense *= key->dims[r][d], d--)
    if (key->strides[r][d] != dense) return false;
  bool fit = false;
  for (int wide = key->dtype == MX_F16; wide < 2 && !fit; wide++) {
    md_t blocks = MD_NONE;
    fit = mx__dnnl_md_tag(&blocks, nd, key->dims[r], wide ? dnnl_f32 : dnnl_bf16, tags[nd]) == dnnl_success &&
          mx__dnnl_md_equal(&blocks, prim);
    *f32 = wide;
    mx__dnnl_md_free(blocks);
  }
  return fit;
}

/* The layout the convolution describes role r in (conv_md), for layout. */
static dnnl_status_t layout_md(md_t *md, const conv_entry *e, int r, int layout, dnnl_data_type_t dt) {
  const conv_key *key = &e->key;
  if (layout == LAYOUT_ANY || (layout == LAYOUT_NHWC && r == ROLE_W))
    return mx__dnnl_md_any(md, key->nd[r], key->dims[r], dt);
  if (layout == LAYOUT_USER) return mx__dnnl_md_strided(md, key->nd[r], key->dims[r], dt, key->strides[r]);
  dnnl_dims_t strides = {0};
  mx__channels_last_strides(key->dims[r], strides);
  return mx__dnnl_md_strided(md, key->nd[r], key->dims[r], dt, strides);
}

/* oneDNN's name for a view's dtype (float32, or the 16-bit ones a float32 primitive's reorders convert) */
static dnnl_data_type_t user_dtype(mx_dtype dtype) {
  return dtype == MX_BF16 ? dnnl_bf16 : dtype == MX_F16 ? dnnl_f16 : dnnl_f32;
}

/* Creates the primitives for key into e. MX_NOT_SUPPORTED (e->primitive NULL)
 * when oneDNN has no kernel; MX_BACKEND_ERROR for any other failure. */
static mx_status create(void *p, const void *k) {
  conv_entry *e = p;
  const conv_key *key = k;
  memset(e, 0, sizeof *e);
  memcpy(&e->key, key, sizeof *key); /* with its zeroed padding: keys are compared by memcmp */
  int kind = key->kind, out = output_role[kind];
  dnnl_data_type_t dt = user_dtype(key->dtype), wdt = user_dtype(key->w_dtype);
  for (int r = 0; r < 3; r++)
    if (mx__dnnl_md_strided(&e->user_md[r], key->nd[r], key->dims[r], r == ROLE_W ? wdt : dt, key->strides[r]) !=
        dnnl_success)
      return MX_NOT_SUPPORTED;
  const dnnl_dims_t channels = {key->dims[ROLE_Y][1]};
  if (key->bias && mx__dnnl_md_tag(&e->bias_md, 1, channels, key->in_f32 ? dnnl_f32 : wdt, dnnl_a) != dnnl_success)
    return MX_NOT_SUPPORTED;
  const md_t *bias = key->bias ? &e->bias_md : NULL;
  mx_status status = MX_OK;
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = dnnl_unimplemented;
  /* Winograd where it fits, then direct in the preferred layouts, then in
   * the others, until oneDNN has a kernel */
  int first = key->nhwc ? LAYOUT_NHWC : preferred_layout(kind, key->dims[ROLE_X][1]);
  dnnl_alg_kind_t algs[3];
  int layouts[3], attempts = 0;
  if (key->winograd) algs[attempts] = dnnl_convolution_winograd, layouts[attempts++] = LAYOUT_ANY;
  algs[attempts] = dnnl_convolution_direct, layouts[attempts++] = first;
  algs[attempts] = dnnl_convolution_direct, layouts[attempts++] = first == LAYOUT_ANY ? LAYOUT_USER : LAYOUT_ANY;
  for (int attempt = 0; attempt < attempts && s == dnnl_unimplemented; attempt++) {
    dnnl_alg_kind_t alg = algs[attempt];
    int layout = layouts[attempt];
    /* the ReLU: clip, but Winograd takes none (2.6), and, JIT code, computes eltwise_relu as clip does */
    const_dnnl_primitive_attr_t attr = !key->relu                         ? mx__dnnl_attr()
                                       : alg == dnnl_convolution_winograd ? mx__dnnl_jit_relu_attr()
                                                                          : mx__dnnl_relu_attr();
    /* the data types it computes in: float32 for Winograd (winograd_fits) and in_f32 */
    bool f32 = alg == dnnl_convolution_winograd || key->in_f32;
    dnnl_data_type_t cdt = f32 ? dnnl_f32 : dt, cwdt = f32 ? dnnl_f32 : wdt;
    md_t conv_md[3] = {MD_NONE, MD_NONE, MD_NONE};
    bool ok = attr != NULL;
    for (int r = 0; r < 3; r++) ok = ok && layout_md(&conv_md[r], e, r, layout, cdt) == dnnl_success;
    if (e->hint) dnnl_primitive_desc_destroy(e->hint);
    e->hint = NULL;
    s = ok ? dnnl_success : dnnl_unimplemented;
    if (s == dnnl_success && kind != KIND_FWD)
      s = conv_pd(&e->hint, KIND_FWD, alg, conv_md, bias, key->stride, key->dil, key->pad_l, key->pad_r, NULL,
                  mx__dnnl_attr()); /* with the diff_bias's bias, as PyTorch's hint */
    if (s == dnnl_success && cwdt != cdt) { /* the hint's weights are the activations' dtype, their gradient not */
      md_t w_md = MD_NONE;
      s = layout_md(&w_md, e, ROLE_W, layout, cwdt) == dnnl_success ? dnnl_success : dnnl_unimplemented;
      mx__dnnl_md_free(conv_md[ROLE_W]);
      conv_md[ROLE_W] = w_md;
    }
    if (s == dnnl_success)
      s = conv_pd(&pd, kind, alg, conv_md, bias, key->stride, key->dil, key->pad_l, key->pad_r, e->hint, attr);
    e->winograd = s == dnnl_success && alg == dnnl_convolution_winograd;
    /* a ReLU oneDNN cannot fuse into its Winograd while the plain
     * convolution runs as Winograd: declined, so the caller runs that and
     * then the ReLU kernel, and fused and unfused sum alike */
    dnnl_primitive_desc_t plain = NULL;
    if (s == dnnl_unimplemented && key->relu && alg == dnnl_convolution_winograd &&
        conv_pd(&plain, kind, alg, conv_md, bias, key->stride, key->dil, key->pad_l, key->pad_r, NULL,
                mx__dnnl_attr()) == dnnl_success) {
      dnnl_primitive_desc_destroy(plain);
      attempts = 0;
    }
    for (int r = 0; r < 3; r++) mx__dnnl_md_free(conv_md[r]);
  }
  if (s == dnnl_unimplemented) return MX_NOT_SUPPORTED;
  if (s != dnnl_success) return fail(kind, "creating the primitive descriptor", s);

  for (int r = 0; r < 3 && status == MX_OK; r++) {
    if (!mx__dnnl_md_query(&e->prim_md[r], pd, dnnl_query_exec_arg_md, exec_arg[kind][r])) {
      status = fail(kind, "querying a memory descriptor", dnnl_runtime_error);
      break;
    }
    e->prim_size[r] = mx__dnnl_md_size(&e->prim_md[r]);
    if (mx__dnnl_md_equal(&e->prim_md[r], &e->user_md[r])) continue;
    if ((e->reorder[r].channel_blocks = channel_blocks_fit(key, r, &e->prim_md[r], &e->reorder[r].f32_blocks)))
      continue;
    /* oneDNN 2.6 reorders float16 with its reference kernel, about 35 ns a value (a CNN's first-layer input took
     * 0.53 ms a block of 19 images): declined, so conv.c converts the operands itself */
    if ((r == ROLE_W ? key->w_dtype : key->dtype) == MX_F16) {
      status = MX_NOT_SUPPORTED;
      break;
    }
    dnnl_primitive_desc_t rpd;
    s = r == out ? reorder_pd(&rpd, &e->prim_md[r], &e->user_md[r]) : reorder_pd(&rpd, &e->user_md[r], &e->prim_md[r]);
    if (s != dnnl_success) {
      status = s == dnnl_unimplemented ? MX_NOT_SUPPORTED : fail(kind, "creating a reorder", s);
      break;
    }
    if (!mx__dnnl_scratchpad_query(rpd, &e->reorder[r].scratch_md, &e->reorder[r].scratch_size))
      status = fail(kind, "querying a reorder's scratchpad", dnnl_runtime_error);
    else if ((s = dnnl_primitive_create(&e->reorder[r].primitive, rpd)) != dnnl_success)
      status = fail(kind, "creating a reorder", s);
    dnnl_primitive_desc_destroy(rpd);
  }
  if (status == MX_OK && !mx__dnnl_scratchpad_query(pd, &e->scratch_md, &e->scratch_size))
    status = fail(kind, "querying the scratchpad", dnnl_runtime_error);
  if (status == MX_OK && (s = dnnl_primitive_create(&e->primitive, pd)) != dnnl_success) {
    e->primitive = NULL;
    status = fail(kind, "creating the primitive", s);
  }
  dnnl_primitive_desc_destroy(pd);
  return status;
}

static mx__dnnl_cache cache = MX__DNNL_CACHE_INIT("mx_conv", conv_key, conv_entry, create, entry_clear);

/* --- reordered operands kept for reuse ------------------------------------------------ */
/* An input reordered into a primitive's layout is kept, keyed by where it
 * came from (mx_kview.origin: the storage, its version, the view), and the
 * next convolution that wants the same operand in the same layout reads it
 * instead of reordering again: a weight serves every call that wants it in
 * that layout until its version changes (an optimizer's step; the slot is
 * then refilled in place), an activation the two kernels that read it (dy:
 * both gradients; x: the forward and the weight's gradient). The weight's
 * gradient is an activation's last reader, so its copy goes when that kernel
 * is done; without that, dead copies filled the budget over a run's first
 * steps (a page-faulting allocation each) and, at batch 512, pushed out the
 * live ones. Weights are kept within KEPT_WEIGHT_BYTES, activations within
 * KEPT_ACTIVATION_BYTES (the least recently used give way): a training
 * step's activations are copied where they fit, which costs memory, not
 * time; 64 MiB holds the demo CNN's largest pair (an input and its output's
 * gradient) at batch 512. */
#define KEPT_SLOTS 64
#define KEPT_WEIGHT_BYTES ((size_t)128 << 20)
#define KEPT_ACTIVATION_BYTES ((size_t)64 << 20)

typedef struct {
  uint64_t origin, version;
  const void *data;
  mx_dtype dtype;
  int nd;
  dnnl_dims_t dims, strides;
  md_t md; /* the primitive's layout */
  void *buf;
  size_t bytes;
  bool weight;
  bool ready; /* false while its first user fills it */
  int users;  /* convolutions reading (or filling) it now: never refilled or evicted while > 0 */
  uint64_t used;
} kept_operand;

static struct {
  pthread_mutex_t lock;
  kept_operand slot[KEPT_SLOTS];
  size_t bytes[2]; /* activations, weights */
  uint64_t tick;
} kept = {.lock = PTHREAD_MUTEX_INITIALIZER};

static atomic_ullong reorders_run, weight_reorders_run, winograd_run;

uint64_t mx__dnnl_conv_reorders(void) { return atomic_load(&reorders_run); }
uint64_t mx__dnnl_conv_weight_reorders(void) { return atomic_load(&weight_reorders_run); }
uint64_t mx__dnnl_conv_winograd_runs(void) { return atomic_load(&winograd_run); }

size_t mx__dnnl_conv_kept_activation_bytes(void) {
  pthread_mutex_lock(&kept.lock);
  size_t bytes = kept.bytes[false];
  pthread_mutex_unlock(&kept.lock);
  return bytes;
}

static void count_reorder(int r) {
  atomic_fetch_add(&reorders_run, 1);
  if (r == ROLE_W) atomic_fetch_add(&weight_reorders_run, 1);
}

/* Whether slot k holds role r of key in layout md (any version). */
static bool kept_matches(const kept_operand *k, const conv_key *key, int r, const mx_kview *v, const md_t *md) {
  return k->buf && k->origin == v->origin && k->data == v->data && k->dtype == key->dtype && k->nd == key->nd[r] &&
         !memcmp(k->dims, key->dims[r], sizeof k->dims) && !memcmp(k->strides, key->strides[r], sizeof k->strides) &&
         mx__dnnl_md_equal(&k->md, md);
}

static void kept_drop(kept_operand *k) {
  mx__host_cache_free(k->buf, k->bytes);
  kept.bytes[k->weight] -= k->bytes;
  mx__dnnl_md_free(k->md);
  memset(k, 0, sizeof *k);
}

/* A free slot for `bytes` more of its class, evicting the least recently
 * used idle entries; NULL when the budget or the slots are all in use. */
static kept_operand *kept_room(bool weight, size_t bytes) {
  size_t budget = weight ? KEPT_WEIGHT_BYTES : KEPT_ACTIVATION_BYTES;
  if (bytes > budget) return NULL;
  for (;;) {
    kept_operand *free_slot = NULL, *oldest = NULL, *oldest_same = NULL;
    for (int i = 0; i < KEPT_SLOTS; i++) {
      kept_operand *k = &kept.slot[i];
      if (!k->buf) {
        free_slot = free_slot ? free_slot : k;
        continue;
      }
      if (k->users) continue;
      if (!oldest || k->used < oldest->used) oldest = k;
      if (k->weight == weight && (!oldest_same || k->used < oldest_same->used)) oldest_same = k;
    }
    if (kept.bytes[weight] + bytes > budget) {
      if (!oldest_same) return NULL;
      kept_drop(oldest_same);
    } else if (free_slot) {
      return free_slot;
    } else if (oldest) {
      kept_drop(oldest);
    } else {
      return NULL;
    }
  }
}

/* The slot holding role r of the convolution's operands, or one to fill
 * (*fill set) when `keep`; NULL when the operand is not kept (the workspace
 * takes it). */
static kept_operand *kept_acquire(const conv_entry *e, int r, const mx_kview *v, bool keep, bool *fill) {
  *fill = false;
  if (!v->origin || v->data != v->origin_data) return NULL;
  pthread_mutex_lock(&kept.lock);
  kept_operand *found = NULL;
  for (int i = 0; i < KEPT_SLOTS && !found; i++)
    if (kept_matches(&kept.slot[i], &e->key, r, v, &e->prim_md[r])) found = &kept.slot[i];
  if (found && found->ready && found->version == v->origin_version) {
    found->users++;
  } else if (!keep) {
    found = NULL;
  } else if (found && found->users == 0) { /* a newer version: refilled in place */
    found->users = 1;
    found->ready = false;
    found->version = v->origin_version;
    *fill = true;
  } else if (found) { /* read by another thread in its older version */
    found = NULL;
  } else if ((found = kept_room(r == ROLE_W, e->prim_size[r]))) {
    void *buf = mx__host_cache_alloc(e->prim_size[r]);
    md_t md = MD_NONE;
    if (buf && mx__dnnl_md_copy(&md, &e->prim_md[r])) {
      *found = (kept_operand){.origin = v->origin, .version = v->origin_version, .data = v->data,
                              .dtype = e->key.dtype, .nd = e->key.nd[r], .md = md, .buf = buf,
                              .bytes = e->prim_size[r], .weight = r == ROLE_W, .users = 1};
      memcpy(found->dims, e->key.dims[r], sizeof found->dims);
      memcpy(found->strides, e->key.strides[r], sizeof found->strides);
      kept.bytes[found->weight] += found->bytes;
      *fill = true;
    } else {
      if (buf) mx__host_cache_free(buf, e->prim_size[r]);
      found = NULL;
    }
  }
  if (found) found->used = ++kept.tick;
  pthread_mutex_unlock(&kept.lock);
  return found;
}

/* After the convolution: filled says whether a slot this call filled holds
 * the operand now (false: the reorder failed, the slot is emptied); an
 * activation's last reader (last_use) empties it too once no one reads it. */
static void kept_release(kept_operand *k, bool filling, bool filled, bool last_use) {
  pthread_mutex_lock(&kept.lock);
  k->users--;
  if (filling && filled) k->ready = true;
  if ((filling && !filled) || (last_use && !k->weight && k->users == 0)) kept_drop(k);
  pthread_mutex_unlock(&kept.lock);
}

/* --- execution ------------------------------------------------------------------------ */

/* Role r between its view (plain) and the workspace (blocks of 16 channels). */
static void channel_blocks(const conv_entry *e, int r, void *blocked, void *plain, bool to_blocked) {
  const conv_key *key = &e->key;
  int64_t spatial = 1, n = key->dims[r][0], c = key->dims[r][1];
  for (int d = 2; d < key->nd[r]; d++) spatial *= key->dims[r][d];
  if (e->reorder[r].f32_blocks && to_blocked) mx__to_channel_blocks16_f32(blocked, plain, key->dtype, n, c, spatial);
  else if (e->reorder[r].f32_blocks) mx__from_channel_blocks16_f32(plain, blocked, key->dtype, n, c, spatial);
  else if (to_blocked) mx__to_channel_blocks16(blocked, plain, n, c, spatial);
  else mx__from_channel_blocks16(plain, blocked, n, c, spatial);
}

/* Reorders the inputs whose layouts differ into the workspace (or finds
 * them kept), runs the convolution (with the forward's bias, or the
 * backward weights' diff_bias written in the same pass; NULL for none), and
 * reorders its output back into the view when needed. y_prim (NULL: none)
 * holds role y in the primitive's layout, read as an input or written as
 * the output there and never reordered: the fused convolution-pooling
 * kernels' (dnnl_conv_plan.h). */
static mx_status run(mx__dnnl_thread *t, const conv_entry *e, int kind, const mx_kview *const *v,
                     const mx_kview *bias, void *y_prim) {
  int out = output_role[kind];
  kept_operand *keep[3] = {NULL, NULL, NULL};
  bool fill[3] = {false, false, false}, reordered[3] = {false, false, false};
  bool given[3] = {false, false, y_prim != NULL}; /* in the primitive's layout already, at y_prim */
  bool mv[3];
  for (int r = 0; r < 3; r++) mv[r] = given[r] || moved(&e->reorder[r]);
  /* the weight's gradient reads its inputs last (after the forward, and
   * after the input's gradient in mx__bwd_convolution): it only looks */
  for (int r = 0; r < 3; r++)
    if (r != out && !given[r] && moved(&e->reorder[r]))
      keep[r] = kept_acquire(e, r, v[r], kind != KIND_BWD_WEIGHTS, &fill[r]);
  size_t offset[3] = {0, 0, 0}, total = 0, scratch_max = e->scratch_size;
  for (int r = 0; r < 3; r++)
    if (mv[r] && !given[r]) {
      if (e->reorder[r].scratch_size > scratch_max) scratch_max = e->reorder[r].scratch_size;
      if (keep[r]) continue;
      offset[r] = total;
      total += MX__DNNL_ALIGN_UP(e->prim_size[r]);
    }
  size_t scratch_at = total;
  total += MX__DNNL_ALIGN_UP(scratch_max);
  mx_status status = MX_OK;
  char *ws = NULL;
  if (total && !(ws = mx__dnnl_workspace(t, total)))
    status = mx__error(MX_OUT_OF_MEMORY, "mx_conv: out of memory for a %zu-byte oneDNN workspace", total);
  char *scratch = ws ? ws + scratch_at : NULL; /* none at all: no offset from NULL (undefined, even of 0) */
  char *place[3] = {NULL, NULL, NULL};
  for (int r = 0; r < 3; r++)
    if (mv[r]) place[r] = given[r] ? y_prim : keep[r] ? keep[r]->buf : ws ? ws + offset[r] : NULL;

  dnnl_memory_t user[3] = {NULL, NULL, NULL}, prim[3] = {NULL, NULL, NULL}, bias_mem = NULL;
  dnnl_status_t s = status != MX_OK ? dnnl_success
                    : bias          ? mx__dnnl_memory_make(&bias_mem, &e->bias_md, bias->data)
                                    : dnnl_success;
  for (int r = 0; r < 3 && s == dnnl_success && status == MX_OK; r++) {
    if (!given[r]) s = mx__dnnl_memory_make(&user[r], &e->user_md[r], v[r]->data);
    if (s == dnnl_success && mv[r]) s = mx__dnnl_memory_make(&prim[r], &e->prim_md[r], place[r]);
  }
  if (s != dnnl_success) status = fail(kind, "wrapping an operand", s);
  for (int r = 0; r < 3 && status == MX_OK; r++) { /* inputs into the primitive's layouts */
    if (r == out || !mv[r] || given[r] || (keep[r] && !fill[r])) continue;
    count_reorder(r);
    if (e->reorder[r].channel_blocks) {
      channel_blocks(e, r, place[r], v[r]->data, true);
      reordered[r] = true;
      continue;
    }
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, user[r]}, {DNNL_ARG_TO, prim[r]}};
    s = mx__dnnl_execute(t->stream, e->reorder[r].primitive, 2, args, &e->reorder[r].scratch_md,
                         e->reorder[r].scratch_size, scratch);
    if (s != dnnl_success) status = fail(kind, "reordering an input", s);
    reordered[r] = s == dnnl_success;
  }
  if (status == MX_OK) {
    dnnl_exec_arg_t args[5]; /* and the scratchpad, added by mx__dnnl_execute */
    for (int r = 0; r < 3; r++) args[r] = (dnnl_exec_arg_t){exec_arg[kind][r], prim[r] ? prim[r] : user[r]};
    if (bias_mem) args[3] = (dnnl_exec_arg_t){kind == KIND_FWD ? DNNL_ARG_BIAS : DNNL_ARG_DIFF_BIAS, bias_mem};
    s = mx__dnnl_execute(t->stream, e->primitive, bias_mem ? 4 : 3, args, &e->scratch_md, e->scratch_size,
                         scratch);
    if (s != dnnl_success) status = fail(kind, "executing", s);
    else if (e->winograd) atomic_fetch_add(&winograd_run, 1);
  }
  bool back = !given[out]; /* the output goes back into its view */
  if (status == MX_OK && back && moved(&e->reorder[out])) count_reorder(out);
  if (status == MX_OK && back && e->reorder[out].channel_blocks) { /* the output back into the view, ours */
    if ((s = dnnl_stream_wait(t->stream)) != dnnl_success) status = fail(kind, "waiting", s);
    else channel_blocks(e, out, place[out], v[out]->data, false);
  }
  if (status == MX_OK && back && e->reorder[out].primitive) { /* the output back into the view, oneDNN's */
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_FROM, prim[out]}, {DNNL_ARG_TO, user[out]}};
    s = mx__dnnl_execute(t->stream, e->reorder[out].primitive, 2, args, &e->reorder[out].scratch_md,
                         e->reorder[out].scratch_size, scratch);
    if (s != dnnl_success) status = fail(kind, "reordering the output", s);
  }
  /* the kept inputs are filled once the stream is done: wait before marking them ready */
  if ((s = dnnl_stream_wait(t->stream)) != dnnl_success && status == MX_OK) status = fail(kind, "waiting", s);
  for (int r = 0; r < 3; r++) {
    if (keep[r]) kept_release(keep[r], fill[r], reordered[r] && s == dnnl_success, kind == KIND_BWD_WEIGHTS);
    if (user[r]) dnnl_memory_destroy(user[r]);
    if (prim[r]) dnnl_memory_destroy(prim[r]);
  }
  if (bias_mem) dnnl_memory_destroy(bias_mem);
  return status;
}

static mx_status conv(int kind, const mx_kview *const *v, const mx_kview *bias, bool relu, bool in_f32,
                      const mx_conv_params *p) {
  if (!mx__dnnl_init()) return MX_NOT_BUILT;
  mx_dtype dt = v[ROLE_X]->dtype;
  if (in_f32 ? dt != MX_BF16 && dt != MX_F16 : !mx__dnnl_runs(dt)) return MX_NOT_SUPPORTED;
  mx__dnnl_thread *t = mx__dnnl_thread_get();
  if (!t) return MX_NOT_BUILT;
  conv_key key;
  if (!make_key(&key, kind, v, bias != NULL, relu, in_f32, p)) return MX_NOT_SUPPORTED;
  mx_status status = MX_OK;
  conv_entry *e = mx__dnnl_cache_acquire(&cache, &key, &status);
  if (!e) return status;
  status = run(t, e, kind, v, bias, NULL);
  mx__dnnl_cache_release(&cache, e);
  return status;
}


/* --- y in the primitive's layout (dnnl_conv_plan.h) ---------------------------------------------------------- */

/* Channels per block of the entry's y layout (see mx__dnnl_conv_plan); 0: none of those. */
static int64_t y_channel_block(const conv_entry *e) {
  const conv_key *key = &e->key;
  if (key->nd[ROLE_Y] != 4) return 0;
  static const struct {
    dnnl_format_tag_t tag;
    int64_t block; /* 0: all the channels (nhwc) */
  } forms[] = {{dnnl_aBcd16b, 16}, {dnnl_aBcd8b, 8}, {dnnl_aBcd4b, 4}, {dnnl_abcd, 1}, {dnnl_acdb, 0}};
  dnnl_data_type_t dt = key->dtype == MX_BF16 && !key->in_f32 ? dnnl_bf16 : dnnl_f32;
  for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) {
    md_t md = MD_NONE;
    bool same = mx__dnnl_md_tag(&md, 4, key->dims[ROLE_Y], dt, forms[k].tag) == dnnl_success &&
                mx__dnnl_md_equal(&md, &e->prim_md[ROLE_Y]);
    mx__dnnl_md_free(md);
    if (same) return forms[k].block ? forms[k].block : key->dims[ROLE_Y][1];
  }
  return 0;
}

mx_status mx__dnnl_conv_plan_begin(mx__dnnl_conv_plan *plan, mx__dnnl_conv_kind kind, const mx_kview *x,
                                   const mx_kview *w, const mx_kview *y, bool bias, const mx_conv_params *p) {
  memset(plan, 0, sizeof *plan);
  if (!mx__dnnl_init()) return MX_NOT_BUILT;
  /* as conv.c's via_f32 runs them */
  bool in_f32 = (x->dtype == MX_BF16 && !mx__dnnl_runs(MX_BF16)) || x->dtype == MX_F16;
  if (!in_f32 && !mx__dnnl_runs(x->dtype)) return MX_NOT_SUPPORTED;
  mx__dnnl_thread *t = mx__dnnl_thread_get();
  if (!t) return MX_NOT_BUILT;
  const mx_kview *v[3] = {x, w, y};
  conv_key key;
  if (!make_key(&key, (int)kind, v, bias, false, in_f32, p)) return MX_NOT_SUPPORTED;
  /* the plain calls run these in float32, but a plan's y keeps the view's
   * dtype in the primitive's layout: declined, so the caller runs the plain
   * calls and fused and unfused agree (an in_f32 plan's y is float32, as
   * the plain call's is before it rounds) */
  if (key.winograd && key.dtype != MX_F32 && !in_f32) return MX_NOT_SUPPORTED;
  mx_status status = MX_OK;
  conv_entry *e = mx__dnnl_cache_acquire(&cache, &key, &status);
  if (!e) return status;
  *plan = (mx__dnnl_conv_plan){.entry = e, .thread = t, .kind = (int)kind, .block = y_channel_block(e),
                               .bytes = e->prim_size[ROLE_Y], .y_dtype = in_f32 ? MX_F32 : key.dtype};
  return MX_OK;
}

mx_status mx__dnnl_conv_plan_run(const mx__dnnl_conv_plan *plan, const mx_kview *x, const mx_kview *w,
                                 const mx_kview *y, const mx_kview *bias, void *y_prim) {
  const mx_kview *v[3] = {x, w, y};
  return run(plan->thread, plan->entry, plan->kind, v, bias, y_prim);
}

void mx__dnnl_conv_plan_end(mx__dnnl_conv_plan *plan) {
  if (plan->entry) mx__dnnl_cache_release(&cache, plan->entry);
  plan->entry = NULL;
}

bool mx__dnnl_conv_plans_share_y(const mx__dnnl_conv_plan *a, const mx__dnnl_conv_plan *b) {
  const conv_entry *ea = a->entry, *eb = b->entry;
  return mx__dnnl_md_equal(&ea->prim_md[ROLE_Y], &eb->prim_md[ROLE_Y]);
}

bool mx__dnnl_conv_plan_reads_x_as_is(const mx__dnnl_conv_plan *plan) {
  const conv_entry *e = plan->entry;
  return !moved(&e->reorder[ROLE_X]);
}

mx_status mx__dnnl_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                const mx_conv_params *p) {
  const mx_kview *v[3] = {x, w, y};
  return conv(KIND_FWD, v, bias, false, false, p);
}

mx_status mx__dnnl_conv_forward_relu(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                     const mx_conv_params *p) {
  const mx_kview *v[3] = {x, w, y};
  return conv(KIND_FWD, v, bias, true, false, p);
}

mx_status mx__dnnl_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                      const mx_conv_params *p) {
  const mx_kview *v[3] = {dx, w, dy};
  return conv(KIND_BWD_DATA, v, NULL, false, false, p);
}

mx_status mx__dnnl_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                        const mx_conv_params *p) {
  const mx_kview *v[3] = {x, dw, dy};
  return conv(KIND_BWD_WEIGHTS, v, NULL, false, false, p);
}

mx_status mx__dnnl_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                             const mx_kview *x, const mx_conv_params *p) {
  const mx_kview *v[3] = {x, dw, dy};
  return conv(KIND_BWD_WEIGHTS, v, db, false, false, p);
}

mx_status mx__dnnl_conv_in_f32(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                               const mx_kview *bias, const mx_conv_params *p) {
  const mx_kview *v[3] = {x, w, y};
  int k = kind == MX_CONV_FORWARD ? KIND_FWD : kind == MX_CONV_BACKWARD_DATA ? KIND_BWD_DATA : KIND_BWD_WEIGHTS;
  return conv(k, v, bias, false, true, p);
}

#else /* built without oneDNN */

mx_status mx__dnnl_conv_plan_begin(mx__dnnl_conv_plan *plan, mx__dnnl_conv_kind kind, const mx_kview *x,
                                   const mx_kview *w, const mx_kview *y, bool bias, const mx_conv_params *p) {
  memset(plan, 0, sizeof *plan);
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_plan_run(const mx__dnnl_conv_plan *plan, const mx_kview *x, const mx_kview *w,
                                 const mx_kview *y, const mx_kview *bias, void *y_prim) {
  return MX_NOT_BUILT;
}
void mx__dnnl_conv_plan_end(mx__dnnl_conv_plan *plan) {}
bool mx__dnnl_conv_plans_share_y(const mx__dnnl_conv_plan *a, const mx__dnnl_conv_plan *b) { return false; }
bool mx__dnnl_conv_plan_reads_x_as_is(const mx__dnnl_conv_plan *plan) { return false; }

uint64_t mx__dnnl_conv_reorders(void) { return 0; }
uint64_t mx__dnnl_conv_weight_reorders(void) { return 0; }
uint64_t mx__dnnl_conv_winograd_runs(void) { return 0; }
size_t mx__dnnl_conv_kept_activation_bytes(void) { return 0; }

mx_status mx__dnnl_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                const mx_conv_params *p) {
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_forward_relu(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                     const mx_conv_params *p) {
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                      const mx_conv_params *p) {
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                        const mx_conv_params *p) {
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                             const mx_kview *x, const mx_conv_params *p) {
  return MX_NOT_BUILT;
}
mx_status mx__dnnl_conv_in_f32(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                               const mx_kview *bias, const mx_conv_params *p) {
  return MX_NOT_BUILT;
}

#endif
