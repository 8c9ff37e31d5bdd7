/* The oneDNN engine, per-thread state, memory descriptors and primitive cache
 * that matmul (dnnl.c) and convolution (dnnl_conv.c) share. */
#include "kernels/cpu/dnnl_common.h"
#include "kernels/cpu/parallel.h"

#if MX_HAVE_DNNL
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

/* --- the engine --------------------------------------------------------------------- */

static dnnl_engine_t engine;
static dnnl_primitive_attr_t attr; /* scratchpad mode user */
static pthread_key_t thread_key;
static bool ready;
static bool native_bf16; /* the CPU has bf16 dot products (AVX512_BF16 or AMX) */
static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static atomic_int threads_alive;

/* At thread exit: nothing of a thread's state outlives it. */
static void thread_free(void *p) {
  mx__dnnl_thread *t = p;
  dnnl_stream_destroy(t->stream);
  for (int i = 0; i < MX__DNNL_KEPT_MEMORIES; i++)
    if (t->kept[i].mem) dnnl_memory_destroy(t->kept[i].mem);
  free(t->data);
  free(t);
  atomic_fetch_sub(&threads_alive, 1);
}

static void init(void) {
  if (dnnl_engine_create(&engine, dnnl_cpu, 0) != dnnl_success) return;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) {
    attr = NULL;
  } else if (dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user) != dnnl_success) {
    dnnl_primitive_attr_destroy(attr);
    attr = NULL;
  }
  if (attr && pthread_key_create(&thread_key, thread_free) == 0) {
    dnnl_cpu_isa_t isa = dnnl_get_effective_cpu_isa();
    native_bf16 = (isa & dnnl_cpu_isa_avx512_core_bf16) == dnnl_cpu_isa_avx512_core_bf16;
    ready = true;
    return;
  }
  if (attr) dnnl_primitive_attr_destroy(attr);
  dnnl_engine_destroy(engine);
  engine = NULL, attr = NULL;
}

bool mx__dnnl_init(void) {
  pthread_once(&init_once, init);
  return ready;
}

bool mx__dnnl_runs(mx_dtype dt) {
  return mx__dnnl_init() && (dt == MX_F32 || (dt == MX_BF16 && native_bf16));
}

dnnl_engine_t mx__dnnl_engine(void) { return engine; }
const_dnnl_primitive_attr_t mx__dnnl_attr(void) { return attr; }

/* [0]: clip to [0, inf]; [1]: eltwise_relu with alpha 0 (mx__dnnl_jit_relu_attr) */
static dnnl_primitive_attr_t relu_attr[2];
static pthread_once_t relu_attr_once = PTHREAD_ONCE_INIT;

static dnnl_status_t append_relu(dnnl_post_ops_t ops, bool clip) {
  dnnl_alg_kind_t alg = clip ? dnnl_eltwise_clip : dnnl_eltwise_relu;
  float beta = clip ? INFINITY : 0.f;
#if DNNL_VERSION_MAJOR >= 3
  return dnnl_post_ops_append_eltwise(ops, alg, 0.f, beta);
#else
  return dnnl_post_ops_append_eltwise(ops, 1.f, alg, 0.f, beta);
#endif
}

static void make_relu_attrs(void) {
  for (int k = 0; k < 2; k++) {
    dnnl_post_ops_t ops = NULL;
    dnnl_primitive_attr_t made = NULL;
    bool ok = attr && dnnl_post_ops_create(&ops) == dnnl_success && append_relu(ops, k == 0) == dnnl_success &&
              dnnl_primitive_attr_clone(&made, attr) == dnnl_success &&
              dnnl_primitive_attr_set_post_ops(made, ops) == dnnl_success;
    if (ops) dnnl_post_ops_destroy(ops);
    if (!ok && made) dnnl_primitive_attr_destroy(made);
    relu_attr[k] = ok ? made : NULL;
  }
}

const_dnnl_primitive_attr_t mx__dnnl_relu_attr(void) {
  pthread_once(&relu_attr_once, make_relu_attrs);
  return relu_attr[0];
}

const_dnnl_primitive_attr_t mx__dnnl_jit_relu_attr(void) {
  pthread_once(&relu_attr_once, make_relu_attrs);
  return relu_attr[1];
}

/* --- per thread --------------------------------------------------------------------- */

/* oneDNN's OpenMP runtime takes its team size from the calling thread:
 * mx_set_num_threads's count, set in each thread that runs a primitive. */
static void use_configured_threads(void) {
#ifdef _OPENMP
  int n = mx__cpu_threads();
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
#endif
}

