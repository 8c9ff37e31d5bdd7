/* The collectives of a process group: all-reduce (also asynchronous),
 * all-gather, reduce-scatter, broadcast and barrier, timed by the group's
 * watchdog. A call waited for at once goes to MPI's blocking collective
 * (Open MPI's tuned algorithms, faster than its nonblocking ones for large
 * messages); an asynchronous all-reduce posts its agreement at once and
 * its data, nonblocking, once the agreement has ended (mx__dist_progress,
 * driven by the waits, the later calls and DDP's hooks), so neither the
 * caller nor backward waits for the other ranks when it starts one. An
 * all-reduce of at most MX__FOLD_BYTES (4 KiB), waited at once or not, has
 * no data phase: its data travels inside its agreement, which every rank
 * then reduces (process_group.c), saving the second round trip.
 *
 * CUDA tensors go to NCCL instead (dist/nccl.c), in their own dtype (f16
 * and bf16 included, average as ncclAvg), on the device: nothing here
 * waits for it, the compute stream does (fenced by events).
 *
 * MPI reduces a dense CPU buffer: a tensor that is one (float32, float64 or
 * an integer, contiguous, on the CPU) is reduced in place; others through a
 * copy. float16 and bfloat16 go through float32 copies: MPI has no types
 * for them, and a user-defined op on 16-bit words measured 7x slower than
 * MPI_SUM on float32 (issue #35). A world of one moves nothing.
 */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "autograd/autograd.h"
#include "dist/dist_internal.h"
#include "kernels/base_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"
#include "tensor/tensor_impl.h" /* mx__bump_version, mx__retain */

struct mx_dist_work {
  mx_process_group *g;
  const char *op;
  mx__call call;
  mx_dist_reduce_op how;
  mx_tensor *t;   /* the caller's tensor, held until the wait */
  mx_tensor *buf; /* the dense buffer MPI (on the CPU) or NCCL (on CUDA) works on: t's own storage, or a copy */
  mx__nccl_done *nccl; /* NCCL's collective, for a CUDA tensor */
  bool on_cuda;
#if MX_HAVE_MPI
  MPI_Request req;
  /* an asynchronous one on MPI, until its wait: one of g->flights */
  bool in_flight;
  enum { AGREEING, RUNNING, ENDED } phase;
  MPI_Request agree_req;
  mx__ballot *ballots; /* the agreement's, until it ends */
  mx_status failed; /* what ended it in flight, reported by its wait with why */
  char why[512];
#endif
};

/* The dtype a reduction runs in: float32 for the 16-bit floats. */
static mx_dtype wire_dtype(mx_dtype dt) { return dt == MX_F16 || dt == MX_BF16 ? MX_F32 : dt; }

/* An owned handle (no scope releases it); mx__decref drops it. */
static mx_tensor *owned(mx_tensor *t) {
  if (!t) return NULL;
  mx__retain(t);
  mx_release(t);
  return t;
}

/* The dense 1-d tensor on dev of dtype `wire` a collective works on: t itself,
 * flattened, when it already is one (the result lands in place); otherwise
 * a copy, filled from t when copy_in, that finish() copies back. Owned;
 * NULL with the error named after op. */
static mx_tensor *work_buffer(const char *op, const mx_tensor *t, mx_dtype wire, mx_device dev, bool copy_in) {
  mx_tensor *buf = NULL;
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD { /* a view of a parameter must not join its graph */
    if (mx_device_of(t) == dev && mx_is_contiguous(t) && mx_dtype_of(t) == wire) {
      buf = mx_view(t, MX_SHAPE(mx_numel(t)));
    } else {
      buf = mx_empty(MX_SHAPE(mx_numel(t)), wire, dev);
      mx_tensor *shaped = buf ? mx_view(buf, mx_shape_get(t)) : NULL;
      if (!shaped || (copy_in && mx_copy_(shaped, t) != MX_OK)) buf = NULL;
    }
  }
  buf = owned(buf);
  mx_scope_end(scope);
  if (!buf) mx__error_prefix(op);
  return buf;
}

/* Leaves the result in t: written in place, t's version moves on, as after
 * any in-place write; a copy is copied back (and rounded to t's dtype). */
