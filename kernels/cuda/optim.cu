/* The optimizer kernels on CUDA: SGD and Adam over a list of parameters in
 * multi-tensor launches. The arithmetic is kernels/math.h's, the same the CPU
 * kernels (kernels/cpu/optim.c) run. */
#include "kernels/backend.h"
#include "kernels/cuda/common.cuh"

/* Parameters per launch: the chunk travels in the kernel's arguments
 * (common.cuh: MX_CUDA_PARAM_BYTES), 9 in 4 KiB and 81 in 32 KiB (an
 * mx_optim_item is 376 bytes). */
#define PARAMS_PER_LAUNCH MX_CUDA_OPTIM_PER_LAUNCH

struct optim_chunk {
  mx_optim_item items[PARAMS_PER_LAUNCH]; /* their cast pointers are the host's: the casts are below */
  int64_t start[PARAMS_PER_LAUNCH + 1];   /* prefix sums of the numels */
  uint16_t *cast[PARAMS_PER_LAUNCH];      /* NULL, or where the parameter's 16-bit cast goes (dense, walk order) */
  mx_dtype cast_dtype[PARAMS_PER_LAUNCH];
  int n;
  bool any_cast;
};

/* The updated float32 value rounded as mx_to_dtype's convert kernel rounds it. */
MX_HD static inline void write_cast(const optim_chunk &c, int t, int64_t k, float v) {
  c.cast[t][k] = c.cast_dtype[t] == MX_BF16 ? float_value<MX_BF16>::store(v) : float_value<MX_F16>::store(v);
}

/* The step counts of a chunk's parameters, counted after their update. */
struct step_list {
  int64_t *step[PARAMS_PER_LAUNCH];
  int n;
};

/* The per-parameter part of each optimizer: begin() when a thread moves on
 * to another parameter, element() for each of its elements. */
struct sgd_update {
  mx_sgd_hparams h;
  bool first; /* the momentum buffer's first step */
  MX_HD void begin(const mx_optim_item &it) { first = it.step && *it.step == 0; }
  MX_HD double element(const mx_optim_item &it, int64_t k, double p, double g, bool f64) const {
    return mx_sgd_step_element(it.state[0], k, p, g, first, &h, f64);
  }
};

struct adam_update {
  mx_adam_hparams h;
  mx_adam_factors f;
  MX_HD void begin(const mx_optim_item &it) { f = mx_adam_factors_of(&h, *it.step + 1); }
  MX_HD double element(const mx_optim_item &it, int64_t k, double p, double g, bool f64) const {
    return mx_adam_step_element(it.state, k, p, g, &h, f, f64);
  }
};

/* Every thread walks the chunk's flat index space grid-stride; found_inf
 * set: the launch writes no parameter or state, only the casts, of the
 * parameters as they are (the host cannot know of the skip without
 * waiting, so it hands them to autocast either way). DENSE_F32: every
 * parameter and gradient of the chunk is float32 and one run of memory (the common case,
 * chosen on the host), read and written as floats: the values
 * mx_element_load and mx_element_store give, without their per-element
 * switch on the dtype and the strided offset. */
template <class Update, bool DENSE_F32>
struct optim_op {
  optim_chunk c;
  Update u;
  const float *found_inf, *grad_scale;
  MX_HD void operator()(const grid_pos &at) const {
    bool skip = found_inf && *found_inf != 0.0f;
    if (skip && !c.any_cast) return;
    Update mine = u; /* begin() keeps the current parameter's part here */
    float inv_scale = grad_scale ? mx_amp_inv_scale(*grad_scale) : 1.0f;
    int64_t total = c.start[c.n];
    int64_t stride = at.threads * at.blocks;
    int current = -1;
    for (int64_t i = at.block * at.threads + at.thread; i < total; i += stride) {
      int t = chunk_tensor_of(c.start, c.n, i);
      const mx_optim_item &it = c.items[t];
      if (t != current) {
        mine.begin(it);
        current = t;
      }
      int64_t k = i - c.start[t];
      /* a parameter with a cast is dense float32 (sgd_adam.c: new_cast), whichever branch runs */
      float *cast_of = c.cast[t] ? (float *)it.param.data + k : NULL;
      if (skip) {
        if (cast_of) write_cast(c, t, k, *cast_of);
        continue;
      }
      if constexpr (DENSE_F32) {
        float *p = (float *)it.param.data + k;
        double g = ((const float *)it.grad.data)[k];
        if (grad_scale) g = mx_optim_unscale(g, inv_scale, false);
        *p = (float)mine.element(it, k, *p, g, false);
      } else {
        bool f64 = it.param.dtype == MX_F64;
        double g = mx_element_load(element(it.grad, k), it.grad.dtype);
        if (grad_scale) g = mx_optim_unscale(g, inv_scale, f64);
        char *p = element(it.param, k);
        mx_element_store(p, it.param.dtype, mine.element(it, k, mx_element_load(p, it.param.dtype), g, f64));
      }
      if (cast_of) write_cast(c, t, k, *cast_of);
    }
  }
};

