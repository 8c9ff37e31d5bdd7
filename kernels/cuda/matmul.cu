/* Matrix products on CUDA: the float dtypes through cuBLAS
 * (cublasGemmStridedBatchedEx; float16 and bfloat16 accumulate in float32,
 * float32 without TF32), the integer dtypes through a plain kernel that does
 * the CPU reference's arithmetic (kernels/cpu/matmul.c).
 *
 * out (B, M, N) is row-major and contiguous; cuBLAS is column-major, so it
 * computes out^T (N x M) = b^T (N x K) a^T (K x M): a row-major matrix is
 * its transpose, column-major, with the same memory. An operand whose
 * strides fit neither orientation is copied to a contiguous buffer first.
 *
 * linear (a @ b + bias, relu'd or not, rounded once) runs on cuBLASLt with
 * the BIAS or RELU_BIAS epilogue where kernels/linear_lt_case.h says it
 * applies, else declines (the op then runs its float32 fallback). */
#include <cublasLt.h>
#include <pthread.h>
#include <string.h>

#include "kernels/cuda/common.cuh"
#include "kernels/linear_lt_case.h"

/* One operand as cuBLAS takes it: op, leading dimension, batch stride. The
 * view is (B, R, C), used as the column-major C x R matrix it is in
 * row-major order (CUBLAS_OP_N with ld = row stride) or, when its rows are
 * the contiguous dim, the transpose of the R x C matrix stored column-major
 * (CUBLAS_OP_T with ld = column stride). */
typedef struct {
  cublasOperation_t op;
  int64_t ld, batch_stride;
} blas_operand;

static bool blas_layout(const mx_kview *v, blas_operand *o) {
  int64_t R = v->shape[1], C = v->shape[2], sr = v->strides[1], sc = v->strides[2];
  if (v->strides[0] < 0) return false;
  o->batch_stride = v->shape[0] > 1 ? v->strides[0] : 0;
  if ((C == 1 || sc == 1) && (R == 1 || sr >= C)) {
    o->op = CUBLAS_OP_N;
    o->ld = R == 1 ? (C > 1 ? C : 1) : sr;
  } else if ((R == 1 || sr == 1) && (C == 1 || sc >= R)) {
    o->op = CUBLAS_OP_T;
    o->ld = C == 1 ? (R > 1 ? R : 1) : sc;
  } else {
    return false;
  }
  return o->ld <= INT32_MAX; /* cuBLAS takes int leading dimensions */
}

/* A contiguous copy of v in `buffer` (the caller frees it). */
static mx_status contiguous_copy(const mx_kview *v, void **buffer, mx_kview *copy) {
  size_t bytes = (size_t)mx__kview_numel(v) * mx_dtype_size(v->dtype);
  MX__RETURN_IF_FAILED(scratch_alloc(buffer, bytes ? bytes : 1));
  *copy = *v;
  copy->data = *buffer;
  int64_t stride = 1;
  for (int d = v->ndim - 1; d >= 0; d--) {
    copy->strides[d] = stride;
    stride *= v->shape[d];
  }
  return mx__cuda_convert(copy, v);
}

static bool blas_dtype(mx_dtype dtype, cudaDataType_t *type, cublasComputeType_t *compute) {
  switch (dtype) {
  case MX_F32: *type = CUDA_R_32F, *compute = CUBLAS_COMPUTE_32F; return true;
  case MX_F64: *type = CUDA_R_64F, *compute = CUBLAS_COMPUTE_64F; return true;
  case MX_F16: *type = CUDA_R_16F, *compute = CUBLAS_COMPUTE_32F; return true;
  case MX_BF16: *type = CUDA_R_16BF, *compute = CUBLAS_COMPUTE_32F; return true;
  default: return false;
  }
}

