/* Batch norm's per-channel kernels on CUDA (kernels/backend.h says what
 * each computes), with the CPU's arithmetic (kernels/cpu/batch_norm.c):
 * float, or double for float64 data, each difference, product and sum
 * rounded in turn (the build passes --fmad=false, so nothing contracts into
 * an FMA), 16-bit values widened exactly and the result rounded once; a
 * fused ReLU through kernels/math.h's mx_relu_* (relu on the value as
 * stored, its backward on the gradient read through the mask).
 *
 * channel_affine and channel_combine are elementwise. channel_sums and
 * channel_moments cut each channel's values into runs
 * (kernels/channel_plan.h): a block per run adds its values in double into
 * a partial (channels-last data: a block per run of a tile of 32
 * neighbouring channels, a partial per lane, so that a warp reads one row's
 * neighbouring values), each thread loading a group of values before adding
 * them so that many loads are in flight; then a block per channel adds
 * that channel's partials by a fixed tree, so a run gives the same bits
 * each time (no atomics). The CPU adds in another order: the sums agree to
 * rounding. */
#include "kernels/channel_plan.h"
#include "kernels/cuda/common.cuh"

#define SUMS_THREADS 256

/* relu's backward in T: gradient g where relu's output y > 0, else 0. */
MX_HD static inline float relu_grad(float g, float y) { return mx_relu_grad_f32(g, y); }
MX_HD static inline double relu_grad(double g, double y) { return mx_relu_grad_f64(g, y); }

/* --- channel_affine and channel_combine ------------------------------------------- */

/* Both are elementwise, and two kernels each. The typed ones take the usual
 * case: fewer than 2^31 elements, every tensor of x's float dtype D (batch
 * norm's ops pass no other). They index in 32 bits, find element i's
 * channel (i / plane) % C by two multiply-highs (channels-last's (N H W, C)
 * rows have plane 1: a quotient by 1), and load and store D's storage
 * directly: a few dozen instructions an element where the general kernels'
 * 64-bit division, modulo and dtype switches on each load and store took
 * about 150, so that they were bound by instructions, not memory; and
 * each thread loads UNROLL elements before it stores any (launch_unrolled),
 * so that 16-bit data is not bound by memory latency. The general kernels
 * take the rest. The arithmetic is the same in both, in T
 * (float, or double for float64), so are the bits. */

/* Element i's channel in a contiguous (N, C, *) tensor, for i < 2^31. */
struct channel_index {
  divider plane, channels;
  MX_HD uint32_t of(uint32_t i) const {
    uint32_t q = plane.quotient(i);
    return q - channels.quotient(q) * channels.d;
  }
};

/* For a plan of at least one element (dividers by plane, channels >= 1). */
static channel_index channel_index_of(const mx_channel_plan &p) {
  channel_index k = {divider_of(p.plane), divider_of(p.channels)};
  return k;
}

/* Whether the typed kernels take n elements of x's dtype with views vs
 * (NULL: absent). */
static bool typed_case(int64_t n, const mx_kview *x, std::initializer_list<const mx_kview *> vs) {
  if (n <= 0 || !index32_fits(n) || !mx_dtype_floating(x->dtype)) return false;
  for (const mx_kview *v : vs)
    if (v && v->dtype != x->dtype) return false;
  return true;
}

/* The general kernels' element i of contiguous v, widened to T; with a mask
 * (data NULL: none) through relu's backward given the mask's element i. */
template <class T>
MX_HD static inline T load_masked(const mx_kview &v, const mx_kview &mask, int64_t i) {
  T value = (T)mx_element_load((const char *)v.data + i * dtype_bytes(v.dtype), v.dtype);
  if (!mask.data) return value;
  return relu_grad(value, (T)mx_element_load((const char *)mask.data + i * dtype_bytes(mask.dtype), mask.dtype));
}

