/* DistributedDataParallel as two calls: every rank starts from the root's
 * weights, and after each backward the gradients are averaged over the
 * ranks, in buckets, so every rank's optimizer takes the same step.
 *
 * As PyTorch's reducer does it, the averaging overlaps the backward: the
 * first mx_ddp_average_gradients of a module averages after the fact and
 * then hooks each parameter (a post-accumulate-grad hook). From then on,
 * parameters are packed into buckets in reverse registration order (about
 * the order backward finishes them; the first bucket about 1 MiB, the
 * others about 25 MiB), and as soon as a bucket's gradients are all in,
 * the hook starts its all-reduce; buckets start in order, so every rank
 * starts the same collectives in the same order. mx_ddp_average_gradients
 * then starts what backward left (gradients a rank did not get), waits,
 * and copies the averages out.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "dist/dist_internal.h"
#include "kernels/base_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"
#include "tensor/tensor_impl.h" /* mx__retain: the reducer holds the parameters and its buffers */

#define BUCKET_BYTES ((size_t)25 << 20)      /* PyTorch's bucket_cap_mb */
#define FIRST_BUCKET_BYTES ((size_t)1 << 20) /* and its first bucket's: it starts early */

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
  /* on the gradients' device: CUDA gradients are averaged by NCCL there */
  mx_tensor *flat = mx_empty(MX_SHAPE(total), mx_dtype_of(grads[0]), mx_device_of(grads[0]));
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

static mx_status wait_buckets(struct mx__ddp_reducer *r);

/* Keeps the first error of several calls, got being the latest's. */
static void first_error(mx_status *st, char *why, size_t size, mx_status got) {
  if (*st == MX_OK && got != MX_OK) *st = got, snprintf(why, size, "%s", mx_last_error());
}

/* How many ranks have each parameter's gradient: an error naming the
 * first parameter that has it on some ranks only. has[i] (n + 1 entries)
 * ends with the count of ranks that have it; the last entry, the parameter
 * count, makes modules of different sizes disagree. With a reducer, its
 * buckets are waited for meanwhile (first the error of theirs). */
static mx_status same_gradients_everywhere(mx_process_group *g, const char *op, mx_module *m, int32_t *has,
                                           struct mx__ddp_reducer *r) {
  int n = mx_module_num_parameters(m), w = mx_dist_world_size(g);
  for (int i = 0; i < n; i++) has[i] = mx_grad_of(mx_module_parameter(m, i, NULL)) != NULL;
  has[n] = n;
  mx_scope *scope = mx_scope_begin();
  mx_tensor *counts = mx_from_data(has, MX_SHAPE(n + 1), MX_I32, MX_CPU);
  mx_status st = MX_OK;
  char why[512] = "";
  /* started before the buckets are waited for, it adds no wait of its own */
  mx_dist_work *work = counts ? mx_dist_all_reduce_async(g, counts, MX_DIST_SUM) : NULL;
  if (!work) first_error(&st, why, sizeof why, mx_last_status());
  if (r) first_error(&st, why, sizeof why, wait_buckets(r));
  if (work) first_error(&st, why, sizeof why, mx_dist_wait(work));
  if (st == MX_OK) first_error(&st, why, sizeof why, mx_to_host(counts, has, ((size_t)n + 1) * sizeof *has));
  if (st != MX_OK) mx__error(st, "%s: %s", op, why);
  mx_scope_end(scope);
  for (int i = 0; st == MX_OK && i < n; i++) {
    const char *name;
    mx_module_parameter(m, i, &name);
    if (has[i] != 0 && has[i] != w)
      st = mx__error(MX_STATE_ERROR, "%s: parameter '%s' has a gradient on %d of the %d ranks (all or none must)", op,
                     name, has[i], w);
  }
  return st;
}

/* The first call's averaging, after the backward: parameters in order,
 * one dtype at a time, in buckets of up to BUCKET_BYTES. */
