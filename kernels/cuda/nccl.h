/* NCCL in the CUDA module: the collectives dist/ runs on CUDA tensors.
 * kernels/backend.c finds mx__nccl_api by name (dlsym) in libmixgrad_cuda.so,
 * so only a program that uses CUDA tensors loads libnccl. Plain C: dist/
 * includes it. */
#ifndef MX_KERNELS_CUDA_NCCL_H
#define MX_KERNELS_CUDA_NCCL_H

#include <stddef.h>

#include "kernels/base.h"

#ifdef __cplusplus
extern "C" {
#endif

#define MX__NCCL_ID_BYTES 128 /* NCCL_UNIQUE_ID_BYTES */

typedef struct mx__nccl_comm mx__nccl_comm;
typedef struct mx__nccl_done mx__nccl_done; /* one started collective: an event on the communication stream */

typedef enum { MX__NCCL_ALL_REDUCE, MX__NCCL_BROADCAST, MX__NCCL_ALL_GATHER, MX__NCCL_REDUCE_SCATTER } mx__nccl_kind;

/* One collective on device memory of the CUDA backend's device. count: the
 * elements of recv (all-reduce, broadcast: in place, send == recv), of send
 * (all-gather: recv holds world * count), of recv (reduce-scatter: send
 * holds world * count). how: 0 sum, 1 average, 2 max, 3 min
 * (mx_dist_reduce_op's order). root: the broadcast's. */
typedef struct {
  mx__nccl_kind kind;
  int how, root;
  mx_dtype dtype;
  const void *send;
  void *recv;
  size_t count;
} mx__nccl_op;

typedef struct {
  /* rank 0's id, which the ranks share (over MPI) before comm_create */
  mx_status (*unique_id)(unsigned char id[MX__NCCL_ID_BYTES]);
  /* This rank's communicator on the CUDA backend's device, which must be
   * device local_rank % (devices) when world > 1 (the process group selects
   * it before the backend starts: select_device); its own stream. Blocks
   * until every rank has called it. */
  mx_status (*comm_create)(const unsigned char id[MX__NCCL_ID_BYTES], int rank, int world, int local_rank,
                           mx__nccl_comm **out);
  /* Makes device local_rank % (devices) the calling thread's; MX_OK
   * without a device (the backend reports that when it starts). */
  mx_status (*select_device)(int local_rank);
  /* Enqueues op on the communication stream after the compute stream's work
   * so far (an event, no host wait); *done: its completion, for finish and
   * for the watchdog. */
  mx_status (*start)(mx__nccl_comm *c, const mx__nccl_op *op, mx__nccl_done **done);
  /* The compute stream's later work waits for done (no host wait). */
  mx_status (*finish)(mx__nccl_comm *c, const mx__nccl_done *done);
  /* 1 when done has completed on the device, 0 when not yet; -1 with the
   * error set when the query fails. */
  int (*query)(mx__nccl_comm *c, const mx__nccl_done *done);
  void (*done_free)(mx__nccl_comm *c, mx__nccl_done *done);
  /* MX_OK, or NCCL's asynchronous error (ncclCommGetAsyncError) as an mx error. */
  mx_status (*async_error)(mx__nccl_comm *c);
  /* Ends the communicator at once, pending collectives included (ncclCommAbort). */
  void (*abort)(mx__nccl_comm *c);
  /* Waits for the communication stream, destroys the communicator and its stream. */
  mx_status (*destroy)(mx__nccl_comm *c);
} mx__nccl_api;

/* The module's (kernels/backend.c loads it); NULL with the error set when
 * mixgrad was built without CUDA or the module did not load. */
const mx__nccl_api *mx__cuda_nccl(void);
/* The local rank whose device the CUDA backend takes when it starts
 * (mx_dist_init says it; nothing is loaded until a CUDA tensor is made). */
void mx__cuda_prefer_local_rank(int local_rank);

#ifdef __cplusplus
}
#endif

#endif
