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
 * neighbouring values), then one thread per channel adds that channel's
 * partials in run order, so a run gives the same bits each time (no
 * atomics). The CPU adds in another order: the sums agree to rounding. */
#include "kernels/channel_plan.h"
#include "kernels/cuda/common.cuh"

#define SUMS_THREADS 256
/* Values per run at least: 8 a thread, so a block's closing tree of adds
 * is a small part of its work. */
#define SUMS_MIN_RUN (8 * SUMS_THREADS)

/* relu's backward in T: gradient g where relu's output y > 0, else 0. */
MX_HD static inline float relu_grad(float g, float y) { return mx_relu_grad_f32(g, y); }
MX_HD static inline double relu_grad(double g, double y) { return mx_relu_grad_f64(g, y); }

/* Element i of contiguous v, widened to T; with a mask (data NULL: none)
 * through relu's backward given the mask's element i. */
template <class T>
MX_HD static inline T load_masked(const mx_kview &v, const mx_kview &mask, int64_t i) {
  T value = (T)mx_element_load((const char *)v.data + i * dtype_bytes(v.dtype), v.dtype);
  if (!mask.data) return value;
  return relu_grad(value, (T)mx_element_load((const char *)mask.data + i * dtype_bytes(mask.dtype), mask.dtype));
}

/* --- channel_affine -------------------------------------------------------------- */

/* T: float, or double for float64; the (C) vectors are T. */
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
  if (x->dtype == MX_F64) return channel_affine<double>(y, x, center, scale, shift, mask, relu);
  return channel_affine<float>(y, x, center, scale, shift, mask, relu);
}

/* --- channel_combine ------------------------------------------------------------ */

/* y = a scale_a[c] + (b - center_b[c]) scale_b[c] + shift[c] in T (the CPU's order of rounding), a read through
 * relu's backward given a mask; the (C) vectors are T. */
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
  if (a->dtype == MX_F64) return channel_combine<double>(y, a, b, scale_a, center_b, scale_b, shift, a_mask);
  return channel_combine<float>(y, a, b, scale_a, center_b, scale_b, shift, a_mask);
}

/* --- channel_sums ----------------------------------------------------------------- */

/* Channels-last data (a plan with plane 1: (N H W, C), or (N, C)) from
 * this many channels on is read in tiles of SUMS_LANES neighbouring
 * channels, a warp's width: a warp's threads then read neighbouring values
 * of one row, not values C elements apart (one memory sector each). Below
 * it a tile's lanes would mostly idle while the old order's sectors are
 * shared by several threads anyway. */
#define SUMS_LANES 32
#define SUMS_TILED_CHANNELS 32

/* A run's two sums. */
struct run_sums {
  double sum, dot;
};

/* Which values a thread adds for an item of the reductions below. LANES 1:
 * the item is run r of channel r / segments (r % segments), the block's
 * threads taking its values in turn. LANES > 1 (plane 1 only): the item is
 * run r % segments of the channels of tile r / segments, thread t taking
 * channel tile LANES + t % LANES (none past the last channel: an idle lane)
 * and the rows of the run from t / LANES on, threads / LANES apart. */
struct thread_share {
  int64_t c, run, first, end; /* values first <= j < end of channel c (end == first: none) */
  int64_t from, step;         /* the thread's: j = from, from + step, ... */
};

template <unsigned LANES>
MX_HD static inline thread_share share_of(const mx_channel_plan &p, int64_t item, int64_t thread, int64_t threads) {
  thread_share s;
  s.c = item / p.segments * LANES + thread % LANES;
  s.run = item % p.segments;
  s.first = s.run * p.segment;
  s.end = s.c >= p.channels ? s.first : s.first + p.segment < p.count ? s.first + p.segment : p.count;
  s.from = s.first + thread / LANES;
  s.step = threads / LANES;
  return s;
}

/* The items of the reductions below: runs, or tiles' runs. */
template <unsigned LANES>
static int64_t items_of(const mx_channel_plan &p) {
  return (p.channels + LANES - 1) / LANES * p.segments;
}

/* Where the two block reductions below leave their pairs: partials[2 r]
 * and partials[2 r + 1] for run k of channel c, r = c segments + k,
 * whatever the LANES (common.cuh's launch_block_reduce asks a body for
 * partial, combine and finish). */
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
    const mx_channel_plan &plan = this->p;
    thread_share s = share_of<LANES>(plan, item, thread, threads);
    partial mine = {0, 0};
    if (s.end == s.first) return mine;
    int64_t bytes = dtype_bytes(a.dtype);
    T ca = a_center ? a_center[s.c] : (T)0, cb = b_center ? b_center[s.c] : (T)0;
    for (int64_t j = s.from; j < s.end; j += s.step) {
      int64_t k = mx_channel_offset(&plan, s.c, j);
      T va = load_masked<T>(a, a_mask, k);
      mine.sum += (double)va;
      if (with_b) {
        T vb = (T)mx_element_load((const char *)b.data + k * bytes, b.dtype);
        T product = (va - ca) * (vb - cb); /* rounded in T, as the elementwise ops round it */
        mine.dot += (double)product;
      }
    }
    return mine;
  }
};

/* Channel c's partials added in run order and stored (sum or dot absent:
 * data NULL). */