mx__dnnl_thread *mx__dnnl_thread_get(void) {
  if (!ready) return NULL;
  use_configured_threads();
  mx__dnnl_thread *t = pthread_getspecific(thread_key);
  if (t) return t;
  if (!(t = calloc(1, sizeof *t))) return NULL;
  if (dnnl_stream_create(&t->stream, engine, dnnl_stream_default_flags) != dnnl_success) {
    free(t);
    return NULL;
  }
  atomic_fetch_add(&threads_alive, 1);
  if (pthread_setspecific(thread_key, t) != 0) {
    thread_free(t);
    return NULL;
  }
  return t;
}

void *mx__dnnl_workspace(mx__dnnl_thread *t, size_t size) {
  if (t->size < size) {
    free(t->data);
    size_t rounded = (size + 4095) / 4096 * 4096;
    t->data = aligned_alloc(64, rounded);
    t->size = t->data ? rounded : 0;
  }
  return t->data;
}

dnnl_status_t mx__dnnl_kept_memory_get(mx__dnnl_thread *t, uint64_t id, int role, const mx__dnnl_md *md,
                                       void *data, dnnl_memory_t *mem) {
  for (int i = 0; i < MX__DNNL_KEPT_MEMORIES; i++)
    if (t->kept[i].mem && t->kept[i].id == id && t->kept[i].role == role) {
      *mem = t->kept[i].mem;
      return dnnl_memory_set_data_handle(*mem, data);
    }
  dnnl_status_t s = mx__dnnl_memory_make(mem, md, data);
  if (s != dnnl_success) return s;
  mx__dnnl_kept_memory *slot = &t->kept[t->next_kept];
  t->next_kept = (t->next_kept + 1) % MX__DNNL_KEPT_MEMORIES;
  if (slot->mem) dnnl_memory_destroy(slot->mem);
  *slot = (mx__dnnl_kept_memory){id, role, *mem};
  return dnnl_success;
}

uint64_t mx__dnnl_new_id(void) {
  static atomic_uint_fast64_t last;
  return atomic_fetch_add(&last, 1) + 1;
}

int mx__dnnl_threads_alive(void) { return atomic_load(&threads_alive); }

/* --- memory descriptors ----------------------------------------------------------------- */

#if DNNL_VERSION_MAJOR >= 3
dnnl_status_t mx__dnnl_md_strided(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                  const dnnl_dims_t strides) {
  return dnnl_memory_desc_create_with_strides(md, n, dims, dt, strides);
}
dnnl_status_t mx__dnnl_md_any(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt) {
  return dnnl_memory_desc_create_with_tag(md, n, dims, dt, dnnl_format_tag_any);
}
dnnl_status_t mx__dnnl_md_tag(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                              dnnl_format_tag_t tag) {
  return dnnl_memory_desc_create_with_tag(md, n, dims, dt, tag);
}
void mx__dnnl_md_free(mx__dnnl_md md) {
  if (md) dnnl_memory_desc_destroy(md);
}
bool mx__dnnl_md_query(mx__dnnl_md *md, const_dnnl_primitive_desc_t pd, dnnl_query_t what, int idx) {
  const_dnnl_memory_desc_t q = dnnl_primitive_desc_query_md(pd, what, idx);
  return q && dnnl_memory_desc_clone(md, q) == dnnl_success;
}
bool mx__dnnl_md_copy(mx__dnnl_md *md, const mx__dnnl_md *from) {
  return dnnl_memory_desc_clone(md, *from) == dnnl_success;
}
bool mx__dnnl_md_equal(const mx__dnnl_md *a, const mx__dnnl_md *b) { return dnnl_memory_desc_equal(*a, *b) == 1; }
size_t mx__dnnl_md_size(const mx__dnnl_md *md) { return dnnl_memory_desc_get_size(*md); }
dnnl_status_t mx__dnnl_memory_make(dnnl_memory_t *m, const mx__dnnl_md *md, void *data) {
  return dnnl_memory_create(m, *md, engine, data);
}
#else
dnnl_status_t mx__dnnl_md_strided(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                  const dnnl_dims_t strides) {
  return dnnl_memory_desc_init_by_strides(md, n, dims, dt, strides);
}
dnnl_status_t mx__dnnl_md_any(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt) {
  return dnnl_memory_desc_init_by_tag(md, n, dims, dt, dnnl_format_tag_any);
}
dnnl_status_t mx__dnnl_md_tag(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                              dnnl_format_tag_t tag) {
  return dnnl_memory_desc_init_by_tag(md, n, dims, dt, tag);
}
void mx__dnnl_md_free(mx__dnnl_md md) { (void)md; }
bool mx__dnnl_md_query(mx__dnnl_md *md, const_dnnl_primitive_desc_t pd, dnnl_query_t what, int idx) {
  const dnnl_memory_desc_t *q = dnnl_primitive_desc_query_md(pd, what, idx);
  if (!q) return false;
  *md = *q;
  return true;
}
bool mx__dnnl_md_copy(mx__dnnl_md *md, const mx__dnnl_md *from) {
  *md = *from;
  return true;
}
bool mx__dnnl_md_equal(const mx__dnnl_md *a, const mx__dnnl_md *b) { return dnnl_memory_desc_equal(a, b) == 1; }
size_t mx__dnnl_md_size(const mx__dnnl_md *md) { return dnnl_memory_desc_get_size(md); }
dnnl_status_t mx__dnnl_memory_make(dnnl_memory_t *m, const mx__dnnl_md *md, void *data) {
  return dnnl_memory_create(m, md, engine, data);
}
#endif