/* y = (x - center[c]) scale[c] + shift[c] in T, x read through relu's
 * backward given a mask, y through relu (on the value as stored) with relu;
 * the (C) vectors are T. The typed kernel: */
template <mx_dtype D>
struct affine_typed_op {
  typedef float_value<D> V;
  typedef typename V::compute T;
  typename V::storage *y;
  const typename V::storage *x, *mask; /* mask NULL: none */
  bool relu;
  const T *center, *scale, *shift; /* center NULL: zeros */
  channel_index channel;
  struct loaded {
    typename V::storage x, mask;
  };
  MX_HD loaded load(int64_t i) const {
    loaded v = {x[i], mask ? mask[i] : x[i]};
    return v;
  }
  MX_HD void store(int64_t at, const loaded &in) const {
    uint32_t i = (uint32_t)at, c = channel.of(i);
    T v = V::load(in.x);
    if (mask) v = relu_grad(v, V::load(in.mask));
    T m = center ? center[c] : (T)0;
    T r = (v - m) * scale[c] + shift[c];
    y[i] = relu ? V::store_relu(r) : V::store(r);
  }
};

/* The general kernel. */
template <class T>
struct affine_op {
  mx_kview y, x, mask; /* mask.data NULL: none */
  bool relu;
  const T *center, *scale, *shift; /* center NULL: zeros */
  mx_channel_plan plan;
  MX_HD void operator()(int64_t i) const {
    int64_t c = mx_channel_of(&plan, i);
    T v = load_masked<T>(x, mask, i);
    T m = center ? center[c] : (T)0;
    T r = (v - m) * scale[c] + shift[c];
    char *out = (char *)y.data + i * dtype_bytes(y.dtype);
    if (relu) mx_element_store_relu(out, y.dtype, (double)r);
    else mx_element_store(out, y.dtype, (double)r);
  }
};

template <class T>
static mx_status channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                                const mx_kview *shift, const mx_kview *mask, bool relu) {
  affine_op<T> op;
  memset(&op, 0, sizeof op);
  op.y = *y;
  op.x = *x;
  if (mask) op.mask = *mask;
  op.relu = relu;
  op.center = center ? (const T *)center->data : NULL;
  op.scale = (const T *)scale->data;
  op.shift = (const T *)shift->data;
  op.plan = mx_channel_plan_of(x);
  return launch_elementwise("launch of kernel channel_affine", mx__kview_numel(x), op);
}

mx_status mx__cuda_channel_affine(const mx_kview *y, const mx_kview *x, const mx_kview *center, const mx_kview *scale,
                                  const mx_kview *shift, const mx_kview *mask, bool relu) {
  int64_t n = mx__kview_numel(x);
  if (typed_case(n, x, {y, mask}))
    return launch_typed<affine_typed_op>("launch of kernel channel_affine", x->dtype, n, [&](auto &op) {
      op.y = (decltype(op.y))y->data, op.x = (decltype(op.x))x->data;
      op.mask = mask ? (decltype(op.mask))mask->data : NULL, op.relu = relu;
      op.center = center ? (decltype(op.center))center->data : NULL;
      op.scale = (decltype(op.scale))scale->data, op.shift = (decltype(op.shift))shift->data;
      op.channel = channel_index_of(mx_channel_plan_of(x));
    });
  if (x->dtype == MX_F64) return channel_affine<double>(y, x, center, scale, shift, mask, relu);
  return channel_affine<float>(y, x, center, scale, shift, mask, relu);
}

/* y = a scale_a[c] + (b - center_b[c]) scale_b[c] + shift[c] in T (the CPU's order of rounding), a read through
 * relu's backward given a mask; the (C) vectors are T. The typed kernel: */
