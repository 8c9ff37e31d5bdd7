/* What the process group's files share (not installed): the group, the
 * check that every rank calls the same collective, the asynchronous
 * all-reduces in flight, and the wait that the watchdog times. */
#ifndef MX_DIST_DIST_INTERNAL_H
#define MX_DIST_DIST_INTERNAL_H

#include <pthread.h>
#include <stdint.h>

#include "dist/dist.h"
#include "kernels/cuda/nccl.h"
#include "mx_config.h"

#if MX_HAVE_MPI
#include <mpi.h>
#endif

/* The first four are the reduce ops, in mx_dist_reduce_op's order. */
typedef enum { CALL_SUM, CALL_AVG, CALL_MAX, CALL_MIN, CALL_BROADCAST, CALL_ALL_GATHER, CALL_REDUCE_SCATTER,
               CALL_BARRIER, CALL_KIND_COUNT } mx__call_kind;

/* One collective as the ranks compare it, and as the watchdog reports it. */
typedef struct {
  int64_t seq, kind, dtype, numel, root;
  int64_t device; /* a CPU tensor goes to MPI, a CUDA one to NCCL: the ranks must agree */
  /* 1 when this rank waits for the call at once, 0 for an asynchronous one; not compared (a rank may wait
   * at once for what another starts asynchronously), and after the agreement 1 when every rank's is 1:
   * then MPI's blocking call serves it (MPI matches a blocking collective with a blocking one only) */
  int64_t blocking;
} mx__call;

#define MX__MAX_PENDING 64 /* collectives started and not yet waited for */

struct mx_process_group {
  int rank, world, local_rank;
  bool broken;
  bool mpi_failed; /* an MPI call failed: the communicator may hold a collective that never ends */
  char why[512]; /* the error that broke it */
  double timeout;
  int64_t next_seq;
  struct mx__ddp_reducer **reducers; /* DDP's, one per module it averages (ddp.c) */
  int n_reducers;
  struct mx__dist_nccl *nccl; /* for CUDA tensors, made on the first (dist/nccl.c) */
#if MX_HAVE_MPI
  MPI_Comm comm;
  /* The agreements' own communicator: they are posted in the calls' order, and an asynchronous
   * all-reduce's data only once its agreement ends (in the same order, on comm), so on each of the two
   * the ranks start the same collectives in the same order. */
  MPI_Comm agree_comm;
  struct mx_dist_work *flights[MX__MAX_PENDING]; /* the asynchronous all-reduces not yet waited for, in order */
  int n_flights;
  /* the watchdog: a thread that ends the job when a pending collective
   * waits past the timeout */
  pthread_t watchdog;
  pthread_mutex_t lock;
  pthread_cond_t wake;
  bool stopping;
  int n_pending;
  mx__call pending[MX__MAX_PENDING];
  double pending_since[MX__MAX_PENDING];
#endif
};

/* Removes a DDP reducer's hooks and frees it (ddp.c). */
void mx__ddp_reducer_free(struct mx__ddp_reducer *r);

/* MX_OK when g can take a call; otherwise the error (NULL, or broken). */
mx_status mx__dist_usable(const mx_process_group *g, const char *op);
/* Marks g broken by the error st (already set), and returns st. */
mx_status mx__dist_broke(mx_process_group *g, mx_status st);
/* "all_reduce(sum) on 5 float32 elements", and " from root R" for a broadcast. */
void mx__dist_describe(const mx__call *c, char *out, size_t size);

/* An all-reduce of a CPU tensor whose reduced data (float32 for the 16-bit
 * floats) is at most this many bytes (over at most 4 ranks; less over
 * more) travels inside its agreement, in one exchange: every agreement's
 * record (a ballot) has room for it whatever the call, so every rank
 * passes MPI the same count even when the ranks' calls differ
 * (process_group.c). 4 KiB, the bench's smallest all-reduce: with Open
 * MPI's eager limit at 8 KiB the record still goes in one message, and the
 * calls that do not fold, which carry the room empty, measured no slower
 * except where the ranks are in step (a barrier: 1.6-1.9 against 0.6-0.9
 * us, 2 ranks). */