static mx_status finish(const char *op, mx_tensor *t, mx_tensor *buf) {
  if (mx_shares_storage(t, buf)) {
    mx__bump_version(t);
    return MX_OK;
  }
  mx_scope *scope = mx_scope_begin();
  mx_tensor *shaped = mx_view(buf, mx_shape_get(t));
  mx_status st = shaped && mx_copy_(t, shaped) == MX_OK ? MX_OK : mx__error_prefix(op);
  mx_scope_end(scope);
  return st;
}

/* buf /= world, as a division (bits as the old ring's and PyTorch's). */
static mx_status divide_in_place(mx_tensor *buf, int world) {
  mx_status st = MX_OK;
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD {
    mx_tensor *mean = mx_div_scalar(buf, world);
    st = mean ? mx_copy_(buf, mean) : mx_last_status();
  }
  mx_scope_end(scope);
  return st;
}

static mx_status check_count(const char *op, int64_t n) {
  if (n > INT_MAX) return mx__error(MX_INVALID_ARGUMENT, "%s: %lld elements are more than MPI's count takes (%d)", op,
                                    (long long)n, INT_MAX);
  return MX_OK;
}

#if MX_HAVE_MPI
static MPI_Datatype mpi_type(mx_dtype dt) {
  switch (dt) {
    case MX_F32: return MPI_FLOAT;
    case MX_F64: return MPI_DOUBLE;
    case MX_I64: return MPI_INT64_T;
    case MX_I32: return MPI_INT32_T;
    default: return MPI_UINT8_T; /* uint8, and the bytes of what only moves */
  }
}

static MPI_Op mpi_op(mx_dist_reduce_op how, mx_dtype wire) {
  if (how == MX_DIST_SUM || how == MX_DIST_AVG) return MPI_SUM;
  if (mx_dtype_is_floating(wire)) return mx__dist_float_op(how);
  return how == MX_DIST_MAX ? MPI_MAX : MPI_MIN;
}

/* Waits for req (MPI_REQUEST_NULL after a blocking call that returned
 * code), timed by the watchdog as call. */
static mx_status wait_for(mx_process_group *g, const char *op, const mx__call *call, MPI_Request *req, int code) {
  if (code == MPI_SUCCESS) code = MPI_Wait(req, MPI_STATUS_IGNORE);
  mx__dist_pending_remove(g, call->seq);
  g->mpi_failed |= code != MPI_SUCCESS;
  return mx__dist_broke(g, mx__dist_mpi_status(code, op));
}
#endif

/* --- CUDA tensors: NCCL ------------------------------------------------------------ */

/* Starts call on NCCL: send and recv are dense CUDA tensors (the same one
 * in place); count as mx__nccl_op says. */
static mx_status nccl_start(mx_process_group *g, const char *op, const mx__call *call, mx__nccl_kind kind,
                            const mx_tensor *send, mx_tensor *recv, size_t count, mx__nccl_done **done) {
  int how = kind == MX__NCCL_ALL_REDUCE ? (int)call->kind : kind == MX__NCCL_REDUCE_SCATTER ? (int)call->root : 0;
  mx__nccl_op nop = {.kind = kind, .how = how, .root = kind == MX__NCCL_BROADCAST ? (int)call->root : 0,
                     .dtype = mx_dtype_of(send), .send = mx_data_ptr(send), .recv = mx_data_ptr(recv), .count = count};
  return mx__dist_nccl_start(g, op, call, &nop, done);
}

/* A whole collective on NCCL: started, then the compute stream waits for it. */
static mx_status nccl_run(mx_process_group *g, const char *op, const mx__call *call, mx__nccl_kind kind,
                          const mx_tensor *send, mx_tensor *recv, size_t count) {
  mx__nccl_done *done;
  mx_status st = nccl_start(g, op, call, kind, send, recv, count, &done);
  return st == MX_OK ? mx__dist_nccl_finish(g, op, done) : st;
}

/* --- all-reduce ---------------------------------------------------------------------- */

static void work_free(mx_dist_work *w) {
  if (!w) return;
  if (w->buf) mx__decref(w->buf);
  if (w->t) mx__decref(w->t);
  free(w);
}

