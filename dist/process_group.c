/* The process group and its collectives: all-reduce, all-gather, broadcast
 * and barrier over the TCP ring of dist/transport.c.
 *
 * Every collective opens with a header that each rank sends to the next:
 * what it calls, on how many elements of which dtype. A rank whose left
 * neighbour calls something else stops with an error naming both calls and
 * closes its connections, so the mistake surfaces on every rank instead of
 * as a hang or as bytes read as the wrong tensor.
 */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"
#include "dist/transport.h"
#include "kernels/base_internal.h"
#include "autograd/autograd.h"
#include "ops/ops.h"
#include "tensor/scope.h"
#include "tensor/tensor_impl.h" /* mx__bump_version */

#define DEFAULT_TIMEOUT 1800.0 /* seconds, as torch.distributed's */
#define HEADER_MAGIC 0x6d78636f6c6cLL /* "mxcoll" */

struct mx_process_group {
  mx__ring ring;
  bool broken;
  char why[512]; /* the error that broke it */
};

/* The first four are the reduce ops, in mx_dist_reduce_op's order. */
typedef enum { CALL_SUM, CALL_AVG, CALL_MAX, CALL_MIN, CALL_BROADCAST, CALL_ALL_GATHER } call_kind;
static const char *const call_names[] = {"all_reduce(sum)", "all_reduce(avg)", "all_reduce(max)",
                                         "all_reduce(min)", "broadcast",       "all_gather"};

/* What a rank is about to do, as its right neighbour checks it. */
typedef struct {
  int64_t magic, kind, dtype, numel, root;
} call_header;

/* --- the group -------------------------------------------------------------------- */

static mx_status broke(mx_process_group *g, mx_status st) {
  if (st != MX_OK && !g->broken) {
    g->broken = true;
    snprintf(g->why, sizeof g->why, "%s", mx_last_error());
    mx__ring_close(&g->ring);
  }
  return st;
}

mx_status mx__dist_usable(const mx_process_group *g, const char *op) {
  if (!g) return mx__null_input(op, "group");
  if (g->broken) return mx__error(MX_STATE_ERROR, "%s: the process group failed earlier (%s)", op, g->why);
  return MX_OK;
}

mx_process_group *mx_dist_init(int rank, int world_size, const char *master_addr, int master_port,
                               double timeout_seconds) {
  const char *op = "mx_dist_init";
  if (world_size < 1 || world_size > 65535)
    return mx__error(MX_INVALID_ARGUMENT, "%s: world_size %d is not in [1, 65535]", op, world_size), NULL;
  if (rank < 0 || rank >= world_size)
    return mx__error(MX_INVALID_ARGUMENT, "%s: rank %d is not in [0, %d)", op, rank, world_size), NULL;
  if (!(timeout_seconds >= 0) || timeout_seconds > 1e6)
    return mx__error(MX_INVALID_ARGUMENT, "%s: timeout %g s is not in [0, 1e6]", op, timeout_seconds), NULL;
  if (world_size > 1 && !master_addr) return mx__null_input(op, "master_addr"), NULL;
  if (world_size > 1 && (master_port < 1 || master_port > 65535))
    return mx__error(MX_INVALID_ARGUMENT, "%s: master port %d is not in [1, 65535]", op, master_port), NULL;
  mx_process_group *g = calloc(1, sizeof *g);
  if (!g) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op), NULL;
  double timeout = timeout_seconds > 0 ? timeout_seconds : DEFAULT_TIMEOUT;
  if (mx__ring_connect(&g->ring, op, rank, world_size, master_addr, master_port, timeout) != MX_OK) {
    free(g);
    return NULL;
  }
  return g;
}

/* The integer in the environment variable name, or false with the error. */
static bool env_int(const char *name, long lo, long hi, int *out) {
  const char *s = getenv(name);
  if (!s) return mx__error(MX_INVALID_ARGUMENT, "mx_dist_init_from_env: WORLD_SIZE is set but %s is not", name), false;
  char *end;
  errno = 0;
  long v = strtol(s, &end, 10);
  if (end == s || *end || errno || v < lo || v > hi)
    return mx__error(MX_INVALID_ARGUMENT, "mx_dist_init_from_env: %s='%s' is not an integer in [%ld, %ld]", name, s,
                     lo, hi),
           false;
  *out = (int)v;
  return true;
}