template <mx_dtype D>
struct combine_typed_op {
  typedef float_value<D> V;
  typedef typename V::compute T;
  typename V::storage *y;
  const typename V::storage *a, *b, *mask; /* mask NULL: none */
  const T *scale_a, *center_b, *scale_b, *shift;
  channel_index channel;
  struct loaded {
    typename V::storage a, b, mask;
  };
  MX_HD loaded load(int64_t i) const {
    loaded v = {a[i], b[i], mask ? mask[i] : a[i]};
    return v;
  }
  MX_HD void store(int64_t at, const loaded &in) const {
    uint32_t i = (uint32_t)at, c = channel.of(i);
    T g = V::load(in.a);
    if (mask) g = relu_grad(g, V::load(in.mask));
    T p = g * scale_a[c], q = (V::load(in.b) - center_b[c]) * scale_b[c];
    T r = (p + q) + shift[c];
    y[i] = V::store(r);
  }
};

/* The general kernel. */
template <class T>
struct combine_op {
  mx_kview y, a, b, mask; /* mask.data NULL: none */
  const T *scale_a, *center_b, *scale_b, *shift;
  mx_channel_plan plan;
  MX_HD void operator()(int64_t i) const {
    int64_t c = mx_channel_of(&plan, i);
    T g = load_masked<T>(a, mask, i);
    T vb = (T)mx_element_load((const char *)b.data + i * dtype_bytes(b.dtype), b.dtype);
    T p = g * scale_a[c], q = (vb - center_b[c]) * scale_b[c];
    T r = (p + q) + shift[c];
    mx_element_store((char *)y.data + i * dtype_bytes(y.dtype), y.dtype, (double)r);
  }
};

template <class T>
static mx_status channel_combine(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                                 const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                                 const mx_kview *a_mask) {
  combine_op<T> op;
  memset(&op, 0, sizeof op);
  op.y = *y;
  op.a = *a;
  op.b = *b;
  if (a_mask) op.mask = *a_mask;
  op.scale_a = (const T *)scale_a->data;
  op.center_b = (const T *)center_b->data;
  op.scale_b = (const T *)scale_b->data;
  op.shift = (const T *)shift->data;
  op.plan = mx_channel_plan_of(a);
  return launch_elementwise("launch of kernel channel_combine", mx__kview_numel(a), op);
}

mx_status mx__cuda_channel_combine(const mx_kview *y, const mx_kview *a, const mx_kview *b, const mx_kview *scale_a,
                                   const mx_kview *center_b, const mx_kview *scale_b, const mx_kview *shift,
                                   const mx_kview *a_mask) {
  int64_t n = mx__kview_numel(a);
  if (typed_case(n, a, {y, b, a_mask}))
    return launch_typed<combine_typed_op>("launch of kernel channel_combine", a->dtype, n, [&](auto &op) {
      op.y = (decltype(op.y))y->data, op.a = (decltype(op.a))a->data, op.b = (decltype(op.b))b->data;
      op.mask = a_mask ? (decltype(op.mask))a_mask->data : NULL;
      op.scale_a = (decltype(op.scale_a))scale_a->data, op.center_b = (decltype(op.center_b))center_b->data;
      op.scale_b = (decltype(op.scale_b))scale_b->data, op.shift = (decltype(op.shift))shift->data;
      op.channel = channel_index_of(mx_channel_plan_of(a));
    });
  if (a->dtype == MX_F64) return channel_combine<double>(y, a, b, scale_a, center_b, scale_b, shift, a_mask);
  return channel_combine<float>(y, a, b, scale_a, center_b, scale_b, shift, a_mask);
}

/* --- channel_sums and channel_moments: per-run partials, then a finish ------------ */

/* Channels-last data (a plan with plane 1: (N H W, C), or (N, C)) from
 * this many channels on is read in tiles of SUMS_LANES neighbouring
 * channels, a warp's width: a warp's threads then read neighbouring values
 * of one row, not values C elements apart (one memory sector each). Below
 * it a tile's lanes would mostly idle while the old order's sectors are
 * shared by several threads anyway. */