static mx_status blas_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b, cudaDataType_t type,
                             cublasComputeType_t compute) {
  int64_t B = out->shape[0], M = out->shape[1], N = out->shape[2], K = a->shape[2];
  if (M > INT32_MAX || N > INT32_MAX || K > INT32_MAX || B > INT32_MAX)
    return mx__error(MX_SHAPE_ERROR, "cuda matmul: (%lld, %lld, %lld) x %lld batches exceeds cuBLAS's int sizes",
                     (long long)M, (long long)N, (long long)K, (long long)B);
  mx_kview av = *a, bv = *b;
  void *a_copy = NULL, *b_copy = NULL;
  blas_operand ao, bo;
  mx_status status = MX_OK;
  if (!blas_layout(&av, &ao)) {
    status = contiguous_copy(a, &a_copy, &av);
    if (status == MX_OK) blas_layout(&av, &ao);
  }
  if (status == MX_OK && !blas_layout(&bv, &bo)) {
    status = contiguous_copy(b, &b_copy, &bv);
    if (status == MX_OK) blas_layout(&bv, &bo);
  }
  /* alpha and beta in the compute type's host form */
  double one_d = 1, zero_d = 0;
  float one_f = 1, zero_f = 0;
  const void *one = compute == CUBLAS_COMPUTE_64F ? (const void *)&one_d : (const void *)&one_f;
  const void *zero = compute == CUBLAS_COMPUTE_64F ? (const void *)&zero_d : (const void *)&zero_f;
  if (status == MX_OK)
    status = MX_CUBLAS_STATUS(cublasGemmStridedBatchedEx(
        mx__cuda_blas(), bo.op, ao.op, (int)N, (int)M, (int)K, one, bv.data, type, bo.ld, bo.batch_stride, av.data,
        type, ao.ld, ao.batch_stride, zero, out->data, type, N, M * N, (int)B, compute, CUBLAS_GEMM_DEFAULT));
  /* stream-ordered frees: after the product that reads the copies */
  mx_status freed_a = a_copy ? scratch_free(a_copy) : MX_OK;
  mx_status freed_b = b_copy ? scratch_free(b_copy) : MX_OK;
  return status != MX_OK ? status : freed_a != MX_OK ? freed_a : freed_b;
}

/* Integer dtypes: out[b, i, j] as the CPU reference computes it, float
 * products summed in k order, one thread per element. */
struct reference_matmul_op {
  mx_kview out, a, b;
  MX_HD void operator()(int64_t e) const {
    int64_t M = out.shape[1], N = out.shape[2], K = a.shape[2];
    int64_t bi = e / (M * N), i = e / N % M, j = e % N;
    float acc = 0;
    for (int64_t k = 0; k < K; k++) {
      const char *pa = (const char *)a.data + (bi * a.strides[0] + i * a.strides[1] + k * a.strides[2]) *
                                                  dtype_bytes(a.dtype);
      const char *pb = (const char *)b.data + (bi * b.strides[0] + k * b.strides[1] + j * b.strides[2]) *
                                                  dtype_bytes(b.dtype);
      acc += (float)mx_element_load(pa, a.dtype) * (float)mx_element_load(pb, b.dtype);
    }
    mx_element_store(element(out, e), out.dtype, acc);
  }
};

mx_status mx__cuda_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  if (mx__kview_numel(out) == 0) return MX_OK;
  if (a->shape[2] == 0) /* an empty sum: zeros (out is contiguous) */
    return MX_CUDA_STATUS(cudaMemsetAsync(out->data, 0, (size_t)mx__kview_numel(out) * mx_dtype_size(out->dtype),
                                          mx__cuda_stream()));
  cudaDataType_t type;
  cublasComputeType_t compute;
  if (blas_dtype(out->dtype, &type, &compute)) return blas_matmul(out, a, b, type, compute);
  reference_matmul_op op;
  op.out = *out;
  op.a = *a;
  op.b = *b;
  return launch_elementwise("launch of kernel matmul_reference", mx__kview_numel(out), op);
}

/* --- linear through cuBLASLt -------------------------------------------------------------------------------- */

/* A case's plan: its descriptors and the heuristic's answer. Made once per
 * case and kept (cuBLASLt's calls that make them cost the host more than
 * the product's launch, on a step that the host bounds), the bias pointer
 * set in the descriptor at each use. */