#if MX_HAVE_MPI
/* An asynchronous all-reduce failed in flight with the error just set: it
 * ends, keeping the error for its wait, and g breaks. */
static void flight_failed(mx_dist_work *w, mx_status st) {
  w->phase = ENDED, w->failed = st;
  snprintf(w->why, sizeof w->why, "%s", mx_last_error());
  mx__dist_pending_remove(w->g, w->call.seq);
  mx__dist_broke(w->g, st);
}

/* w's agreement ended with code: its data starts, unless the ranks' calls
 * differ (the error names both) or an earlier call broke g. */
static void agreed(mx_dist_work *w, int code) {
  mx_process_group *g = w->g;
  if (g->broken) { /* the agreement ended, but no data moves on a broken group */
    free(w->ballots), w->ballots = NULL;
    flight_failed(w, mx__dist_usable(g, "mx_dist_wait"));
    return;
  }
  mx_status st = mx__dist_agree_check(g, "mx_dist_wait", &w->call, w->ballots, code, mx_data_ptr(w->buf));
  w->ballots = NULL;
  if (st == MX_OK && mx__dist_folds(g, &w->call)) { /* its data came with the agreement */
    w->phase = ENDED;
    mx__dist_pending_remove(g, w->call.seq);
    return;
  }
  if (st == MX_OK) {
    mx_dtype wire = mx_dtype_of(w->buf);
    code = MPI_Iallreduce(MPI_IN_PLACE, mx_data_ptr(w->buf), (int)mx_numel(w->buf), mpi_type(wire),
                          mpi_op(w->how, wire), g->comm, &w->req);
    g->mpi_failed |= code != MPI_SUCCESS;
    st = mx__dist_mpi_status(code, "mx_dist_wait");
  }
  if (st == MX_OK) w->phase = RUNNING;
  else flight_failed(w, st);
}
#endif

void mx__dist_progress(mx_process_group *g, const mx_dist_work *settle) {
#if MX_HAVE_MPI
  bool settling = settle != NULL, in_order = true;
  for (int i = 0; i < g->n_flights; i++) {
    mx_dist_work *w = g->flights[i];
    int done = 0, code;
    if (w->phase == AGREEING && in_order) {
      code = settling ? MPI_Wait(&w->agree_req, MPI_STATUS_IGNORE) : MPI_Test(&w->agree_req, &done, MPI_STATUS_IGNORE);
      if (settling || done || code != MPI_SUCCESS) agreed(w, code);
      else in_order = false; /* the later ones' data starts after this one's */
    } else if (w->phase == RUNNING) {
      code = MPI_Test(&w->req, &done, MPI_STATUS_IGNORE);
      g->mpi_failed |= code != MPI_SUCCESS;
      if (code != MPI_SUCCESS) flight_failed(w, mx__dist_mpi_status(code, "mx_dist_wait"));
      else if (done) w->phase = ENDED, mx__dist_pending_remove(g, w->call.seq);
    }
    if (w == settle) settling = false;
  }
#else
  (void)g, (void)settle;
#endif
}

#if MX_HAVE_MPI
/* Waits for the asynchronous w and takes it out of g's flights. */
static mx_status land(mx_dist_work *w) {
  mx_process_group *g = w->g;
  mx__dist_progress(g, w);
  mx_status st = w->failed;
  if (w->phase == RUNNING) st = wait_for(g, "mx_dist_wait", &w->call, &w->req, MPI_SUCCESS);
  else if (st != MX_OK) mx__error(st, "%s", w->why);
  int i = 0;
  while (g->flights[i] != w) i++;
  memmove(&g->flights[i], &g->flights[i + 1], (size_t)(g->n_flights - i - 1) * sizeof *g->flights);
  g->n_flights--, w->in_flight = false;
  return st;
}

/* Starts w's agreement; its data starts once every rank has agreed. */
static mx_status take_off(mx_dist_work *w) {
  mx_process_group *g = w->g;
  mx_status st = mx__dist_agree_start(g, w->op, &w->call, mx_data_ptr(w->buf), &w->ballots, &w->agree_req);
  if (st != MX_OK) return st;
  w->in_flight = true, w->phase = AGREEING;
  g->flights[g->n_flights++] = w;
  mx__dist_progress(g, NULL); /* the others' agreements may be in already */
  return MX_OK;
}

