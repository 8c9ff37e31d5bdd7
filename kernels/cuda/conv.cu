/* Convolutions on CUDA. float32, float16 and bfloat16 go to cuDNN
 * (kernels/cuda/conv_cudnn.cu), the bias added after by the binary kernel.
 * What cuDNN does not take (float64, non-contiguous views, sizes past its
 * ints, a case it has no algorithm for) runs on the direct kernels below:
 * one thread per output element, each element the same sum in the same
 * order as the CPU's plain loops (kernels/cpu/conv_reference.inc), float
 * accumulation for float32, float16 and bfloat16 (widened on load, rounded
 * once at the end), double for float64. The checks are the CPU's
 * (kernels/conv_check.h), the geometry kernels/conv_geom.h's. */
#include "kernels/conv_check.h"
#include "kernels/conv_geom.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv_cudnn.h"
#include "kernels/elementwise.h"

/* Element i of a 5-d (n, c, d, h, w) operand of the geometry, as A. */
template <class A>
MX_HD static inline A load5(const void *base, const int64_t *s, mx_dtype dtype, int64_t n, int64_t c,
                            int64_t d, int64_t h, int64_t w) {
  int64_t off = n * s[0] + c * s[1] + d * s[2] + h * s[3] + w * s[4];
  return (A)mx_element_load((const char *)base + off * dtype_bytes(dtype), dtype);
}

MX_HD static inline void store5(void *base, const int64_t *s, mx_dtype dtype, int64_t n, int64_t c, int64_t d,
                                int64_t h, int64_t w, double v) {
  int64_t off = n * s[0] + c * s[1] + d * s[2] + h * s[3] + w * s[4];
  mx_element_store((char *)base + off * dtype_bytes(dtype), dtype, v);
}

/* Linear index e over (a, b, c[0], c[1], c[2]) as its five coordinates. */
MX_HD static inline void unravel5(int64_t e, int64_t b, const int64_t *c, int64_t *out) {
  out[4] = e % c[2], e /= c[2];
  out[3] = e % c[1], e /= c[1];
  out[2] = e % c[0], e /= c[0];
  out[1] = e % b, out[0] = e / b;
}

/* y[n, oc, od, oh, ow]: over the group's channels, then the taps. */
template <class A>
struct forward_op {
  mx_conv_geom g;
  mx_dtype dtype;
  MX_HD void operator()(int64_t e) const {
    int64_t C_out = g.G * g.OCg, q[5];
    unravel5(e, C_out, g.out, q);
    int64_t n = q[0], oc = q[1], ic0 = oc / g.OCg * g.ICg;
    A acc = 0;
    for (int64_t c = 0; c < g.ICg; c++)
      for (int64_t kd = 0; kd < g.k[0]; kd++) {
        int64_t id = q[2] * g.stride[0] - g.pad[0] + kd * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t kh = 0; kh < g.k[1]; kh++) {
          int64_t ih = q[3] * g.stride[1] - g.pad[1] + kh * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          for (int64_t kw = 0; kw < g.k[2]; kw++) {
            int64_t iw = q[4] * g.stride[2] - g.pad[2] + kw * g.dil[2];
            if (iw < 0 || iw >= g.in[2]) continue;
            A wv = load5<A>(g.w, g.ws, dtype, oc, c, kd, kh, kw);
            acc += wv * load5<A>(g.x, g.xs, dtype, n, ic0 + c, id, ih, iw);
          }
        }
      }
    if (g.bias) acc = acc + (A)mx_element_load((const char *)g.bias + oc * dtype_bytes(dtype), dtype);
    store5(g.y, g.ys, dtype, n, oc, q[2], q[3], q[4], (double)acc);
  }
};

/* dx[n, ic, id, ih, iw]: over the group's output channels, then the taps
 * that land on it. */