typedef struct {
  cublasLtMatmulDesc_t desc;
  cublasLtMatrixLayout_t layout[3]; /* A, B, D (C is D: beta is 0) */
  bool usable;                      /* false: the heuristic has no algorithm for the case (the op's fallback) */
  cublasLtMatmulHeuristicResult_t heuristic;
} lt_plan;

static void lt_plan_free(lt_plan *p) {
  for (int i = 0; i < 3; i++)
    if (p->layout[i]) cublasLtMatrixLayoutDestroy(p->layout[i]);
  if (p->desc) cublasLtMatmulDescDestroy(p->desc);
  *p = lt_plan{};
}

/* The workspace the heuristic may ask for: taken with cudaMallocAsync on the
 * backend's stream, so that a step captured in a CUDA graph (graph.cu)
 * records it as an allocation node rather than failing on cudaMalloc. */
enum { LT_MAX_WORKSPACE = 4 << 20 };

/* The bias pointer is set before the heuristic, which reads its alignment
 * from it (cublasLt.h, CUBLASLT_MATMUL_DESC_BIAS_POINTER); each later use
 * sets its own bias, of the same alignment (the case's bias_alignment). */
static mx_status lt_describe(lt_plan *p, const mx_lt_linear_case *lc, const void *bias, cudaDataType_t type,
                             cublasComputeType_t compute, cublasLtMatmulPreference_t preference) {
  cublasLtEpilogue_t epilogue = lc->relu ? CUBLASLT_EPILOGUE_RELU_BIAS : CUBLASLT_EPILOGUE_BIAS;
  cublasOperation_t trans_a = lc->a.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t trans_b = lc->b.transposed ? CUBLAS_OP_T : CUBLAS_OP_N;
  size_t workspace = LT_MAX_WORKSPACE;
  const mx_lt_operand *ops[3] = {&lc->a, &lc->b, &lc->d};
  MX_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p->desc, compute, CUDA_R_32F));
  MX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof trans_a));
  MX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof trans_b));
  MX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue));
  MX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
  for (int i = 0; i < 3; i++)
    MX_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&p->layout[i], type, (uint64_t)ops[i]->rows, (uint64_t)ops[i]->cols,
                                               ops[i]->ld));
  MX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                       &workspace, sizeof workspace));
  /* the heuristic assumes 256-byte aligned operands unless told: views may start anywhere */
  static const cublasLtMatmulPreferenceAttributes_t alignment_of[3] = {
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
      CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
  for (int i = 0; i < 3; i++)
    MX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, alignment_of[i], &ops[i]->alignment,
                                                         sizeof ops[i]->alignment));
  uint32_t c_alignment = lc->d.alignment;
  MX_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                                       &c_alignment, sizeof c_alignment));
  return MX_OK;
}

/* Makes p for the case: its descriptors, then the heuristic's first answer
 * (usable false, MX_OK, where it has none). On an error p holds nothing. */
static mx_status lt_plan_make(lt_plan *p, cublasLtHandle_t lt, const mx_lt_linear_case *lc, const void *bias,
                              cudaDataType_t type, cublasComputeType_t compute) {
  *p = lt_plan{};
  cublasLtMatmulPreference_t preference = NULL;
  mx_status status = MX_CUBLAS_STATUS(cublasLtMatmulPreferenceCreate(&preference));
  if (status == MX_OK) status = lt_describe(p, lc, bias, type, compute, preference);
  if (status == MX_OK) {
    int found = 0;
    cublasStatus_t s = cublasLtMatmulAlgoGetHeuristic(lt, p->desc, p->layout[0], p->layout[1], p->layout[2],
                                                      p->layout[2], preference, 1, &p->heuristic, &found);
    p->usable = s == CUBLAS_STATUS_SUCCESS && found > 0;
    if (s != CUBLAS_STATUS_NOT_SUPPORTED && !(s == CUBLAS_STATUS_SUCCESS && found == 0))
      status = MX_CUBLAS_STATUS(s); /* no algorithm with this epilogue here is no error */
  }
  if (preference) cublasLtMatmulPreferenceDestroy(preference);
  if (status != MX_OK) lt_plan_free(p);
  return status;
}