static mx_status average_after_backward(mx_process_group *g, const char *op, mx_module *m) {
  int n = mx_module_num_parameters(m);
  int32_t *has = calloc((size_t)n + 1, sizeof *has);
  mx_tensor **bucket = calloc((size_t)n + 1, sizeof *bucket);
  mx_status st = has && bucket ? same_gradients_everywhere(g, op, m, has, NULL)
                               : mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  for (int d = 0; st == MX_OK && d < MX_DTYPE_COUNT; d++) {
    int k = 0;
    size_t bytes = 0;
    for (int i = 0; st == MX_OK && i <= n; i++) {
      mx_tensor *grad = i < n && has[i] ? mx_grad_of(mx_module_parameter(m, i, NULL)) : NULL;
      bool take = grad && mx_dtype_of(grad) == (mx_dtype)d;
      size_t b = take ? (size_t)mx_numel(grad) * mx_dtype_size(mx_dtype_of(grad)) : 0;
      if (k > 0 && (i == n || (take && bytes + b > BUCKET_BYTES)))
        st = average_bucket(g, op, bucket, k), k = 0, bytes = 0;
      if (take) bucket[k++] = grad, bytes += b;
    }
  }
  free(has);
  free(bucket);
  return st;
}

/* --- the reducer: all-reduces started from backward's hooks ------------------------ */

typedef struct {
  int first, count; /* its parameters: order[first .. first + count) */
  int64_t numel;
  mx_tensor *flat; /* owned: the gradients packed, on the CPU */
  int ready;       /* how many of its parameters' gradients are in */
  mx_dist_work *work;
} ddp_bucket;

typedef struct {
  struct mx__ddp_reducer *r;
  int param;
} hook_ctx;

struct mx__ddp_reducer {
  mx_process_group *g;
  const mx_module *m;
  int n;
  mx_tensor **params; /* held, so the hooks can be removed after the module is freed */
  hook_ctx *ctx;
  int *order;      /* parameter indices, the last registered first */
  int *bucket_of;  /* per parameter */
  int64_t *offset; /* per parameter, in its bucket */
  bool *ready;     /* per parameter, this iteration */
  ddp_bucket *buckets;
  int n_buckets, next_launch;
  mx_status failed; /* a hook's error (a hook returns none), reported by the next average */
  char why[512];
};

/* Packs bucket b's gradients (zeros for a parameter without one) and
 * starts their average. */
static void launch(struct mx__ddp_reducer *r, int b) {
  ddp_bucket *bk = &r->buckets[b];
  mx_status st = r->failed;
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD {
    for (int j = 0; st == MX_OK && j < bk->count; j++) {
      int i = r->order[bk->first + j];
      mx_tensor *grad = mx_grad_of(r->params[i]);
      mx_tensor *run = mx_narrow(bk->flat, 0, r->offset[i], mx_numel(r->params[i]));
      mx_tensor *part = run ? mx_view(run, mx_shape_get(r->params[i])) : NULL;
      st = !part ? mx_last_status() : grad ? mx_copy_(part, grad) : mx_fill_(part, 0.0);
    }
  }
  mx_scope_end(scope);
  if (st == MX_OK && !(bk->work = mx_dist_all_reduce_async(r->g, bk->flat, MX_DIST_AVG))) st = mx_last_status();
  if (st != MX_OK && r->failed == MX_OK) r->failed = st, snprintf(r->why, sizeof r->why, "%s", mx_last_error());
}

/* Backward stored a parameter's gradient: its bucket may be complete, and
 * the buckets before it too. */
static void gradient_ready(mx_tensor *t, void *ctx) {
  (void)t;
  const hook_ctx *hc = ctx;
  struct mx__ddp_reducer *r = hc->r;
  if (r->ready[hc->param] || r->failed != MX_OK) return; /* a second backward before the average adds nothing */
  r->ready[hc->param] = true;
  r->buckets[r->bucket_of[hc->param]].ready++;
  while (r->next_launch < r->n_buckets && r->buckets[r->next_launch].ready == r->buckets[r->next_launch].count)
    launch(r, r->next_launch++);
  /* MPI moves the buckets already started only inside MPI calls: each gradient gives them a push */
  mx__dist_progress(r->g, NULL);
}