#define SUMS_LANES 32
#define SUMS_TILED_CHANNELS 32

/* Values a thread loads before it adds any of them. The reductions are
 * bound by memory: one load at a time would wait a whole memory latency
 * per value, while a group's loads are independent and all in flight at
 * once. A run has at least a group a thread. */
#define SUMS_GROUP 8
#define SUMS_MIN_RUN (SUMS_GROUP * SUMS_THREADS)

/* The finish's threads per channel at most (a power of two): each adds a
 * few of the channel's partials, then the block's tree adds theirs. */
#define FINISH_THREADS 256

/* A run's two sums. */
struct run_sums {
  double sum, dot;
};

/* Which values a thread adds for an item of the partials below. LANES 1:
 * the item is run r of channel r / segments (r % segments), the block's
 * threads taking its values in turn. LANES > 1 (plane 1 only): the item is
 * run r % segments of the channels of tile r / segments, thread t taking
 * channel tile LANES + t % LANES (none past the last channel: an idle lane)
 * and the rows of the run from t / LANES on, threads / LANES apart. */
struct thread_share {
  int64_t c;
  int64_t from, step, count; /* values from, from + step, ... of channel c: count of them */
};

template <unsigned LANES>
MX_HD static inline thread_share share_of(const mx_channel_plan &p, int64_t item, int64_t thread, int64_t threads) {
  thread_share s;
  s.c = item / p.segments * LANES + thread % LANES;
  int64_t first = item % p.segments * p.segment;
  int64_t end = s.c >= p.channels ? first : first + p.segment < p.count ? first + p.segment : p.count;
  s.from = first + thread / LANES;
  s.step = threads / LANES;
  s.count = s.from < end ? (end - s.from + s.step - 1) / s.step : 0;
  return s;
}

/* The items of the partials below: runs, or tiles' runs. */
template <unsigned LANES>
static int64_t items_of(const mx_channel_plan &p) {
  return (p.channels + LANES - 1) / LANES * p.segments;
}

/* The offsets of a thread's next group of values, of which `left` remain;
 * past those, offsets of the group's first (read, never added). */
MX_HD static inline void next_group(mx_channel_walk &walk, int64_t left, int64_t *k) {
  for (int u = 0; u < SUMS_GROUP; u++) {
    k[u] = u < left ? walk.offset : k[0];
    mx_channel_walk_next(&walk);
  }
}

/* The values at offsets k[0..SUMS_GROUP) of contiguous v, widened exactly
 * and then converted to T: one switch on the dtype for the whole group, so
 * that its loads issue one after another without waiting (16-bit values
 * all loaded before any is widened: float16's widening branches on the
 * value, so widening each as it comes would wait for each load in turn). */
template <class T>
MX_HD static inline void load_group(const mx_kview &v, const int64_t *k, T *out) {
  uint16_t bits[SUMS_GROUP];
  switch (v.dtype) {
  case MX_F32:
    for (int u = 0; u < SUMS_GROUP; u++) out[u] = (T)((const float *)v.data)[k[u]];
    break;
  case MX_F64:
    for (int u = 0; u < SUMS_GROUP; u++) out[u] = (T)((const double *)v.data)[k[u]];
    break;
  case MX_BF16:
  case MX_F16:
    for (int u = 0; u < SUMS_GROUP; u++) bits[u] = ((const uint16_t *)v.data)[k[u]];
    for (int u = 0; u < SUMS_GROUP; u++)
      out[u] = (T)(v.dtype == MX_BF16 ? mx_bf16_to_f32(bits[u]) : f16_to_f32(bits[u]));
    break;
  default:
    for (int u = 0; u < SUMS_GROUP; u++)
      out[u] = (T)mx_element_load((const char *)v.data + k[u] * dtype_bytes(v.dtype), v.dtype);
    break;
  }
}

