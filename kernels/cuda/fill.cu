/* The CUDA kernels that write every element of a view: fill, convert, random
 * and bernoulli, with the CPU's arithmetic (kernels/math.h). */
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/typed_element.cuh"

/* out[i] = one fixed element pattern (value already stored in out's dtype).
 * out: any shape, any strides. */
struct fill_op {
  mx_kview out;
  uint64_t bits; /* the element's bits, in the low dtype_bytes(out.dtype) bytes */
  MX_HD void operator()(int64_t i) const { store_bits(element(out, i), dtype_bytes(out.dtype), bits); }
};

mx_status mx__cuda_fill(const mx_kview *out, double value) {
  fill_op op;
  flatten_operands({out}, &op.out);
  /* the element stored once on the host, by the very function the device
   * uses; host and GPU are both little-endian, so its first bytes are the
   * low bytes of `bits` */
  alignas(8) unsigned char element_bytes[8] = {0};
  mx_element_store(element_bytes, out->dtype, value);
  memcpy(&op.bits, element_bytes, sizeof op.bits);
  return launch_elementwise("launch of kernel fill", mx__kview_numel(out), op);
}

/* out[i] = src[i] converted to out's dtype; same dtype copies the bytes
 * (int64 stays exact). out, src: the same shape, any strides (src may
 * broadcast with stride 0). */
struct convert_op {
  mx_kview out, src;
  MX_HD void operator()(int64_t i) const {
    char *o = element(out, i);
    const char *s = element(src, i);
    if (out.dtype == src.dtype)
      store_bits(o, dtype_bytes(out.dtype), load_bits(s, dtype_bytes(out.dtype)));
    else
      mx_element_convert(o, out.dtype, s, src.dtype);
  }
};

/* convert_op's fast path: out[i] = src[i * src_step] between float32,
 * bfloat16 and float16 operands that flattened to contiguous 1-d (src may
 * be one broadcast element). The bits of the CPU backend's dense loops
 * (kernels/cpu/backend.c, convert_row): a same-dtype copy moves the bits,
 * any other pair rounds once from the float that mx_element_load gives
 * (float32 holds every bfloat16 and float16 value) by mx_element_store's
 * function. convert_op's only difference: a signalling bfloat16 NaN
 * widened to float32 stays signalling here, as on the CPU, where
 * convert_op's trip through double quiets it. */
template <mx_dtype OUT, mx_dtype SRC>
struct dense_convert_op {
  typename float_value<OUT>::storage *out;
  const typename float_value<SRC>::storage *src;
  int64_t src_step;
  typedef typename float_value<SRC>::storage loaded;
  MX_HD loaded load(int64_t i) const { return src[i * src_step]; }
  MX_HD void store(int64_t i, const loaded &v) const {
    if constexpr (OUT == SRC) out[i] = v;
    else out[i] = float_value<OUT>::store(float_value<SRC>::load(v));
  }
};

mx_status mx__cuda_convert(const mx_kview *out, const mx_kview *src) {
  mx_kview v[2];
  flatten_operands({out, src}, v);
  int64_t n = mx__kview_numel(out), src_step = dense_step(v[1]);
  if (is_typed_float(out->dtype) && is_typed_float(src->dtype) && dense_output(v[0]) && src_step >= 0)
    return with_typed_float(out->dtype, [&](auto out_dtype) {
      return with_typed_float(src->dtype, [&](auto src_dtype) {
        dense_convert_op<decltype(out_dtype)::value, decltype(src_dtype)::value> op;
        op.out = (decltype(op.out))v[0].data;
        op.src = (decltype(op.src))v[1].data;
        op.src_step = src_step;
        return launch_unrolled("launch of kernel convert", n, op);
      });
    });
  convert_op op;
  op.out = v[0], op.src = v[1];
  return launch_elementwise("launch of kernel convert", n, op);
}

/* out[i] = draw number i (i the row-major linear index) of the params'
 * stream, as the CPU's random_row. out: any shape, any strides. */
struct random_op {
  mx_kview out;
  mx_rand_params params;
  MX_HD void operator()(int64_t i) const {
    char *o = element(out, i);
    if (params.kind == MX_RAND_INT && out.dtype == MX_I64) /* exact beyond 2^53 */
      *(int64_t *)o = mx_rand_int(&params, (uint64_t)i);
    else
      mx_element_store(o, out.dtype, mx_rand_sample(&params, (uint64_t)i, mx_mantissa_bits(out.dtype)));
  }
};

mx_status mx__cuda_random(const mx_kview *out, const mx_rand_params *params) {
  random_op op;
  op.out = flatten_if_contiguous(out);
  op.params = *params;
  return launch_elementwise("launch of kernel random", mx__kview_numel(out), op);
}

/* out[i] = (u_i < p[i]), u_i the 53-bit uniform of draw i, as the CPU's
 * bernoulli_row. out, p: the same shape, any strides, any dtypes. */
struct bernoulli_op {
  mx_kview out, p;
  mx_rand_params params;
  MX_HD void operator()(int64_t i) const {
    mx_philox_block r = mx_philox_draw(params.seed, params.offset, (uint64_t)i);
    double prob = mx_element_load(element(p, i), p.dtype);
    mx_element_store(element(out, i), out.dtype, mx_uniform53(r.v[0], r.v[1]) < prob);
  }
};

mx_status mx__cuda_bernoulli(const mx_kview *out, const mx_kview *p, const mx_rand_params *params) {
  bernoulli_op op;
  op.out = flatten_if_contiguous(out);
  op.p = flatten_if_contiguous(p);
  op.params = *params;
  return launch_elementwise("launch of kernel bernoulli", mx__kview_numel(out), op);
}
