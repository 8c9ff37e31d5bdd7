/* oneDNN matmul primitives, created once per shape and reused.
 *
 * The primitives work on the views' own strides (transposed operands and
 * leading dimensions included). Like the convolutions (dnnl_conv.c) they are
 * made with a user scratchpad, given from the calling thread's workspace
 * (dnnl_common.h), so a cached primitive can run on several threads at once;
 * cache entries are never evicted while a thread runs them. The same cache
 * holds the linear kernel's products: with a bias, and a ReLU post-op or
 * none. */
#include "kernels/cpu/dnnl.h"

#include <string.h>

#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/parallel.h"
#include "mx_config.h"

#if MX_HAVE_DNNL
#include <oneapi/dnnl/dnnl_debug.h>

/* the scratchpad and the bias: only memory objects' roles */
enum { ROLE_OUT, ROLE_A, ROLE_B, ROLE_SCRATCHPAD, ROLE_BIAS };

/* --- the two API generations ------------------------------------------------------ */
#if DNNL_VERSION_MAJOR >= 3
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, const mx__dnnl_md *src, const mx__dnnl_md *wei,
                               const mx__dnnl_md *bias, const mx__dnnl_md *dst, const_dnnl_primitive_attr_t attr) {
  return dnnl_matmul_primitive_desc_create(pd, mx__dnnl_engine(), *src, *wei, bias ? *bias : NULL, *dst, attr);
}
#else
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, const mx__dnnl_md *src, const mx__dnnl_md *wei,
                               const mx__dnnl_md *bias, const mx__dnnl_md *dst, const_dnnl_primitive_attr_t attr) {
  dnnl_matmul_desc_t desc;
  dnnl_status_t s = dnnl_matmul_desc_init(&desc, src, wei, bias, dst);
  return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &desc, attr, mx__dnnl_engine(), NULL);
}
#endif

static mx_status fail(const char *what, dnnl_status_t s) {
  return mx__error(MX_BACKEND_ERROR, "mx_matmul: oneDNN matmul: %s failed (%s)", what, dnnl_status2str(s));
}

/* --- the cache ----------------------------------------------------------------------- */

/* All int64_t: no padding bytes (and memset all the same, since keys are
 * compared by memcmp). */
typedef struct {
  int64_t dtype;
  int64_t dims[3][3], strides[3][3]; /* per role, as oneDNN sees them */
  int64_t threads; /* oneDNN may size a primitive's work split for the threads it was made on */
  int64_t epilogue; /* EPILOGUE_BIAS: plus a contiguous bias (1, 1, N); EPILOGUE_BIAS_RELU: then the ReLU post-op */
} matmul_key;

enum { EPILOGUE_NONE, EPILOGUE_BIAS, EPILOGUE_BIAS_RELU };

typedef struct {
  matmul_key key; /* first: the cache compares it */
  uint64_t id;     /* names its memory objects in each thread's keep */
  dnnl_primitive_t primitive;
  mx__dnnl_md md[3], scratch_md, bias_md; /* bias_md: only with a bias */
  size_t scratch_size;
} matmul_entry;

/* How oneDNN sees a (B, R, C) operand: a batch broadcast by stride 0 is a
 * batch of one; a dim of size 1 gets the stride that makes the matrix plain
 * (its stride is never applied; 1 when the other dim's stride is not 1, the
 * matrix then being column-major, else the row length), and a batch of one
 * the stride past the whole matrix. False when oneDNN cannot take it (a zero
 * or negative stride elsewhere). */
static bool describe(const mx_kview *v, bool output, int64_t *dims, int64_t *strides) {
  for (int d = 0; d < 3; d++) {
    dims[d] = v->shape[d];
    strides[d] = v->strides[d];
  }
  if (strides[0] == 0 && !output) dims[0] = 1;
  if (dims[1] == 1 && dims[2] == 1)
    strides[1] = strides[2] = 1;
  else if (dims[1] == 1)
    strides[1] = strides[2] == 1 ? dims[2] : 1;
  else if (dims[2] == 1)
    strides[2] = strides[1] == 1 ? dims[1] : 1;
  if (strides[1] <= 0 || strides[2] <= 0) return false;
  if (dims[0] == 1) {
    int64_t rows = strides[1] * dims[1], cols = strides[2] * dims[2];
    strides[0] = rows > cols ? rows : cols;
  }
  return strides[0] > 0;
}

