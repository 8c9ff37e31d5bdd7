/* How a convolution is put to cuDNN, as plain numbers: which cases cuDNN
 * takes and each operand's dims as cuDNN sees them. kernels/cuda/conv_cudnn.cu
 * makes its descriptors from these and picks among cuDNN's ranked
 * algorithms with mx_cudnn_pick; the CPU tests check them
 * (tests/kernels/test_conv_cudnn_case.c), since no GPU runs in CI. */
#ifndef MX_KERNELS_CONV_CUDNN_CASE_H
#define MX_KERNELS_CONV_CUDNN_CASE_H

#include <limits.h>
#include <string.h>

#include "kernels/conv_check.h"

/* One convolution for cuDNN, compared bytewise as the key its plan (its
 * descriptors and algorithm) is kept by (so always made by
 * mx_cudnn_conv_case_of, which zeroes it). */
typedef struct {
  int kind, dtype, nd;           /* mx_conv_kind, mx_dtype; nd: 4 or 5 dims as cuDNN sees them */
  /* x, w and y each row-major (0) or channels-last (1, 2-d only). cuDNN is
   * given its filter in x's layout (KRSC beside a channels-last x, the layout
   * its NHWC tensor-core kernels read): w itself where it lies so (a model
   * laid out by mx_module_to_channels_last), else a copy */
  int x_channels_last, w_channels_last, y_channels_last;
  int x[5], w[5], y[5];          /* dims (the first nd used) */
  int pad[3], stride[3], dil[3]; /* the first nd - 2 used */
  int groups;
  /* the settings it runs under (mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic, mx_set_cudnn_benchmark),
   * read when the case is made, so an algorithm chosen under one is never reused under another; allow_tf32 only
   * for float32, the one dtype it changes, so 16-bit cases keep one key either way */
  int allow_tf32, deterministic, benchmark;
} mx_cudnn_conv_case;

static inline bool mx__cudnn_fits_int(int64_t v) { return v >= 0 && v <= INT_MAX; }

/* v's dims as cuDNN's: a 1-d operand (N, C, W) becomes (N, C, 1, W), since
 * cuDNN wants 4 or 5 dims. False when one does not fit an int. */
static inline bool mx__cudnn_dims(const mx_kview *v, int spatial, int out[5]) {
  int64_t d[5] = {v->shape[0], v->shape[1], 1, 1, 1};
  if (spatial == 1) d[3] = v->shape[2];
  else
    for (int j = 0; j < spatial; j++) d[2 + j] = v->shape[2 + j];
  for (int i = 0; i < 5; i++) {
    if (!mx__cudnn_fits_int(d[i])) return false;
    out[i] = (int)d[i];
  }
  return true;
}

/* An operand's layout for cuDNN: 0 row-major, 1 channels-last (a 2-d
 * convolution's activation only), -1 neither. */
static inline int mx__cudnn_layout(const mx_kview *v, bool may_be_channels_last) {
  if (mx__kview_is_contiguous(v)) return 0;
  return may_be_channels_last && mx__kview_is_channels_last(v) ? 1 : -1;
}

/* The strides of a 4-d operand of dims d as cuDNN is told them. */
static inline void mx__cudnn_strides(int nd, const int *d, int channels_last, int *strides) {
  if (channels_last) { /* (N, C, H, W) dims, (N, H, W, C) in memory */
    strides[1] = 1, strides[3] = d[1], strides[2] = d[1] * d[3], strides[0] = d[1] * d[3] * d[2];
    return;
  }
  strides[nd - 1] = 1;
  for (int i = nd - 2; i >= 0; i--) strides[i] = strides[i + 1] * d[i + 1];
}

/* Whether cuDNN takes the convolution (operands named as in the forward:
 * x input, w weight, y output), and its case if so: float32, float16 or
 * bfloat16, non-empty, every size within cuDNN's ints, each operand
 * row-major or (2-d) channels-last. The case carries the cuDNN settings in
 * force now. */
