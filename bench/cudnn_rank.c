/* cuDNN's ranking of its convolution algorithms beside their timings, for
 * ResNet-9's float32 convolutions (batch 64, 3x3, padding 1): what
 * kernels/cuda/conv_cudnn.cu's heuristics choose, and how fast each choice
 * is against the fastest deterministic one (bench/NOTES.md, round 29).
 *
 *     build-gpu/bench/cudnn_rank            # on a GPU machine
 *
 * For each geometry, layout (NCHW, NHWC) and direction it prints the
 * legacy heuristics' list (cudnnGet*Algorithm_v7) with the convolution's
 * math type set to FMA, as mixgrad's float32 without TF32 asks, and set to
 * DEFAULT, then every algorithm timed under FMA (cudnnFind*AlgorithmEx):
 * algo:milliseconds, "d" for deterministic. Last, per layout, the summed
 * milliseconds of three rules: the FMA list's first deterministic answer
 * (mixgrad's), the DEFAULT list's first deterministic answer run under
 * FMA, and the fastest deterministic timing. Each case also prints the
 * host's microseconds to queue one call of the chosen algorithm (the mean
 * of 20, queued without waiting), and last their median: what a
 * host-bound step pays a call. scripts/gpu-check runs it and quotes the
 * totals and that median in bench/GPU.md. */
#include <cuda_runtime.h>
#include <cudnn.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