static bool make_key(matmul_key *key, const mx_kview *const *v) {
  memset(key, 0, sizeof *key);
  key->dtype = v[ROLE_OUT]->dtype;
  key->threads = mx__cpu_threads_here();
  for (int r = 0; r < 3; r++) {
    if (v[r]->ndim != 3 || v[r]->dtype != v[ROLE_OUT]->dtype) return false;
    for (int d = 0; d < 3; d++)
      if (v[r]->shape[d] <= 0) return false; /* empty: the caller's loops */
    if (!describe(v[r], r == ROLE_OUT, key->dims[r], key->strides[r])) return false;
  }
  /* oneDNN broadcasts a batch of one against the other input's batch, not
   * both inputs against the output's */
  if (key->dims[ROLE_OUT][0] > 1 && key->dims[ROLE_A][0] == 1 && key->dims[ROLE_B][0] == 1) return false;
  return true;
}

static void entry_clear(void *p) {
  matmul_entry *e = p;
  if (e->primitive) dnnl_primitive_destroy(e->primitive);
  for (int r = 0; r < 3; r++) mx__dnnl_md_free(e->md[r]);
  mx__dnnl_md_free(e->scratch_md);
  mx__dnnl_md_free(e->bias_md);
  memset((char *)e + sizeof e->key, 0, sizeof *e - sizeof e->key);
}

/* Makes the primitive for the key in e. MX_NOT_SUPPORTED when oneDNN has no
 * kernel (or cannot describe the strides); MX_BACKEND_ERROR otherwise. */
static mx_status entry_create(void *p, const void *k) {
  matmul_entry *e = p;
  const matmul_key *key = k;
  dnnl_data_type_t dt = key->dtype == MX_BF16 ? dnnl_bf16 : dnnl_f32;
  for (int r = 0; r < 3; r++) {
    dnnl_dims_t dims = {0}, strides = {0};
    for (int d = 0; d < 3; d++) dims[d] = key->dims[r][d], strides[d] = key->strides[r][d];
    dnnl_status_t s = mx__dnnl_md_strided(&e->md[r], 3, dims, dt, strides);
    if (s == dnnl_invalid_arguments || s == dnnl_unimplemented) return MX_NOT_SUPPORTED;
    if (s != dnnl_success) return fail("describing an operand", s);
  }
  const_dnnl_primitive_attr_t attr = key->epilogue == EPILOGUE_BIAS_RELU ? mx__dnnl_relu_attr() : mx__dnnl_attr();
  if (!attr) return MX_NOT_SUPPORTED;
  if (key->epilogue != EPILOGUE_NONE) {
    int64_t n = key->dims[ROLE_OUT][2];
    dnnl_dims_t dims = {1, 1, n}, strides = {n, n, 1};
    dnnl_status_t s = mx__dnnl_md_strided(&e->bias_md, 3, dims, dt, strides);
    if (s == dnnl_invalid_arguments || s == dnnl_unimplemented) return MX_NOT_SUPPORTED;
    if (s != dnnl_success) return fail("describing the bias", s);
  }
  dnnl_primitive_desc_t pd = NULL;
  dnnl_status_t s = matmul_pd(&pd, &e->md[ROLE_A], &e->md[ROLE_B], key->epilogue != EPILOGUE_NONE ? &e->bias_md : NULL,
                              &e->md[ROLE_OUT], attr);
  if (s == dnnl_unimplemented) return MX_NOT_SUPPORTED;
  if (s != dnnl_success) return fail("creating the primitive descriptor", s);
  mx_status status = MX_OK;
  if (!mx__dnnl_scratchpad_query(pd, &e->scratch_md, &e->scratch_size)) {
    status = fail("querying the scratchpad", dnnl_runtime_error);
  } else if ((s = dnnl_primitive_create(&e->primitive, pd)) != dnnl_success) {
    e->primitive = NULL;
    status = fail("creating the primitive", s);
  }
  dnnl_primitive_desc_destroy(pd);
  e->id = mx__dnnl_new_id();
  return status;
}

