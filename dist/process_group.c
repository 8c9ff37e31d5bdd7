/* The process group: joining the ranks an MPI launcher started (or a world
 * of one), the check that every rank makes the same call, and the watchdog
 * that ends the job when a collective waits past the group's timeout.
 *
 * Every collective first exchanges each rank's description of it
 * (sequence number, op, dtype, element count, root): a rank that calls
 * something else gets an error naming both calls before any tensor moves,
 * on every rank, where MPI itself would hang or read the bytes as the
 * wrong tensor. The descriptions travel on a communicator of their own, so
 * an asynchronous all-reduce can post its agreement at once and start its
 * data only once the agreement has ended, still before any tensor moves
 * (collectives.c).
 *
 * The exchange is one nonblocking all-gather of a fixed-size record (a
 * ballot), whatever the call: MPI requires every rank to pass the same
 * count, which a call's own sizes could not promise when the ranks
 * disagree. A small all-reduce puts its data in the ballot too
 * (MX__FOLD_BYTES), and once the calls agree every rank reduces the
 * gathered data itself, in rank order (the same bits everywhere): the call
 * needs no second round trip.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dist/dist_internal.h"
#include "kernels/base_internal.h"

#define DEFAULT_TIMEOUT 600.0 /* seconds, as torch.distributed's NCCL watchdog */

static const char *const call_names[CALL_KIND_COUNT] = {"all_reduce(sum)", "all_reduce(avg)", "all_reduce(max)",
                                                        "all_reduce(min)", "broadcast",       "all_gather",
                                                        "reduce_scatter",  "barrier"};

bool mx_dist_mpi_built(void) { return MX_HAVE_MPI; }

/* --- how this process was started ---------------------------------------------- */

/* The launchers' variables that give the number of ranks they started:
 * Open MPI's mpirun, MPICH's and Intel MPI's Hydra, Slurm's srun, and
 * torchrun's (which mixgrad's ranks cannot meet through). */
static const char *const world_vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "WORLD_SIZE"};

/* The number of ranks the launcher says it started (0: no launcher), and
 * in *var the variable that says so. PMIx names a rank but no count:
 * PMIX_RANK counts as a launch of at least two when it is not 0. */
static long launched_ranks(const char **var) {
  for (size_t i = 0; i < sizeof world_vars / sizeof *world_vars; i++) {
    const char *s = getenv(world_vars[i]);
    char *end;
    long n = s ? strtol(s, &end, 10) : 0;
    if (s && end != s && !*end && n > 0) return *var = world_vars[i], n;
  }
  const char *pmix = getenv("PMIX_RANK");
  if (pmix) return *var = "PMIX_RANK", strcmp(pmix, "0") ? 2 : 1;
  return *var = NULL, 0;
}

/* The timeout: the argument, else MX_DIST_TIMEOUT, else the default; 0
 * with the error set when either is not a number of seconds in (0, 1e6]. */
static double timeout_from(const char *op, double seconds) {
  if (!(seconds >= 0) || seconds > 1e6)
    return mx__error(MX_INVALID_ARGUMENT, "%s: timeout %g s is not in [0, 1e6]", op, seconds), 0;
  if (seconds > 0) return seconds;
  const char *s = getenv("MX_DIST_TIMEOUT");
  if (!s) return DEFAULT_TIMEOUT;
  char *end;
  errno = 0;
  double v = strtod(s, &end);
  if (end == s || *end || errno || !(v > 0) || v > 1e6)
    return mx__error(MX_INVALID_ARGUMENT, "%s: MX_DIST_TIMEOUT='%s' is not a number of seconds in (0, 1e6]", op, s),
           0;
  return v;
}

/* --- the group -------------------------------------------------------------------- */

mx_status mx__dist_broke(mx_process_group *g, mx_status st) {
  if (st != MX_OK && !g->broken) {
    g->broken = true;
    snprintf(g->why, sizeof g->why, "%s", mx_last_error());
  }
  return st;
}

mx_status mx__dist_usable(const mx_process_group *g, const char *op) {
  if (!g) return mx__null_input(op, "group");
  if (g->broken) return mx__error(MX_STATE_ERROR, "%s: the process group failed earlier (%s)", op, g->why);
  return MX_OK;
}