/* The whole all-reduce of w, waited for at once. */
static mx_status all_reduce_now(mx_dist_work *w) {
  mx_process_group *g = w->g;
  void *data = mx_data_ptr(w->buf);
  mx_status st = mx__dist_agree(g, w->op, &w->call, data);
  if (st != MX_OK || mx__dist_folds(g, &w->call)) return st; /* a folded call's data came with the agreement */
  mx_dtype wire = mx_dtype_of(w->buf);
  int n = (int)mx_numel(w->buf);
  MPI_Request req = MPI_REQUEST_NULL;
  mx__dist_pending_add(g, &w->call);
  int code = w->call.blocking ? MPI_Allreduce(MPI_IN_PLACE, data, n, mpi_type(wire), mpi_op(w->how, wire), g->comm)
                              : MPI_Iallreduce(MPI_IN_PLACE, data, n, mpi_type(wire), mpi_op(w->how, wire), g->comm,
                                               &req); /* another rank's is asynchronous */
  return wait_for(g, w->op, &w->call, &req, code);
}
#endif

static mx_dist_work *start_all_reduce(const char *op, mx_process_group *g, mx_tensor *t, mx_dist_reduce_op how,
                                      bool async) {
  if (mx__dist_usable(g, op) != MX_OK) return NULL;
  if (!t) return mx__null_input(op, "t"), NULL;
  if (how < MX_DIST_SUM || how > MX_DIST_MIN)
    return mx__error(MX_INVALID_ARGUMENT, "%s: unknown reduce op %d", op, (int)how), NULL;
  mx_dtype dt = mx_dtype_of(t);
  static const char *const verbs[] = {"sum", "average", "take the maximum of", "take the minimum of"};
  if (dt == MX_BOOL || (how == MX_DIST_AVG && !mx_dtype_is_floating(dt)))
    return mx__error(MX_DTYPE_ERROR, "%s: cannot %s %s tensors", op, verbs[how], mx_dtype_name(dt)), NULL;
  if (check_count(op, mx_numel(t)) != MX_OK) return NULL;
#if MX_HAVE_MPI
  if (g->world > 1 && g->n_pending >= MX__MAX_PENDING)
    return mx__error(MX_STATE_ERROR, "%s: %d collectives are already pending (wait for some first)", op,
                     MX__MAX_PENDING), NULL;
#endif
  mx_dist_work *w = calloc(1, sizeof *w);
  if (!w) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op), NULL;
  *w = (mx_dist_work){.g = g, .op = op, .how = how, .call = {.kind = (int64_t)how, .dtype = dt, .numel = mx_numel(t),
                                                             .root = -1, .device = mx_device_of(t)}};
  if (mx_device_of(t) == MX_CUDA) { /* NCCL, even for a world of one: its path is the one tested there */
    if (mx__dist_agree(g, op, &w->call, NULL) != MX_OK) return work_free(w), NULL;
    w->t = mx__retain(t);
    w->on_cuda = true;
    w->buf = mx__dist_nccl_get(g, op) ? work_buffer(op, t, dt, MX_CUDA, true) : NULL;
    mx_status st = w->buf ? MX_OK : mx__dist_broke(g, mx_last_status());
    if (st == MX_OK && mx_numel(t) > 0)
      st = nccl_start(g, op, &w->call, MX__NCCL_ALL_REDUCE, w->buf, w->buf, (size_t)mx_numel(t), &w->nccl);
    return st == MX_OK ? w : (work_free(w), NULL);
  }
  w->t = mx__retain(t);
  if (g->world == 1) { /* nothing to move: every op of one rank is the identity */
    mx__dist_agree(g, op, &w->call, NULL);
    return w;
  }
  w->buf = work_buffer(op, t, wire_dtype(dt), MX_CPU, true);
  if (!w->buf) return mx__dist_broke(g, mx_last_status()), work_free(w), NULL;
