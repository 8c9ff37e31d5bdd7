/* The CUDA backend: memory from CUDA's stream-ordered pool; the vtable of every
 * CUDA kernel (the kernels are in the files beside this one). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>

#include "kernels/backend.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/graph.h"
#include "kernels/math.h"

/* --- state, set up once ------------------------------------------------------ */

static struct {
  mx_status status;    /* of the initialisation: MX_OK once the backend is usable */
  char error[768];     /* why it is not (the message is thread-local; this is kept) */
  int device;          /* the CUDA device current when the backend was set up */
  cudaStream_t stream; /* every allocation, copy and kernel goes on this stream */
  cublasHandle_t blas; /* cuBLAS on that stream (one handle: host threads share it, as the stream) */
  int max_blocks;      /* grid size cap for the grid-stride loops */
  mx_backend vtable;   /* slots this backend lacks stay NULL: supports() answers "not built" */
} cuda;

static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

cudaStream_t mx__cuda_stream(void) { return cuda.stream; }

int mx__cuda_max_blocks(void) { return cuda.max_blocks; }

cublasHandle_t mx__cuda_blas(void) { return cuda.blas; }

int mx__cuda_device_count(void) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError(); /* no driver or no device: not an error to keep */
    return 0;
  }
  return count;
}

/* --- memory: the device's default pool, stream-ordered -------------------------- */

/* While a CUDA graph is captured, tensors come from its private pool and
 * frees are the pools' (kernels/cuda/graph.cu). */
static mx_status cuda_alloc(size_t bytes, void **out) {
  *out = NULL;
  mx_status pooled;
  if (mx__cuda_graph_take_alloc(bytes, out, &pooled)) return pooled;
  /* an empty tensor still gets a real, distinct pointer */
  mx_status status = MX_CUDA_STATUS(cudaMallocAsync(out, bytes ? bytes : 1, cuda.stream));
  if (status != MX_OK) {
    char why[640];
    snprintf(why, sizeof why, "%s", mx_last_error());
    *out = NULL;
    return mx__error(status, "cuda: allocating %zu bytes: %s", bytes, why);
  }
  return MX_OK;
}

static void cuda_free(void *ptr, size_t bytes) {
  if (!ptr || mx__cuda_graph_take_free(ptr, bytes)) return;
  cudaError_t err = cudaFreeAsync(ptr, cuda.stream);
  if (err == cudaSuccess) return;
  /* free cannot fail upward: record it unless an earlier error is pending,
   * which stays the one reported */
  if (mx_last_status() == MX_OK)
    (void)mx__cuda_status(err, "cudaFreeAsync(ptr, cuda.stream)", __FILE__, __LINE__);
  else
    (void)cudaGetLastError();
}

/* The pool keeps freed blocks (release threshold: all); hand them back once
 * the stream has reached every free queued on it. */
static mx_status cuda_empty_cache(void) {
  MX__RETURN_IF_FAILED(mx__cuda_refuse_during_capture("emptying the memory cache", 0));
  MX_CUDA_CHECK(cudaStreamSynchronize(cuda.stream));
  cudaMemPool_t pool;
  MX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cuda.device));
  MX_CUDA_CHECK(cudaMemPoolTrimTo(pool, 0));
  return MX_OK;
}

/* A few host bytes written by a kernel that carries them in its argument:
 * how the 0-d CPU scalars ops move to the device (a constant such as batch
 * norm's eps or cross entropy's ignore_index) reach it. The launch queues
 * on the stream like any kernel: the host neither waits for the device nor
 * keeps the bytes, and a captured graph holds them, fixed at capture (a
 * copy of pageable host memory cannot be captured). */
#define HOST_BYTES_IN_ARGUMENT 16
struct host_bytes {
  unsigned char b[HOST_BYTES_IN_ARGUMENT];
};

__global__ void write_host_bytes(unsigned char *dst, host_bytes v, unsigned n) {
  if (threadIdx.x < n) dst[threadIdx.x] = v.b[threadIdx.x];
}

/* Host buffers are pageable user memory: wait for a copy before returning,
 * so the caller may reuse or free them at once. */
static mx_status cuda_copy_from_host(void *dst, const void *src, size_t bytes) {
  if (!bytes) return MX_OK;
  if (bytes <= HOST_BYTES_IN_ARGUMENT) {
    host_bytes v;
    memcpy(v.b, src, bytes);
    write_host_bytes<<<1, HOST_BYTES_IN_ARGUMENT, 0, cuda.stream>>>((unsigned char *)dst, v, (unsigned)bytes);
    MX_CUDA_CHECK_LAUNCH("launch of kernel write_host_bytes");
    return MX_OK;
  }
  MX__RETURN_IF_FAILED(mx__cuda_refuse_during_capture("copying from the host to the device", bytes));
  MX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cuda.stream));
  MX_CUDA_CHECK(cudaStreamSynchronize(cuda.stream));
  return MX_OK;
}

static mx_status cuda_copy_to_host(void *dst, const void *src, size_t bytes) {
  if (!bytes) return MX_OK;
  MX__RETURN_IF_FAILED(mx__cuda_refuse_during_capture("copying from the device to the host", bytes));
  MX_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cuda.stream));
  MX_CUDA_CHECK(cudaStreamSynchronize(cuda.stream));
  return MX_OK;
}

static mx_status cuda_synchronize(void) {
  MX__RETURN_IF_FAILED(mx__cuda_refuse_during_capture("waiting for the device", 0));
  MX_CUDA_CHECK(cudaStreamSynchronize(cuda.stream));
  return MX_OK;
}

