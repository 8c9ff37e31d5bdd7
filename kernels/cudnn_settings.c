/* mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic and
 * mx_set_cudnn_benchmark: how cuDNN's convolutions run, process-wide flags the CUDA module reads
 * through its host table (kernels/cuda/cuda_backend.h) at each convolution; and the count of
 * convolutions cuDNN ran or declined, which the module keeps here through the same table. */
#include <stdatomic.h>

#include "kernels/base_internal.h"

static atomic_bool allow_tf32 = false;   /* exact float32 by default */
static atomic_bool deterministic = true; /* a run repeats its bits by default */
static atomic_bool benchmark = false;    /* cuDNN's heuristics choose, as PyTorch's default */

void mx_set_cudnn_allow_tf32(bool allow) { atomic_store(&allow_tf32, allow); }
bool mx_cudnn_allow_tf32(void) { return atomic_load(&allow_tf32); }
void mx_set_cudnn_deterministic(bool on) { atomic_store(&deterministic, on); }
bool mx_cudnn_deterministic(void) { return atomic_load(&deterministic); }
void mx_set_cudnn_benchmark(bool on) { atomic_store(&benchmark, on); }
bool mx_cudnn_benchmark(void) { return atomic_load(&benchmark); }

static atomic_llong cudnn_ran, cudnn_declined;

void mx__cudnn_count(bool ran) { atomic_fetch_add(ran ? &cudnn_ran : &cudnn_declined, 1); }

void mx__cudnn_counts(int64_t *ran, int64_t *declined) {
  *ran = atomic_load(&cudnn_ran);
  *declined = atomic_load(&cudnn_declined);
}