#if MX_HAVE_MPI
  if ((async ? take_off(w) : all_reduce_now(w)) != MX_OK) return work_free(w), NULL;
#endif
  return w;
}

static mx_status finish_all_reduce(mx_dist_work *w) {
  mx_process_group *g = w->g;
  mx_status st = MX_OK;
  if (w->on_cuda) { /* ncclAvg has averaged */
    if (w->nccl) st = mx__dist_nccl_finish(g, w->op, w->nccl);
    if (st == MX_OK) st = finish(w->op, w->t, w->buf);
    if (st != MX_OK) mx__error_prefix(w->op), mx__dist_broke(g, st);
  } else if (g->world > 1) {
#if MX_HAVE_MPI
    if (w->in_flight) st = land(w); /* its error names the wait and the calls */
#endif
    /* every rank holds the same sum, so the same quotient */
    if (st == MX_OK && w->how == MX_DIST_AVG && mx_numel(w->buf) > 0 && divide_in_place(w->buf, g->world) != MX_OK)
      st = mx__error_prefix(w->op);
    if (st == MX_OK) st = finish(w->op, w->t, w->buf);
    mx__dist_broke(g, st);
  }
  work_free(w);
  return st;
}

mx_status mx_dist_all_reduce(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op how) {
  mx_dist_work *w = start_all_reduce("mx_dist_all_reduce", g, t, how, false);
  return w ? finish_all_reduce(w) : mx_last_status();
}

mx_dist_work *mx_dist_all_reduce_async(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op how) {
  return start_all_reduce("mx_dist_all_reduce_async", g, t, how, true);
}

mx_status mx_dist_wait(mx_dist_work *w) {
  if (!w) return mx__null_input("mx_dist_wait", "w");
  w->op = "mx_dist_wait";
  return finish_all_reduce(w);
}

/* --- the others -------------------------------------------------------------------- */

static mx_status usable_tensor(mx_process_group *g, const char *op, const mx_tensor *t) {
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!t) return mx__null_input(op, "t");
  return check_count(op, mx_numel(t) * (int64_t)mx_dtype_size(mx_dtype_of(t)) * (g->world > 1 ? g->world : 1));
}

mx_tensor *mx_dist_all_gather(mx_process_group *g, const mx_tensor *t) {
  const char *op = "mx_dist_all_gather";
  if (usable_tensor(g, op, t) != MX_OK) return NULL;
  mx_shape shape = mx_shape_get(t);
  if (shape.ndim == MX_MAX_DIMS)
    return mx__error(MX_SHAPE_ERROR, "%s: t has %d dims, and the result would need one more (at most %d)", op,
                     shape.ndim, MX_MAX_DIMS),
           NULL;
  int w = g->world;
  int64_t n = mx_numel(t);
  mx__call call = {.kind = CALL_ALL_GATHER, .dtype = mx_dtype_of(t), .numel = n, .root = -1,
                   .device = mx_device_of(t)};
  mx_status st = mx__dist_agree(g, op, &call, NULL);
  mx_tensor *out = NULL;
  mx_scope *scope = mx_scope_begin();
  if (mx_device_of(t) == MX_CUDA) MX_NO_GRAD {
    mx_tensor *own = st == MX_OK && mx__dist_nccl_get(g, op) ? work_buffer(op, t, mx_dtype_of(t), MX_CUDA, true) : NULL;
    mx_tensor *buf = own ? mx_empty(MX_SHAPE((int64_t)w * n), mx_dtype_of(t), MX_CUDA) : NULL;
    if (st == MX_OK && !buf) st = own ? mx__error_prefix(op) : mx_last_status(); /* NCCL's error names op */
    if (st == MX_OK && n > 0) st = nccl_run(g, op, &call, MX__NCCL_ALL_GATHER, own, buf, (size_t)n);
    if (own) mx__decref(own); /* freed on the compute stream, after the collective */
    mx_shape stacked = {shape.ndim + 1, {w}};
    for (int d = 0; d < shape.ndim; d++) stacked.d[d + 1] = shape.d[d];
    if (st == MX_OK && !(out = mx_view(buf, stacked))) st = mx__error_prefix(op);
  }
  else MX_NO_GRAD {
    mx_tensor *own = st == MX_OK ? work_buffer(op, t, mx_dtype_of(t), MX_CPU, true) : NULL;
    mx_tensor *buf = own ? mx_empty(MX_SHAPE((int64_t)w * n), mx_dtype_of(t), MX_CPU) : NULL;
    if (st == MX_OK && !buf) st = mx__error_prefix(op);
    size_t bytes = (size_t)n * mx_dtype_size(mx_dtype_of(t));
    if (st == MX_OK && w == 1) memcpy(mx_data_ptr(buf), mx_data_ptr(own), bytes);
#if MX_HAVE_MPI
    if (st == MX_OK && w > 1) {
      MPI_Request req = MPI_REQUEST_NULL;
      mx__dist_pending_add(g, &call);
      int code = MPI_Allgather(mx_data_ptr(own), (int)bytes, MPI_BYTE, mx_data_ptr(buf), (int)bytes, MPI_BYTE,
                               g->comm);
      st = wait_for(g, op, &call, &req, code);
    }
#endif
    if (own) mx__decref(own);
    mx_shape stacked = {shape.ndim + 1, {w}};
    for (int d = 0; d < shape.ndim; d++) stacked.d[d + 1] = shape.d[d];
    if (st == MX_OK) out = mx_view(buf, stacked);
    if (out && mx_device_of(t) != MX_CPU) out = mx_to_device(out, mx_device_of(t));
    if (st == MX_OK && !out) st = mx__error_prefix(op);
  }
  if (out) mx_keep(out);
  mx_scope_end(scope);
  return mx__dist_broke(g, st) == MX_OK ? out : NULL;
}