#define MX__FOLD_BYTES 4096

/* Whether call's data travels inside its agreement (see MX__FOLD_BYTES). */
bool mx__dist_folds(const mx_process_group *g, const mx__call *call);

/* Numbers the call and checks that every rank makes the same one; an error
 * names this rank's call and another rank's that differs. Earlier
 * asynchronous all-reduces first start their data (mx__dist_progress).
 * When the call folds, data holds its data (in the wire dtype), reduced
 * in place by the same exchange; NULL otherwise. */
mx_status mx__dist_agree(mx_process_group *g, const char *op, mx__call *call, void *data);

/* --- CUDA tensors, on NCCL (dist/nccl.c) --- */
typedef struct mx__dist_nccl mx__dist_nccl;
/* g's NCCL communicator, made on the first call (a collective call itself:
 * every rank makes it at the same collective); NULL with the error naming
 * op when it cannot start ("built without CUDA", "no CUDA device", NCCL's). */
mx__dist_nccl *mx__dist_nccl_get(mx_process_group *g, const char *op);
/* Starts nop on the device after the compute stream's work so far,
 * registered as call until the device completes it; *done for finish. */
mx_status mx__dist_nccl_start(mx_process_group *g, const char *op, const mx__call *call, const mx__nccl_op *nop,
                              mx__nccl_done **done);
/* The compute stream's later work waits for done (no host wait). */
mx_status mx__dist_nccl_finish(mx_process_group *g, const char *op, const mx__nccl_done *done);
/* Frees g's communicator (after its collectives end). */
void mx__dist_nccl_free(mx_process_group *g);

/* Moves g's asynchronous all-reduces along (collectives.c): the data of
 * those whose agreement has ended starts, in the order they were called,
 * and running ones progress (Open MPI's nonblocking collectives move only
 * inside MPI calls). Waits for the agreements up to and including
 * settle's (NULL: none; the last flight: all). */
void mx__dist_progress(mx_process_group *g, const struct mx_dist_work *settle);

#if MX_HAVE_MPI
/* The watchdog's NCCL half: on NCCL's asynchronous error, or a collective
 * waiting past the timeout, prints it, aborts the communicator and returns
 * true (the caller ends the job). */
bool mx__dist_nccl_watch(mx_process_group *g);
/* An MPI error code as an mx error naming op; MX_OK for MPI_SUCCESS. */
mx_status mx__dist_mpi_status(int code, const char *op);
/* Registers call with the watchdog (it was started), and the reverse once
 * its request is complete. */
void mx__dist_pending_add(mx_process_group *g, const mx__call *call);
void mx__dist_pending_remove(mx_process_group *g, int64_t seq);
/* One rank's record in an agreement: its call, and a folded call's data
 * (process_group.c); opaque here. */
typedef struct mx__ballot mx__ballot;
/* mx__dist_agree in two halves, for an asynchronous call: the first numbers
 * call, registers it with the watchdog and starts gathering every rank's
 * ballot (with data, as mx__dist_agree) into *ballots (malloc'd); the
 * second, once req has ended (code: its wait's), checks them as
 * mx__dist_agree does, leaves the reduced data in data (when call folds
 * and the calls agree), frees the ballots, and leaves in call->blocking
 * whether every rank's is. */
mx_status mx__dist_agree_start(mx_process_group *g, const char *op, mx__call *call, const void *data,
                               mx__ballot **ballots, MPI_Request *req);
mx_status mx__dist_agree_check(mx_process_group *g, const char *op, mx__call *call, mx__ballot *ballots, int code,
                               void *data);
/* The NaN-propagating maximum and minimum ops for float32 and float64. */
MPI_Op mx__dist_float_op(mx_dist_reduce_op how);
#endif

#endif
