/* mx_set_cudnn_allow_tf32, mx_set_cudnn_deterministic and
 * mx_set_cudnn_benchmark: how cuDNN's convolutions run, process-wide flags the CUDA module reads
 * through its host table (kernels/cuda/cuda_backend.h) at each convolution. */
#include <stdatomic.h>

#include "kernels/base.h"

static atomic_bool allow_tf32 = false;   /* exact float32 by default */
static atomic_bool deterministic = true; /* a run repeats its bits by default */
static atomic_bool benchmark = false;    /* cuDNN's heuristics choose, as PyTorch's default */

void mx_set_cudnn_allow_tf32(bool allow) { atomic_store(&allow_tf32, allow); }
bool mx_cudnn_allow_tf32(void) { return atomic_load(&allow_tf32); }
void mx_set_cudnn_deterministic(bool on) { atomic_store(&deterministic, on); }
bool mx_cudnn_deterministic(void) { return atomic_load(&deterministic); }
void mx_set_cudnn_benchmark(bool on) { atomic_store(&benchmark, on); }
bool mx_cudnn_benchmark(void) { return atomic_load(&benchmark); }