template <class A>
struct backward_data_op {
  mx_conv_geom g;
  mx_dtype dtype;
  MX_HD void operator()(int64_t e) const {
    int64_t C_in = g.G * g.ICg, q[5];
    unravel5(e, C_in, g.in, q);
    int64_t n = q[0], ic = q[1], c = ic % g.ICg, oc0 = ic / g.ICg * g.OCg;
    A acc = 0;
    for (int64_t o = 0; o < g.OCg; o++)
      for (int64_t kd = 0; kd < g.k[0]; kd++) {
        int64_t od;
        if (!mx_conv_tap_source(q[2], g.out[0], g.stride[0], kd * g.dil[0] - g.pad[0], &od)) continue;
        for (int64_t kh = 0; kh < g.k[1]; kh++) {
          int64_t oh;
          if (!mx_conv_tap_source(q[3], g.out[1], g.stride[1], kh * g.dil[1] - g.pad[1], &oh)) continue;
          for (int64_t kw = 0; kw < g.k[2]; kw++) {
            int64_t ow;
            if (!mx_conv_tap_source(q[4], g.out[2], g.stride[2], kw * g.dil[2] - g.pad[2], &ow)) continue;
            A wv = load5<A>(g.w, g.ws, dtype, oc0 + o, c, kd, kh, kw);
            acc += wv * load5<A>(g.y, g.ys, dtype, n, oc0 + o, od, oh, ow);
          }
        }
      }
    store5(g.x, g.xs, dtype, n, ic, q[2], q[3], q[4], (double)acc);
  }
};

/* dw[oc, c, kd, kh, kw]: over the batch and the output rows, each row's
 * products summed on their own first, as the CPU does. */
template <class A>
struct backward_weight_op {
  mx_conv_geom g;
  mx_dtype dtype;
  MX_HD void operator()(int64_t e) const {
    int64_t q[5];
    unravel5(e, g.ICg, g.k, q);
    int64_t oc = q[0], c = q[1], ic = oc / g.OCg * g.ICg + c;
    int64_t off = q[4] * g.dil[2] - g.pad[2], lo, hi;
    mx_conv_tap_range(g.in[2], 0, g.out[2], g.stride[2], off, &lo, &hi);
    A acc = 0;
    for (int64_t n = 0; n < g.N && lo < hi; n++)
      for (int64_t od = 0; od < g.out[0]; od++) {
        int64_t id = od * g.stride[0] - g.pad[0] + q[2] * g.dil[0];
        if (id < 0 || id >= g.in[0]) continue;
        for (int64_t oh = 0; oh < g.out[1]; oh++) {
          int64_t ih = oh * g.stride[1] - g.pad[1] + q[3] * g.dil[1];
          if (ih < 0 || ih >= g.in[1]) continue;
          A row = 0;
          for (int64_t ow = lo; ow < hi; ow++)
            row += load5<A>(g.y, g.ys, dtype, n, oc, od, oh, ow) *
                   load5<A>(g.x, g.xs, dtype, n, ic, id, ih, ow * g.stride[2] + off);
          acc += row;
        }
      }
    store5(g.w, g.ws, dtype, oc, c, q[2], q[3], q[4], (double)acc);
  }
};

template <template <class> class Op>
static mx_status launch(const char *what, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                        const mx_kview *bias, const mx_conv_params *p, int64_t outputs) {
  mx_conv_geom g = mx_conv_geom_of(x, w, y, p);
  g.bias = bias ? bias->data : NULL;
  if (x->dtype == MX_F64) {
    Op<double> op = {g, x->dtype};
    return launch_elementwise(what, outputs, op);
  }
  Op<float> op = {g, x->dtype};
  return launch_elementwise(what, outputs, op);
}

