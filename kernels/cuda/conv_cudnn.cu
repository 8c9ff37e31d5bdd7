/* Convolutions through cuDNN's convolution API: descriptors for the three
 * operands and the convolution and an algorithm from cuDNN's heuristics,
 * made once per case and kept (a plan), a workspace from the stream's
 * memory pool at each call.
 *
 * Numerics, as PyTorch's cuDNN convolutions under its two flags (kernels/
 * base.h, mx_set_cudnn_allow_tf32 and mx_set_cudnn_deterministic):
 * float32 runs with CUDNN_FMA_MATH, so no TF32 (the matrix products' cuBLAS
 * default is the same), unless TF32 is allowed: then CUDNN_DEFAULT_MATH and
 * the math type cuDNN ranks with the algorithm, TF32 tensor cores on
 * Ampere and later. float16 and bfloat16 run on tensor cores with float
 * accumulation and one rounding of the result. Among cuDNN's ranked
 * algorithms that fit, the first deterministic one is taken while
 * determinism is on (the default), so a run repeats its own bits as the
 * CPU's does, else the first. cuDNN ranks them by its heuristics, or,
 * under mx_set_cudnn_benchmark, by timing each on the operands (as
 * PyTorch's torch.backends.cudnn.benchmark). A float32 3x3 convolution on
 * FMA takes the non-fused Winograd algorithm where cuDNN offers it, which
 * the legacy heuristics misrank (mx_cudnn_prefers_winograd), on NCHW
 * copies of channels-last activations (mx_cudnn_runs_in_nchw). The
 * settings are part of the case, the key a plan is kept by.
 * 1-d convolutions run as 2-d ones of height 1 (cuDNN wants 4 or 5 dims). */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/conv_cudnn_case.h"
#include "kernels/cuda/check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/conv_cudnn.h"
#include "kernels/cuda/graph.h"

/* Workspace cap when choosing an algorithm: larger ones are skipped. */
#define WORKSPACE_LIMIT ((size_t)1 << 30)
/* Cases whose plan is kept; past this, a new one takes the place of the
 * one kept longest ago. */
#define PLANS 256

/* cuDNN's "not supported" answers (cuDNN 9 numbers them 3000-3999). */
#if CUDNN_MAJOR >= 9
#define NOT_SUPPORTED(s) ((s) / 1000 == CUDNN_STATUS_NOT_SUPPORTED / 1000)
#else
#define NOT_SUPPORTED(s) ((s) == CUDNN_STATUS_NOT_SUPPORTED)
#endif

/* A cuDNN call in a function with a `bool *declined`: "not supported"
 * hands the case to the direct kernels, another failure is returned. */
