/* Elementwise kernels on CUDA: unary, binary (arithmetic and comparisons)
 * and where, over broadcast strided views. The functions are
 * kernels/elementwise.def's, the ones the CPU kernels
 * (kernels/cpu/elementwise.c) run, in the same compute types: float for
 * float32/float16/bfloat16 (16-bit values widened and rounded back), double
 * for float64, int64_t for the integer types and bool. */
#include <type_traits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/typed_element.cuh"
#include "kernels/elementwise.h"

/* --- one element in its compute type --------------------------------------- */

/* Floats through double are exact (float widens exactly, and a float result
 * rounds once to float16/bfloat16); integers load and store exactly, with
 * the CPU kernels' C casts (int32 and uint8 wrap, bool is v != 0). */
template <class T>
MX_HD static inline T load_as(const char *p, mx_dtype dtype) {
  if constexpr (std::is_integral<T>::value) {
    switch (dtype) {
    case MX_I64: return *(const int64_t *)p;
    case MX_I32: return *(const int32_t *)p;
    case MX_U8: return *(const uint8_t *)p;
    default: return *(const bool *)p;
    }
  } else {
    return (T)mx_element_load(p, dtype);
  }
}

template <class T>
MX_HD static inline void store_as(char *p, mx_dtype dtype, T v) {
  if constexpr (std::is_integral<T>::value) {
    switch (dtype) {
    case MX_I64: *(int64_t *)p = v; break;
    case MX_I32: *(int32_t *)p = (int32_t)v; break;
    case MX_U8: *(uint8_t *)p = (uint8_t)v; break;
    default: *(bool *)p = v != 0; break;
    }
  } else {
    mx_element_store(p, dtype, (double)v);
  }
}

/* --- the functions of kernels/elementwise.def -------------------------------- */

template <class T>
MX_HD static inline T unary_value(int code, T x, T a, T b) {
  if constexpr (std::is_integral<T>::value) {
    switch (code) {
#define MX_UNARY_INT_FN(code, expr) \
  case MX_UN_##code: return (T)(expr);
#include "kernels/elementwise.def"
    }
  } else {
    switch (code) {
#define MX_UNARY_FN(code, expr) \
  case MX_UN_##code: return (T)(expr);
#include "kernels/elementwise.def"
    }
  }
  return x; /* not reached: the host checks the code */
}

template <class T>
MX_HD static inline T binary_value(int code, T x, T y, T a) {
  if constexpr (std::is_integral<T>::value) {
    switch (code) {
#define MX_BINARY_INT_FN(code, expr) \
  case MX_BIN_##code: return (T)(expr);
#include "kernels/elementwise.def"
    }
  } else {
    switch (code) {
#define MX_BINARY_FN(code, expr) \
  case MX_BIN_##code: return (T)(expr);
#include "kernels/elementwise.def"
    }
  }
  return x;
}

template <class T>
MX_HD static inline bool compare_value(int code, T x, T y) {
  switch (code) {
#define MX_COMPARE_FN(code, expr) \
  case MX_BIN_##code: return (expr);
#include "kernels/elementwise.def"
  }
  return false;
}

/* --- the ops: out[i] from the inputs' element i -------------------------------- */

template <class T>
struct unary_op {
  mx_kview out, in;
  int code;
  T a, b;
  MX_HD void operator()(int64_t i) const {
    T x = load_as<T>(element(in, i), in.dtype);
    store_as<T>(element(out, i), out.dtype, unary_value<T>(code, x, a, b));
  }
};

/* Codes from MX_BIN_EQ on compare and store bool. */
template <class T>
struct binary_op {
  mx_kview out, x, y;
  int code;
  T alpha;
  MX_HD void operator()(int64_t i) const {
    T xv = load_as<T>(element(x, i), x.dtype), yv = load_as<T>(element(y, i), y.dtype);
    char *o = element(out, i);
    if (code >= MX_BIN_EQ)
      *(bool *)o = compare_value<T>(code, xv, yv);
    else
      store_as<T>(o, out.dtype, binary_value<T>(code, xv, yv, alpha));
  }
};

/* unary_op and binary_op's fast paths, for one dtype D of float32,
 * bfloat16 and float16 throughout, the output contiguous 1-d and each
 * input that too or one broadcast element (p[i * step], step 1 or 0). The
 * same float arithmetic as the generic ops; only the loads and stores are
 * typed (float_value: no dtype switch, no trip through double, so a
 * signalling NaN that a function passes through, such as MAXIMUM's, stays
 * signalling in a float32 output, as in the CPU's kernels), and a thread
 * has UNROLL elements' loads in flight (launch_unrolled). Binary
 * comparisons (bool output) stay generic. */
template <mx_dtype D>
struct dense_unary_op {
  typedef float_value<D> E;
  typename E::storage *out;
  const typename E::storage *in;
  int64_t in_step;
  int code;
  float a, b;
  typedef typename E::storage loaded;
  MX_HD loaded load(int64_t i) const { return in[i * in_step]; }
  MX_HD void store(int64_t i, const loaded &v) const { out[i] = E::store(unary_value<float>(code, E::load(v), a, b)); }
};