void mx__dist_describe(const mx__call *c, char *out, size_t size) {
  bool known = c->kind >= 0 && c->kind < CALL_KIND_COUNT && mx_dtype_valid((mx_dtype)c->dtype);
  if (!known) {
    snprintf(out, size, "an unknown collective");
  } else if (c->kind == CALL_BARRIER) {
    snprintf(out, size, "barrier");
  } else {
    int n = snprintf(out, size, "%s on %lld %s elements", call_names[c->kind], (long long)c->numel,
                     mx_dtype_name((mx_dtype)c->dtype));
    if (c->kind == CALL_BROADCAST && n >= 0 && (size_t)n < size)
      n += snprintf(out + n, size - (size_t)n, " from root %lld", (long long)c->root);
    if (c->device == MX_CUDA && n >= 0 && (size_t)n < size) snprintf(out + n, size - (size_t)n, " on cuda");
  }
}

int mx_dist_rank(const mx_process_group *g) { return g ? g->rank : 0; }
int mx_dist_world_size(const mx_process_group *g) { return g ? g->world : 1; }
int mx_dist_local_rank(const mx_process_group *g) { return g ? g->local_rank : 0; }

#if MX_HAVE_MPI

/* --- MPI --------------------------------------------------------------------------- */

/* MPI is initialized once per process; mixgrad finalizes it (after the last
 * group it opened) only if it initialized it. */
static bool mpi_ours;
static int open_groups;
static MPI_Op float_ops[2]; /* the NaN-propagating max and min */

mx_status mx__dist_mpi_status(int code, const char *op) {
  if (code == MPI_SUCCESS) return MX_OK;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(code, text, &len) != MPI_SUCCESS) snprintf(text, sizeof text, "MPI error %d", code);
  return mx__error(MX_BACKEND_ERROR, "%s: %s", op, text);
}

/* MPI_MAX and MPI_MIN compare with < and >, so whether a NaN survives
 * depends on which rank's value comes first (measured with Open MPI 4.1:
 * a NaN on one of 3 ranks was lost). These order every value, NaN
 * included, so each op is associative and commutative and every rank
 * gets the same bits: NaNs above all numbers for max (below for min),
 * NaNs among themselves by their bits, and -0 below +0. */
#define FLOAT_OPS(T, U, name)                                                             \
  /* <0, 0, >0 as a comes below, with or above b; nan_high: where a lone NaN goes */       \
  static int name##_order(T a, T b, bool nan_high) {                                      \
    bool na = a != a, nb = b != b;                                                        \
    if (na && nb) {                                                                       \
      U ua, ub;                                                                           \
      memcpy(&ua, &a, sizeof a), memcpy(&ub, &b, sizeof b);                               \
      return (ua > ub) - (ua < ub);                                                       \
    }                                                                                     \
    if (na || nb) return na == nan_high ? 1 : -1;                                         \
    if (a == b) return (int)!signbit(a) - (int)!signbit(b);                               \
    return a < b ? -1 : 1;                                                                \
  }                                                                                       \
  static void name##_max(void *in, void *inout, int *len, MPI_Datatype *type) {           \
    (void)type;                                                                           \
    const T *x = in;                                                                      \
    T *y = inout;                                                                         \
    for (int i = 0; i < *len; i++)                                                        \
      if (name##_order(x[i], y[i], true) > 0) y[i] = x[i];                                \
  }                                                                                       \
  static void name##_min(void *in, void *inout, int *len, MPI_Datatype *type) {           \
    (void)type;                                                                           \
    const T *x = in;                                                                      \
    T *y = inout;                                                                         \
    for (int i = 0; i < *len; i++)                                                        \
      if (name##_order(x[i], y[i], false) < 0) y[i] = x[i];                               \
  }
FLOAT_OPS(float, uint32_t, f32)
FLOAT_OPS(double, uint64_t, f64)

/* One op for both float types: MPI hands it the datatype. */
static void float_max(void *in, void *inout, int *len, MPI_Datatype *type) {
  (*type == MPI_DOUBLE ? f64_max : f32_max)(in, inout, len, type);
}
static void float_min(void *in, void *inout, int *len, MPI_Datatype *type) {
  (*type == MPI_DOUBLE ? f64_min : f32_min)(in, inout, len, type);
}

MPI_Op mx__dist_float_op(mx_dist_reduce_op how) { return float_ops[how == MX_DIST_MIN]; }

/* --- the ballot ---------------------------------------------------------------------- */

struct mx__ballot {
  mx__call call;
  unsigned char data[]; /* room for ballot_room(world) bytes: a folded all-reduce's, in its wire dtype */
};

