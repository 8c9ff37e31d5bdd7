/* Data parallelism across processes, like torch.distributed with
 * DistributedDataParallel: N processes (ranks) each hold the whole model,
 * train on their own share of every batch, and average their gradients
 * before each optimizer step, so every rank takes the same step.
 *
 *     mx_process_group *g = mx_dist_init_from_env(0);     // RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 *     mx_ddp_broadcast_module(g, net, 0);                  // every rank starts from rank 0's weights
 *     for (each step) {                                    // on this rank's share of the batch
 *       mx_backward(mx_scaler_scale(scaler, loss), NULL, false);
 *       mx_ddp_average_gradients(g, net);                  // before the scaler unscales them
 *       mx_scaler_step(scaler, opt, NULL);                 // ranks skip or step together
 *       mx_scaler_update(scaler);
 *     }
 *     mx_dist_free(g);
 *
 * `scripts/launch N PROGRAM ARGS...` starts N ranks of a program on this
 * machine (with --nnodes and --node-rank, on each of several machines).
 * The ranks talk over TCP in a ring (each rank sends to the next): an
 * all-reduce moves 2(N-1)/N of the tensor through every link, the ring
 * algorithm of Baidu's allreduce, Horovod and NCCL. The sums are reduced
 * chunk by chunk in one order that every rank then copies, so all ranks get
 * the same bits. Tensors on a CUDA device go through host memory.
 *
 * A group serves one thread at a time, and every rank must call the same
 * collectives in the same order with tensors of the same dtype and size;
 * a rank that differs gets an error naming both calls, and a peer that
 * exits or stays silent past the timeout gives an error, never a hang.
 * After an error the group is broken: every later call fails, and the
 * other ranks' calls fail as soon as they reach it.
 */
#ifndef MX_DIST_DIST_H
#define MX_DIST_DIST_H

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

/* Joins rank `rank` of `world_size` processes, meeting the others at
 * master_addr:master_port, where rank 0 listens (a name or an IPv4
 * address). Returns when the ring is connected, or NULL after
 * timeout_seconds (0: 1800, PyTorch's default) with the error set. A
 * world of one needs no network (master_addr may be NULL). Connections to
 * the master port that are not mixgrad ranks (a port scanner, say) are
 * dropped, and the timeout's error counts them. */
mx_process_group *mx_dist_init(int rank, int world_size, const char *master_addr, int master_port,
                               double timeout_seconds);
/* The same from torchrun's variables RANK, WORLD_SIZE, MASTER_ADDR and
 * MASTER_PORT. Without WORLD_SIZE, a world of one. */
mx_process_group *mx_dist_init_from_env(double timeout_seconds);
/* Closes the connections (the other ranks' next calls fail). NULL is fine. */
void mx_dist_free(mx_process_group *g);

int mx_dist_rank(const mx_process_group *g);
int mx_dist_world_size(const mx_process_group *g);

/* Reduces t over the ranks in place: afterwards every rank's t holds the
 * same result. t may have any layout and live on any device. */
mx_status mx_dist_all_reduce(mx_process_group *g, mx_tensor *t, mx_dist_reduce_op op);
/* Every rank's t, stacked: a new tensor of shape (world_size, t's shape)
 * on t's device, rank r's t at index r (torch.distributed's
 * all_gather_into_tensor, stacked). The ranks' t must have the same dtype
 * and number of elements. Not differentiable. */
mx_tensor *mx_dist_all_gather(mx_process_group *g, const mx_tensor *t);
/* Copies root's t into every rank's t. */
mx_status mx_dist_broadcast(mx_process_group *g, mx_tensor *t, int root);
/* Returns when every rank has called it. */
mx_status mx_dist_barrier(mx_process_group *g);

/* --- DistributedDataParallel, as two calls ------------------------------------ */
/* Copies root's parameters and buffers into every rank's module (the
 * modules must have the same parameters and buffers, in the same order). */
mx_status mx_ddp_broadcast_module(mx_process_group *g, mx_module *m, int root);
/* Replaces each parameter's gradient with its average over the ranks, in
 * buckets of at most 25 MiB per dtype (PyTorch's bucket_cap_mb). A
 * parameter must have a gradient on every rank or on none; one that has
 * it on some ranks only is an error naming it. Call it after backward
 * and before the GradScaler or optimizer reads the gradients: a gradient
 * that overflowed on one rank then overflows on all, so every rank skips
 * that step together. */
mx_status mx_ddp_average_gradients(mx_process_group *g, mx_module *m);

MX_API_END

#endif