bool mx__dnnl_scratchpad_query(const_dnnl_primitive_desc_t pd, mx__dnnl_md *md, size_t *size) {
  if (!mx__dnnl_md_query(md, pd, dnnl_query_scratchpad_md, 0)) return false;
  *size = mx__dnnl_md_size(md);
  return true;
}

dnnl_status_t mx__dnnl_execute(dnnl_stream_t stream, dnnl_primitive_t prim, int nargs, dnnl_exec_arg_t *args,
                               const mx__dnnl_md *scratch_md, size_t scratch_size, void *scratch) {
  dnnl_memory_t sm = NULL;
  dnnl_status_t s;
  if (scratch_size) {
    if ((s = mx__dnnl_memory_make(&sm, scratch_md, scratch)) != dnnl_success) return s;
    args[nargs++] = (dnnl_exec_arg_t){DNNL_ARG_SCRATCHPAD, sm};
  }
  s = dnnl_primitive_execute(prim, stream, nargs, args);
  if (sm) dnnl_memory_destroy(sm);
  return s;
}

/* --- the cache ----------------------------------------------------------------------- */

static void entry_free(mx__dnnl_cache *c, void *entry) {
  c->clear(entry);
  free(entry);
}

void *mx__dnnl_cache_acquire(mx__dnnl_cache *c, const void *key, mx_status *status) {
  pthread_mutex_lock(&c->lock);
  mx__dnnl_slot *slot = NULL;
  for (int i = 0; i < MX__DNNL_CACHE_SIZE && !slot; i++)
    if (c->slot[i].entry && !memcmp(c->slot[i].entry, key, c->key_size)) slot = &c->slot[i];
  if (slot) {
    if (!slot->kernel) {
      pthread_mutex_unlock(&c->lock);
      *status = MX_NOT_SUPPORTED;
      return NULL;
    }
    slot->users++;
    pthread_mutex_unlock(&c->lock);
    return slot->entry;
  }

  /* a free slot, or else the oldest one not in use (none: a temporary entry) */
  for (int i = 0; i < MX__DNNL_CACHE_SIZE && !slot; i++)
    if (!c->slot[i].entry) slot = &c->slot[i];
  for (int i = 0; i < MX__DNNL_CACHE_SIZE && !slot; i++) {
    int at = (c->next + i) % MX__DNNL_CACHE_SIZE;
    if (!c->slot[at].users) {
      slot = &c->slot[at];
      c->next = (at + 1) % MX__DNNL_CACHE_SIZE;
      entry_free(c, slot->entry);
      *slot = (mx__dnnl_slot){NULL, 0, false};
    }
  }
  void *e = calloc(1, c->entry_size);
  if (!e) {
    pthread_mutex_unlock(&c->lock);
    *status = mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for a oneDNN primitive", c->op);
    return NULL;
  }
  memcpy(e, key, c->key_size);
  *status = c->create(e, key);
  if (*status != MX_OK) {
    c->clear(e);
    if (*status == MX_NOT_SUPPORTED && slot) { /* remembered: oneDNN has no kernel for this */
      memset(e, 0, c->entry_size);
      memcpy(e, key, c->key_size);
      *slot = (mx__dnnl_slot){e, 0, false};
    } else { /* an error: tried again next time */
      free(e);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
  }
  if (slot) *slot = (mx__dnnl_slot){e, 1, true};
  pthread_mutex_unlock(&c->lock);
  return e;
}

void mx__dnnl_cache_release(mx__dnnl_cache *c, void *entry) {
  pthread_mutex_lock(&c->lock);
  bool cached = false;
  for (int i = 0; i < MX__DNNL_CACHE_SIZE && !cached; i++)
    if (c->slot[i].entry == entry) {
      c->slot[i].users--;
      cached = true;
    }
  if (!cached) entry_free(c, entry); /* a temporary entry */
  pthread_mutex_unlock(&c->lock);
}

#else

typedef int mx__dnnl_common_unused; /* ISO C wants a declaration in every file */

#endif
