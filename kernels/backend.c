/* Backend registration: the one place that knows whether CUDA was built.
 *
 * The CUDA backend is a module of its own, libmixgrad_cuda.so, loaded on
 * first use from the folder libmixgrad.so was loaded from (else by the
 * loader's search path): a program that never asks for a CUDA device never
 * maps the CUDA runtime, cuBLAS and cuDNN. The module is never unloaded (it
 * registers an atexit handler that destroys its cuBLAS handle). */
#include "kernels/backend.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "mx_config.h"
#if MX_HAVE_CUDA
#include "kernels/cuda/cuda_backend.h"
#include "kernels/elementwise.h"
#endif
#include "kernels/cuda/graph.h"
#include "kernels/cuda/nccl.h"

bool mx_cuda_built(void) { return MX_HAVE_CUDA; }

#if MX_HAVE_CUDA
#define CUDA_MODULE "libmixgrad_cuda.so"

/* What the module calls in this library (kernels/cuda/cuda_backend.h):
 * handed over, not exported, so that libmixgrad.so exports its public API only. */
static const mx__cuda_host host = {
    .error = mx__error,
    .last_error = mx_last_error,
    .last_status = mx_last_status,
    .dtype_size = mx_dtype_size,
    .dtype_name = mx_dtype_name,
    .dtype_is_floating = mx_dtype_is_floating,
    .kview_numel = mx__kview_numel,
    .kview_is_contiguous = mx__kview_is_contiguous,
    .kview_is_channels_last = mx__kview_is_channels_last,
    .channels_last_strides = mx__channels_last_strides,
    .unary_has_int = mx__unary_has_int,
    .binary_has_int = mx__binary_has_int,
    .conv_check = mx__conv_check,
    .cudnn_allow_tf32 = mx_cudnn_allow_tf32,
    .cudnn_deterministic = mx_cudnn_deterministic,
    .cudnn_benchmark = mx_cudnn_benchmark,
    .cudnn_count = mx__cudnn_count,
};

/* kernels/cuda/cuda_backend.h's entry points, found in the module. */
static struct {
  int (*device_count)(void);
  const mx_backend *(*get)(void);
  const mx__nccl_api *(*nccl)(void); /* kernels/cuda/nccl.h */
  const mx__cuda_graph_api *(*graph)(void); /* kernels/cuda/graph.h */
} cuda;
static int preferred_local_rank = -1; /* the device the backend starts on, when a process group said */
static char load_error[512]; /* why the module could not be used */
static pthread_once_t load_once = PTHREAD_ONCE_INIT;

/* The function named in handle, in fn (a function pointer's bytes: ISO C
 * has no cast from dlsym's object pointer); false when missing. */
static bool find(void *handle, const char *name, void *fn, size_t fn_size) {
  void *sym = dlsym(handle, name);
  if (sym) memcpy(fn, &sym, fn_size);
  return sym != NULL;
}

static void load(void) {
  void (*init)(const mx__cuda_host *host);
  char path[4096] = CUDA_MODULE;
  Dl_info self;
  if (dladdr(&load_once, &self) /* any address in this library */ && self.dli_fname && strrchr(self.dli_fname, '/')) {
    int dir = (int)(strrchr(self.dli_fname, '/') - self.dli_fname) + 1;
    snprintf(path, sizeof path, "%.*s%s", dir, self.dli_fname, CUDA_MODULE);
  }
  void *handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!handle && strcmp(path, CUDA_MODULE) != 0) handle = dlopen(CUDA_MODULE, RTLD_NOW | RTLD_LOCAL);
  if (!handle) {
    snprintf(load_error, sizeof load_error, "%s", dlerror());
  } else if (!find(handle, "mx__cuda_init", &init, sizeof init) ||
             !find(handle, "mx__cuda_device_count", &cuda.device_count, sizeof cuda.device_count) ||
             !find(handle, "mx__cuda_backend_get", &cuda.get, sizeof cuda.get) ||
             !find(handle, "mx__nccl_get", &cuda.nccl, sizeof cuda.nccl) ||
             !find(handle, "mx__cuda_graph_get", &cuda.graph, sizeof cuda.graph)) {
    snprintf(load_error, sizeof load_error, "%s lacks the backend's entry points", path);
    cuda.device_count = NULL, cuda.get = NULL, cuda.nccl = NULL, cuda.graph = NULL;
  } else {
    init(&host);
    /* before the backend starts (on this thread's current device) */
    if (preferred_local_rank >= 0 && cuda.nccl()->select_device(preferred_local_rank) != MX_OK) {
      snprintf(load_error, sizeof load_error, "%s", mx_last_error());
      cuda.device_count = NULL, cuda.get = NULL, cuda.nccl = NULL;
    }
  }
}

static bool loaded(void) {
  pthread_once(&load_once, load);
  return cuda.get != NULL;
}

int mx_cuda_device_count(void) { return loaded() ? cuda.device_count() : 0; }

static const mx_backend *cuda_backend(void) {
  if (loaded()) return cuda.get();
  mx__error(MX_NOT_BUILT, "cannot use device 'cuda': the CUDA backend did not load (%s)", load_error);
  return NULL;
}

const mx__nccl_api *mx__cuda_nccl(void) { return cuda_backend() ? cuda.nccl() : NULL; }

const mx__cuda_graph_api *mx__cuda_graph(void) { return cuda_backend() ? cuda.graph() : NULL; }

void mx__cuda_prefer_local_rank(int local_rank) { preferred_local_rank = local_rank; }
#else
int mx_cuda_device_count(void) { return 0; }

static const mx_backend *cuda_backend(void) {
  mx__error(MX_NOT_BUILT, "mixgrad was built without CUDA: cannot use device 'cuda' "
                          "(rebuild with -Dcuda=enabled)");
  return NULL;
}

const mx__nccl_api *mx__cuda_nccl(void) {
  (void)cuda_backend(); /* the error: built without CUDA */
  return NULL;
}

const mx__cuda_graph_api *mx__cuda_graph(void) {
  (void)cuda_backend(); /* the error: built without CUDA */
  return NULL;
}

void mx__cuda_prefer_local_rank(int local_rank) { (void)local_rank; }
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

mx_status mx_synchronize(mx_device device) {
  const mx_backend *backend = mx__backend(device);
  mx_status st = backend ? backend->synchronize() : mx_last_status();
  return st == MX_OK ? MX_OK : mx__error_prefix("mx_synchronize");
}

const char *mx__kernel_name(mx_kernel kernel) {
  static const char *const names[] = {
#define MX__KERNEL_NAME(E, slot) #slot,
      MX_KERNEL_MAP(MX__KERNEL_NAME)
#undef MX__KERNEL_NAME
  };
  return (unsigned)kernel < MX_KERNEL_COUNT ? names[kernel] : "?";
}

static bool has_slot(const mx_backend *be, mx_kernel kernel) {
  switch (kernel) {
#define MX__KERNEL_SLOT(E, slot) \
  case MX_KERNEL_##E: return be->slot != NULL;
    MX_KERNEL_MAP(MX__KERNEL_SLOT)
#undef MX__KERNEL_SLOT
  default: return false;
  }
}

mx_kernel_support mx__backend_supports(const mx_backend *be, mx_kernel kernel, mx_dtype dtype) {
  if (!has_slot(be, kernel)) return MX_KERNEL_NOT_BUILT;
  return be->supports ? be->supports(kernel, dtype) : MX_KERNEL_NATIVE;
}