/* Where the partials kernels below leave their pairs: partials[2 r] and
 * partials[2 r + 1] for run k of channel c, r = c segments + k, whatever
 * the LANES (common.cuh's launch_block_reduce asks a body for partial,
 * combine and finish). */
template <unsigned LANES>
struct run_sums_out {
  typedef run_sums partial;
  double *partials;
  int64_t items;
  mx_channel_plan p;
  MX_HD partial combine(partial x, partial y) const {
    x.sum += y.sum;
    x.dot += y.dot;
    return x;
  }
  MX_HD void finish(int64_t r, partial all) const {
    partials[2 * r] = all.sum;
    partials[2 * r + 1] = all.dot;
  }
  MX_HD void finish(int64_t item, unsigned lane, partial all) const {
    int64_t c = item / p.segments * LANES + lane;
    if (c < p.channels) finish(c * p.segments + item % p.segments, all);
  }
};

/* The sum of a, and of (a - ca)(b - cb), over each run (without b, the
 * second is 0); with a mask, a is read through relu's backward. */
template <class T, unsigned LANES>
struct channel_partials_body : run_sums_out<LANES> {
  typedef run_sums partial;
  mx_kview a, b, a_mask; /* a_mask.data NULL: none */
  bool with_b;
  const T *a_center, *b_center;
  MX_HD partial thread_partial(int64_t item, int64_t thread, int64_t threads) const {
    thread_share s = share_of<LANES>(this->p, item, thread, threads);
    partial mine = {0, 0};
    if (s.count == 0) return mine;
    T ca = a_center ? a_center[s.c] : (T)0, cb = b_center ? b_center[s.c] : (T)0;
    mx_channel_walk walk = mx_channel_walk_of(&this->p, s.c, s.from, s.step);
    for (int64_t left = s.count; left > 0; left -= SUMS_GROUP) {
      int64_t k[SUMS_GROUP];
      T va[SUMS_GROUP], vb[SUMS_GROUP], mask[SUMS_GROUP];
      next_group(walk, left, k);
      load_group(a, k, va);
      if (a_mask.data) load_group(a_mask, k, mask);
      if (with_b) load_group(b, k, vb);
      for (int u = 0; u < SUMS_GROUP && u < left; u++) {
        T v = a_mask.data ? relu_grad(va[u], mask[u]) : va[u];
        mine.sum += (double)v;
        if (with_b) {
          T product = (v - ca) * (vb[u] - cb); /* rounded in T, as the elementwise ops round it */
          mine.dot += (double)product;
        }
      }
    }
    return mine;
  }
};

/* The value of channel c at position j, widened exactly to double. */
MX_HD static inline double channel_value(const mx_channel_plan &p, const mx_kview &x, int64_t c, int64_t j) {
  return mx_element_load((const char *)x.data + mx_channel_offset(&p, c, j) * dtype_bytes(x.dtype), x.dtype);
}

/* The sums of x - k and of (x - k)^2 over each run, k the channel's first
 * value, in double (the CPU's arithmetic: the same differences and
 * squares, added in another order). */
template <unsigned LANES>
struct moment_partials_body : run_sums_out<LANES> {
  typedef run_sums partial;
  mx_kview x;
  MX_HD partial thread_partial(int64_t item, int64_t thread, int64_t threads) const {
    thread_share s = share_of<LANES>(this->p, item, thread, threads);
    partial mine = {0, 0};
    if (s.count == 0) return mine; /* an empty channel, or an idle lane */
    double k = channel_value(this->p, x, s.c, 0);
    mx_channel_walk walk = mx_channel_walk_of(&this->p, s.c, s.from, s.step);
    for (int64_t left = s.count; left > 0; left -= SUMS_GROUP) {
      int64_t at[SUMS_GROUP];
      double v[SUMS_GROUP];
      next_group(walk, left, at);
      load_group(x, at, v);
      for (int u = 0; u < SUMS_GROUP && u < left; u++) {
        double d = v[u] - k;
        mine.sum += d;
        mine.dot += d * d;
      }
    }
    return mine;
  }
};