#define DNN_CALL(call)                                                        \
  do {                                                                        \
    cudnnStatus_t dnn_status_ = (call);                                       \
    if (NOT_SUPPORTED(dnn_status_)) {                                         \
      *declined = true;                                                       \
      return MX_OK;                                                           \
    }                                                                         \
    MX__RETURN_IF_FAILED(mx__cudnn_status(dnn_status_, #call, __FILE__, __LINE__)); \
  } while (0)

/* --- the handle: made on first use, so a program without convolutions never loads cuDNN's kernels --- */

static struct {
  cudnnHandle_t handle;
  mx_status status;
  char error[512];
} dnn;
static pthread_once_t dnn_once = PTHREAD_ONCE_INIT;

static void release_plans(void);

/* At exit, before the CUDA runtime's own teardown (registered earlier). */
static void release_dnn(void) {
  release_plans();
  (void)cudnnDestroy(dnn.handle);
}

/* The first convolution may come inside a CUDA graph's capture (one with no
 * warm-up steps, graph.cu), whose global mode refuses the allocations
 * cudnnCreate makes: the handle is not stream work, so it is made in the
 * relaxed mode, as the graph's pool takes its memory, and the calling
 * thread's mode put back. */
static void dnn_init(void) {
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  dnn.status = MX_CUDA_STATUS(cudaThreadExchangeStreamCaptureMode(&mode));
  if (dnn.status == MX_OK) {
    dnn.status = MX_CUDNN_STATUS(cudnnCreate(&dnn.handle));
    if (dnn.status == MX_OK) {
      atexit(release_dnn);
      dnn.status = MX_CUDNN_STATUS(cudnnSetStream(dnn.handle, mx__cuda_stream()));
    }
    mx_status restored = MX_CUDA_STATUS(cudaThreadExchangeStreamCaptureMode(&mode));
    if (dnn.status == MX_OK) dnn.status = restored;
  }
  if (dnn.status != MX_OK) snprintf(dnn.error, sizeof dnn.error, "%s", mx_last_error());
}

static mx_status dnn_handle(cudnnHandle_t *out) {
  pthread_once(&dnn_once, dnn_init);
  if (dnn.status != MX_OK) return mx__error(dnn.status, "%s", dnn.error);
  *out = dnn.handle;
  return MX_OK;
}

static cudnnDataType_t dnn_type(int dtype) {
  return dtype == MX_F16 ? CUDNN_DATA_HALF : dtype == MX_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_FLOAT;
}

/* --- descriptors ---------------------------------------------------------------------------------- */

typedef struct {
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
} descriptors;

static void destroy(descriptors *d) {
  if (d->x) (void)cudnnDestroyTensorDescriptor(d->x);
  if (d->y) (void)cudnnDestroyTensorDescriptor(d->y);
  if (d->w) (void)cudnnDestroyFilterDescriptor(d->w);
  if (d->conv) (void)cudnnDestroyConvolutionDescriptor(d->conv);
}

/* The four descriptors of a case (d zeroed by the caller; destroy() frees
 * what was made, also after a failure). */
static mx_status describe(const mx_cudnn_conv_case *c, descriptors *d, bool *declined) {
  cudnnDataType_t type = dnn_type(c->dtype);
  int xs[5], ys[5];
  mx__cudnn_strides(c->nd, c->x, c->x_channels_last, xs);
  mx__cudnn_strides(c->nd, c->y, c->y_channels_last, ys);
  MX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->x));
  MX_CUDNN_CHECK(cudnnCreateTensorDescriptor(&d->y));
  MX_CUDNN_CHECK(cudnnCreateFilterDescriptor(&d->w));
  MX_CUDNN_CHECK(cudnnCreateConvolutionDescriptor(&d->conv));
  DNN_CALL(cudnnSetTensorNdDescriptor(d->x, type, c->nd, c->x, xs));
  DNN_CALL(cudnnSetTensorNdDescriptor(d->y, type, c->nd, c->y, ys));
  /* the filter's dims are KCRS whatever its format; NHWC means KRSC in memory */
  DNN_CALL(cudnnSetFilterNdDescriptor(d->w, type, c->x_channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW, c->nd,
                                      c->w));
  DNN_CALL(cudnnSetConvolutionNdDescriptor(d->conv, c->nd - 2, c->pad, c->stride, c->dil, CUDNN_CROSS_CORRELATION,
                                           CUDNN_DATA_FLOAT));
  DNN_CALL(cudnnSetConvolutionGroupCount(d->conv, c->groups));
  /* float32: FMA only, unless TF32 is allowed (DEFAULT lets cuDNN rank TF32 tensor-core algorithms with the
   * rest, as PyTorch's allow_tf32 does); 16-bit: tensor cores */
  cudnnMathType_t math = c->dtype != MX_F32   ? CUDNN_TENSOR_OP_MATH
                         : mx_cudnn_fma_only(c) ? CUDNN_FMA_MATH
                                                : CUDNN_DEFAULT_MATH;
  DNN_CALL(cudnnSetConvolutionMathType(d->conv, math));
  return MX_OK;
}

/* --- the algorithm: cuDNN's ranking, taken once per case --- */

typedef struct {
  int algo;               /* a cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
  cudnnMathType_t math;
  size_t workspace;
  bool provisional; /* timed short of a workspace (it could not be had then): not kept, timed again next call */
} algo_choice;

