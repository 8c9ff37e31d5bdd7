/* The optimizer kernels on the CPU: SGD and Adam over a list of parameters,
 * element by element with kernels/math.h's update rules (the ones the CUDA
 * kernels run), rows shared among threads by mx__cpu_foreach. */
#include "kernels/cpu/optim.h"
#include "kernels/cpu/strided.h"

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

/* A row of the parameter (ptr[0]) and its gradient (ptr[1]); row->first is
 * the row-major index of its first element, hence of its state. */
static void sgd_row(const mx__row *row, void *arg) {
  const step_ctx *c = arg;
  mx_dtype dtype = c->item->param.dtype;
  for (int64_t i = 0; i < row->n; i++) {
    char *p = row->ptr[0] + i * row->step[0];
    double next = mx_sgd_step_element(c->item->state[0], row->first + i, mx_element_load(p, dtype),
                                      grad_at(c, row, i), c->first, c->sgd, c->f64);
    mx_element_store(p, dtype, next);
  }
}

static void adam_row(const mx__row *row, void *arg) {
  const step_ctx *c = arg;
  mx_dtype dtype = c->item->param.dtype;
  for (int64_t i = 0; i < row->n; i++) {
    char *p = row->ptr[0] + i * row->step[0];
    double next = mx_adam_step_element(c->item->state, row->first + i, mx_element_load(p, dtype),
                                       grad_at(c, row, i), c->adam, c->factors, c->f64);
    mx_element_store(p, dtype, next);
  }
}

mx_status mx__cpu_sgd_step(int n, const mx_optim_item *items, const mx_sgd_hparams *h, const float *found_inf,
                           const float *grad_scale) {
  if (found_inf && *found_inf != 0) return MX_OK;
  for (int t = 0; t < n; t++) {
    step_ctx c = context_of(&items[t], grad_scale);
    c.sgd = h;
    c.first = items[t].step && *items[t].step == 0;
    mx__cpu_foreach_row(&items[t].param, &items[t].grad, sgd_row, &c);
    if (items[t].step) *items[t].step += 1;
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
    mx__cpu_foreach_row(&items[t].param, &items[t].grad, adam_row, &c);
    *items[t].step += 1;
  }
  return MX_OK;
}