/* The finish: a block per channel adds the channel's partials, thread t
 * those of runs t, t + threads, ..., then the block's tree adds the
 * threads' sums, in the same order on every call. (One thread per channel
 * adding them one after another waited a memory latency per partial.)
 * Store(c, all) stores channel c's result. */
template <class Store>
struct finish_body {
  typedef run_sums partial;
  const double *partials;
  int64_t segments, items; /* items: the channels */
  Store store;
  MX_HD partial thread_partial(int64_t c, int64_t thread, int64_t threads) const {
    partial mine = {0, 0};
    for (int64_t k = thread; k < segments; k += threads) {
      mine.sum += partials[2 * (c * segments + k)];
      mine.dot += partials[2 * (c * segments + k) + 1];
    }
    return mine;
  }
  MX_HD partial combine(partial x, partial y) const {
    x.sum += y.sum;
    x.dot += y.dot;
    return x;
  }
  MX_HD void finish(int64_t c, partial all) const { store(c, all); }
};

/* channel_sums' store: the two sums (sum or dot absent: data NULL). */
struct sums_store {
  mx_kview sum, dot;
  MX_HD void operator()(int64_t c, run_sums all) const {
    if (sum.data) mx_element_store((char *)sum.data + c * dtype_bytes(sum.dtype), sum.dtype, all.sum);
    if (dot.data) mx_element_store((char *)dot.data + c * dtype_bytes(dot.dtype), dot.dtype, all.dot);
  }
};

/* channel_moments' store: the mean and variance from the shifted sums. */
struct moments_store {
  mx_channel_plan p;
  mx_kview x, mean, var;
  MX_HD void operator()(int64_t c, run_sums all) const {
    double m, v;
    mx_moments_of(p.count ? channel_value(p, x, c, 0) : 0, all.sum, all.dot, (double)p.count, &m, &v);
    mx_element_store((char *)mean.data + c * dtype_bytes(mean.dtype), mean.dtype, m);
    mx_element_store((char *)var.data + c * dtype_bytes(var.dtype), var.dtype, v);
  }
};

/* The plan of the partials for x, and whether it is read in tiles of
 * SUMS_LANES channels. A tile's run takes SUMS_LANES values a row, so it
 * is split as one channel of rows, at least SUMS_MIN_RUN values a block
 * either way; a quarter of the grid cap: about 8 blocks of 256 threads per
 * multiprocessor. */
static mx_channel_plan sums_plan(const mx_kview *x, bool *tiled) {
  mx_channel_plan p = mx_channel_plan_of(x);
  *tiled = p.plane == 1 && p.channels >= SUMS_TILED_CHANNELS;
  if (!*tiled) return mx_channel_plan_split(p, mx__cuda_max_blocks() / 4, SUMS_MIN_RUN);
  int64_t channels = p.channels;
  p.channels = (channels + SUMS_LANES - 1) / SUMS_LANES;
  p = mx_channel_plan_split(p, mx__cuda_max_blocks() / 4, SUMS_MIN_RUN / SUMS_LANES);
  p.channels = channels;
  return p;
}

/* A block per item of the body's, at most the grid cap. */
template <unsigned LANES, class Body>
static mx_status launch_partials(const char *what, Body &body) {
  body.items = items_of<LANES>(body.p);
  int64_t blocks = body.items < mx__cuda_max_blocks() ? body.items : mx__cuda_max_blocks();
  return launch_block_reduce<SUMS_THREADS, LANES>(what, blocks, SUMS_THREADS, body);
}