mx_status mx__cuda_conv_forward(const mx_kview *y, const mx_kview *x, const mx_kview *w, const mx_kview *bias,
                                const mx_conv_params *p) {
  MX__RETURN_IF_FAILED(mx__conv_check(MX_CONV_FORWARD, x, w, y, bias, p));
  bool declined;
  MX__RETURN_IF_FAILED(mx__cudnn_conv(MX_CONV_FORWARD, x, w, y, p, &declined));
  if (declined) return launch<forward_op>("launch of kernel conv_forward", x, w, y, bias, p, mx__kview_numel(y));
  if (!bias) return MX_OK;
  mx_kview channel_bias = *y; /* bias as (1, C, 1, ...), broadcast over y, added in place */
  channel_bias.data = bias->data;
  for (int d = 0; d < y->ndim; d++) channel_bias.strides[d] = d == 1 ? 1 : 0;
  return mx__cuda_binary(MX_BIN_ADD, y, y, &channel_bias, 1.0);
}

mx_status mx__cuda_conv_backward_data(const mx_kview *dx, const mx_kview *dy, const mx_kview *w,
                                      const mx_conv_params *p) {
  MX__RETURN_IF_FAILED(mx__conv_check(MX_CONV_BACKWARD_DATA, dx, w, dy, NULL, p));
  bool declined;
  MX__RETURN_IF_FAILED(mx__cudnn_conv(MX_CONV_BACKWARD_DATA, dx, w, dy, p, &declined));
  if (!declined) return MX_OK;
  return launch<backward_data_op>("launch of kernel conv_backward_data", dx, w, dy, NULL, p, mx__kview_numel(dx));
}

mx_status mx__cuda_conv_backward_weight(const mx_kview *dw, const mx_kview *dy, const mx_kview *x,
                                        const mx_conv_params *p) {
  MX__RETURN_IF_FAILED(mx__conv_check(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, NULL, p));
  bool declined;
  MX__RETURN_IF_FAILED(mx__cudnn_conv(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, p, &declined));
  if (!declined) return MX_OK;
  return launch<backward_weight_op>("launch of kernel conv_backward_weight", x, dw, dy, NULL, p,
                                    mx__kview_numel(dw));
}

/* db[c]: dy summed over every dim but the channels, in one pass spread over
 * the whole device: batch norm's channel sums (kernels/cuda/batch_norm.cu)
 * for a contiguous or channels-last dy (read as N H W vectors of C), the
 * reduction kernel for other strides. Sums in double, rounded once. */
static mx_status bias_gradient(const mx_kview *db, const mx_kview *dy) {
  mx_kview v = *dy;
  if (mx__kview_is_channels_last(dy)) {
    v.ndim = 2;
    v.shape[0] = dy->shape[0] * dy->shape[2] * dy->shape[3], v.shape[1] = dy->shape[1];
    v.strides[0] = dy->shape[1], v.strides[1] = 1;
  }
  if (mx__kview_is_contiguous(&v) && mx__kview_is_contiguous(db))
    return mx__cuda_channel_sums(db, NULL, &v, NULL, NULL, NULL, NULL);
  mx_kview out = *dy; /* db as (1, C, 1, ...) */
  out.data = db->data, out.dtype = db->dtype;
  for (int d = 0; d < dy->ndim; d++) {
    out.shape[d] = d == 1 ? dy->shape[1] : 1;
    out.strides[d] = d == 1 ? db->strides[0] : 0;
  }
  return mx__cuda_reduce(MX_RED_SUM, &out, NULL, dy, ((1u << dy->ndim) - 1) & ~2u);
}

/* dw as above, and db by one pass of its own over dy (cuDNN's legacy
 * convolution API has no fused bias gradient). */
mx_status mx__cuda_conv_backward_weight_bias(const mx_kview *dw, const mx_kview *db, const mx_kview *dy,
                                             const mx_kview *x, const mx_conv_params *p) {
  MX__RETURN_IF_FAILED(mx__conv_check(MX_CONV_BACKWARD_WEIGHT, x, dw, dy, db, p));
  MX__RETURN_IF_FAILED(mx__cuda_conv_backward_weight(dw, dy, x, p));
  return mx__kview_numel(db) == 0 ? MX_OK : bias_gradient(db, dy);
}
