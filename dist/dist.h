/* Data parallelism across processes, like torch.distributed with
 * DistributedDataParallel: N processes (ranks) each hold the whole model,
 * train on their own share of every batch, and average their gradients
 * before each optimizer step, so every rank takes the same step.
 *
 *     mx_process_group *g = mx_dist_init(0);               // the ranks mpirun (or srun) started
 *     mx_ddp_broadcast_module(g, net, 0);                  // every rank starts from rank 0's weights
 *     for (each step) {                                    // on this rank's share of the batch
 *       mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
 *       mx_ddp_average_gradients(g, net);                  // before the scaler unscales them
 *       mx_ddp_unscale(g, scaler, opt);                    // one found-inf flag for all ranks
 *       mx_scaler_step(scaler, opt, NULL);                 // ranks skip or step together
 *       mx_scaler_update(scaler);
 *     }
 *     mx_dist_free(g);
 *
 * The engine is MPI (built with -Dmpi=enabled or found by -Dmpi=auto): the
 * ranks are the processes an MPI launcher started, `scripts/launch N
 * PROGRAM ARGS...` (a thin wrapper over mpirun) or srun. A program started
 * alone, without a launcher, is a world of one and touches no MPI at all.
 * A build without MPI that a launcher started as several ranks fails in
 * mx_dist_init ("built without MPI"). MPI does not authenticate its peers:
 * run it on networks you trust (README, "Data parallelism").
 *
 * A group serves one thread at a time, and every rank must call the same
 * collectives in the same order with tensors of the same dtype and size;
 * the ranks compare each call before it moves data, and a rank that
 * differs gets an error naming both calls. After an error the group is
 * broken: every later call fails. A collective that waits longer than the
 * group's timeout (a rank died, stopped or went elsewhere) is reported on
 * stderr by the group's watchdog, with its sequence number, op, dtype and
 * element count, and the job is ended with MPI_Abort.
 */
#ifndef MX_DIST_DIST_H
#define MX_DIST_DIST_H

#include "amp/scaler.h"
#include "nn/module.h"
#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_process_group mx_process_group;

typedef enum {
  MX_DIST_SUM, /* every dtype but bool; integers wrap as PyTorch's do */
  MX_DIST_AVG, /* the sum divided by the world size, floating dtypes */
  MX_DIST_MAX, /* every dtype but bool; NaN wins, as in mx_maximum */
  MX_DIST_MIN, /* every dtype but bool; NaN wins, as in mx_minimum */
} mx_dist_reduce_op;

/* Joins the ranks of this job: every process an MPI launcher started
 * (mpirun, scripts/launch, srun), or a world of one when none did. A
 * collective that waits longer than timeout_seconds ends the job (0: the
 * MX_DIST_TIMEOUT environment variable, or else 600 s). Errors: a build
 * without MPI started as several ranks (MX_NOT_BUILT), a bad timeout. */
mx_process_group *mx_dist_init(double timeout_seconds);
/* Leaves the group; the last group mixgrad opened also finalizes MPI (if
 * mixgrad initialized it). After an MPI call of the group failed it does
 * neither, as a collective may hang there: the process should exit with a
 * non-zero status, which ends the job. NULL is fine. */
void mx_dist_free(mx_process_group *g);

int mx_dist_rank(const mx_process_group *g);
int mx_dist_world_size(const mx_process_group *g);
/* This rank's index among the ranks on its machine (the GPU it takes). */
int mx_dist_local_rank(const mx_process_group *g);
/* Whether this build has an engine for several ranks (MPI). */
bool mx_dist_mpi_built(void);

/* Reduces t over the ranks in place: afterwards every rank's t holds the
 * same bits. t may have any layout and live on any device. On the CPU,
 * float16 and bfloat16 tensors are reduced in float32 and rounded once. A
 * CUDA tensor goes to NCCL, in its own dtype, with average as ncclAvg and
 * max and min as NCCL's (whose NaN handling mixgrad has not measured); the
 * call returns without waiting for the device (the CUDA stream does). The
 * group's first collective on a CUDA tensor makes its NCCL communicator on
 * every rank; an error there says why ("built without CUDA", "no CUDA
 * device", NCCL's own). */