struct finish_op {
  const double *partials;
  int64_t segments;
  mx_kview sum, dot;
  MX_HD void operator()(int64_t c) const {
    double s = 0, d = 0;
    for (int64_t k = 0; k < segments; k++) {
      s += partials[2 * (c * segments + k)];
      d += partials[2 * (c * segments + k) + 1];
    }
    if (sum.data) mx_element_store((char *)sum.data + c * dtype_bytes(sum.dtype), sum.dtype, s);
    if (dot.data) mx_element_store((char *)dot.data + c * dtype_bytes(dot.dtype), dot.dtype, d);
  }
};

/* The plan of the reductions below for x, and whether it is read in tiles
 * of SUMS_LANES channels. A tile's run takes SUMS_LANES values a row, so it
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

template <class T, unsigned LANES>
static mx_status launch_partials(const mx_channel_plan *p, const mx_kview *a, const mx_kview *b,
                                 const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask,
                                 double *partials) {
  int64_t items = items_of<LANES>(*p);
  int64_t blocks = items < mx__cuda_max_blocks() ? items : mx__cuda_max_blocks();
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
  body.items = items;
  return launch_block_reduce<SUMS_THREADS, LANES>("launch of kernel channel_partials", blocks, SUMS_THREADS, body);
}

template <class T>
static mx_status launch_partials(bool tiled, const mx_channel_plan *p, const mx_kview *a, const mx_kview *b,
                                 const mx_kview *a_center, const mx_kview *b_center, const mx_kview *a_mask,
                                 double *partials) {
  return tiled ? launch_partials<T, SUMS_LANES>(p, a, b, a_center, b_center, a_mask, partials)
               : launch_partials<T, 1>(p, a, b, a_center, b_center, a_mask, partials);
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
                        ? launch_partials<double>(tiled, &p, a, with_b, a_center, b_center, a_mask, partials)
                        : launch_partials<float>(tiled, &p, a, with_b, a_center, b_center, a_mask, partials);
  if (status == MX_OK) {
    finish_op finish;
    memset(&finish, 0, sizeof finish);
    finish.partials = partials;
    finish.segments = p.segments;
    if (sum) finish.sum = *sum;
    if (dot) finish.dot = *dot;
    status = launch_elementwise("launch of kernel channel_sums", p.channels, finish);
  }
  mx_status freed = scratch_free(partials);
  return status != MX_OK ? status : freed;
}

/* --- channel_moments -------------------------------------------------------------- */

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
    const mx_channel_plan &plan = this->p;
    thread_share s = share_of<LANES>(plan, item, thread, threads);
    partial mine = {0, 0};
    if (s.end == s.first) return mine; /* an empty channel, or an idle lane */
    double k = channel_value(plan, x, s.c, 0);
    for (int64_t j = s.from; j < s.end; j += s.step) {
      double d = channel_value(plan, x, s.c, j) - k;
      mine.sum += d;
      mine.dot += d * d;
    }
    return mine;
  }
};

/* Channel c's partials added in run order, its moments stored. */
struct moments_finish_op {
  const double *partials;
  mx_channel_plan p;
  mx_kview x, mean, var;
  MX_HD void operator()(int64_t c) const {
    double s1 = 0, s2 = 0, m, v;
    for (int64_t k = 0; k < p.segments; k++) {
      s1 += partials[2 * (c * p.segments + k)];
      s2 += partials[2 * (c * p.segments + k) + 1];
    }
    mx_moments_of(p.count ? channel_value(p, x, c, 0) : 0, s1, s2, (double)p.count, &m, &v);
    mx_element_store((char *)mean.data + c * dtype_bytes(mean.dtype), mean.dtype, m);
    mx_element_store((char *)var.data + c * dtype_bytes(var.dtype), var.dtype, v);
  }
};

template <unsigned LANES>
static mx_status launch_moment_partials(const mx_channel_plan *p, const mx_kview *x, double *partials) {
  int64_t items = items_of<LANES>(*p);
  int64_t blocks = items < mx__cuda_max_blocks() ? items : mx__cuda_max_blocks();
  moment_partials_body<LANES> body;
  memset(&body, 0, sizeof body);
  body.p = *p;
  body.x = *x;
  body.partials = partials;
  body.items = items;
  return launch_block_reduce<SUMS_THREADS, LANES>("launch of kernel channel_moment_partials", blocks, SUMS_THREADS,
                                                  body);
}

mx_status mx__cuda_channel_moments(const mx_kview *mean, const mx_kview *var, const mx_kview *x) {
  bool tiled;
  mx_channel_plan p = sums_plan(x, &tiled);
  if (p.channels == 0) return MX_OK;
  double *partials = NULL;
  MX__RETURN_IF_FAILED(scratch_alloc((void **)&partials, (size_t)(p.channels * p.segments) * 2 * sizeof(double)));
  mx_status status =
      tiled ? launch_moment_partials<SUMS_LANES>(&p, x, partials) : launch_moment_partials<1>(&p, x, partials);
  if (status == MX_OK) {
    moments_finish_op finish;
    memset(&finish, 0, sizeof finish);
    finish.partials = partials;
    finish.p = p;
    finish.x = *x;
    finish.mean = *mean;
    finish.var = *var;
    status = launch_elementwise("launch of kernel channel_moments", p.channels, finish);
  }
  mx_status freed = scratch_free(partials);
  return status != MX_OK ? status : freed;
}