mx_tensor *mx_dist_reduce_scatter(mx_process_group *g, const mx_tensor *t, mx_dist_reduce_op how) {
  const char *op = "mx_dist_reduce_scatter";
  if (usable_tensor(g, op, t) != MX_OK) return NULL;
  if (how < MX_DIST_SUM || how > MX_DIST_MIN)
    return mx__error(MX_INVALID_ARGUMENT, "%s: unknown reduce op %d", op, (int)how), NULL;
  mx_dtype dt = mx_dtype_of(t);
  if (dt == MX_BOOL || (how == MX_DIST_AVG && !mx_dtype_is_floating(dt)))
    return mx__error(MX_DTYPE_ERROR, "%s: cannot reduce %s tensors with this op", op, mx_dtype_name(dt)), NULL;
  mx_shape shape = mx_shape_get(t);
  if (shape.ndim == 0 || shape.d[0] != g->world)
    return mx__error(MX_SHAPE_ERROR, "%s: t's first dim must be the world size %d, but t has %d dims%s", op, g->world,
                     shape.ndim, shape.ndim ? " and that dim is another size" : ""),
           NULL;
  int64_t n = mx_numel(t) / g->world;
  mx__call call = {.kind = CALL_REDUCE_SCATTER, .dtype = dt, .numel = mx_numel(t), .root = (int64_t)how,
                   .device = mx_device_of(t)};
  mx_status st = mx__dist_agree(g, op, &call, NULL);
  mx_shape part = {shape.ndim - 1, {0}};
  for (int d = 1; d < shape.ndim; d++) part.d[d - 1] = shape.d[d];
  mx_tensor *out = NULL;
  mx_scope *scope = mx_scope_begin();
  if (mx_device_of(t) == MX_CUDA) MX_NO_GRAD { /* ncclAvg averages */
    mx_tensor *buf = st == MX_OK && mx__dist_nccl_get(g, op) ? work_buffer(op, t, dt, MX_CUDA, true) : NULL;
    out = buf ? mx_empty(part, dt, MX_CUDA) : NULL;
    if (st == MX_OK && !out) st = buf ? mx__error_prefix(op) : mx_last_status(); /* NCCL's error names op */
    if (st == MX_OK && n > 0) st = nccl_run(g, op, &call, MX__NCCL_REDUCE_SCATTER, buf, out, (size_t)n);
    if (buf) mx__decref(buf);
    if (st != MX_OK) out = NULL;
  }
  else MX_NO_GRAD {
    mx_tensor *buf = st == MX_OK ? work_buffer(op, t, wire_dtype(dt), MX_CPU, true) : NULL;
    if (st == MX_OK && !buf) st = mx_last_status();
    mx_tensor *mine = buf ? mx_narrow(buf, 0, (int64_t)g->rank * n, n) : NULL;
#if MX_HAVE_MPI
    if (st == MX_OK && g->world > 1) {
      MPI_Request req = MPI_REQUEST_NULL;
      mx_dtype wire = mx_dtype_of(buf);
      mx__dist_pending_add(g, &call);
      /* in place: rank r's block lands at r's own offset */
      int code = MPI_Reduce_scatter_block(MPI_IN_PLACE, mx_data_ptr(buf), (int)n, mpi_type(wire), mpi_op(how, wire),
                                          g->comm);
      st = wait_for(g, op, &call, &req, code);
      if (st == MX_OK) mine = mx_narrow(buf, 0, 0, n);
    }
#endif
    if (st == MX_OK && how == MX_DIST_AVG && g->world > 1)
      st = mine ? divide_in_place(mine, g->world) : mx_last_status();
    mx_tensor *shaped = st == MX_OK && mine ? mx_view(mine, part) : NULL;
    out = shaped ? mx_empty(part, dt, mx_device_of(t)) : NULL;
    if (st == MX_OK && (!out || mx_copy_(out, shaped) != MX_OK)) st = mx__error_prefix(op), out = NULL;
    if (buf) mx__decref(buf);
  }
  if (out) mx_keep(out);
  mx_scope_end(scope);
  return mx__dist_broke(g, st) == MX_OK ? out : NULL;
}