mx_status mx_dist_all_reduce(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op op);
/* Every rank's t, stacked: a new tensor of shape (world_size, t's shape)
 * on t's device, rank r's t at index r (torch.distributed's
 * all_gather_into_tensor, stacked). The ranks' t must have the same dtype
 * and number of elements. Not differentiable. */
mx_tensor *mx_dist_all_gather(mx_process_group *g, const mx_tensor *t);
/* The reverse: t has shape (world_size, ...); returns a new tensor of
 * shape t's shape without the first dim, on rank r the reduction over the
 * ranks of their t[r] (torch.distributed's reduce_scatter_tensor). */
mx_tensor *mx_dist_reduce_scatter(mx_process_group *g, const mx_tensor *t, mx_dist_reduce_op op);
/* Copies root's t into every rank's t. */
mx_status mx_dist_broadcast(mx_process_group *g, mx_tensor *t, int root);
/* Returns when every rank has called it. */
mx_status mx_dist_barrier(mx_process_group *g);

/* --- asynchronous collectives ------------------------------------------------- */
typedef struct mx_dist_work mx_dist_work;
/* Starts mx_dist_all_reduce and returns at once, without waiting for the
 * other ranks; t must stay alive, and neither read nor written, until
 * mx_dist_wait. The ranks' calls are still compared before any data moves:
 * a mismatch is an error of mx_dist_wait (naming both calls), or of the
 * next start when this rank has already seen it. NULL on error. */
mx_dist_work *mx_dist_all_reduce_async(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op op);
/* Waits for the collective, leaves its result in the tensor and frees w. */
mx_status mx_dist_wait(mx_dist_work *w);

/* --- DistributedDataParallel, as two calls ------------------------------------ */
/* Copies root's parameters and buffers into every rank's module (the
 * modules must have the same parameters and buffers, in the same order). */
mx_status mx_ddp_broadcast_module(mx_process_group *g, mx_module *m, int root);
/* Replaces each parameter's gradient with its average over the ranks. A
 * parameter must have a gradient on every rank or on none; one that has
 * it on some ranks only is an error naming it. Call it after backward
 * and before the GradScaler or optimizer reads the gradients.
 *
 * The first call for a module averages after the fact, in buckets of up
 * to 25 MiB per dtype, and hooks its parameters (a post-accumulate-grad
 * hook, held by g until mx_dist_free): from then on, as in PyTorch's DDP,
 * each bucket (the last-registered parameters first, the first bucket
 * about 1 MiB, the others about 25 MiB) starts its all-reduce during
 * backward as soon as its gradients are in, and this call only starts
 * what backward left, waits and copies the averages out. So after the
 * first call, each backward through the module must be followed by this
 * call before the next backward. With one rank it returns at once, unless
 * the module has CUDA parameters: those still go through the buckets and
 * NCCL (an average over one rank leaves them as they were), as PyTorch's
 * DDP does at world size 1, and the rule above holds for them too. */
mx_status mx_ddp_average_gradients(mx_process_group *g, mx_module *m);
/* The GradScaler across ranks: unscales opt's gradients (mx_scaler_unscale)
 * and agrees whether any rank found inf or NaN with a max all-reduce of the
 * scaler's found-inf flag, so every rank's mx_scaler_step skips or steps
 * together, and every rank's mx_scaler_update backs off together. (An
 * overflow usually spreads through the average as well; this does not rely
 * on it.) Call it after mx_ddp_average_gradients and before
 * mx_scaler_step. A disabled scaler needs nothing: MX_OK. */
mx_status mx_ddp_unscale(mx_process_group *g, mx_scaler *s, mx_optimizer *opt);

MX_API_END

#endif