/* Whether an answer is the non-fused Winograd algorithm (mx_cudnn_prefers_winograd). */
static bool is_winograd(cudnnConvolutionFwdAlgo_t a) { return a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED; }
static bool is_winograd(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
static bool is_winograd(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

/* cuDNN's ranked answer the case takes (mx_cudnn_pick: usable ones ran
 * their check and fit in `workspace` bytes), with its math type, or FMA for
 * float32 without TF32 whatever the answer says; -1 when none. n: the
 * answers cuDNN returned, at most the N asked for. */
template <class Perf, size_t N>
static int pick(const Perf (&perf)[N], int n, const mx_cudnn_conv_case *c, size_t workspace, algo_choice *out) {
  bool usable[N], deterministic[N], winograd[N];
  n = n < (int)N ? n : (int)N;
  for (int i = 0; i < n; i++) {
    usable[i] = perf[i].status == CUDNN_STATUS_SUCCESS && perf[i].memory <= workspace;
    deterministic[i] = perf[i].determinism == CUDNN_DETERMINISTIC;
    winograd[i] = is_winograd(perf[i].algo);
  }
  int chosen = mx_cudnn_pick(c, n, usable, deterministic, winograd);
  if (chosen >= 0) {
    out->algo = (int)perf[chosen].algo;
    out->math = mx_cudnn_fma_only(c) ? CUDNN_FMA_MATH : perf[chosen].mathType;
  }
  return chosen;
}

/* The workspace a kind's algorithm needs for the case (its math type as set on d->conv). */
static cudnnStatus_t workspace_size(cudnnHandle_t h, const mx_cudnn_conv_case *c, const descriptors *d, int algo,
                                    size_t *bytes) {
  if (c->kind == MX_CONV_FORWARD)
    return cudnnGetConvolutionForwardWorkspaceSize(h, d->x, d->w, d->conv, d->y, (cudnnConvolutionFwdAlgo_t)algo,
                                                   bytes);
  if (c->kind == MX_CONV_BACKWARD_DATA)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(h, d->w, d->y, d->conv, d->x,
                                                        (cudnnConvolutionBwdDataAlgo_t)algo, bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(h, d->x, d->y, d->conv, d->w,
                                                        (cudnnConvolutionBwdFilterAlgo_t)algo, bytes);
}

/* The answers room for: the ranking may hold more than one answer an
 * algorithm (cudnnGet*AlgorithmMaxCount counts them with their tensor-core
 * variants, above the enums' counts), and an answer cut off at the end
 * could be the Winograd one the heuristics rank last. */
enum { MAX_ANSWERS = 64 };

/* How many answers to ask a kind's ranking for: cuDNN's own most, within MAX_ANSWERS. */
static mx_status answers_wanted(cudnnHandle_t h, const mx_cudnn_conv_case *c, int *count, bool *declined) {
  int n = 0;
  if (c->kind == MX_CONV_FORWARD) DNN_CALL(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &n));
  else if (c->kind == MX_CONV_BACKWARD_DATA) DNN_CALL(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &n));
  else DNN_CALL(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &n));
  *count = n < 1 ? 1 : n > MAX_ANSWERS ? MAX_ANSWERS : n;
  return MX_OK;
}

/* cuDNN's heuristics' ranking (nothing runs); *found: the answer taken, -1 when none. */
static mx_status rank_by_heuristics(cudnnHandle_t h, const mx_cudnn_conv_case *c, const descriptors *d,
                                    algo_choice *out, int *found, bool *declined) {
  int n = 0, wanted = 0;
  MX__RETURN_IF_FAILED(answers_wanted(h, c, &wanted, declined));
  if (*declined) return MX_OK;
  if (c->kind == MX_CONV_FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAX_ANSWERS];
    DNN_CALL(cudnnGetConvolutionForwardAlgorithm_v7(h, d->x, d->w, d->conv, d->y, wanted, &n, perf));
    *found = pick(perf, n, c, WORKSPACE_LIMIT, out);
  } else if (c->kind == MX_CONV_BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ANSWERS];
    DNN_CALL(cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d->w, d->y, d->conv, d->x, wanted, &n, perf));
    *found = pick(perf, n, c, WORKSPACE_LIMIT, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ANSWERS];
    DNN_CALL(cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d->x, d->y, d->conv, d->w, wanted, &n, perf));
    *found = pick(perf, n, c, WORKSPACE_LIMIT, out);
  }
  return MX_OK;
}