mx_process_group *mx_dist_init_from_env(double timeout_seconds) {
  int rank = 0, world = 1, port = 0;
  const char *addr = getenv("MASTER_ADDR");
  if (getenv("WORLD_SIZE")) {
    if (!env_int("WORLD_SIZE", 1, 65535, &world) || !env_int("RANK", 0, world - 1, &rank)) return NULL;
    if (world > 1 && !addr)
      return mx__error(MX_INVALID_ARGUMENT, "mx_dist_init_from_env: WORLD_SIZE is set but MASTER_ADDR is not"), NULL;
    if (world > 1 && !env_int("MASTER_PORT", 1, 65535, &port)) return NULL;
  }
  return mx_dist_init(rank, world, addr, port, timeout_seconds);
}

void mx_dist_free(mx_process_group *g) {
  if (!g) return;
  mx__ring_close(&g->ring);
  free(g);
}

int mx_dist_rank(const mx_process_group *g) { return g ? g->ring.rank : 0; }
int mx_dist_world_size(const mx_process_group *g) { return g ? g->ring.world_size : 1; }

/* --- the collectives ------------------------------------------------------------- */

/* Sends this rank's header right and checks the left neighbour's. */
static mx_status agree(mx_process_group *g, const char *op, call_header mine) {
  if (g->ring.world_size == 1) return MX_OK;
  mine.magic = HEADER_MAGIC;
  call_header left;
  mx_status st = mx__ring_exchange(&g->ring, op, &mine, sizeof mine, &left, sizeof left);
  if (st != MX_OK) return st;
  if (!memcmp(&mine, &left, sizeof mine)) return MX_OK;
  int prev = (g->ring.rank + g->ring.world_size - 1) % g->ring.world_size;
  if (left.magic != HEADER_MAGIC || left.kind < 0 || left.kind > CALL_ALL_GATHER || !mx_dtype_valid((mx_dtype)left.dtype))
    return mx__error(MX_CORRUPT_DATA, "%s: rank %d: rank %d sent something that is not a collective's header", op,
                     g->ring.rank, prev);
  char root_mine[32] = "", root_left[32] = "";
  if (mine.kind == CALL_BROADCAST) snprintf(root_mine, sizeof root_mine, " from root %lld", (long long)mine.root);
  if (left.kind == CALL_BROADCAST) snprintf(root_left, sizeof root_left, " from root %lld", (long long)left.root);
  return mx__error(MX_INVALID_ARGUMENT, "%s: rank %d calls %s on %lld %s elements%s, but rank %d calls %s on %lld %s elements%s",
                   op, g->ring.rank, call_names[mine.kind], (long long)mine.numel, mx_dtype_name((mx_dtype)mine.dtype),
                   root_mine, prev, call_names[left.kind], (long long)left.numel,
                   mx_dtype_name((mx_dtype)left.dtype), root_left);
}

/* Chunk i of n elements cut into world pieces whose sizes differ by at most 1. */
static int64_t chunk_start(int64_t n, int world, int i) { return n / world * i + (i < n % world ? i : n % world); }

static char *element(mx_tensor *buf, int64_t i) { return (char *)mx_data_ptr(buf) + i * (int64_t)mx_dtype_size(mx_dtype_of(buf)); }

/* The ring all-gather: buf is cut into world chunks, and rank r starts
 * with chunk (r + first) complete. In step t each rank passes on the chunk
 * it completed last, (r + first - t), and receives (r + first - t - 1)
 * from the left, so after world - 1 steps every rank holds every chunk. */
static mx_status ring_gather(mx_process_group *g, const char *op, mx_tensor *buf, int first) {
  int w = g->ring.world_size, r = g->ring.rank;
  int64_t n = mx_numel(buf);
  size_t es = mx_dtype_size(mx_dtype_of(buf));
  mx_status st = MX_OK;
  for (int t = 0; st == MX_OK && t < w - 1; t++) {
    int send = ((r + first - t) % w + w) % w, recv = (send - 1 + w) % w;
    int64_t s0 = chunk_start(n, w, send), s1 = chunk_start(n, w, send + 1);
    int64_t r0 = chunk_start(n, w, recv), r1 = chunk_start(n, w, recv + 1);
    st = mx__ring_exchange(&g->ring, op, element(buf, s0), (size_t)(s1 - s0) * es, element(buf, r0),
                           (size_t)(r1 - r0) * es);
  }
  return st;
}

/* Folds theirs into mine as `how` reduces (an average sums; the division
 * comes at the end). */
static mx_status combine(mx_tensor *mine, const mx_tensor *theirs, mx_dist_reduce_op how) {
  if (how == MX_DIST_SUM || how == MX_DIST_AVG) return mx_add_(mine, theirs);
  mx_tensor *folded = how == MX_DIST_MAX ? mx_maximum(mine, theirs) : mx_minimum(mine, theirs);
  return folded ? mx_copy_(mine, folded) : mx_last_status();
}

