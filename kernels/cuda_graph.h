/* CUDA Graphs: a whole training step (forward, backward, GradScaler unscale
 * and update, optimizer step) captured once and replayed with one launch,
 * as torch.cuda.graphs does for static shapes.
 *
 *     // the step reads static_x, static_y and leaves its loss in ctx's static_loss
 *     mx_cuda_graph *g = mx_cuda_graph_capture(train_step, &ctx, 3);
 *     for (each batch) {
 *       mx_copy_(static_x, batch_x);            // inputs copied into the same tensors
 *       mx_copy_(static_y, batch_y);
 *       mx_cuda_graph_replay(g);                // the whole step, no host work
 *     }
 *     mx_cuda_graph_free(g);
 *
 * mx_cuda_graph_capture runs `warmup` steps eagerly first (they are real
 * steps: they train), waits for them, then captures one more call of the
 * step on mixgrad's CUDA stream without running it. While it is captured,
 * the tensors the step makes come from a memory pool private to the graph,
 * kept until the graph is freed and no tensor uses it, so the tensors the
 * step leaves behind (a loss kept in ctx, the gradients) are the graph's
 * static outputs: every replay rewrites them in place.
 *
 * What a replay repeats is the device work of the captured call, with the
 * addresses and the host values it had then:
 *  - inputs are read from the tensors the capture read: copy new data into
 *    them (mx_copy_), never replace them, and keep them alive;
 *  - host-side numbers are fixed at capture: an optimizer's hyper-parameters
 *    (a schedule that changes the learning rate after capture does not reach
 *    the graph), a GradScaler's options, and the random generator's state,
 *    so random ops (dropout) draw the same numbers in every replay. What changes per step is kept on
 *    the device: the Adam/SGD step counts and bias corrections, the loss
 *    scale, the GradScaler's found_inf, on which the optimizer skips a step
 *    and the scale backs off without the host;
 *  - the step may not read device memory on the host or wait for the device
 *    (mx_item, mx_to_host, mx_synchronize, mx_scaler_step with an info,
 *    max_consecutive_skips), nor copy host data in (mx_from_data,
 *    mx_to_device): those fail with a message saying so, and the capture
 *    fails naming it. Class-index targets (cross entropy) are not range
 *    checked on the host while captured: an out-of-range index is skipped
 *    by the kernel.
 *
 * One capture at a time in the process; a step must not capture, replay or
 * free a graph. */
#ifndef MX_KERNELS_GRAPH_CAPTURE_API_H
#define MX_KERNELS_GRAPH_CAPTURE_API_H

#include <stdbool.h>

#include "kernels/base.h"

MX_API_BEGIN

typedef struct mx_cuda_graph mx_cuda_graph;

/* One training step on CUDA tensors: MX_OK, or the error set. */
typedef mx_status (*mx_cuda_graph_step)(void *ctx);

/* warmup (>= 0; 3 is PyTorch's advice) eager steps, then one captured;
 * NULL with the error set: MX_NOT_SUPPORTED without CUDA (a build without
 * it, or no device), the step's own error (warm-up or capture), or the
 * CUDA call that failed. */
mx_cuda_graph *mx_cuda_graph_capture(mx_cuda_graph_step step, void *ctx, int warmup);
/* Launches the captured step on mixgrad's stream and returns without
 * waiting (the next host read of a tensor waits). MX_STATE_ERROR on a freed
 * graph. */
mx_status mx_cuda_graph_replay(mx_cuda_graph *g);
/* Waits for the graph's launches and frees it (NULL: nothing). */
void mx_cuda_graph_free(mx_cuda_graph *g);
/* Whether a capture is in progress (ops skip their host-side checks then). */
bool mx_cuda_graph_capturing(void);

MX_API_END

#endif
