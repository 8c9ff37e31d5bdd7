/* Lifetimes: reference counts plus scopes, so a training loop frees every
 * intermediate without naming it.
 *
 *     for (int step = 0; step < steps; step++) {
 *       mx_scope *s = mx_scope_begin();
 *       mx_tensor *loss = forward(model, batch);    // many temporaries
 *       total = mx_keep(mx_clone(loss));            // survives this scope
 *       mx_scope_end(s);                            // frees the rest
 *     }
 *
 * A handle made while a scope is open on this thread belongs to the
 * innermost scope; one made outside any scope belongs to the caller, who
 * releases it with mx_release. Storage shared by views lives until its last
 * view is gone, and (later) the autograd graph holds references of its own,
 * so releasing a handle never breaks a backward pass.
 */
#ifndef MX_TENSOR_SCOPE_H
#define MX_TENSOR_SCOPE_H

#include "tensor/tensor.h"

MX_API_BEGIN

typedef struct mx_scope mx_scope;

mx_scope *mx_scope_begin(void);
/* Releases every handle the scope still owns. Scopes nest; ending one ends
 * any inner scope still open on this thread. */
void mx_scope_end(mx_scope *scope);
/* Moves t's handle to the enclosing scope (or to the caller, outside any
 * scope) so it outlives the current one. Returns t. */
mx_tensor *mx_keep(mx_tensor *t);
/* Releases the handle now, whichever scope owns it. NULL is ignored. */
void mx_release(mx_tensor *t);

/* Allocation statistics per device, like torch.cuda.memory_allocated and
 * max_memory_allocated. */
typedef struct {
  int64_t bytes_in_use;  /* storage bytes allocated now */
  int64_t peak_bytes;    /* the most in use since start or the last reset */
  int64_t live_tensors;  /* tensor handles alive (views included) */
  int64_t live_storages; /* storages alive */
  int64_t allocations;   /* storage allocations ever made */
} mx_memory_stats;

mx_memory_stats mx_memory_stats_get(mx_device device);
void mx_memory_reset_peak(mx_device device);
/* Gives the memory a device's allocator keeps for reuse back to the system
 * (like torch.cuda.empty_cache). The CPU keeps freed blocks for the next
 * tensors of their size, up to MX_CPU_CACHE_BYTES (default 1 GiB; 0: keep
 * none); CUDA's stream-ordered pool keeps what it frees. bytes_in_use
 * counts neither. */
mx_status mx_memory_empty_cache(mx_device device);

MX_API_END

#endif