static mx_status lt_plan_run(lt_plan *p, cublasLtHandle_t lt, const mx_kview *out, const mx_kview *a,
                             const mx_kview *b, const mx_kview *bias) {
  MX_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias->data,
                                                 sizeof bias->data));
  void *workspace = NULL;
  size_t bytes = p->heuristic.workspaceSize;
  if (bytes > 0) MX__RETURN_IF_FAILED(scratch_alloc(&workspace, bytes));
  float one = 1, zero = 0;
  cublasStatus_t s = cublasLtMatmul(lt, p->desc, &one, b->data, p->layout[0], a->data, p->layout[1], &zero, out->data,
                                    p->layout[2], out->data, p->layout[2], &p->heuristic.algo, workspace, bytes,
                                    mx__cuda_stream());
  /* cuBLASLt refuses before it launches (the heuristic's answer does not
   * promise a run: cublasLtMatmulAlgoCheck's documentation): the case is
   * the op's fallback's from now on, as a refusal by the heuristic is */
  if (s == CUBLAS_STATUS_NOT_SUPPORTED) p->usable = false;
  mx_status status = s == CUBLAS_STATUS_NOT_SUPPORTED ? MX_NOT_SUPPORTED : MX_CUBLAS_STATUS(s);
  mx_status freed = workspace ? scratch_free(workspace) : MX_OK; /* stream-ordered: after the product */
  return status != MX_OK ? status : freed;
}

/* The plans made so far, by case (the words of lt_key): a case past the
 * last slot gets a plan for its call only. One lock over a plan's making
 * and use, since a use writes the bias pointer into its descriptor. */
enum { LT_PLANS = 64, LT_KEY_WORDS = 18 };

static struct {
  pthread_mutex_t lock;
  int n;
  int64_t key[LT_PLANS][LT_KEY_WORDS];
  lt_plan plan[LT_PLANS];
} lt_plans = {PTHREAD_MUTEX_INITIALIZER, 0, {}, {}};

/* The case as words, without the struct's padding, for memcmp. */
static void lt_key(const mx_lt_linear_case *lc, int64_t *key) {
  const mx_lt_operand *ops[3] = {&lc->a, &lc->b, &lc->d};
  key[0] = lc->dtype;
  for (int i = 0; i < 3; i++) {
    int64_t *k = key + 1 + 5 * i;
    k[0] = ops[i]->transposed, k[1] = ops[i]->rows, k[2] = ops[i]->cols, k[3] = ops[i]->ld, k[4] = ops[i]->alignment;
  }
  key[16] = lc->bias_alignment;
  key[17] = lc->relu;
}

mx_status mx__cuda_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias,
                          bool relu) {
  mx_lt_linear_case lc;
  cudaDataType_t type;
  cublasComputeType_t compute;
  if (!mx__lt_linear_case_of(out, a, b, bias, relu, &lc) || !blas_dtype(out->dtype, &type, &compute))
    return MX_NOT_SUPPORTED;
  /* a cuBLAS handle serves as cuBLASLt's (the cuBLAS documentation's cublasLtHandle_t) */
  cublasLtHandle_t lt = (cublasLtHandle_t)mx__cuda_blas();
  int64_t key[LT_KEY_WORDS];
  lt_key(&lc, key);
  pthread_mutex_lock(&lt_plans.lock);
  lt_plan *p = NULL, once = {};
  mx_status status = MX_OK;
  for (int i = 0; i < lt_plans.n && !p; i++)
    if (!memcmp(lt_plans.key[i], key, sizeof key)) p = &lt_plans.plan[i];
  if (!p) {
    bool kept = lt_plans.n < LT_PLANS;
    p = kept ? &lt_plans.plan[lt_plans.n] : &once;
    status = lt_plan_make(p, lt, &lc, bias->data, type, compute);
    if (status == MX_OK && kept) memcpy(lt_plans.key[lt_plans.n++], key, sizeof key);
  }
  if (status == MX_OK) status = p->usable ? lt_plan_run(p, lt, out, a, b, bias) : MX_NOT_SUPPORTED;
  pthread_mutex_unlock(&lt_plans.lock);
  lt_plan_free(&once);
  return status;
}