static_assert(sizeof(optim_op<adam_update, false>) <= MX_CUDA_PARAM_BYTES && sizeof(sgd_update) <= sizeof(adam_update),
              "an optimizer launch's arguments must fit the kernel's");

/* One thread per parameter, launched after the update so that no thread of
 * it still reads the old count. */
struct count_steps_op {
  step_list s;
  const float *found_inf;
  MX_HD void operator()(const grid_pos &at) const {
    if (found_inf && *found_inf != 0.0f) return;
    if (at.thread < s.n) *s.step[at.thread] += 1;
  }
};

/* Whether every parameter and gradient of the chunk is float32, 1-d and
 * contiguous (flatten_if_contiguous made them so): optim_op's DENSE_F32. */
static bool dense_f32(const optim_chunk &c) {
  for (int t = 0; t < c.n; t++) {
    const mx_kview *v[2] = {&c.items[t].param, &c.items[t].grad};
    for (const mx_kview *x : v)
      if (x->dtype != MX_F32 || x->ndim > 1 || (x->ndim == 1 && x->strides[0] != 1)) return false;
  }
  return true;
}

template <class Update>
static mx_status launch(const char *what, int n, const mx_optim_item *items, Update u, const float *found_inf,
                        const float *grad_scale) {
  for (int first = 0; first < n; first += PARAMS_PER_LAUNCH) {
    optim_chunk c;
    step_list s;
    c.n = n - first < PARAMS_PER_LAUNCH ? n - first : PARAMS_PER_LAUNCH;
    c.start[0] = 0;
    c.any_cast = false;
    s.n = 0;
    for (int t = 0; t < c.n; t++) {
      const mx_optim_item *it = &items[first + t];
      c.items[t] = *it;
      c.items[t].cast = NULL;
      c.items[t].param = flatten_if_contiguous(&it->param);
      c.items[t].grad = flatten_if_contiguous(&it->grad);
      c.start[t + 1] = c.start[t] + mx__kview_numel(&it->param);
      c.cast[t] = it->cast ? (uint16_t *)it->cast->data : NULL;
      c.cast_dtype[t] = it->cast ? it->cast->dtype : MX_F32;
      c.any_cast = c.any_cast || it->cast;
      if (it->step) s.step[s.n++] = it->step;
    }
    if (c.start[c.n] > 0) { /* an empty grid is an invalid configuration */
      if (dense_f32(c)) {
        optim_op<Update, true> op = {c, u, found_inf, grad_scale};
        MX__RETURN_IF_FAILED(launch_threads(what, grid_blocks(c.start[c.n]), THREADS_PER_BLOCK, op));
      } else {
        optim_op<Update, false> op = {c, u, found_inf, grad_scale};
        MX__RETURN_IF_FAILED(launch_threads(what, grid_blocks(c.start[c.n]), THREADS_PER_BLOCK, op));
      }
    }
    if (s.n > 0) {
      count_steps_op count = {s, found_inf};
      MX__RETURN_IF_FAILED(launch_threads("launch of kernel optim_count_steps", 1, PARAMS_PER_LAUNCH, count));
    }
    for (int t = 0; t < c.n; t++)
      if (items[first + t].cast) items[first + t].cast->written = true;
  }
  return MX_OK;
}

mx_status mx__cuda_sgd_step(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                            const float *grad_scale) {
  sgd_update u;
  u.h = *h;
  u.first = false;
  return launch("launch of kernel sgd_step", n, items, u, found_inf, grad_scale);
}

mx_status mx__cuda_adam_step(int n, const mx_optim_item *items, const mx_adam_hparams *h, const float *found_inf,
                             const float *grad_scale) {
  adam_update u;
  u.h = *h;
  u.f.step_size = u.f.bias_correction2_sqrt = 0;
  return launch("launch of kernel adam_step", n, items, u, found_inf, grad_scale);
}