/* --- initialisation ------------------------------------------------------------------ */

/* At exit, before the CUDA runtime's own teardown (registered earlier, so
 * run later): cuBLAS's workspace goes back, and a leak checker
 * (compute-sanitizer --leak-check full) sees every allocation freed. */
static void release_blas(void) { (void)cublasDestroy(cuda.blas); }

static mx_status cuda_init(void) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) { /* cudaErrorNoDevice, cudaErrorInsufficientDriver, ... */
    (void)cudaGetLastError();
    return mx__error(MX_NO_CUDA_DEVICE, "no CUDA device: %s (%s from cudaGetDeviceCount)",
                     cudaGetErrorString(err), cudaGetErrorName(err));
  }
  if (count == 0)
    return mx__error(MX_NO_CUDA_DEVICE, "no CUDA device: the CUDA runtime reports 0 devices");

  MX_CUDA_CHECK(cudaGetDevice(&cuda.device));
  int pools = 0, sms = 0;
  MX_CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, cuda.device));
  if (!pools)
    return mx__error(MX_BACKEND_ERROR,
                     "cuda: device %d does not support stream-ordered memory pools (cudaMallocAsync)",
                     cuda.device);
  MX_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, cuda.device));
  cuda.max_blocks = (sms > 0 ? sms : 1) * 32;

  /* Freed memory stays in the pool for the next allocation instead of going
   * back to the driver at each synchronisation. */
  cudaMemPool_t pool;
  MX_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, cuda.device));
  uint64_t threshold = UINT64_MAX; /* the attribute's value type is cuuint64_t */
  MX_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));

  MX_CUDA_CHECK(cudaStreamCreateWithFlags(&cuda.stream, cudaStreamNonBlocking));

  /* cuBLAS for the matrix products (float32 without TF32: its default
   * math mode), and cuDNN answers (the convolution kernels will use it) */
  MX_CUBLAS_CHECK(cublasCreate(&cuda.blas));
  MX_CUBLAS_CHECK(cublasSetStream(cuda.blas, cuda.stream));
  atexit(release_blas);
  int dnn_major = 0;
  MX_CUDNN_CHECK(cudnnGetProperty(MAJOR_VERSION, &dnn_major));

  mx_backend *b = &cuda.vtable;
  b->name = "cuda";
  b->device = MX_CUDA;
  b->alloc = cuda_alloc;
  b->free = cuda_free;
  b->empty_cache = cuda_empty_cache;
  b->copy_from_host = cuda_copy_from_host;
  b->copy_to_host = cuda_copy_to_host;
  b->synchronize = cuda_synchronize;
  b->fill = mx__cuda_fill;
  b->convert = mx__cuda_convert;
  b->random = mx__cuda_random;
  b->bernoulli = mx__cuda_bernoulli;
  b->unary = mx__cuda_unary;
  b->binary = mx__cuda_binary;
  b->where = mx__cuda_where;
  b->reduce = mx__cuda_reduce;
  b->scan = mx__cuda_scan;
  b->sort = mx__cuda_sort;
  b->matmul = mx__cuda_matmul;
  b->linear = mx__cuda_linear;
  b->softmax = mx__cuda_softmax;
  b->cross_entropy = mx__cuda_cross_entropy;
  b->cross_entropy_backward = mx__cuda_cross_entropy_backward;
  b->gather = mx__cuda_gather;
  b->scatter = mx__cuda_scatter;
  b->index_select = mx__cuda_index_select;
  b->index_add = mx__cuda_index_add;
  b->conv_forward = mx__cuda_conv_forward;
  b->conv_backward_data = mx__cuda_conv_backward_data;
  b->conv_backward_weight = mx__cuda_conv_backward_weight;
  b->conv_backward_weight_bias = mx__cuda_conv_backward_weight_bias;
  b->channel_affine = mx__cuda_channel_affine;
  b->channel_sums = mx__cuda_channel_sums;
  b->channel_moments = mx__cuda_channel_moments;
  b->channel_combine = mx__cuda_channel_combine;
  b->batch_norm_vectors = mx__cuda_batch_norm_vectors;
  b->max_pool = mx__cuda_max_pool;
  b->max_pool_backward = mx__cuda_max_pool_backward;
  b->avg_pool = mx__cuda_avg_pool;
  b->avg_pool_backward = mx__cuda_avg_pool_backward;
  b->amp_unscale = mx__cuda_amp_unscale;
  b->amp_update_scale = mx__cuda_amp_update_scale;
  b->amp_histogram = mx__cuda_amp_histogram;
  b->amp_unscale_histogram = mx__cuda_amp_unscale_histogram;
  b->sgd_step = mx__cuda_sgd_step;
  b->adam_step = mx__cuda_adam_step;
  b->optim_casts = true;
  return MX_OK;
}

static void cuda_init_once(void) {
  cuda.status = cuda_init();
  if (cuda.status != MX_OK) snprintf(cuda.error, sizeof cuda.error, "%s", mx_last_error());
}

const mx_backend *mx__cuda_backend_get(void) {
  int rc = pthread_once(&cuda_once, cuda_init_once);
  if (rc != 0) {
    mx__error(MX_BACKEND_ERROR, "cuda: pthread_once failed (error %d)", rc);
    return NULL;
  }
  if (cuda.status != MX_OK) {
    mx__error(cuda.status, "%s", cuda.error);
    return NULL;
  }
  return &cuda.vtable;
}
