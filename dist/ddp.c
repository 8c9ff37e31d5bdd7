/* DistributedDataParallel as two calls: every rank starts from the root's
 * weights, and after each backward the gradients are averaged over the
 * ranks, in buckets, so every rank's optimizer takes the same step. Unlike
 * PyTorch's DDP the averaging runs after the backward, not overlapped with
 * it: simpler to follow, and the same arithmetic.
 */
#include <stdio.h>
#include <stdlib.h>

#include "autograd/autograd.h"
#include "dist/dist_internal.h"
#include "kernels/base_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"

#define BUCKET_BYTES ((size_t)25 << 20) /* PyTorch's bucket_cap_mb */

/* How many parameters and buffers each rank's module has must agree. */
static mx_status same_shape_of_module(mx_process_group *g, const char *op, const mx_module *m) {
  int64_t mine[2] = {mx_module_num_parameters(m), mx_module_num_buffers(m)}, all[2];
  mx_scope *scope = mx_scope_begin();
  mx_tensor *counts = mx_from_data(mine, MX_SHAPE(2), MX_I64, MX_CPU);
  mx_status st = counts ? mx_dist_all_reduce(g, counts, MX_DIST_SUM) : mx__error_prefix(op);
  if (st == MX_OK) st = mx_to_host(counts, all, sizeof all);
  int w = mx_dist_world_size(g);
  if (st == MX_OK && (all[0] != w * mine[0] || all[1] != w * mine[1]))
    st = mx__error(MX_INVALID_ARGUMENT,
                   "%s: the ranks' modules differ: rank %d has %lld parameters and %lld buffers, the %d ranks %lld "
                   "and %lld in all",
                   op, mx_dist_rank(g), (long long)mine[0], (long long)mine[1], w, (long long)all[0], (long long)all[1]);
  mx_scope_end(scope);
  return st;
}

static mx_status named_failure(const char *op, const char *kind, const char *name) {
  char where[256];
  snprintf(where, sizeof where, "%s: %s '%s'", op, kind, name);
  return mx__error_prefix(where);
}

mx_status mx_ddp_broadcast_module(mx_process_group *g, mx_module *m, int root) {
  const char *op = "mx_ddp_broadcast_module";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!m) return mx__null_input(op, "m");
  if (mx_dist_world_size(g) == 1) return MX_OK;
  st = same_shape_of_module(g, op, m);
  for (int i = 0; st == MX_OK && i < mx_module_num_parameters(m); i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    if ((st = mx_dist_broadcast(g, p, root)) != MX_OK) named_failure(op, "parameter", name);
  }
  for (int i = 0; st == MX_OK && i < mx_module_num_buffers(m); i++) {
    const char *name;
    mx_tensor *b = mx_module_buffer(m, i, &name);
    if ((st = mx_dist_broadcast(g, b, root)) != MX_OK) named_failure(op, "buffer", name);
  }
  return st;
}

/* Averages k gradients of one dtype through one flat buffer. */
static mx_status average_bucket(mx_process_group *g, const char *op, mx_tensor *const *grads, int k) {
  int64_t total = 0;
  for (int i = 0; i < k; i++) total += mx_numel(grads[i]);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *flat = mx_empty(MX_SHAPE(total), mx_dtype_of(grads[0]), MX_CPU);
  mx_tensor **parts = calloc((size_t)k, sizeof *parts);
  mx_status st = flat && parts ? MX_OK : mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  for (int64_t i = 0, at = 0; st == MX_OK && i < k; at += mx_numel(grads[i]), i++) {
    mx_tensor *run = mx_narrow(flat, 0, at, mx_numel(grads[i]));
    parts[i] = run ? mx_view(run, mx_shape_get(grads[i])) : NULL;
    st = parts[i] ? mx_copy_(parts[i], grads[i]) : mx_last_status();
  }
  if (st == MX_OK) st = mx_dist_all_reduce(g, flat, MX_DIST_AVG);
  for (int i = 0; st == MX_OK && i < k; i++) st = mx_copy_(grads[i], parts[i]);
  free(parts);
  mx_scope_end(scope);
  return st;
}

mx_status mx_ddp_average_gradients(mx_process_group *g, mx_module *m) {
  const char *op = "mx_ddp_average_gradients";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!m) return mx__null_input(op, "m");
  int n = mx_module_num_parameters(m), w = mx_dist_world_size(g);
  if (w == 1) return MX_OK; /* nothing to average */
  int32_t *has = calloc((size_t)n + 1, sizeof *has);
  mx_tensor **bucket = calloc((size_t)n + 1, sizeof *bucket);
  if (!has || !bucket) st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  /* How many ranks have each parameter's gradient; the last entry, the
   * parameter count, makes modules of different sizes disagree. */
  mx_scope *scope = mx_scope_begin();
  for (int i = 0; st == MX_OK && i < n; i++) has[i] = mx_grad_of(mx_module_parameter(m, i, NULL)) != NULL;
  if (st == MX_OK) has[n] = n;
  mx_tensor *counts = st == MX_OK ? mx_from_data(has, MX_SHAPE(n + 1), MX_I32, MX_CPU) : NULL;
  if (st == MX_OK) st = counts ? mx_dist_all_reduce(g, counts, MX_DIST_SUM) : mx__error_prefix(op);
  if (st == MX_OK) st = mx_to_host(counts, has, ((size_t)n + 1) * sizeof *has);
  mx_scope_end(scope);
  for (int i = 0; st == MX_OK && i < n; i++) {
    const char *name;
    mx_module_parameter(m, i, &name);
    if (has[i] != 0 && has[i] != w)
      st = mx__error(MX_STATE_ERROR, "%s: parameter '%s' has a gradient on %d of the %d ranks (all or none must)", op,
                     name, has[i], w);
  }
  /* Buckets: parameters in order, one dtype at a time, up to BUCKET_BYTES. */
  for (int d = 0; st == MX_OK && d < MX_DTYPE_COUNT; d++) {
    int k = 0;
    size_t bytes = 0;
    for (int i = 0; st == MX_OK && i <= n; i++) {
      mx_tensor *grad = i < n && has[i] ? mx_grad_of(mx_module_parameter(m, i, NULL)) : NULL;
      bool take = grad && mx_dtype_of(grad) == (mx_dtype)d;
      size_t b = take ? (size_t)mx_numel(grad) * mx_dtype_size(mx_dtype_of(grad)) : 0;
      if (k > 0 && (i == n || (take && bytes + b > BUCKET_BYTES))) st = average_bucket(g, op, bucket, k), k = 0, bytes = 0;
      if (take) bucket[k++] = grad, bytes += b;
    }
  }
  free(has);
  free(bucket);
  return st;
}

mx_status mx_ddp_unscale(mx_process_group *g, mx_scaler *s, mx_optimizer *opt) {
  const char *op = "mx_ddp_unscale";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!s || !opt) return mx__null_input(op, s ? "opt" : "s");
  if (!mx_scaler_is_enabled(s)) return MX_OK;
  if ((st = mx_scaler_unscale(s, opt)) != MX_OK) return st;
  mx_tensor *found_inf = mx_scaler_found_inf(s, opt);
  st = found_inf ? mx_dist_all_reduce(g, found_inf, MX_DIST_MAX) : mx_last_status();
  return st == MX_OK ? MX_OK : mx__error_prefix(op);
}
