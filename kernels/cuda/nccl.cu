/* NCCL for dist/'s collectives on CUDA tensors (kernels/cuda/nccl.h): one
 * communicator per process group, on a communication stream of its own that
 * CUDA events fence against the backend's compute stream, so no call here
 * waits on the host (but comm_create and destroy). */
#include <stdlib.h>
#include <string.h>

#include <cuda_runtime.h>
#include <nccl.h>

#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/nccl.h"

static_assert(MX__NCCL_ID_BYTES == NCCL_UNIQUE_ID_BYTES, "nccl.h's id size is NCCL's");

struct mx__nccl_comm {
  ncclComm_t comm;
  int device;          /* the backend's device, the communicator's */
  cudaStream_t stream; /* the collectives' stream */
  cudaEvent_t ready;   /* recorded on the compute stream before each collective */
  bool aborted;        /* ncclCommAbort freed comm */
};

struct mx__nccl_done {
  cudaEvent_t event; /* recorded on the communication stream after the collective */
};

/* An NCCL result as an mx status, the message naming the call and where,
 * with NCCL's own last error (which says more than the result's string). */
static mx_status nccl_status(ncclResult_t r, const char *call, const char *file, int line) {
  if (r == ncclSuccess) return MX_OK;
  return mx__error(MX_BACKEND_ERROR, "%s failed at %s:%d: %s (ncclResult_t = %d; NCCL says: %s)", call, file, line,
                   ncclGetErrorString(r), (int)r, ncclGetLastError(NULL));
}
#define MX_NCCL_CHECK(call) MX__RETURN_IF_FAILED(nccl_status((call), #call, __FILE__, __LINE__))

static mx_status nccl_unique_id(unsigned char id[MX__NCCL_ID_BYTES]) {
  ncclUniqueId unique;
  MX_NCCL_CHECK(ncclGetUniqueId(&unique));
  memcpy(id, unique.internal, sizeof unique.internal);
  return MX_OK;
}

/* The device local_rank takes; -1 with the error set when there is none. */
static int device_of_rank(int local_rank) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    (void)cudaGetLastError();
    mx__error(MX_NO_CUDA_DEVICE, "no CUDA device: %s (%s from cudaGetDeviceCount)", cudaGetErrorString(err),
              cudaGetErrorName(err));
    return -1;
  }
  if (count == 0) {
    mx__error(MX_NO_CUDA_DEVICE, "no CUDA device: the CUDA runtime reports 0 devices");
    return -1;
  }
  return local_rank % count;
}

static mx_status nccl_select_device(int local_rank) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError(); /* the backend reports it when it starts */
    return MX_OK;
  }
  MX_CUDA_CHECK(cudaSetDevice(local_rank % count));
  return MX_OK;
}

static void comm_free_stream(mx__nccl_comm *c) {
  if (c->ready) (void)cudaEventDestroy(c->ready);
  if (c->stream) (void)cudaStreamDestroy(c->stream);
  free(c);
}

static mx_status nccl_comm_create(const unsigned char id[MX__NCCL_ID_BYTES], int rank, int world, int local_rank,
                                  mx__nccl_comm **out) {
  *out = NULL;
  int want = device_of_rank(local_rank);
  if (want < 0) return mx_last_status();
  int have = 0;
  MX_CUDA_CHECK(cudaStreamGetDevice(mx__cuda_stream(), &have));
  if (world > 1 && have != want) /* one rank keeps the device it chose */
    return mx__error(MX_STATE_ERROR,
                     "local rank %d takes CUDA device %d, but the CUDA backend already runs on device %d (it started "
                     "before the process group: call mx_dist_init before making CUDA tensors, or give each rank "
                     "its own device with CUDA_VISIBLE_DEVICES)",
                     local_rank, want, have);
  MX_CUDA_CHECK(cudaSetDevice(have));
  mx__nccl_comm *c = (mx__nccl_comm *)calloc(1, sizeof *c);
  if (!c) return mx__error(MX_OUT_OF_MEMORY, "nccl: out of memory");
  c->device = have;
  mx_status st = MX_CUDA_STATUS(cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking));
  if (st == MX_OK) st = MX_CUDA_STATUS(cudaEventCreateWithFlags(&c->ready, cudaEventDisableTiming));
  ncclUniqueId unique;
  memcpy(unique.internal, id, sizeof unique.internal);
  if (st == MX_OK) st = nccl_status(ncclCommInitRank(&c->comm, world, unique, rank), "ncclCommInitRank", __FILE__,
                                    __LINE__);
  if (st != MX_OK) {
    comm_free_stream(c);
    return st;
  }
  *out = c;
  return MX_OK;
}

/* NCCL's type for a reduction over dtype; false for one it lacks (bool). */
static bool nccl_type(mx_dtype dtype, ncclDataType_t *out) {
  switch (dtype) {
    case MX_F32: *out = ncclFloat32; return true;
    case MX_F64: *out = ncclFloat64; return true;
    case MX_F16: *out = ncclFloat16; return true;
    case MX_BF16: *out = ncclBfloat16; return true;
    case MX_I64: *out = ncclInt64; return true;
    case MX_I32: *out = ncclInt32; return true;
    case MX_U8: *out = ncclUint8; return true;
    default: return false;
  }
}

static const ncclRedOp_t reduce_ops[] = {ncclSum, ncclAvg, ncclMax, ncclMin}; /* mx_dist_reduce_op's order */