/* The data a ballot has room for: MX__FOLD_BYTES up to 4 ranks, then less
 * (a multiple of 8 bytes), so that an agreement, which every collective
 * makes, gathers at most 4 * MX__FOLD_BYTES of data whatever the ranks. */
static int64_t ballot_room(int world) {
  int64_t room = world <= 4 ? MX__FOLD_BYTES : MX__FOLD_BYTES * 4 / world;
  return room & ~(int64_t)7;
}

/* One ballot's bytes, and rank r's in an agreement's gather. */
static size_t ballot_size(int world) { return sizeof(mx__ballot) + (size_t)ballot_room(world); }
static mx__ballot *ballot_of(mx__ballot *gathered, int world, int r) {
  return (mx__ballot *)((unsigned char *)gathered + (size_t)r * ballot_size(world));
}

static mx_dtype wire_of(mx_dtype dt) { return dt == MX_F16 || dt == MX_BF16 ? MX_F32 : dt; }

bool mx__dist_folds(const mx_process_group *g, const mx__call *call) {
  if (call->kind < CALL_SUM || call->kind > CALL_MIN || call->device != MX_CPU) return false;
  return call->numel <= ballot_room(g->world) / (int64_t)mx_dtype_size(wire_of((mx_dtype)call->dtype));
}

/* The bytes of call's data in a ballot. */
static size_t folded_bytes(const mx__call *call) {
  return (size_t)call->numel * mx_dtype_size(wire_of((mx_dtype)call->dtype));
}

#define SUM_INTO(T, in, inout, n)                                    \
  do {                                                               \
    const T *x_ = (const T *)(in);                                   \
    T *y_ = (T *)(inout);                                            \
    for (int64_t i_ = 0; i_ < (n); i_++) y_[i_] = (T)(y_[i_] + x_[i_]); \
  } while (0)
#define EXTREME_INTO(T, in, inout, n, max)                                                       \
  do {                                                                                           \
    const T *x_ = (const T *)(in);                                                               \
    T *y_ = (T *)(inout);                                                                        \
    for (int64_t i_ = 0; i_ < (n); i_++)                                                         \
      if ((max) ? x_[i_] > y_[i_] : x_[i_] < y_[i_]) y_[i_] = x_[i_];                            \
  } while (0)

/* inout op= in for the folded call c, as MPI_SUM (uint8 wraps), MPI_MAX
 * and MPI_MIN do, and the floats' max and min as the ops above. */