void mx__ddp_reducer_free(struct mx__ddp_reducer *r) {
  if (!r) return;
  for (int b = 0; b < r->n_buckets; b++) {
    if (r->buckets[b].work) mx_dist_wait(r->buckets[b].work);
    if (r->buckets[b].flat) mx__decref(r->buckets[b].flat);
  }
  for (int i = 0; r->params && i < r->n; i++)
    if (r->params[i]) {
      mx_remove_post_accumulate_grad_hook(r->params[i], gradient_ready, &r->ctx[i]);
      mx__decref(r->params[i]);
    }
  free(r->params), free(r->ctx), free(r->order), free(r->bucket_of), free(r->offset), free(r->ready);
  free(r->buckets);
  free(r);
}

/* Buckets over m's parameters, last registered first, one dtype each; the
 * hooks registered. NULL with the error. */
static struct mx__ddp_reducer *reducer_new(mx_process_group *g, const char *op, mx_module *m) {
  int n = mx_module_num_parameters(m);
  struct mx__ddp_reducer *r = calloc(1, sizeof *r);
  if (r) {
    *r = (struct mx__ddp_reducer){.g = g, .m = m, .n = n};
    r->params = calloc((size_t)n + 1, sizeof *r->params), r->ctx = calloc((size_t)n + 1, sizeof *r->ctx);
    r->order = calloc((size_t)n + 1, sizeof *r->order), r->bucket_of = calloc((size_t)n + 1, sizeof *r->bucket_of);
    r->offset = calloc((size_t)n + 1, sizeof *r->offset), r->ready = calloc((size_t)n + 1, sizeof *r->ready);
    r->buckets = calloc((size_t)n + 1, sizeof *r->buckets);
  }
  if (!r || !r->params || !r->ctx || !r->order || !r->bucket_of || !r->offset || !r->ready || !r->buckets) {
    mx__ddp_reducer_free(r);
    return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op), NULL;
  }
  size_t bytes = 0;
  for (int k = 0; k < n; k++) {
    int i = n - 1 - k;
    mx_tensor *p = mx_module_parameter(m, i, NULL);
    size_t b = (size_t)mx_numel(p) * mx_dtype_size(mx_dtype_of(p));
    ddp_bucket *last = r->n_buckets ? &r->buckets[r->n_buckets - 1] : NULL;
    size_t cap = r->n_buckets == 1 ? FIRST_BUCKET_BYTES : BUCKET_BYTES;
    mx_tensor *first = last ? mx_module_parameter(m, r->order[last->first], NULL) : NULL;
    bool same_kind = first && mx_dtype_of(first) == mx_dtype_of(p) && mx_device_of(first) == mx_device_of(p);
    if (!last || !same_kind || (bytes + b > cap && last->count > 0))
      last = &r->buckets[r->n_buckets++], *last = (ddp_bucket){.first = k}, bytes = 0;
    r->order[k] = i, r->bucket_of[i] = r->n_buckets - 1, r->offset[i] = last->numel;
    last->count++, last->numel += mx_numel(p), bytes += b;
  }
  mx_status st = MX_OK;
  for (int b = 0; st == MX_OK && b < r->n_buckets; b++) {
    mx_tensor *first = mx_module_parameter(m, r->order[r->buckets[b].first], NULL);
    /* on the parameters' device: a CUDA bucket is averaged by NCCL there */
    mx_tensor *flat = mx_empty(MX_SHAPE(r->buckets[b].numel), mx_dtype_of(first), mx_device_of(first));
    st = flat ? MX_OK : mx_last_status();
    if (flat) r->buckets[b].flat = mx__retain(flat), mx_release(flat);
  }
  for (int i = 0; st == MX_OK && i < n; i++) {
    r->params[i] = mx__retain(mx_module_parameter(m, i, NULL));
    r->ctx[i] = (hook_ctx){r, i};
    st = mx_register_post_accumulate_grad_hook(r->params[i], gradient_ready, &r->ctx[i]);
  }
  if (st != MX_OK) {
    mx__error_prefix(op);
    mx__ddp_reducer_free(r);
    return NULL;
  }
  return r;
}