mx_status mx_dist_broadcast(mx_process_group *g, mx_tensor *t, int root) {
  const char *op = "mx_dist_broadcast";
  mx_status st = usable_tensor(g, op, t);
  if (st != MX_OK) return st;
  if (root < 0 || root >= g->world)
    return mx__error(MX_INVALID_ARGUMENT, "%s: root %d is not in [0, %d)", op, root, g->world);
  mx__call call = {.kind = CALL_BROADCAST, .dtype = mx_dtype_of(t), .numel = mx_numel(t), .root = root,
                   .device = mx_device_of(t)};
  st = mx__dist_agree(g, op, &call, NULL);
  if (st == MX_OK && mx_device_of(t) == MX_CUDA) {
    mx_tensor *buf = mx__dist_nccl_get(g, op) ? work_buffer(op, t, mx_dtype_of(t), MX_CUDA, g->rank == root) : NULL;
    st = buf ? MX_OK : mx_last_status();
    if (st == MX_OK && mx_numel(t) > 0)
      st = nccl_run(g, op, &call, MX__NCCL_BROADCAST, buf, buf, (size_t)mx_numel(t));
    if (st == MX_OK && g->rank != root) st = finish(op, t, buf);
    if (buf) mx__decref(buf);
    return mx__dist_broke(g, st);
  }
  if (st != MX_OK || g->world == 1) return st;
#if MX_HAVE_MPI
  mx_tensor *buf = work_buffer(op, t, mx_dtype_of(t), MX_CPU, g->rank == root);
  st = buf ? MX_OK : mx_last_status();
  if (st == MX_OK) {
    MPI_Request req = MPI_REQUEST_NULL;
    mx__dist_pending_add(g, &call);
    int code = MPI_Bcast(mx_data_ptr(buf), (int)((size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t))), MPI_BYTE,
                         root, g->comm);
    st = wait_for(g, op, &call, &req, code);
  }
  if (st == MX_OK && g->rank != root) st = finish(op, t, buf);
  if (buf) mx__decref(buf);
#endif
  return mx__dist_broke(g, st);
}

mx_status mx_dist_barrier(mx_process_group *g) {
  const char *op = "mx_dist_barrier";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  mx__call call = {.kind = CALL_BARRIER, .dtype = MX_U8, .numel = 0, .root = -1};
  st = mx__dist_agree(g, op, &call, NULL); /* the agreement is itself a barrier */
  return st;
}