static mx__dnnl_cache cache = MX__DNNL_CACHE_INIT("mx_matmul", matmul_key, matmul_entry, entry_create, entry_clear);

/* --- execution ------------------------------------------------------------------------ */

/* v: out, a, b and, with an epilogue, the bias. */
static mx_status run(mx__dnnl_thread *t, const matmul_entry *e, const mx_kview *const *v) {
  void *scratch = NULL;
  if (e->scratch_size && !(scratch = mx__dnnl_workspace(t, e->scratch_size)))
    return mx__error(MX_OUT_OF_MEMORY, "mx_matmul: out of memory for a %zu-byte oneDNN scratchpad", e->scratch_size);
  static const int arg_of[5] = {[ROLE_OUT] = DNNL_ARG_DST, [ROLE_A] = DNNL_ARG_SRC, [ROLE_B] = DNNL_ARG_WEIGHTS,
                                [ROLE_SCRATCHPAD] = DNNL_ARG_SCRATCHPAD, [ROLE_BIAS] = DNNL_ARG_BIAS};
  int roles[5] = {ROLE_OUT, ROLE_A, ROLE_B}, nargs = 3;
  if (scratch) roles[nargs++] = ROLE_SCRATCHPAD;
  if (e->key.epilogue != EPILOGUE_NONE) roles[nargs++] = ROLE_BIAS;
  dnnl_exec_arg_t args[5];
  dnnl_status_t s = dnnl_success;
  for (int i = 0; i < nargs && s == dnnl_success; i++) {
    int r = roles[i];
    const mx__dnnl_md *md = r == ROLE_SCRATCHPAD ? &e->scratch_md : r == ROLE_BIAS ? &e->bias_md : &e->md[r];
    void *data = r == ROLE_SCRATCHPAD ? scratch : r == ROLE_BIAS ? v[3]->data : v[r]->data;
    args[i].arg = arg_of[r];
    s = mx__dnnl_kept_memory_get(t, e->id, r, md, data, &args[i].memory);
  }
  if (s != dnnl_success) return fail("wrapping an operand", s);
  if ((s = dnnl_primitive_execute(e->primitive, t->stream, nargs, args)) != dnnl_success) return fail("executing", s);
  if ((s = dnnl_stream_wait(t->stream)) != dnnl_success) return fail("waiting", s);
  return MX_OK;
}

/* bias: NULL for the plain product. */
static mx_status matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu) {
  if (!mx__dnnl_init()) return MX_NOT_BUILT;
  if (!mx__dnnl_runs(out->dtype)) return MX_NOT_SUPPORTED;
  mx__dnnl_thread *t = mx__dnnl_thread_get();
  if (!t) return MX_NOT_BUILT;
  const mx_kview *v[4] = {out, a, b, bias};
  matmul_key key;
  if (!make_key(&key, v)) return MX_NOT_SUPPORTED;
  if (bias) {
    if (bias->ndim != 1 || bias->dtype != out->dtype || bias->shape[0] != out->shape[2] ||
        (bias->shape[0] > 1 && bias->strides[0] != 1))
      return MX_NOT_SUPPORTED;
    key.epilogue = relu ? EPILOGUE_BIAS_RELU : EPILOGUE_BIAS;
  }
  mx_status status = MX_OK;
  matmul_entry *e = mx__dnnl_cache_acquire(&cache, &key, &status);
  if (!e) return status;
  status = run(t, e, v);
  mx__dnnl_cache_release(&cache, e);
  return status;
}

mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  return matmul(out, a, b, NULL, false);
}

mx_status mx__dnnl_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu) {
  return matmul(out, a, b, bias, relu);
}

bool mx__dnnl_native(mx_dtype dtype) { return mx__dnnl_runs(dtype); }

#else /* built without oneDNN */

mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) { return MX_NOT_BUILT; }

mx_status mx__dnnl_linear(const mx_kview *out, const mx_kview *a, const mx_kview *b, const mx_kview *bias, bool relu) {
  return MX_NOT_BUILT;
}

bool mx__dnnl_native(mx_dtype dtype) { return false; }

#endif
