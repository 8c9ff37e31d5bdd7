/* The optimizer kernels on the CPU: SGD and Adam over a list of parameters,
 * element by element with kernels/math.h's update rules (the ones the CUDA
 * kernels run), rows shared among threads by mx__cpu_foreach. */
#include "kernels/cpu/optim.h"
#include "kernels/cpu/convert.h"
#include "kernels/cpu/strided.h"
#include "kernels/cpu/wide_clones.h"

#include <math.h>

/* One parameter's pass: its item, the arithmetic's precision, the unscaling,
 * and the optimizer's per-parameter values. */
typedef struct {
  const mx_optim_item *item;
  bool f64, unscale;
  float inv_scale;
  const mx_sgd_hparams *sgd;
  bool first; /* SGD: the momentum buffer's first step */
  const mx_adam_hparams *adam;
  mx_adam_factors factors;
} step_ctx;

static step_ctx context_of(const mx_optim_item *item, const float *grad_scale) {
  step_ctx c = {.item = item, .f64 = item->param.dtype == MX_F64, .unscale = grad_scale != NULL};
  c.inv_scale = grad_scale ? mx_amp_inv_scale(*grad_scale) : 1.0f;
  return c;
}

/* The gradient of the row's element i, unscaled when asked. */
static double grad_at(const step_ctx *c, const mx__row *row, int64_t i) {
  double g = mx_element_load(row->ptr[1] + i * row->step[1], c->item->grad.dtype);
  return c->unscale ? mx_optim_unscale(g, c->inv_scale, c->f64) : g;
}

/* float32 parameters and gradients in dense rows, the common case: the
 * same updates as kernels/math.h's written in float, which rounds exactly
 * as their float64 arithmetic rounded to float after every operation does
 * (see mx_optim_round). The loops have no branches (the options are selects
 * on constants, a gradient is always multiplied by the inverse scale, 1 when
 * there is none), so the compiler vectorises them, in AVX-512 where the CPU
 * has it (Adam's square root and two divisions ran 4 lanes at a time in the
 * baseline build); C11 forbids FMA contraction, so every width rounds alike.
 * AMSGrad takes the element path. */
static bool dense_f32(const step_ctx *c, const mx__row *row) {
  return c->item->param.dtype == MX_F32 && c->item->grad.dtype == MX_F32 && row->step[0] == 4 &&
         row->step[1] == 4 && !(c->adam && c->adam->amsgrad);
}

MX_WIDE_CLONES static void sgd_row_f32(const step_ctx *c, const mx__row *row) {
  const mx_sgd_hparams *h = c->sgd;
  float *restrict p = (float *)row->ptr[0];
  const float *restrict g = (const float *)row->ptr[1];
  const float inv = c->inv_scale, sign = h->maximize ? -1.0f : 1.0f, wd = (float)h->weight_decay;
  const float momentum = (float)h->momentum, keep = (float)(1 - h->dampening), neg_lr = (float)-h->lr;
  const bool decay = h->weight_decay != 0, nesterov = h->nesterov, first = c->first;
  if (h->momentum == 0) {
    for (int64_t i = 0; i < row->n; i++) {
      float d = sign * (g[i] * inv);
      d = decay ? d + wd * p[i] : d;
      p[i] = p[i] + neg_lr * d;
    }
    return;
  }
  float *restrict buf = (float *)c->item->state[0] + row->first;
  for (int64_t i = 0; i < row->n; i++) {
    float d = sign * (g[i] * inv);
    d = decay ? d + wd * p[i] : d;
    float b = buf[i]; /* read on the first step too (zeros), so that the choice below is a select */
    b = first ? d : b * momentum + keep * d;
    buf[i] = b;
    d = nesterov ? d + momentum * b : b;
    p[i] = p[i] + neg_lr * d;
  }
}

MX_WIDE_CLONES static void adam_row_f32(const step_ctx *c, const mx__row *row) {
  const mx_adam_hparams *h = c->adam;
  float *restrict p = (float *)row->ptr[0];
  const float *restrict g = (const float *)row->ptr[1];
  float *restrict m = (float *)c->item->state[0] + row->first, *restrict v = (float *)c->item->state[1] + row->first;
  const float inv = c->inv_scale, sign = h->maximize ? -1.0f : 1.0f, wd = (float)h->weight_decay;
  const float shrink = (float)(1 - h->lr * h->weight_decay), b1 = (float)h->beta1, b2 = (float)h->beta2;
  const float keep1 = (float)(1 - h->beta1), keep2 = (float)(1 - h->beta2), eps = (float)h->eps;
  const float bc2 = (float)c->factors.bias_correction2_sqrt, neg_step = (float)-c->factors.step_size;
  const bool decoupled = h->decoupled_decay, coupled = !decoupled && h->weight_decay != 0;
  for (int64_t i = 0; i < row->n; i++) {
    float gi = sign * (g[i] * inv), pi = p[i];
    gi = coupled ? gi + wd * pi : gi;
    pi = decoupled ? pi * shrink : pi;
    float mi = m[i] * b1 + keep1 * gi, vi = v[i] * b2 + keep2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + neg_step * mi / (sqrtf(vi) / bc2 + eps);
  }
}