/* Stops the program at a failed call, naming it and the library's message. */
static void check(bool ok, const char *call, const char *message, const char *file, int line) {
  if (ok) return;
  fprintf(stderr, "%s:%d: %s: %s\n", file, line, call, message);
  exit(1);
}
#define CHECK_CUDA(call)                                                                      \
  do {                                                                                        \
    cudaError_t e_ = (call);                                                                  \
    check(e_ == cudaSuccess, #call, cudaGetErrorString(e_), __FILE__, __LINE__);              \
  } while (0)
#define CHECK_DNN(call)                                                                       \
  do {                                                                                        \
    cudnnStatus_t s_ = (call);                                                                \
    check(s_ == CUDNN_STATUS_SUCCESS, #call, cudnnGetErrorString(s_), __FILE__, __LINE__);    \
  } while (0)

enum { FWD, DATA, FILTER, KINDS };
static const char *kind_name[KINDS] = {"fwd", "bwd_data", "bwd_filter"};
#define MAX_ALGOS 16
#define WORKSPACE_LIMIT ((size_t)1 << 30)

typedef struct {
  int algo;
  cudnnStatus_t status;
  float ms;
  size_t memory;
  bool deterministic;
  cudnnMathType_t math;
} answer;

typedef struct {
  cudnnHandle_t h;
  cudnnTensorDescriptor_t x, y;
  cudnnFilterDescriptor_t w;
  cudnnConvolutionDescriptor_t conv;
  void *xd, *yd, *wd, *ws;
} setup;

#define COPY_ANSWERS(perf, n, out)                                                                    \
  for (int i = 0; i < (n); i++)                                                                       \
  (out)[i] = (answer){(int)(perf)[i].algo, (perf)[i].status, (perf)[i].time, (perf)[i].memory,       \
                      (perf)[i].determinism == CUDNN_DETERMINISTIC, (perf)[i].mathType}

/* The heuristics' list (timed: cudnnFind*AlgorithmEx instead) for kind. */
static int rank(setup *s, int kind, bool timed, answer *out) {
  int n = 0;
  if (kind == FWD) {
    cudnnConvolutionFwdAlgoPerf_t p[MAX_ALGOS];
    if (timed)
      CHECK_DNN(cudnnFindConvolutionForwardAlgorithmEx(s->h, s->x, s->xd, s->w, s->wd, s->conv, s->y, s->yd,
                                                       MAX_ALGOS, &n, p, s->ws, WORKSPACE_LIMIT));
    else
      CHECK_DNN(cudnnGetConvolutionForwardAlgorithm_v7(s->h, s->x, s->w, s->conv, s->y, MAX_ALGOS, &n, p));
    COPY_ANSWERS(p, n, out);
  } else if (kind == DATA) {
    cudnnConvolutionBwdDataAlgoPerf_t p[MAX_ALGOS];
    if (timed)
      CHECK_DNN(cudnnFindConvolutionBackwardDataAlgorithmEx(s->h, s->w, s->wd, s->y, s->yd, s->conv, s->x, s->xd,
                                                            MAX_ALGOS, &n, p, s->ws, WORKSPACE_LIMIT));
    else
      CHECK_DNN(cudnnGetConvolutionBackwardDataAlgorithm_v7(s->h, s->w, s->y, s->conv, s->x, MAX_ALGOS, &n, p));
    COPY_ANSWERS(p, n, out);
  } else {
    cudnnConvolutionBwdFilterAlgoPerf_t p[MAX_ALGOS];
    if (timed)
      CHECK_DNN(cudnnFindConvolutionBackwardFilterAlgorithmEx(s->h, s->x, s->xd, s->y, s->yd, s->conv, s->w, s->wd,
                                                              MAX_ALGOS, &n, p, s->ws, WORKSPACE_LIMIT));
    else
      CHECK_DNN(cudnnGetConvolutionBackwardFilterAlgorithm_v7(s->h, s->x, s->y, s->conv, s->w, MAX_ALGOS, &n, p));
    COPY_ANSWERS(p, n, out);
  }
  return n;
}

static void print_list(const char *label, const answer *a, int n, bool timed) {
  printf("  %-7s", label);
  for (int i = 0; i < n; i++) {
    if (a[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (timed) printf(" %d:%.3f", a[i].algo, a[i].ms);
    else printf(" %d", a[i].algo);
    printf("%s%s", a[i].deterministic ? "d" : "", a[i].math == CUDNN_FMA_MATH ? "" : a[i].math == CUDNN_DEFAULT_MATH ? "/def" : "/tc");
    if (a[i].memory > WORKSPACE_LIMIT) printf("(ws)");
  }
  printf("\n");
}

static int first_deterministic(const answer *a, int n) {
  for (int i = 0; i < n; i++)
    if (a[i].status == CUDNN_STATUS_SUCCESS && a[i].deterministic && a[i].memory <= WORKSPACE_LIMIT) return a[i].algo;
  return -1;
}

/* The timed milliseconds of algo (-1: not timed or failed). */
static float timed_ms(const answer *t, int n, int algo) {
  for (int i = 0; i < n; i++)
    if (t[i].algo == algo && t[i].status == CUDNN_STATUS_SUCCESS) return t[i].ms;
  return -1;
}

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

static cudnnStatus_t execute(setup *s, int kind, int algo) {
  const float one = 1, zero = 0;
  if (kind == FWD)
    return cudnnConvolutionForward(s->h, &one, s->x, s->xd, s->w, s->wd, s->conv, (cudnnConvolutionFwdAlgo_t)algo,
                                   s->ws, WORKSPACE_LIMIT, &zero, s->y, s->yd);
  if (kind == DATA)
    return cudnnConvolutionBackwardData(s->h, &one, s->w, s->wd, s->y, s->yd, s->conv,
                                        (cudnnConvolutionBwdDataAlgo_t)algo, s->ws, WORKSPACE_LIMIT, &zero, s->x,
                                        s->xd);
  return cudnnConvolutionBackwardFilter(s->h, &one, s->x, s->xd, s->y, s->yd, s->conv,
                                        (cudnnConvolutionBwdFilterAlgo_t)algo, s->ws, WORKSPACE_LIMIT, &zero, s->w,
                                        s->wd);
}

/* The host's microseconds to queue one call of algo (FMA math), -1 when it fails. */
static double host_us_per_call(setup *s, int kind, int algo) {
  if (algo < 0 || execute(s, kind, algo) != CUDNN_STATUS_SUCCESS) return -1;
  CHECK_CUDA(cudaDeviceSynchronize());
  const int calls = 20;
  double t0 = now_us();
  for (int i = 0; i < calls; i++) CHECK_DNN(execute(s, kind, algo));
  double t1 = now_us();
  CHECK_CUDA(cudaDeviceSynchronize());
  return (t1 - t0) / calls;
}

static int compare_doubles(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(void) {
  /* ResNet-9's convolutions at batch 64: in channels, out channels, side */
  static const int geometry[][3] = {{3, 64, 32}, {64, 128, 32}, {128, 128, 16}, {128, 256, 16}, {256, 512, 8},
                                    {512, 512, 4}};
  const int batch = 64, count = (int)(sizeof geometry / sizeof geometry[0]);
  setup s;
  CHECK_DNN(cudnnCreate(&s.h));
  CHECK_DNN(cudnnCreateTensorDescriptor(&s.x));
  CHECK_DNN(cudnnCreateTensorDescriptor(&s.y));
  CHECK_DNN(cudnnCreateFilterDescriptor(&s.w));
  CHECK_DNN(cudnnCreateConvolutionDescriptor(&s.conv));
  size_t most = (size_t)batch * 128 * 32 * 32 * sizeof(float);
  CHECK_CUDA(cudaMalloc(&s.xd, most));
  CHECK_CUDA(cudaMalloc(&s.yd, most));
  CHECK_CUDA(cudaMalloc(&s.wd, (size_t)512 * 512 * 9 * sizeof(float)));
  CHECK_CUDA(cudaMalloc(&s.ws, WORKSPACE_LIMIT));
  CHECK_CUDA(cudaMemset(s.xd, 0, most));
  CHECK_CUDA(cudaMemset(s.yd, 0, most));
  CHECK_CUDA(cudaMemset(s.wd, 0, (size_t)512 * 512 * 9 * sizeof(float)));
  int pad[2] = {1, 1}, stride[2] = {1, 1}, dil[2] = {1, 1};
  double host[2 * (sizeof geometry / sizeof geometry[0]) * KINDS];
  int n_host = 0;
  for (int nhwc = 0; nhwc < 2; nhwc++) {
    double total[3] = {0, 0, 0}; /* mixgrad's rule, the DEFAULT list's, the fastest */
    for (int g = 0; g < count; g++) {
      int c = geometry[g][0], k = geometry[g][1], side = geometry[g][2];
      cudnnTensorFormat_t f = nhwc ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
      CHECK_DNN(cudnnSetTensor4dDescriptor(s.x, f, CUDNN_DATA_FLOAT, batch, c, side, side));
      CHECK_DNN(cudnnSetTensor4dDescriptor(s.y, f, CUDNN_DATA_FLOAT, batch, k, side, side));
      CHECK_DNN(cudnnSetFilter4dDescriptor(s.w, CUDNN_DATA_FLOAT, f, k, c, 3, 3));
      CHECK_DNN(cudnnSetConvolutionNdDescriptor(s.conv, 2, pad, stride, dil, CUDNN_CROSS_CORRELATION,
                                                CUDNN_DATA_FLOAT));
      for (int kind = 0; kind < KINDS; kind++) {
        answer fma[MAX_ALGOS], def[MAX_ALGOS], timed[MAX_ALGOS];
        CHECK_DNN(cudnnSetConvolutionMathType(s.conv, CUDNN_DEFAULT_MATH));
        int n_def = rank(&s, kind, false, def);
        CHECK_DNN(cudnnSetConvolutionMathType(s.conv, CUDNN_FMA_MATH));
        int n_fma = rank(&s, kind, false, fma);
        int n_timed = rank(&s, kind, true, timed);
        printf("%s %s %dx%dx%dx%d -> %d\n", nhwc ? "NHWC" : "NCHW", kind_name[kind], batch, c, side, side, k);
        print_list("v7 fma", fma, n_fma, false);
        print_list("v7 def", def, n_def, false);
        print_list("timed", timed, n_timed, true);
        float ours = timed_ms(timed, n_timed, first_deterministic(fma, n_fma));
        float by_def = timed_ms(timed, n_timed, first_deterministic(def, n_def));
        float best = timed_ms(timed, n_timed, first_deterministic(timed, n_timed));
        double us = host_us_per_call(&s, kind, first_deterministic(timed, n_timed));
        printf("  chosen %.3f, by DEFAULT's list %.3f, fastest deterministic %.3f ms; host %.1f us a call\n", ours,
               by_def, best, us);
        if (us >= 0 && n_host < (int)(sizeof host / sizeof host[0])) host[n_host++] = us;
        total[0] += ours, total[1] += by_def, total[2] += best;
      }
    }
    printf("%s totals (one of each convolution): heuristics under FMA %.3f ms, DEFAULT's list %.3f ms, "
           "fastest deterministic %.3f ms\n\n", nhwc ? "NHWC" : "NCHW", total[0], total[1], total[2]);
  }
  qsort(host, (size_t)n_host, sizeof host[0], compare_doubles);
  if (n_host) printf("host: median %.1f us to queue a convolution call (%d cases)\n", host[n_host / 2], n_host);
  return 0;
}