template <mx_dtype D>
struct dense_binary_op {
  typedef float_value<D> E;
  typename E::storage *out;
  const typename E::storage *x, *y;
  int64_t x_step, y_step;
  int code;
  float alpha;
  struct loaded {
    typename E::storage x, y;
  };
  MX_HD loaded load(int64_t i) const {
    loaded v = {x[i * x_step], y[i * y_step]};
    return v;
  }
  MX_HD void store(int64_t i, const loaded &in) const {
    out[i] = E::store(binary_value<float>(code, E::load(in.x), E::load(in.y), alpha));
  }
};

struct where_op {
  mx_kview out, cond, x, y;
  MX_HD void operator()(int64_t i) const {
    const mx_kview &pick = *(const bool *)element(cond, i) ? x : y;
    int64_t bytes = dtype_bytes(out.dtype);
    store_bits(element(out, i), bytes, load_bits(element(pick, i), bytes));
  }
};

/* --- entry points --------------------------------------------------------------- */

mx_status mx__cuda_unary(int code, const mx_kview *out, const mx_kview *in, double a, double b) {
  if (code < 0 || code >= MX_UN_COUNT || (!mx_dtype_is_floating(in->dtype) && !mx__unary_has_int(code)))
    return mx__error(MX_DTYPE_ERROR, "cuda unary kernel %d: no %s version", code, mx_dtype_name(in->dtype));
  mx_kview v[2];
  flatten_operands({out, in}, v);
  int64_t in_step = dense_step(v[1]);
  if (is_typed_float(in->dtype) && out->dtype == in->dtype && dense_output(v[0]) && in_step >= 0)
    return with_typed_float(in->dtype, [&](auto dtype) {
      dense_unary_op<decltype(dtype)::value> op;
      op.out = (decltype(op.out))v[0].data;
      op.in = (decltype(op.in))v[1].data;
      op.in_step = in_step;
      op.code = code;
      op.a = (float)a, op.b = (float)b;
      return launch_unrolled("launch of kernel unary", mx__kview_numel(out), op);
    });
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    unary_op<T> op;
    op.out = v[0], op.in = v[1];
    op.code = code;
    op.a = std::is_integral<T>::value ? (T)mx_int_param(a) : (T)a;
    op.b = std::is_integral<T>::value ? (T)mx_int_param(b) : (T)b;
    return launch_elementwise("launch of kernel unary", mx__kview_numel(out), op);
  };
  switch (in->dtype) {
  case MX_F32: case MX_F16: case MX_BF16: return launch(0.0f);
  case MX_F64: return launch(0.0);
  default: return launch((int64_t)0);
  }
}

mx_status mx__cuda_binary(int code, const mx_kview *out, const mx_kview *x, const mx_kview *y, double alpha) {
  if (code < 0 || code >= MX_BIN_COUNT || (!mx_dtype_is_floating(x->dtype) && !mx__binary_has_int(code)))
    return mx__error(MX_DTYPE_ERROR, "cuda binary kernel %d: no %s version", code, mx_dtype_name(x->dtype));
  mx_kview v[3];
  flatten_operands({out, x, y}, v);
  int64_t x_step = dense_step(v[1]), y_step = dense_step(v[2]);
  if (code < MX_BIN_EQ && is_typed_float(x->dtype) && out->dtype == x->dtype && y->dtype == x->dtype &&
      dense_output(v[0]) && x_step >= 0 && y_step >= 0)
    return with_typed_float(x->dtype, [&](auto dtype) {
      dense_binary_op<decltype(dtype)::value> op;
      op.out = (decltype(op.out))v[0].data;
      op.x = (decltype(op.x))v[1].data;
      op.y = (decltype(op.y))v[2].data;
      op.x_step = x_step, op.y_step = y_step;
      op.code = code;
      op.alpha = (float)alpha;
      return launch_unrolled("launch of kernel binary", mx__kview_numel(out), op);
    });
  auto launch = [&](auto zero) {
    using T = decltype(zero);
    binary_op<T> op;
    op.out = v[0], op.x = v[1], op.y = v[2];
    op.code = code;
    op.alpha = std::is_integral<T>::value ? (T)mx_int_param(alpha) : (T)alpha;
    return launch_elementwise("launch of kernel binary", mx__kview_numel(out), op);
  };
  switch (x->dtype) {
  case MX_F32: case MX_F16: case MX_BF16: return launch(0.0f);
  case MX_F64: return launch(0.0);
  default: return launch((int64_t)0);
  }
}

mx_status mx__cuda_where(const mx_kview *out, const mx_kview *cond, const mx_kview *x, const mx_kview *y) {
  where_op op;
  mx_kview v[4];
  flatten_operands({out, cond, x, y}, v);
  op.out = v[0], op.cond = v[1], op.x = v[2], op.y = v[3];
  return launch_elementwise("launch of kernel where", mx__kview_numel(out), op);
}
