/* Backend registration: the one place that knows whether CUDA was built. */
#include "kernels/backend.h"
#include "mx_config.h"

#if MX_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#endif

bool mx_cuda_built(void) { return MX_HAVE_CUDA; }

#if MX_HAVE_CUDA
int mx_cuda_device_count(void) { return mx__cuda_device_count(); }

static const mx_backend *cuda_backend(void) { return mx__cuda_backend_get(); }
#else
int mx_cuda_device_count(void) { return 0; }

static const mx_backend *cuda_backend(void) {
  mx__error(MX_NOT_BUILT, "mixgrad was built without CUDA: cannot use device 'cuda' "
                          "(rebuild with -Dcuda=enabled)");
  return NULL;
}
#endif

const mx_backend *mx__backend(mx_device device) {
  switch (device) {
  case MX_CPU: return &mx__cpu_backend;
  case MX_CUDA: return cuda_backend();
  default:
    mx__error(MX_DEVICE_ERROR, "invalid device %d (expected MX_CPU or MX_CUDA)", (int)device);
    return NULL;
  }
}
