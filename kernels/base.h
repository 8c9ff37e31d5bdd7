/* The vocabulary every room shares: dtypes, devices, status codes, the
 * thread-local error message, and the strided view a kernel receives.
 *
 * Errors work like errno with words. A function that fails returns NULL (or a
 * status other than MX_OK) and leaves a message naming the op and the values:
 *
 *     mx_tensor *y = mx_reshape(x, MX_SHAPE(4, 5));
 *     if (!y) fprintf(stderr, "%s\n", mx_last_error());
 *     // mx_reshape: shape [4,5] is invalid for input of size 6
 *
 * The message stays until mx_clear_error(); an op handed a NULL input keeps
 * the first message, so a whole forward pass can be checked once at the end.
 */
#ifndef MX_KERNELS_BASE_H
#define MX_KERNELS_BASE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/api.h"

MX_API_BEGIN

#define MX_MAX_DIMS 8

/* dtypes: X(NAME, C storage type, bytes, name as printed) */
#define MX_DTYPE_MAP(X)                 \
  X(F32, float, 4, "float32")           \
  X(F64, double, 8, "float64")          \
  X(F16, uint16_t, 2, "float16")        \
  X(BF16, uint16_t, 2, "bfloat16")      \
  X(I64, int64_t, 8, "int64")           \
  X(I32, int32_t, 4, "int32")           \
  X(U8, uint8_t, 1, "uint8")            \
  X(BOOL, bool, 1, "bool")

typedef enum {
#define MX__DTYPE_ENUM(name, ctype, size, str) MX_##name,
  MX_DTYPE_MAP(MX__DTYPE_ENUM)
#undef MX__DTYPE_ENUM
  MX_DTYPE_COUNT
} mx_dtype;

size_t mx_dtype_size(mx_dtype dtype);
const char *mx_dtype_name(mx_dtype dtype); /* "float32", "bfloat16", ... */
bool mx_dtype_is_floating(mx_dtype dtype);
bool mx_dtype_valid(mx_dtype dtype);

/* Devices. CUDA tensors live on the process's current CUDA device. */
typedef enum { MX_CPU, MX_CUDA, MX_DEVICE_COUNT } mx_device;
const char *mx_device_name(mx_device device); /* "cpu", "cuda" */
/* Whether this build of mixgrad includes the CUDA backend. */
bool mx_cuda_built(void);
/* CUDA devices usable now: 0 without a GPU, or in a build without CUDA. */
int mx_cuda_device_count(void);

/* Status codes: X(NAME, description) */
#define MX_STATUS_MAP(X)                                   \
  X(OK, "success")                                         \
  X(INVALID_ARGUMENT, "invalid argument")                  \
  X(NULL_INPUT, "NULL input")                              \
  X(SHAPE_ERROR, "invalid or mismatched shape")            \
  X(DTYPE_ERROR, "unsupported or mismatched dtype")        \
  X(DEVICE_ERROR, "device mismatch or unavailable device") \
  X(INDEX_ERROR, "index out of range")                     \
  X(OUT_OF_MEMORY, "out of memory")                        \
  X(NO_CUDA_DEVICE, "no CUDA device")                      \
  X(NOT_BUILT, "feature not built in")                     \
  X(BACKEND_ERROR, "backend library call failed")          \
  X(IO_ERROR, "file input/output failed")                  \
  X(CORRUPT_DATA, "corrupt or truncated data")             \
  X(STATE_ERROR, "operation not allowed in this state")    \
  X(NOT_SUPPORTED, "not supported on this machine")

typedef enum {
#define MX__STATUS_ENUM(name, desc) MX_##name,
  MX_STATUS_MAP(MX__STATUS_ENUM)
#undef MX__STATUS_ENUM
  MX_STATUS_COUNT
} mx_status;

const char *mx_status_str(mx_status status);

/* The calling thread's last error: message ("" if none) and status. */
const char *mx_last_error(void);
mx_status mx_last_status(void);
void mx_clear_error(void);

/* Waits until the device has finished the work queued on it (CUDA runs
 * kernels asynchronously; the CPU has nothing to wait for). Timing GPU work
 * needs it: a clock read right after a call measures only the launch. */
mx_status mx_synchronize(mx_device device);

/* The threads the CPU kernels (OpenMP loops and oneDNN) use, for every
 * thread of the process that calls mixgrad. The default is the
 * environment's MX_NUM_THREADS, else OpenMP's (OMP_NUM_THREADS, else one
 * per core). When nothing sets the count or how OpenMP's threads wait
 * (OMP_WAIT_POLICY), the kernels use fewer while other programs keep the
 * cores busy, and the full count again once they stop (README: "Threads");
 * a count set here or in the environment is used as it is. n from 1 to
 * 1024; a build without OpenMP runs on one thread whatever is set.
 * mx_num_threads says the count set or the default, not a smaller one a
 * busy machine makes the kernels use for a while. */
mx_status mx_set_num_threads(int n);
int mx_num_threads(void);

/* cuDNN's numerics for convolutions on CUDA, process-wide (like PyTorch's
 * torch.backends.cudnn globals); each convolution reads them when it runs,
 * from any thread. No effect on the CPU backend.
 *
 * mx_set_cudnn_allow_tf32 mirrors torch.backends.cudnn.allow_tf32: when
 * true, float32 convolutions may run on TF32 tensor cores (products of
 * inputs rounded to a 10-bit mantissa, float32 accumulation), roughly 1e-3
 * relative error per product against float32's 1e-7. Default false, unlike
 * PyTorch (true): mixgrad's float32 is exact float32 on the GPU as on the
 * CPU. float16 and bfloat16 always use tensor cores and float64 never does,
 * whatever is set; matrix products (cuBLAS) never use TF32 either way.
 *
 * mx_set_cudnn_deterministic mirrors torch.backends.cudnn.deterministic:
 * when true, the first of cuDNN's ranked algorithms that fits and is
 * deterministic is taken, so a run repeats its own bits as on the CPU
 * (should none fit, the first that fits: unlike PyTorch, mixgrad does not
 * fail); when false, the first that fits, which may sum in a different
 * order from run to run (atomics) and is often faster. Default true, unlike PyTorch
 * (false), for the same repeatability. */
void mx_set_cudnn_allow_tf32(bool allow);
bool mx_cudnn_allow_tf32(void);
void mx_set_cudnn_deterministic(bool on);
bool mx_cudnn_deterministic(void);
/* mx_set_cudnn_benchmark mirrors torch.backends.cudnn.benchmark: when true,
 * the first convolution of each geometry times every algorithm cuDNN has
 * for it on the operands themselves (cudnnFind*AlgorithmEx) and keeps the
 * fastest allowed by the two settings above; when false (the default, as
 * PyTorch's), cuDNN's heuristics rank them without running any. The timing
 * costs milliseconds to seconds per new geometry, so it pays where shapes
 * repeat (training at a fixed batch size). The two settings above hold
 * either way; what changes is that the choice rests on timings, so two runs
 * may choose differently and their float32 results differ in the last bits
 * (as PyTorch's do); within a run, each geometry keeps its choice. A
 * geometry first met inside a CUDA graph's capture takes the heuristics'
 * choice there (timing waits for the device, which a capture cannot hold)
 * and is timed at its next run outside one. */
void mx_set_cudnn_benchmark(bool on);
bool mx_cudnn_benchmark(void);

MX_API_END

#endif