/* A row of the parameter (ptr[0]) and its gradient (ptr[1]); row->first is
 * the row-major index of its first element, hence of its state. */
static void sgd_row_uncast(const step_ctx *c, const mx__row *row) {
  if (dense_f32(c, row)) {
    sgd_row_f32(c, row);
    return;
  }
  mx_dtype dtype = c->item->param.dtype;
  for (int64_t i = 0; i < row->n; i++) {
    char *p = row->ptr[0] + i * row->step[0];
    double next = mx_sgd_step_element(c->item->state[0], row->first + i, mx_element_load(p, dtype),
                                      grad_at(c, row, i), c->first, c->sgd, c->f64);
    mx_element_store(p, dtype, next);
  }
}

static void adam_row_uncast(const step_ctx *c, const mx__row *row) {
  if (dense_f32(c, row)) {
    adam_row_f32(c, row);
    return;
  }
  mx_dtype dtype = c->item->param.dtype;
  for (int64_t i = 0; i < row->n; i++) {
    char *p = row->ptr[0] + i * row->step[0];
    double next = mx_adam_step_element(c->item->state, row->first + i, mx_element_load(p, dtype),
                                       grad_at(c, row, i), c->adam, c->factors, c->f64);
    mx_element_store(p, dtype, next);
  }
}

/* The item's cast (a dense float32 parameter: ptr[0] advances 4 bytes) is
 * written a block at a time, just after the block's update, while the new
 * values are still in L1: the parameter's memory is read once for both.
 * The conversions are the convert kernel's (mx__f32_to_bf16_n, _f16_n), so
 * the cast has the bits mx_to_dtype gives. */
enum { CAST_BLOCK = 1024 };

static void step_row(const step_ctx *c, const mx__row *row, void (*update)(const step_ctx *, const mx__row *)) {
  const mx_optim_cast *cast = c->item->cast;
  if (!cast) {
    update(c, row);
    return;
  }
  for (int64_t at = 0; at < row->n; at += CAST_BLOCK) {
    mx__row part = *row;
    part.n = row->n - at < CAST_BLOCK ? row->n - at : CAST_BLOCK;
    part.first = row->first + at;
    for (int k = 0; k < 2; k++) part.ptr[k] += at * row->step[k];
    update(c, &part);
    uint16_t *out = (uint16_t *)cast->data + part.first;
    if (cast->dtype == MX_BF16)
      mx__f32_to_bf16_n((const float *)part.ptr[0], out, part.n);
    else
      mx__f32_to_f16_n((const float *)part.ptr[0], out, part.n);
  }
}

static void sgd_row(const mx__row *row, void *arg) { step_row(arg, row, sgd_row_uncast); }
static void adam_row(const mx__row *row, void *arg) { step_row(arg, row, adam_row_uncast); }

/* After a parameter's update: its step count and its cast. */
static void finish(const mx_optim_item *item) {
  if (item->step) *item->step += 1;
  if (item->cast) item->cast->written = true;
}

mx_status mx__cpu_sgd_step(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                           const float *grad_scale) {
  if (found_inf && *found_inf != 0) return MX_OK;
  for (int t = 0; t < n; t++) {
    step_ctx c = context_of(&items[t], grad_scale);
    c.sgd = h;
    c.first = items[t].step && *items[t].step == 0;
    mx__cpu_foreach_row_indexed(&items[t].param, &items[t].grad, sgd_row, &c);
    finish(&items[t]);
  }
  return MX_OK;
}

mx_status mx__cpu_adam_step(int n, const mx_optim_item *items, const mx_adam_hparams *h, const float *found_inf,
                            const float *grad_scale) {
  if (found_inf && *found_inf != 0) return MX_OK;
  for (int t = 0; t < n; t++) {
    step_ctx c = context_of(&items[t], grad_scale);
    c.adam = h;
    c.factors = mx_adam_factors_of(h, *items[t].step + 1);
    mx__cpu_foreach_row_indexed(&items[t].param, &items[t].grad, adam_row, &c);
    finish(&items[t]);
  }
  return MX_OK;
}