/* Enqueues op on c's stream. */
static mx_status enqueue(mx__nccl_comm *c, const mx__nccl_op *op) {
  ncclDataType_t type = ncclUint8;
  size_t count = op->count;
  bool reduces = op->kind == MX__NCCL_ALL_REDUCE || op->kind == MX__NCCL_REDUCE_SCATTER;
  if (reduces && (op->how < 0 || op->how > 3 || !nccl_type(op->dtype, &type)))
    return mx__error(MX_DTYPE_ERROR, "nccl: cannot reduce %s tensors with op %d", mx_dtype_name(op->dtype), op->how);
  if (!reduces) count *= mx_dtype_size(op->dtype); /* what only moves moves as bytes, bool included */
  switch (op->kind) {
    case MX__NCCL_ALL_REDUCE:
      MX_NCCL_CHECK(ncclAllReduce(op->send, op->recv, count, type, reduce_ops[op->how], c->comm, c->stream));
      break;
    case MX__NCCL_BROADCAST:
      MX_NCCL_CHECK(ncclBroadcast(op->send, op->recv, count, type, op->root, c->comm, c->stream));
      break;
    case MX__NCCL_ALL_GATHER:
      MX_NCCL_CHECK(ncclAllGather(op->send, op->recv, count, type, c->comm, c->stream));
      break;
    case MX__NCCL_REDUCE_SCATTER:
      MX_NCCL_CHECK(ncclReduceScatter(op->send, op->recv, count, type, reduce_ops[op->how], c->comm, c->stream));
      break;
  }
  return MX_OK;
}

static mx_status nccl_start(mx__nccl_comm *c, const mx__nccl_op *op, mx__nccl_done **done) {
  *done = NULL;
  MX_CUDA_CHECK(cudaSetDevice(c->device));
  mx__nccl_done *d = (mx__nccl_done *)calloc(1, sizeof *d);
  if (!d) return mx__error(MX_OUT_OF_MEMORY, "nccl: out of memory");
  mx_status st = MX_CUDA_STATUS(cudaEventCreateWithFlags(&d->event, cudaEventDisableTiming));
  if (st != MX_OK) return free(d), st;
  /* the collective reads what the compute stream wrote so far */
  st = MX_CUDA_STATUS(cudaEventRecord(c->ready, mx__cuda_stream()));
  if (st == MX_OK) st = MX_CUDA_STATUS(cudaStreamWaitEvent(c->stream, c->ready, 0));
  if (st == MX_OK) st = enqueue(c, op);
  if (st == MX_OK) st = MX_CUDA_STATUS(cudaEventRecord(d->event, c->stream));
  if (st != MX_OK) {
    (void)cudaEventDestroy(d->event);
    free(d);
    return st;
  }
  *done = d;
  return MX_OK;
}

static mx_status nccl_finish(mx__nccl_comm *c, const mx__nccl_done *done) {
  MX_CUDA_CHECK(cudaSetDevice(c->device));
  MX_CUDA_CHECK(cudaStreamWaitEvent(mx__cuda_stream(), done->event, 0));
  return MX_OK;
}

static int nccl_query(mx__nccl_comm *c, const mx__nccl_done *done) {
  if (MX_CUDA_STATUS(cudaSetDevice(c->device)) != MX_OK) return -1;
  cudaError_t err = cudaEventQuery(done->event);
  if (err == cudaSuccess) return 1;
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return 0;
  }
  (void)MX_CUDA_STATUS(err); /* the error, named */
  return -1;
}

static void nccl_done_free(mx__nccl_comm *c, mx__nccl_done *done) {
  if (!done) return;
  (void)cudaSetDevice(c->device);
  (void)cudaEventDestroy(done->event);
  free(done);
}

static mx_status nccl_async_error(mx__nccl_comm *c) {
  ncclResult_t async = ncclSuccess;
  MX_NCCL_CHECK(ncclCommGetAsyncError(c->comm, &async));
  if (async == ncclSuccess || async == ncclInProgress) return MX_OK;
  return mx__error(MX_BACKEND_ERROR, "NCCL asynchronous error (ncclCommGetAsyncError): %s (ncclResult_t = %d; NCCL "
                   "says: %s)", ncclGetErrorString(async), (int)async, ncclGetLastError(c->comm));
}

static void nccl_abort(mx__nccl_comm *c) {
  if (c->aborted) return;
  (void)ncclCommAbort(c->comm);
  c->aborted = true;
}

static mx_status nccl_destroy(mx__nccl_comm *c) {
  if (!c) return MX_OK;
  mx_status st = MX_CUDA_STATUS(cudaSetDevice(c->device));
  if (!c->aborted) {
    /* the collectives left on the stream end before the communicator does */
    if (st == MX_OK) st = MX_CUDA_STATUS(cudaStreamSynchronize(c->stream));
    mx_status destroyed = nccl_status(ncclCommDestroy(c->comm), "ncclCommDestroy", __FILE__, __LINE__);
    if (st == MX_OK) st = destroyed;
  }
  comm_free_stream(c);
  return st;
}

/* in mx__nccl_api's order (C++17 has no designated initializers) */
static const mx__nccl_api api = {nccl_unique_id, nccl_comm_create, nccl_select_device, nccl_start, nccl_finish,
                                 nccl_query,     nccl_done_free,   nccl_async_error,   nccl_abort, nccl_destroy};

extern "C" const mx__nccl_api *mx__nccl_get(void) { return &api; }