/* The ring all-reduce. Reduce-scatter: in step s each rank sends chunk
 * (rank - s) to the right and folds the left's chunk (rank - s - 1) into
 * its own, so after world - 1 steps rank r holds the full result of chunk
 * r + 1. Then the all-gather passes the finished chunks around. */
static mx_status ring_reduce(mx_process_group *g, const char *op, mx_tensor *buf, mx_dist_reduce_op how) {
  int w = g->ring.world_size, r = g->ring.rank;
  int64_t n = mx_numel(buf);
  size_t es = mx_dtype_size(mx_dtype_of(buf));
  mx_tensor *incoming = mx_empty(MX_SHAPE(n / w + 1), mx_dtype_of(buf), MX_CPU);
  if (!incoming) return mx__error_prefix(op);
  mx_status st = MX_OK;
  for (int s = 0; st == MX_OK && s < w - 1; s++) {
    int send = ((r - s) % w + w) % w, recv = (send - 1 + w) % w;
    int64_t s0 = chunk_start(n, w, send), s1 = chunk_start(n, w, send + 1);
    int64_t r0 = chunk_start(n, w, recv), r1 = chunk_start(n, w, recv + 1);
    st = mx__ring_exchange(&g->ring, op, element(buf, s0), (size_t)(s1 - s0) * es, mx_data_ptr(incoming),
                           (size_t)(r1 - r0) * es);
    if (st == MX_OK && r1 > r0) {
      mx_scope *scope = mx_scope_begin();
      mx_tensor *mine = mx_narrow(buf, 0, r0, r1 - r0), *theirs = mx_narrow(incoming, 0, 0, r1 - r0);
      st = mine && theirs ? combine(mine, theirs, how) : mx_last_status();
      if (st != MX_OK) mx__error_prefix(op);
      mx_scope_end(scope);
    }
  }
  mx_release(incoming);
  return st == MX_OK ? ring_gather(g, op, buf, 1) : st;
}

mx_status mx__dist_reduce(mx_process_group *g, const char *op, mx_tensor *buf, mx_dist_reduce_op how) {
  mx_status st = agree(g, op, (call_header){.kind = (call_kind)how, .dtype = mx_dtype_of(buf), .numel = mx_numel(buf),
                                            .root = -1});
  MX_NO_GRAD { /* buf may be a view of a parameter */
    if (st == MX_OK && g->ring.world_size > 1 && mx_numel(buf) > 0) st = ring_reduce(g, op, buf, how);
    if (st == MX_OK && how == MX_DIST_AVG && g->ring.world_size > 1) {
      mx_scope *scope = mx_scope_begin();
      mx_tensor *mean = mx_div_scalar(buf, g->ring.world_size);
      st = mean ? mx_copy_(buf, mean) : mx_last_status();
      if (st != MX_OK) mx__error_prefix(op);
      mx_scope_end(scope);
    }
  }
  return broke(g, st);
}

/* The dense 1-d CPU tensor a collective works on: t itself, flattened,
 * when t is dense on the CPU (the result lands in place, with no copies);
 * otherwise a copy, filled from t when copy_in, that finish() copies back.
 * NULL with the error named after op. */
static mx_tensor *work_buffer(const char *op, const mx_tensor *t, bool copy_in) {
  mx_tensor *buf = NULL;
  MX_NO_GRAD { /* a view of a parameter must not join its graph */
    if (mx_device_of(t) == MX_CPU && mx_is_contiguous(t)) {
      buf = mx_view(t, MX_SHAPE(mx_numel(t)));
    } else {
      buf = mx_empty(MX_SHAPE(mx_numel(t)), mx_dtype_of(t), MX_CPU);
      mx_tensor *shaped = buf ? mx_view(buf, mx_shape_get(t)) : NULL;
      if (!shaped || (copy_in && mx_copy_(shaped, t) != MX_OK)) buf = NULL;
    }
  }
  if (!buf) mx__error_prefix(op);
  return buf;
}

/* Leaves the result in t: written in place, t's version moves on, as after
 * any in-place write; a copy is copied back. */
static mx_status finish(const char *op, mx_tensor *t, mx_tensor *buf) {
  if (mx_shares_storage(t, buf)) {
    mx__bump_version(t);
    return MX_OK;
  }
  mx_tensor *shaped = mx_view(buf, mx_shape_get(t));
  return shaped && mx_copy_(t, shaped) == MX_OK ? MX_OK : mx__error_prefix(op);
}