/* Adds each channel's partials and stores the results through store. */
template <class Store>
static mx_status launch_finish(const char *what, const mx_channel_plan &p, const double *partials,
                               const Store &store) {
  finish_body<Store> body;
  memset(&body, 0, sizeof body);
  body.partials = partials;
  body.segments = p.segments;
  body.items = p.channels;
  body.store = store;
  unsigned threads = 32; /* a warp at least; no more than one a partial below FINISH_THREADS */
  while (threads < FINISH_THREADS && threads < p.segments) threads *= 2;
  int64_t blocks = p.channels < mx__cuda_max_blocks() ? p.channels : mx__cuda_max_blocks();
  return launch_block_reduce<FINISH_THREADS>(what, blocks, threads, body);
}

template <class T, unsigned LANES>
static mx_status sums_partials(const mx_channel_plan *p, const mx_kview *a, const mx_kview *b,
                               const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask,
                               double *partials) {
  channel_partials_body<T, LANES> body;
  memset(&body, 0, sizeof body);
  body.p = *p;
  body.a = *a;
  if (b) body.b = *b;
  if (a_mask) body.a_mask = *a_mask;
  body.with_b = b != NULL;
  body.a_center = a_center ? (const T *)a_center->data : NULL;
  body.b_center = b_center ? (const T *)b_center->data : NULL;
  body.partials = partials;
  return launch_partials<LANES>("launch of kernel channel_partials", body);
}

template <class T>
static mx_status sums_partials(bool tiled, const mx_channel_plan *p, const mx_kview *a, const mx_kview *b,
                               const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask,
                               double *partials) {
  return tiled ? sums_partials<T, SUMS_LANES>(p, a, b, a_center, b_center, a_mask, partials)
               : sums_partials<T, 1>(p, a, b, a_center, b_center, a_mask, partials);
}

mx_status mx__cuda_channel_sums(const mx_kview *sum, const mx_kview *dot, const mx_kview *a, const mx_kview *b,
                                const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask) {
  bool tiled;
  mx_channel_plan p = sums_plan(a, &tiled);
  if (p.channels == 0) return MX_OK;
  const mx_kview *with_b = dot ? b : NULL;
  double *partials = NULL;
  size_t bytes = (size_t)(p.channels * p.segments) * 2 * sizeof(double);
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&partials, bytes));
  mx_status status = a->dtype == MX_F64
                         ? sums_partials<double>(tiled, &p, a, with_b, a_center, b_center, a_mask, partials)
                         : sums_partials<float>(tiled, &p, a, with_b, a_center, b_center, a_mask, partials);
  if (status == MX_OK) {
    sums_store store;
    memset(&store, 0, sizeof store);
    if (sum) store.sum = *sum;
    if (dot) store.dot = *dot;
    status = launch_finish("launch of kernel channel_sums", p, partials, store);
  }
  mx_status freed = scratch_free(partials);
  return status != MX_OK ? status : freed;
}

template <unsigned LANES>
static mx_status moment_partials(const mx_channel_plan *p, const mx_kview *x, double *partials) {
  moment_partials_body<LANES> body;
  memset(&body, 0, sizeof body);
  body.p = *p;
  body.x = *x;
  body.partials = partials;
  return launch_partials<LANES>("launch of kernel channel_moment_partials", body);
}

mx_status mx__cuda_channel_moments(const mx_kview *mean, const mx_kview *var, const mx_kview *x) {
  bool tiled;
  mx_channel_plan p = sums_plan(x, &tiled);
  if (p.channels == 0) return MX_OK;
  double *partials = NULL;
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&partials, (size_t)(p.channels * p.segments) * 2 * sizeof(double)));
  mx_status status = tiled ? moment_partials<SUMS_LANES>(&p, x, partials) : moment_partials<1>(&p, x, partials);
  if (status == MX_OK) {
    moments_store store;
    memset(&store, 0, sizeof store);
    store.p = p;
    store.x = *x;
    store.mean = *mean;
    store.var = *var;
    status = launch_finish("launch of kernel channel_moments", p, partials, store);
  }
  mx_status freed = scratch_free(partials);
  return status != MX_OK ? status : freed;
}