static inline bool mx_cudnn_conv_case_of(mx_conv_kind kind, const mx_kview *x, const mx_kview *w,
                                         const mx_kview *y, const mx_conv_params *p, mx_cudnn_conv_case *c) {
  memset(c, 0, sizeof *c);
  if (x->dtype != MX_F32 && x->dtype != MX_F16 && x->dtype != MX_BF16) return false;
  if (p->spatial < 1 || p->spatial > 3 || !mx__cudnn_fits_int(p->groups)) return false;
  const mx_kview *views[3] = {x, w, y};
  int layout[3];
  for (int i = 0; i < 3; i++) {
    int64_t n = mx__kview_numel(views[i]);
    layout[i] = mx__cudnn_layout(views[i], p->spatial == 2);
    if (layout[i] < 0 || n == 0 || n > INT_MAX) return false;
  }
  /* An operand in both layouts at once (one channel, or a 1x1 image: the
   * same memory either way, like a grayscale batch) is described as
   * channels-last beside one that is channels-last only, so that cuDNN sees
   * one layout, not NCHW beside NHWC (a mix it may refuse or run slowly). */
  bool channels_last = layout[0] == 1 || layout[1] == 1 || layout[2] == 1;
  for (int i = 0; i < 3 && channels_last; i++)
    if (layout[i] == 0 && mx__kview_is_channels_last(views[i])) layout[i] = 1;
  c->x_channels_last = layout[0], c->w_channels_last = layout[1], c->y_channels_last = layout[2];
  c->kind = (int)kind, c->dtype = (int)x->dtype, c->nd = p->spatial == 3 ? 5 : 4, c->groups = (int)p->groups;
  c->allow_tf32 = x->dtype == MX_F32 && mx_cudnn_allow_tf32(), c->deterministic = mx_cudnn_deterministic();
  c->benchmark = mx_cudnn_benchmark();
  if (!mx__cudnn_dims(x, p->spatial, c->x) || !mx__cudnn_dims(w, p->spatial, c->w) ||
      !mx__cudnn_dims(y, p->spatial, c->y))
    return false;
  for (int j = 0; j < c->nd - 2; j++) {
    int from = p->spatial == 1 ? j - 1 : j; /* a 1-d convolution's height: padding 0, stride 1, dilation 1 */
    if (from < 0) {
      c->pad[j] = 0, c->stride[j] = 1, c->dil[j] = 1;
      continue;
    }
    if (!mx__cudnn_fits_int(p->padding[from]) || !mx__cudnn_fits_int(p->stride[from]) ||
        !mx__cudnn_fits_int(p->dilation[from]))
      return false;
    c->pad[j] = (int)p->padding[from], c->stride[j] = (int)p->stride[from], c->dil[j] = (int)p->dilation[from];
  }
  return true;
}

/* Whether the case runs on plain float32 FMA arithmetic whatever cuDNN's
 * answer says: float32 unless TF32 is allowed (as PyTorch sets
 * CUDNN_FMA_MATH when allow_tf32 is off). */
static inline bool mx_cudnn_fma_only(const mx_cudnn_conv_case *c) { return c->dtype == MX_F32 && !c->allow_tf32; }

/* Whether the case is a float32 convolution on FMA arithmetic that cuDNN's
 * non-fused Winograd serves best: 2-d, a 3x3 filter at stride 1 and
 * dilation 1, one group. At every ResNet-9 geometry an H200 timed it was
 * the fastest deterministic algorithm in each direction, but the
 * 3-channel first layer's forward and weight gradient (bench/cudnn_rank,
 * bench/NOTES.md round 29). */
static inline bool mx_cudnn_winograd_case(const mx_cudnn_conv_case *c) {
  if (!mx_cudnn_fma_only(c) || c->nd != 4 || c->groups != 1) return false;
  if (c->w[2] != 3 || c->w[3] != 3) return false;
  for (int j = 0; j < 2; j++)
    if (c->stride[j] != 1 || c->dil[j] != 1) return false;
  return true;
}

/* Whether the heuristics' ranking is overruled for Winograd: in a
 * Winograd case ranked by them (timing finds it anyway). They rank it low
 * or last, though it was never slower than their pick there and up to
 * 8.8x faster; PyTorch's default, cuDNN's v8 heuristics, takes it. */
static inline bool mx_cudnn_prefers_winograd(const mx_cudnn_conv_case *c) {
  return mx_cudnn_winograd_case(c) && !c->benchmark;
}

/* Whether the case runs on row-major (NCHW) copies of its channels-last
 * activations: a Winograd case, ranked or timed, since cuDNN offers
 * Winograd (and FFT) for NCHW only. Its NHWC float32 algorithms, implicit
 * GEMMs, took 2.1x the NCHW Winograd time over ResNet-9's geometries on an
 * H200, timed or not (7.0 ms against 3.4 for one of each; round 29), far
 * more than the copies, which move each activation once more. */
static inline bool mx_cudnn_runs_in_nchw(const mx_cudnn_conv_case *c) {
  return mx_cudnn_winograd_case(c) && c->x_channels_last && c->y_channels_last;
}

/* Which of cuDNN's n ranked answers to take (ranked by its heuristics, or
 * by the time each took under mx_set_cudnn_benchmark), given which are
 * usable (ran their check, fit the workspace cap), which deterministic and
 * which the non-fused Winograd algorithm: while the case is deterministic,
 * the first usable deterministic one, else (none, or determinism off) the
 * first usable one; -1 when none is. Where mx_cudnn_prefers_winograd, a
 * usable Winograd answer (deterministic, while the case is) comes first. */
static inline int mx_cudnn_pick(const mx_cudnn_conv_case *c, int n, const bool *usable, const bool *deterministic,
                                const bool *winograd) {
  if (mx_cudnn_prefers_winograd(c))
    for (int i = 0; i < n; i++)
      if (usable[i] && winograd[i] && (!c->deterministic || deterministic[i])) return i;
  int first = -1;
  for (int i = 0; i < n; i++) {
    if (!usable[i]) continue;
    if (!c->deterministic || deterministic[i]) return i;
    if (first < 0) first = i;
  }
  return first;
}

#endif