mx_status mx_dist_all_reduce(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op how) {
  const char *op = "mx_dist_all_reduce";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!t) return mx__null_input(op, "t");
  if (how < MX_DIST_SUM || how > MX_DIST_MIN)
    return mx__error(MX_INVALID_ARGUMENT, "%s: unknown reduce op %d", op, (int)how);
  mx_dtype dt = mx_dtype_of(t);
  static const char *const verbs[] = {"sum", "average", "take the maximum of", "take the minimum of"};
  if (dt == MX_BOOL || (how == MX_DIST_AVG && !mx_dtype_is_floating(dt)))
    return mx__error(MX_DTYPE_ERROR, "%s: cannot %s %s tensors", op, verbs[how], mx_dtype_name(dt));
  mx_scope *scope = mx_scope_begin();
  mx_tensor *buf = work_buffer(op, t, true);
  st = buf ? mx__dist_reduce(g, op, buf, how) : mx_last_status();
  if (st == MX_OK) st = finish(op, t, buf);
  mx_scope_end(scope);
  return st;
}

mx_tensor *mx_dist_all_gather(mx_process_group *g, const mx_tensor *t) {
  const char *op = "mx_dist_all_gather";
  if (mx__dist_usable(g, op) != MX_OK) return NULL;
  if (!t) return mx__null_input(op, "t"), NULL;
  mx_shape shape = mx_shape_get(t);
  if (shape.ndim == MX_MAX_DIMS)
    return mx__error(MX_SHAPE_ERROR, "%s: t has %d dims, and the result would need one more (at most %d)", op,
                     shape.ndim, MX_MAX_DIMS),
           NULL;
  int w = g->ring.world_size, r = g->ring.rank;
  int64_t n = mx_numel(t);
  mx_status st = agree(g, op, (call_header){.kind = CALL_ALL_GATHER, .dtype = mx_dtype_of(t), .numel = n, .root = -1});
  mx_tensor *out = NULL;
  mx_scope *scope = mx_scope_begin();
  MX_NO_GRAD {
    mx_tensor *buf = st == MX_OK ? mx_empty(MX_SHAPE((int64_t)w * n), mx_dtype_of(t), MX_CPU) : NULL;
    mx_tensor *own = buf ? mx_view(mx_narrow(buf, 0, r * n, n), shape) : NULL;
    if (st == MX_OK) st = own ? mx_copy_(own, t) : mx__error_prefix(op);
    if (st == MX_OK && w > 1 && n > 0) st = ring_gather(g, op, buf, 0);
    mx_shape stacked = {shape.ndim + 1, {w}};
    for (int d = 0; d < shape.ndim; d++) stacked.d[d + 1] = shape.d[d];
    if (st == MX_OK) out = mx_view(buf, stacked);
    if (out && mx_device_of(t) != MX_CPU) out = mx_to_device(out, mx_device_of(t));
    if (st == MX_OK && !out) st = mx__error_prefix(op);
  }
  if (out) mx_keep(out);
  mx_scope_end(scope);
  return broke(g, st) == MX_OK ? out : NULL;
}

/* Root sends its bytes to the right; each other rank receives them from the
 * left and passes them on, until the rank before root. */
mx_status mx_dist_broadcast(mx_process_group *g, mx_tensor *t, int root) {
  const char *op = "mx_dist_broadcast";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  if (!t) return mx__null_input(op, "t");
  int w = g->ring.world_size, r = g->ring.rank;
  if (root < 0 || root >= w) return mx__error(MX_INVALID_ARGUMENT, "%s: root %d is not in [0, %d)", op, root, w);
  st = agree(g, op, (call_header){.kind = CALL_BROADCAST, .dtype = mx_dtype_of(t), .numel = mx_numel(t), .root = root});
  if (st != MX_OK || w == 1) return broke(g, st);
  mx_scope *scope = mx_scope_begin();
  mx_tensor *buf = work_buffer(op, t, r == root);
  size_t bytes = (size_t)mx_numel(t) * mx_dtype_size(mx_dtype_of(t));
  st = buf ? MX_OK : mx_last_status();
  if (st == MX_OK && r != root) st = mx__ring_exchange(&g->ring, op, NULL, 0, mx_data_ptr(buf), bytes);
  if (st == MX_OK && (r + 1) % w != root) st = mx__ring_exchange(&g->ring, op, mx_data_ptr(buf), bytes, NULL, 0);
  if (st == MX_OK && r != root) st = finish(op, t, buf);
  mx_scope_end(scope);
  return broke(g, st);
}

mx_status mx_dist_barrier(mx_process_group *g) {
  const char *op = "mx_dist_barrier";
  mx_status st = mx__dist_usable(g, op);
  if (st != MX_OK) return st;
  mx_scope *scope = mx_scope_begin();
  mx_tensor *one = mx_ones(MX_SHAPE(1), MX_I32, MX_CPU);
  st = one ? mx__dist_reduce(g, op, one, MX_DIST_SUM) : mx__error_prefix(op);
  mx_scope_end(scope);
  return st;
}
