/* oneDNN matmul primitives, created once per shape and reused. */
#include "kernels/cpu/dnnl.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "mx_config.h"

#if MX_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>

static dnnl_engine_t engine;
static pthread_once_t engine_once = PTHREAD_ONCE_INIT;
static _Thread_local dnnl_stream_t stream; /* streams are per thread */

static void engine_init(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) engine = NULL;
}

/* --- the two API generations ------------------------------------------------------ */
#if DNNL_VERSION_MAJOR >= 3
typedef dnnl_memory_desc_t md_t;
static bool md_make(md_t *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt, const dnnl_dims_t strides) {
  return dnnl_memory_desc_create_with_strides(md, n, dims, dt, strides) == dnnl_success;
}
static void md_free(md_t md) { dnnl_memory_desc_destroy(md); }
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, md_t *src, md_t *wei, md_t *dst) {
  return dnnl_matmul_primitive_desc_create(pd, engine, *src, *wei, NULL, *dst, NULL);
}
static dnnl_status_t memory_make(dnnl_memory_t *m, md_t *md, void *data) {
  return dnnl_memory_create(m, *md, engine, data);
}
#else
typedef dnnl_memory_desc_t md_t;
static bool md_make(md_t *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt, const dnnl_dims_t strides) {
  return dnnl_memory_desc_init_by_strides(md, n, dims, dt, strides) == dnnl_success;
}
static void md_free(md_t md) { (void)md; }
static dnnl_status_t matmul_pd(dnnl_primitive_desc_t *pd, md_t *src, md_t *wei, md_t *dst) {
  dnnl_matmul_desc_t desc;
  dnnl_status_t s = dnnl_matmul_desc_init(&desc, src, wei, NULL, dst);
  return s != dnnl_success ? s : dnnl_primitive_desc_create(pd, &desc, NULL, engine, NULL);
}
static dnnl_status_t memory_make(dnnl_memory_t *m, md_t *md, void *data) {
  return dnnl_memory_create(m, md, engine, data);
}
#endif

/* --- the cache ----------------------------------------------------------------------- */

typedef struct {
  mx_dtype dtype;
  dnnl_dims_t dims[3], strides[3]; /* out, a, b */
} matmul_key;

typedef struct {
  matmul_key key;
  dnnl_primitive_t primitive; /* NULL: oneDNN has no kernel for this */
  md_t md[3];
} matmul_entry;

#define CACHE_SIZE 128
static matmul_entry cache[CACHE_SIZE];
static int cache_count, cache_next;
static pthread_mutex_t cache_lock = PTHREAD_MUTEX_INITIALIZER;

static void describe(const mx_kview *v, dnnl_dim_t *dims, dnnl_dim_t *strides) {
  for (int d = 0; d < 3; d++) {
    dims[d] = v->shape[d];
    strides[d] = v->strides[d];
  }
  /* a batch broadcast by stride 0 is a batch of one for oneDNN */
  if (strides[0] == 0) dims[0] = 1;
  if (dims[0] == 1) strides[0] = dims[1] * dims[2];
}

static matmul_entry *lookup(const matmul_key *key) {
  for (int i = 0; i < cache_count; i++)
    if (!memcmp(&cache[i].key, key, sizeof *key)) return &cache[i];
  return NULL;
}

static matmul_entry *create(const matmul_key *key) {
  matmul_entry *e = &cache[cache_next];
  if (cache_count == CACHE_SIZE) { /* evict the oldest */
    if (e->primitive) dnnl_primitive_destroy(e->primitive);
    for (int k = 0; k < 3; k++) md_free(e->md[k]);
  } else {
    cache_count++;
  }
  cache_next = (cache_next + 1) % CACHE_SIZE;
  memset(e, 0, sizeof *e);
  e->key = *key;
  dnnl_data_type_t dt = key->dtype == MX_BF16 ? dnnl_bf16 : dnnl_f32;
  for (int k = 0; k < 3; k++)
    if (!md_make(&e->md[k], 3, key->dims[k], dt, key->strides[k])) return e;
  dnnl_primitive_desc_t pd;
  if (matmul_pd(&pd, &e->md[1], &e->md[2], &e->md[0]) != dnnl_success) return e;
  if (dnnl_primitive_create(&e->primitive, pd) != dnnl_success) e->primitive = NULL;
  dnnl_primitive_desc_destroy(pd);
  return e;
}

mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) {
  if (out->dtype != MX_F32 && out->dtype != MX_BF16) return MX_NOT_BUILT;
  pthread_once(&engine_once, engine_init);
  if (!engine) return MX_NOT_BUILT;
  if (!stream && dnnl_stream_create(&stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    stream = NULL;
    return MX_NOT_BUILT;
  }
  matmul_key key;
  memset(&key, 0, sizeof key);
  key.dtype = out->dtype;
  const mx_kview *views[3] = {out, a, b};
  for (int k = 0; k < 3; k++) describe(views[k], key.dims[k], key.strides[k]);

  pthread_mutex_lock(&cache_lock);
  matmul_entry *e = lookup(&key);
  if (!e) e = create(&key);
  dnnl_primitive_t primitive = e->primitive;
  md_t md[3] = {e->md[0], e->md[1], e->md[2]};
  pthread_mutex_unlock(&cache_lock);
  if (!primitive) return MX_NOT_BUILT;

  dnnl_memory_t mem[3] = {NULL, NULL, NULL};
  mx_status status = MX_OK;
  for (int k = 0; k < 3 && status == MX_OK; k++)
    if (memory_make(&mem[k], &md[k], views[k]->data) != dnnl_success)
      status = mx__error(MX_BACKEND_ERROR, "mx_matmul: oneDNN could not wrap an operand");
  if (status == MX_OK) {
    dnnl_exec_arg_t args[3] = {{DNNL_ARG_DST, mem[0]}, {DNNL_ARG_SRC, mem[1]}, {DNNL_ARG_WEIGHTS, mem[2]}};
    if (dnnl_primitive_execute(primitive, stream, 3, args) != dnnl_success || dnnl_stream_wait(stream) != dnnl_success)
      status = mx__error(MX_BACKEND_ERROR, "mx_matmul: oneDNN matmul failed");
  }
  for (int k = 0; k < 3; k++)
    if (mem[k]) dnnl_memory_destroy(mem[k]);
  return status;
}

#else /* built without oneDNN */

mx_status mx__dnnl_matmul(const mx_kview *out, const mx_kview *a, const mx_kview *b) { return MX_NOT_BUILT; }

#endif