/* Every algorithm timed on the operands themselves (cudnnFind*AlgorithmEx, which blocks the host and writes the
 * output operand, as the convolution then does again), fastest first, with one workspace as large as the
 * largest any of them asks for within the cap. Should that workspace not be had, the algorithms that need
 * none are timed. *found: the answer taken, -1 when none. */
static mx_status rank_by_timing(cudnnHandle_t h, const mx_cudnn_conv_case *c, const descriptors *d,
                                const mx_kview *x, const mx_kview *w, const mx_kview *y, algo_choice *out,
                                int *found, bool *declined) {
  int wanted = 0;
  MX__RETURN_IF_FAILED(answers_wanted(h, c, &wanted, declined));
  if (*declined) return MX_OK;
  int count = c->kind == MX_CONV_FORWARD         ? (int)CUDNN_CONVOLUTION_FWD_ALGO_COUNT
              : c->kind == MX_CONV_BACKWARD_DATA ? (int)CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT
                                                 : (int)CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
  size_t bytes = 0, need;
  for (int algo = 0; algo < count; algo++) /* an algorithm without this case answers with an error: skipped */
    if (workspace_size(h, c, d, algo, &need) == CUDNN_STATUS_SUCCESS && need <= WORKSPACE_LIMIT && need > bytes)
      bytes = need;
  void *ws = NULL;
  if (bytes && cudaMallocAsync(&ws, bytes, mx__cuda_stream()) != cudaSuccess) {
    (void)cudaGetLastError(); /* out of memory is not sticky: clear it so later checks do not see it */
    ws = NULL, bytes = 0;
    out->provisional = true; /* a passing shortage: the answer is for this call only */
  }
  int n = 0;
  cudnnStatus_t s;
  if (c->kind == MX_CONV_FORWARD) {
    cudnnConvolutionFwdAlgoPerf_t perf[MAX_ANSWERS];
    s = cudnnFindConvolutionForwardAlgorithmEx(h, d->x, x->data, d->w, w->data, d->conv, d->y, y->data, wanted, &n,
                                               perf, ws, bytes);
    if (s == CUDNN_STATUS_SUCCESS) *found = pick(perf, n, c, bytes, out);
  } else if (c->kind == MX_CONV_BACKWARD_DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t perf[MAX_ANSWERS];
    s = cudnnFindConvolutionBackwardDataAlgorithmEx(h, d->w, w->data, d->y, y->data, d->conv, d->x, x->data, wanted,
                                                    &n, perf, ws, bytes);
    if (s == CUDNN_STATUS_SUCCESS) *found = pick(perf, n, c, bytes, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t perf[MAX_ANSWERS];
    s = cudnnFindConvolutionBackwardFilterAlgorithmEx(h, d->x, x->data, d->y, y->data, d->conv, d->w, w->data, wanted,
                                                      &n, perf, ws, bytes);
    if (s == CUDNN_STATUS_SUCCESS) *found = pick(perf, n, c, bytes, out);
  }
  mx_status freed = ws ? MX_CUDA_STATUS(cudaFreeAsync(ws, mx__cuda_stream())) : MX_OK;
  DNN_CALL(s);
  return freed;
}

/* The algorithm for a case (x, w, y: the operands, timed on under mx_set_cudnn_benchmark), set with its math type
 * on d->conv, and the workspace it needs; *declined when cuDNN offers nothing. */
static mx_status choose(cudnnHandle_t h, const mx_cudnn_conv_case *c, const descriptors *d, const mx_kview *x,
                        const mx_kview *w, const mx_kview *y, bool timed, algo_choice *out, bool *declined) {
  int found = -1;
  MX__RETURN_IF_FAILED(timed ? rank_by_timing(h, c, d, x, w, y, out, &found, declined)
                             : rank_by_heuristics(h, c, d, out, &found, declined));
  if (*declined) return MX_OK;
  if (found < 0) {
    *declined = true;
    return MX_OK;
  }
  DNN_CALL(cudnnSetConvolutionMathType(d->conv, out->math));
  DNN_CALL(workspace_size(h, c, d, out->algo, &out->workspace));
  return MX_OK;
}

/* --- plans: a case's descriptors and algorithm, or cuDNN's refusal, kept --- */

/* Made once per case: the descriptors (four creates, six sets) and the
 * ranking cost the host more than the convolution's launch, on steps the
 * host bounds. */
typedef struct {
  descriptors d;
  algo_choice a;
  bool declined; /* cuDNN takes no algorithm for the case: the direct kernels do */
} plan;

/* The plans kept, by case. One lock over a plan's making and use, which
 * also keeps to cuDNN's rule that a handle serve one thread at a time. */
static struct {
  pthread_mutex_t lock;
  int n, oldest; /* oldest: the slot a new plan takes once all n == PLANS are used */
  mx_cudnn_conv_case key[PLANS];
  plan value[PLANS];
} plans = {PTHREAD_MUTEX_INITIALIZER, 0, 0, {}, {}};

static void release_plans(void) {
  for (int i = 0; i < plans.n; i++) destroy(&plans.value[i].d);
}

static const plan *plan_find(const mx_cudnn_conv_case *c) {
  for (int i = 0; i < plans.n; i++)
    if (!memcmp(&plans.key[i], c, sizeof *c)) return &plans.value[i];
  return NULL;
}

/* Keeps *p (then emptied) and returns the kept plan. With the table full it
 * replaces the plan kept longest ago, whose descriptors go: no plan is in
 * use then, since every use is under the lock, one at a time. (Planning a
 * new case at every call instead would time every algorithm at every call
 * under mx_set_cudnn_benchmark, in a program with over PLANS geometries.) */
static const plan *plan_keep(const mx_cudnn_conv_case *c, plan *p) {
  int i;
  if (plans.n < PLANS) {
    i = plans.n++;
  } else {
    i = plans.oldest;
    plans.oldest = (plans.oldest + 1) % PLANS;
    destroy(&plans.value[i].d);
  }
  plans.key[i] = *c, plans.value[i] = *p;
  memset(p, 0, sizeof *p);
  return &plans.value[i];
}

/* A new plan for the case in *p (zeroed by the caller, which destroys its descriptors), kept where it may be: the
 * operands (x, w as cuDNN reads it, y) are timed on under mx_set_cudnn_benchmark. Timing waits for the device,
 * which a CUDA graph's capture cannot hold: during one the heuristics choose and the plan is not kept, so the case
 * is timed at its next run outside a capture. Nor is a timing kept that ran without the workspace the larger
 * algorithms need (the memory was short at that moment): it would hold that moment's slower choice, or refusal,
 * for good. */
static mx_status plan_make(cudnnHandle_t h, const mx_cudnn_conv_case *c, const mx_kview *x, const mx_kview *w,
                           const mx_kview *y, plan *p, const plan **out) {
  bool timed = c->benchmark && !mx__cuda_capturing();
  MX__RETURN_IF_FAILED(describe(c, &p->d, &p->declined));
  if (!p->declined) MX__RETURN_IF_FAILED(choose(h, c, &p->d, x, w, y, timed, &p->a, &p->declined));
  if (p->declined) destroy(&p->d), memset(&p->d, 0, sizeof p->d);
  *out = (timed && !p->a.provisional) || !c->benchmark ? plan_keep(c, p) : p;
  return MX_OK;
}

/* --- running it --- */

static cudnnStatus_t execute(cudnnHandle_t h, const mx_cudnn_conv_case *c, const descriptors *d, const algo_choice *a,
                             const mx_kview *x, const mx_kview *w, const mx_kview *y, void *ws) {
  const float one = 1.0f, zero = 0.0f; /* float scalars for float, half and bfloat16 data */
  if (c->kind == MX_CONV_FORWARD)
    return cudnnConvolutionForward(h, &one, d->x, x->data, d->w, w->data, d->conv, (cudnnConvolutionFwdAlgo_t)a->algo,
                                   ws, a->workspace, &zero, d->y, y->data);
  if (c->kind == MX_CONV_BACKWARD_DATA)
    return cudnnConvolutionBackwardData(h, &one, d->w, w->data, d->y, y->data, d->conv,
                                        (cudnnConvolutionBwdDataAlgo_t)a->algo, ws, a->workspace, &zero, d->x,
                                        x->data);
  return cudnnConvolutionBackwardFilter(h, &one, d->x, x->data, d->y, y->data, d->conv,
                                        (cudnnConvolutionBwdFilterAlgo_t)a->algo, ws, a->workspace, &zero, d->w,
                                        w->data);
}

/* A row-major view with v's shape and dtype over data. */
static mx_kview row_major_twin(const mx_kview *v, void *data) {
  mx_kview t = *v;
  t.data = data;
  t.strides[t.ndim - 1] = 1;
  for (int d = t.ndim - 2; d >= 0; d--) t.strides[d] = t.strides[d + 1] * t.shape[d + 1];
  return t;
}

/* The filter as cuDNN reads it, in x's layout: w itself where it lies so,
 * else a copy in *buffer (the caller frees it; KRSC beside a channels-last
 * x, row-major beside a row-major one), filled from w unless the
 * convolution writes it (the weight's gradient). */
static mx_status filter_view(const mx_cudnn_conv_case *c, const mx_kview *w, void **buffer, mx_kview *out) {
  *out = *w;
  if (c->w_channels_last == c->x_channels_last) return MX_OK;
  MX_CUDA_CHECK(cudaMallocAsync(buffer, (size_t)mx__kview_numel(w) * mx_dtype_size(w->dtype), mx__cuda_stream()));
  *out = row_major_twin(w, *buffer);
  if (c->x_channels_last) mx__channels_last_strides(w->shape, out->strides);
  return c->kind == MX_CONV_BACKWARD_WEIGHT ? MX_OK : mx__cuda_convert(out, w);
}

/* The convolution by the case's plan (made here on its first call); *declined when cuDNN takes none. */
static mx_status run(cudnnHandle_t h, const mx_cudnn_conv_case *c, const mx_kview *x, const mx_kview *w,
                     const mx_kview *y, plan *fresh, bool *declined) {
  const plan *p = plan_find(c);
  if (p && p->declined) {
    *declined = true;
    return MX_OK;
  }
  void *ws = NULL, *filter = NULL;
  mx_kview fv;
  mx_status st = filter_view(c, w, &filter, &fv);
  if (st == MX_OK && !p) st = plan_make(h, c, x, &fv, y, fresh, &p);
  if (st != MX_OK || p->declined) { /* not run (declined: the direct kernels write the result) */
    *declined = st == MX_OK;
    mx_status freed_filter = filter ? MX_CUDA_STATUS(cudaFreeAsync(filter, mx__cuda_stream())) : MX_OK;
    return st != MX_OK ? st : freed_filter;
  }
  if (p->a.workspace) st = MX_CUDA_STATUS(cudaMallocAsync(&ws, p->a.workspace, mx__cuda_stream()));
  cudnnStatus_t s = st == MX_OK ? execute(h, c, &p->d, &p->a, x, &fv, y, ws) : CUDNN_STATUS_SUCCESS;
  bool ran = st == MX_OK && s == CUDNN_STATUS_SUCCESS;
  if (ran && filter && c->kind == MX_CONV_BACKWARD_WEIGHT) st = mx__cuda_convert(w, &fv); /* back to w's layout */
  mx_status freed = ws ? MX_CUDA_STATUS(cudaFreeAsync(ws, mx__cuda_stream())) : MX_OK;
  mx_status freed_filter = filter ? MX_CUDA_STATUS(cudaFreeAsync(filter, mx__cuda_stream())) : MX_OK;
  MX__RETURN_IF_FAILED(st);
  if (NOT_SUPPORTED(s)) { /* nothing was written: the direct kernels take it */
    *declined = true;
    return freed != MX_OK ? freed : freed_filter;
  }
  MX__RETURN_IF_FAILED(mx__cudnn_status(s, "the cuDNN convolution", __FILE__, __LINE__));
  return freed != MX_OK ? freed : freed_filter;
}

/* The convolution on row-major copies of its channels-last x and y
 * (mx_cudnn_runs_in_nchw): the operands it reads are copied in (x for the
 * forward and the weight's gradient, y's gradient for both backwards), the
 * one it writes copied out; the filter follows x's layout as ever. */
static mx_status conv_in_nchw(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                              const mx_conv_params *p, bool *declined) {
  cudaStream_t stream = mx__cuda_stream();
  void *xd = NULL, *yd = NULL;
  size_t x_bytes = (size_t)mx__kview_numel(x) * mx_dtype_size(x->dtype);
  size_t y_bytes = (size_t)mx__kview_numel(y) * mx_dtype_size(y->dtype);
  mx_status st = MX_CUDA_STATUS(cudaMallocAsync(&xd, x_bytes, stream));
  if (st == MX_OK) st = MX_CUDA_STATUS(cudaMallocAsync(&yd, y_bytes, stream));
  mx_kview xs = row_major_twin(x, xd), ys = row_major_twin(y, yd);
  if (st == MX_OK && kind != MX_CONV_BACKWARD_DATA) st = mx__cuda_convert(&xs, x);
  if (st == MX_OK && kind != MX_CONV_FORWARD) st = mx__cuda_convert(&ys, y);
  if (st == MX_OK) st = mx__cudnn_conv(kind, &xs, w, &ys, p, declined); /* declined: nothing written */
  if (st == MX_OK && !*declined && kind == MX_CONV_FORWARD) st = mx__cuda_convert(y, &ys);
  if (st == MX_OK && !*declined && kind == MX_CONV_BACKWARD_DATA) st = mx__cuda_convert(x, &xs);
  mx_status freed_x = xd ? MX_CUDA_STATUS(cudaFreeAsync(xd, stream)) : MX_OK;
  mx_status freed_y = yd ? MX_CUDA_STATUS(cudaFreeAsync(yd, stream)) : MX_OK;
  return st != MX_OK ? st : freed_x != MX_OK ? freed_x : freed_y;
}

mx_status mx__cudnn_conv(mx_conv_kind kind, const mx_kview *x, const mx_kview *w, const mx_kview *y,
                         const mx_conv_params *p, bool *declined) {
  mx_cudnn_conv_case c;
  *declined = !mx_cudnn_conv_case_of(kind, x, w, y, p, &c);
  if (*declined) {
    mx__cudnn_count(false);
    return MX_OK;
  }
  if (mx_cudnn_runs_in_nchw(&c)) return conv_in_nchw(kind, x, w, y, p, declined); /* counted by its own call */
  cudnnHandle_t h = NULL;
  MX__RETURN_IF_FAILED(dnn_handle(&h));
  plan fresh; /* a plan made by this call and not kept: destroyed after it */
  memset(&fresh, 0, sizeof fresh);
  pthread_mutex_lock(&plans.lock);
  mx_status st = run(h, &c, x, w, y, &fresh, declined);
  pthread_mutex_unlock(&plans.lock);
  destroy(&fresh.d);
  if (st == MX_OK) mx__cudnn_count(!*declined);
  return st;
}