static void reduce_folded(const mx__call *c, const void *in, void *inout) {
  mx_dtype wire = wire_of((mx_dtype)c->dtype);
  int64_t n = c->numel;
  if (c->kind == CALL_SUM || c->kind == CALL_AVG) {
    switch (wire) {
      case MX_F32: SUM_INTO(float, in, inout, n); break;
      case MX_F64: SUM_INTO(double, in, inout, n); break;
      case MX_I64: SUM_INTO(int64_t, in, inout, n); break;
      case MX_I32: SUM_INTO(int32_t, in, inout, n); break;
      default: SUM_INTO(uint8_t, in, inout, n); break;
    }
    return;
  }
  bool max = c->kind == CALL_MAX;
  int len = (int)n;
  MPI_Datatype type = wire == MX_F64 ? MPI_DOUBLE : MPI_FLOAT;
  switch (wire) {
    case MX_F32:
    case MX_F64: (max ? float_max : float_min)((void *)in, inout, &len, &type); break;
    case MX_I64: EXTREME_INTO(int64_t, in, inout, n, max); break;
    case MX_I32: EXTREME_INTO(int32_t, in, inout, n, max); break;
    default: EXTREME_INTO(uint8_t, in, inout, n, max); break;
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void mx__dist_pending_add(mx_process_group *g, const mx__call *call) {
  pthread_mutex_lock(&g->lock);
  if (g->n_pending < MX__MAX_PENDING) { /* the async calls refuse to start a 65th */
    g->pending[g->n_pending] = *call;
    g->pending_since[g->n_pending++] = now();
  }
  pthread_mutex_unlock(&g->lock);
}

void mx__dist_pending_remove(mx_process_group *g, int64_t seq) {
  pthread_mutex_lock(&g->lock);
  for (int i = 0; i < g->n_pending; i++)
    if (g->pending[i].seq == seq) {
      g->n_pending--;
      g->pending[i] = g->pending[g->n_pending];
      g->pending_since[i] = g->pending_since[g->n_pending];
      break;
    }
  pthread_mutex_unlock(&g->lock);
}

/* The watchdog: wakes a few times per timeout, and when the oldest pending
 * collective has waited past it, says which and ends the job. A rank that
 * died usually ends the job sooner (mpirun notices); this catches a rank
 * that is alive and silent (stopped, deadlocked, calling nothing). */
static void *watch(void *arg) {
  mx_process_group *g = arg;
  double period = fmin(1.0, fmax(0.01, g->timeout / 8));
  pthread_mutex_lock(&g->lock);
  while (!g->stopping) {
    int oldest = -1;
    for (int i = 0; i < g->n_pending; i++)
      if (oldest < 0 || g->pending_since[i] < g->pending_since[oldest]) oldest = i;
    double waited = oldest >= 0 ? now() - g->pending_since[oldest] : 0;
    if (oldest >= 0 && waited > g->timeout) {
      char what[160];
      mx__dist_describe(&g->pending[oldest], what, sizeof what);
      fprintf(stderr,
              "mixgrad: rank %d of %d: collective #%lld, %s, has waited %.1f s, past the process group's timeout of "
              "%g s (a rank died, stopped or calls something else); ending the job with MPI_Abort\n",
              g->rank, g->world, (long long)g->pending[oldest].seq, what, waited, g->timeout);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (mx__dist_nccl_watch(g)) MPI_Abort(MPI_COMM_WORLD, 1);
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    double t = (double)until.tv_sec + 1e-9 * (double)until.tv_nsec + period;
    until.tv_sec = (time_t)t, until.tv_nsec = (long)((t - floor(t)) * 1e9);
    pthread_cond_timedwait(&g->wake, &g->lock, &until);
  }
  pthread_mutex_unlock(&g->lock);
  return NULL;
}

/* Initializes MPI unless someone did; the float ops once. */
static mx_status start_mpi(const char *op) {
  int ready = 0;
  MPI_Initialized(&ready);
  if (!ready) {
    /* Open MPI serves an in-place nonblocking all-reduce (DDP's buckets) over fewer than 4 ranks with its
     * binomial tree, which moves the whole buffer through rank 0 twice; its ring measured 0.77x the DDP
     * step's time (2 ranks, bench/all_reduce). A hint other MPIs ignore; the user's own setting wins. */
    setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "1", 0);
    /* Its shared-memory transport sends up to 4 KiB at once (eagerly) and larger messages after a handshake:
     * a ballot with room for 4 KiB of data is larger, and measured twice as slow there (4.3 against 2.2 us
     * in the 4 KiB all-reduce, bench/all_reduce). 8 KiB sends every ballot eagerly. */
    setenv("OMPI_MCA_btl_vader_eager_limit", "8192", 0);
    int provided; /* the watchdog thread calls MPI_Abort while another thread waits */
    int code = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided);
    if (code != MPI_SUCCESS) return mx__error(MX_BACKEND_ERROR, "%s: MPI_Init_thread failed (error %d)", op, code);
    mpi_ours = true;
  }
  if (!float_ops[0]) {
    MPI_Op_create(float_max, 1, &float_ops[0]);
    MPI_Op_create(float_min, 1, &float_ops[1]);
  }
  return MX_OK;
}

static mx_status join_mpi(mx_process_group *g, const char *op) {
  mx_status st = start_mpi(op);
  if (st != MX_OK) return st;
  int code = MPI_Comm_dup(MPI_COMM_WORLD, &g->comm);
  if (code != MPI_SUCCESS) return mx__dist_mpi_status(code, op);
  if ((code = MPI_Comm_dup(MPI_COMM_WORLD, &g->agree_comm)) != MPI_SUCCESS) {
    MPI_Comm_free(&g->comm);
    return mx__dist_mpi_status(code, op);
  }
  MPI_Comm_set_errhandler(g->comm, MPI_ERRORS_RETURN); /* errors come back as mx errors */
  MPI_Comm_set_errhandler(g->agree_comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(g->comm, &g->rank);
  MPI_Comm_size(g->comm, &g->world);
  MPI_Comm node; /* the ranks sharing this machine's memory */
  if (MPI_Comm_split_type(g->comm, MPI_COMM_TYPE_SHARED, g->rank, MPI_INFO_NULL, &node) == MPI_SUCCESS) {
    MPI_Comm_rank(node, &g->local_rank);
    MPI_Comm_free(&node);
  }
  pthread_mutex_init(&g->lock, NULL);
  pthread_cond_init(&g->wake, NULL);
  if (pthread_create(&g->watchdog, NULL, watch, g) != 0) {
    MPI_Comm_free(&g->comm);
    MPI_Comm_free(&g->agree_comm);
    return mx__error(MX_BACKEND_ERROR, "%s: cannot start the watchdog thread", op);
  }
  open_groups++;
  return MX_OK;
}

static void leave_mpi(mx_process_group *g) {
  pthread_mutex_lock(&g->lock);
  g->stopping = true;
  pthread_cond_signal(&g->wake);
  pthread_mutex_unlock(&g->lock);
  pthread_join(g->watchdog, NULL);
  pthread_mutex_destroy(&g->lock);
  pthread_cond_destroy(&g->wake);
  if (g->mpi_failed) return; /* a collective may still hang on the communicator: the process should exit */
  MPI_Comm_free(&g->comm);
  MPI_Comm_free(&g->agree_comm);
  if (--open_groups == 0 && mpi_ours) {
    MPI_Op_free(&float_ops[0]);
    MPI_Op_free(&float_ops[1]);
    MPI_Finalize();
    mpi_ours = false;
  }
}

/* This rank's ballot for call, with data when call folds. */
static void fill_ballot(mx__ballot *b, const mx_process_group *g, const mx__call *call, const void *data) {
  b->call = *call;
  size_t bytes = data && mx__dist_folds(g, call) ? folded_bytes(call) : 0, room = (size_t)ballot_room(g->world);
  if (bytes) memcpy(b->data, data, bytes);
  memset(b->data + bytes, 0, room - bytes); /* MPI sends it all */
}

/* Gathers every rank's ballot after this rank's own (the first of g->world + 1). */
static int gather_ballots(mx_process_group *g, mx__ballot *ballots, MPI_Request *req) {
  int bytes = (int)ballot_size(g->world);
  return MPI_Iallgather(ballots, bytes, MPI_BYTE, ballot_of(ballots, g->world, 1), bytes, MPI_BYTE, g->agree_comm,
                        req);
}

mx_status mx__dist_agree_start(mx_process_group *g, const char *op, mx__call *call, const void *data,
                               mx__ballot **ballots, MPI_Request *req) {
  call->seq = g->next_seq++;
  *ballots = malloc((size_t)(g->world + 1) * ballot_size(g->world));
  if (!*ballots) return mx__dist_broke(g, mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op));
  fill_ballot(*ballots, g, call, data);
  mx__dist_pending_add(g, call);
  int code = gather_ballots(g, *ballots, req);
  if (code == MPI_SUCCESS) return MX_OK;
  mx__dist_pending_remove(g, call->seq);
  free(*ballots), *ballots = NULL;
  g->mpi_failed = true;
  return mx__dist_broke(g, mx__dist_mpi_status(code, op));
}

/* After the first agreement that failed (every rank finds the same one,
 * each in its own time), a rank may have posted the agreements of later
 * asynchronous calls that the others, already broken, never will: every
 * rank posts empty ones up to the most any rank has posted, so none is
 * left in flight (MPI cannot cancel a collective). The data communicator
 * holds the same collectives on every rank up to that agreement's call. */
static void drain(mx_process_group *g, const mx__call *failed) {
  int64_t posted = g->next_seq, most = posted;
  mx__dist_pending_add(g, failed); /* a rank that never finds it would hang here */
  int code = MPI_Allreduce(&posted, &most, 1, MPI_INT64_T, MPI_MAX, g->comm);
  mx__ballot *none = malloc((size_t)(g->world + 1) * ballot_size(g->world));
  if (none) fill_ballot(none, g, &(mx__call){.seq = -1, .kind = -1}, NULL);
  for (int64_t k = posted; code == MPI_SUCCESS && none && k < most; k++) {
    MPI_Request req;
    code = gather_ballots(g, none, &req);
    if (code == MPI_SUCCESS) code = MPI_Wait(&req, MPI_STATUS_IGNORE);
  }
  mx__dist_pending_remove(g, failed->seq);
  g->mpi_failed |= code != MPI_SUCCESS || !none;
  g->next_seq = most;
  free(none);
}

mx_status mx__dist_agree_check(mx_process_group *g, const char *op, mx__call *call, mx__ballot *ballots, int code,
                               void *data) {
  g->mpi_failed |= code != MPI_SUCCESS;
  mx_status st = mx__dist_mpi_status(code, op);
  bool blocking = true;
  for (int r = 0; st == MX_OK && r < g->world; r++) {
    mx__call theirs = ballot_of(ballots, g->world, r + 1)->call;
    blocking &= theirs.blocking == 1;
    theirs.blocking = call->blocking;
    if (!memcmp(&theirs, call, sizeof *call)) continue;
    char mine[160], other[160];
    mx__dist_describe(call, mine, sizeof mine);
    mx__dist_describe(&theirs, other, sizeof other);
    st = mx__error(MX_INVALID_ARGUMENT, "%s: rank %d calls %s, but rank %d calls %s (collective #%lld)", op, g->rank,
                   mine, r, other, (long long)call->seq);
  }
  call->blocking = blocking;
  if (st == MX_OK && data && mx__dist_folds(g, call)) { /* every rank reduces in rank order: the same bits */
    memcpy(data, ballot_of(ballots, g->world, 1)->data, folded_bytes(call));
    for (int r = 1; r < g->world; r++) reduce_folded(call, ballot_of(ballots, g->world, r + 1)->data, data);
  }
  free(ballots);
  if (st == MX_OK) return MX_OK;
  mx__dist_broke(g, st);
  if (code == MPI_SUCCESS) drain(g, call);
  return st;
}

mx_status mx__dist_agree(mx_process_group *g, const char *op, mx__call *call, void *data) {
  if (g->world == 1) return call->seq = g->next_seq++, MX_OK;
  if (g->n_flights > 0) mx__dist_progress(g, g->flights[g->n_flights - 1]); /* they come first, on every rank */
  mx_status st = mx__dist_usable(g, op); /* and may have found a mismatch */
  if (st != MX_OK) return st;
  mx__ballot *ballots;
  MPI_Request req;
  call->blocking = 1;
  if ((st = mx__dist_agree_start(g, op, call, data, &ballots, &req)) != MX_OK) return st;
  int code = MPI_Wait(&req, MPI_STATUS_IGNORE);
  mx__dist_pending_remove(g, call->seq);
  return mx__dist_agree_check(g, op, call, ballots, code, data);
}

#else

mx_status mx__dist_agree(mx_process_group *g, const char *op, mx__call *call, void *data) {
  (void)op, (void)data;
  call->seq = g->next_seq++;
  return MX_OK; /* a world of one */
}

#endif

mx_process_group *mx_dist_init(double timeout_seconds) {
  const char *op = "mx_dist_init";
  double timeout = timeout_from(op, timeout_seconds);
  if (timeout == 0) return NULL;
  const char *var;
  long launched = launched_ranks(&var);
#if MX_HAVE_MPI
  bool torchrun = var && !strcmp(var, "WORLD_SIZE");
  if (torchrun && launched > 1)
    return mx__error(MX_INVALID_ARGUMENT,
                     "%s: WORLD_SIZE=%s says %ld ranks, but no MPI launcher started this process; mixgrad's ranks "
                     "meet through MPI: start them with scripts/launch or mpirun",
                     op, getenv(var), launched),
           NULL;
#else
  if (launched > 1)
    return mx__error(MX_NOT_BUILT,
                     "%s: %s=%s says a launcher started several ranks, but this mixgrad was built without MPI "
                     "(configure it with -Dmpi=enabled; Debian: libopenmpi-dev)",
                     op, var, getenv(var)),
           NULL;
#endif
  mx_process_group *g = calloc(1, sizeof *g);
  if (!g) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op), NULL;
  g->world = 1, g->timeout = timeout;
#if MX_HAVE_MPI
  if (launched > 0 && !torchrun && join_mpi(g, op) != MX_OK) {
    free(g);
    return NULL;
  }
  if (launched == 0 || torchrun) g->comm = g->agree_comm = MPI_COMM_NULL;
#endif
  /* several ranks: the CUDA tensors made from now on go to this rank's GPU */
  if (g->world > 1) mx__cuda_prefer_local_rank(g->local_rank);
  return g;
}

void mx_dist_free(mx_process_group *g) {
  if (!g) return;
  for (int k = 0; k < g->n_reducers; k++) mx__ddp_reducer_free(g->reducers[k]);
  free(g->reducers);
#if MX_HAVE_MPI
  bool hung = g->mpi_failed; /* as MPI's, NCCL's communicator may hold a collective that never ends */
  if (g->comm != MPI_COMM_NULL) leave_mpi(g); /* the watchdog stops first: it reads the NCCL communicator */
  if (!hung) mx__dist_nccl_free(g);
#else
  mx__dist_nccl_free(g);
#endif
  free(g);
}