/* Waits for r's buckets started; the first error. */
static mx_status wait_buckets(struct mx__ddp_reducer *r) {
  mx_status st = MX_OK;
  for (int b = 0; b < r->n_buckets; b++) {
    mx_status waited = r->buckets[b].work ? mx_dist_wait(r->buckets[b].work) : MX_OK;
    r->buckets[b].work = NULL, r->buckets[b].ready = 0;
    if (st == MX_OK) st = waited;
  }
  return st;
}

/* Starts the buckets backward left, waits for all, checks that every rank
 * had the same gradients, and copies the averages into them. */
static mx_status reducer_finish(struct mx__ddp_reducer *r, const char *op, mx_module *m) {
  while (r->failed == MX_OK && r->next_launch < r->n_buckets) launch(r, r->next_launch++);
  mx_status st = r->failed;
  if (st != MX_OK) mx__error(st, "%s: starting a bucket's all-reduce during backward: %s", op, r->why);
  int32_t *has = st == MX_OK ? calloc((size_t)r->n + 1, sizeof *has) : NULL;
  if (st == MX_OK && !has) st = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  if (st == MX_OK) {
    st = same_gradients_everywhere(r->g, op, m, has, r);
  } else { /* the buckets started must still end; the error stays the first */
    char why[512];
    snprintf(why, sizeof why, "%s", mx_last_error());
    wait_buckets(r);
    mx__error(st, "%s", why);
  }
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD {
    for (int i = 0; st == MX_OK && i < r->n; i++) {
      mx_tensor *grad = mx_grad_of(r->params[i]);
      if (!grad) continue;
      mx_tensor *run = mx_narrow(r->buckets[r->bucket_of[i]].flat, 0, r->offset[i], mx_numel(grad));
      mx_tensor *part = run ? mx_view(run, mx_shape_get(grad)) : NULL;
      st = part ? mx_copy_(grad, part) : mx_last_status();
    }
  }
  mx_scope_end(scope);
  free(has);
  memset(r->ready, 0, (size_t)r->n * sizeof *r->ready);
  r->next_launch = 0, r->failed = MX_OK;
  return st;
}

/* Whether r was made for m (the same parameters: a module freed and
 * another made at its address is not). */
static bool same_module(const struct mx__ddp_reducer *r, const mx_module *m) {
  if (r->m != m || r->n != mx_module_num_parameters(m)) return false;
  for (int i = 0; i < r->n; i++)
    if (r->params[i] != mx_module_parameter(m, i, NULL)) return false;
  return true;
}

/* Whether any of m's parameters lives on CUDA. */
static bool has_cuda_parameter(const mx_module *m) {
  for (int i = 0; i < mx_module_num_parameters(m); i++)
    if (mx_device_of(mx_module_parameter(m, i, NULL)) == MX_CUDA) return true;
  return false;
}

mx_status mx_ddp_average_gradients(mx_process_group *g, mx_module *m) {
  const char *op = "mx_ddp_average_gradients";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!m) return mx__null_input(op, "m");
  /* One rank has nothing to average. On the CPU that ends it (a program run
   * without a launcher packs no buckets); CUDA parameters still go through
   * the buckets and NCCL, as PyTorch's reducer does at world size 1: one
   * GPU allows only one NCCL rank, so a world of one is where a one-GPU
   * machine tests that path. */
  if (mx_dist_world_size(g) == 1 && !has_cuda_parameter(m)) return MX_OK;
  for (int k = 0; k < g->n_reducers; k++)
    if (same_module(g->reducers[k], m)) return reducer_finish(g->reducers[k], op, m);
  if ((st = average_after_backward(g, op, m)) != MX_OK) return st;
  struct mx__ddp_reducer **grown = realloc(g->reducers, sizeof *grown * (size_t)(g->n_reducers + 1));
  if (!grown) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  g->reducers = grown;
  struct mx__ddp_reducer *r = reducer_new(g, op, m);
  if (!r) return mx_last_status();
  g->reducers[g->n_reducers++] = r;
  return MX_OK;
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
