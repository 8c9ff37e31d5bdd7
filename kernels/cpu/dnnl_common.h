/* What the oneDNN kernels (dnnl.c: matmul; dnnl_conv.c: convolution) share:
 * the CPU engine and a primitive attribute asking for user scratchpads; per
 * thread a stream, a workspace (scratchpads, reordered operands) and the
 * memory objects it keeps for reuse, freed when the thread exits; memory
 * descriptors over the 2.x API (Debian 12) and
 * the 3.x one; and a cache of primitives whose entries are never evicted
 * while a thread runs them.
 *
 * Every primitive is made with the user-scratchpad attribute and runs with
 * its scratchpad in the calling thread's workspace, so a cached primitive
 * may run on several threads at once whatever oneDNN's build flags are. */
#ifndef MX_KERNELS_CPU_DNNL_COMMON_H
#define MX_KERNELS_CPU_DNNL_COMMON_H

#include "mx_config.h"

#if MX_HAVE_DNNL
#include <oneapi/dnnl/dnnl.h>
#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/base_internal.h"

/* --- the engine --------------------------------------------------------------------- */

/* Makes the engine, the attribute and the per-thread key once; false when
 * oneDNN could not (the callers answer MX_NOT_BUILT). */
bool mx__dnnl_init(void);
/* Whether oneDNN is ready and has a native kernel for dt: float32, and
 * bfloat16 where the CPU has bf16 dot products. Without them oneDNN emulates
 * bf16 and its GEMM runs 4x slower than float32's, so the callers'
 * float32 path (convert, f32 kernel, round once) is the faster one
 * (bench/NOTES.md, round 8). */
bool mx__dnnl_runs(mx_dtype dt);
/* After mx__dnnl_init returned true. */
dnnl_engine_t mx__dnnl_engine(void);
/* Scratchpad mode user: every primitive descriptor is made with it. */
const_dnnl_primitive_attr_t mx__dnnl_attr(void);
/* mx__dnnl_attr with a ReLU post-op, for the fused convolution and
 * matmul: clip to [0, inf], which writes +0 for every negative sum as
 * mixgrad's ReLU does (eltwise_relu's alpha * s gave -0 in 2.6's GEMM
 * post-ops); a NaN sum becomes 0 where relu keeps NaN. Made once; NULL when
 * oneDNN refused it (the fused kernels then decline). */
const_dnnl_primitive_attr_t mx__dnnl_relu_attr(void);
/* The same with eltwise_relu at alpha 0, for primitives that take no clip
 * (Winograd, in 2.6) and are JIT code only: oneDNN's JIT post-ops compute
 * it as max(s, +0), clip's result bit for bit (GEMM post-ops do not). */
const_dnnl_primitive_attr_t mx__dnnl_jit_relu_attr(void);

/* --- per thread --------------------------------------------------------------------- */

/* A memory object the thread keeps for one operand role of one cached
 * primitive (id: the primitive's entry, unique for the process's life). */
typedef struct {
  uint64_t id;
  int role;
  dnnl_memory_t mem;
} mx__dnnl_kept_memory;

#define MX__DNNL_KEPT_MEMORIES 32

typedef struct {
  dnnl_stream_t stream;
  void *data; /* the workspace, 64-byte aligned */
  size_t size;
  mx__dnnl_kept_memory kept[MX__DNNL_KEPT_MEMORIES];
  int next_kept; /* the slot the next new memory object replaces */
} mx__dnnl_thread;

/* This thread's state, made on first use and freed when the thread exits;
 * NULL when it cannot be made. After mx__dnnl_init. */
mx__dnnl_thread *mx__dnnl_thread_get(void);
/* The thread's workspace, grown to at least size bytes; NULL when out of
 * memory. Valid until the next call on this thread. */
void *mx__dnnl_workspace(mx__dnnl_thread *t, size_t size);
/* The threads whose state is alive now (for tests: it drops when one exits). */
int mx__dnnl_threads_alive(void);

#define MX__DNNL_ALIGN_UP(n) (((n) + 63) / 64 * 64)

/* --- memory descriptors: a handle in 3.x, a plain struct in 2.x -------------------------- */

typedef dnnl_memory_desc_t mx__dnnl_md;
#if DNNL_VERSION_MAJOR >= 3
#define MX__DNNL_MD_NONE NULL
#else
#define MX__DNNL_MD_NONE                                                                                               \
  { 0 }
#endif

dnnl_status_t mx__dnnl_md_strided(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                                  const dnnl_dims_t strides);
dnnl_status_t mx__dnnl_md_any(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt);
dnnl_status_t mx__dnnl_md_tag(mx__dnnl_md *md, int n, const dnnl_dims_t dims, dnnl_data_type_t dt,
                              dnnl_format_tag_t tag);
/* Frees what md_strided, md_any, md_tag or md_query made (nothing in 2.x); an
 * MX__DNNL_MD_NONE or zeroed md is fine. */
void mx__dnnl_md_free(mx__dnnl_md md);
/* A copy of the md a primitive descriptor has for `what` (index idx). */
bool mx__dnnl_md_query(mx__dnnl_md *md, const_dnnl_primitive_desc_t pd, dnnl_query_t what, int idx);
/* A copy of *from that mx__dnnl_md_free frees. */
bool mx__dnnl_md_copy(mx__dnnl_md *md, const mx__dnnl_md *from);
bool mx__dnnl_md_equal(const mx__dnnl_md *a, const mx__dnnl_md *b);
size_t mx__dnnl_md_size(const mx__dnnl_md *md);
/* The scratchpad a primitive descriptor asks for (size 0: none). */
bool mx__dnnl_scratchpad_query(const_dnnl_primitive_desc_t pd, mx__dnnl_md *md, size_t *size);
/* A memory object over data, on the engine. */
dnnl_status_t mx__dnnl_memory_make(dnnl_memory_t *m, const mx__dnnl_md *md, void *data);

/* A memory object over data for operand `role` of the cached primitive
 * `id` (md its descriptor), kept by the thread and reused: creating one per
 * call costs more than a small GEMM's own overhead. Valid until the thread
 * has made MX__DNNL_KEPT_MEMORIES more. */
dnnl_status_t mx__dnnl_kept_memory_get(mx__dnnl_thread *t, uint64_t id, int role, const mx__dnnl_md *md,
                                       void *data, dnnl_memory_t *mem);
/* A fresh id for a cached primitive. */
uint64_t mx__dnnl_new_id(void);

/* Runs prim on stream with args (room for one more: the scratchpad, at
 * scratch, is added when scratch_size > 0). Does not wait. */
dnnl_status_t mx__dnnl_execute(dnnl_stream_t stream, dnnl_primitive_t prim, int nargs, dnnl_exec_arg_t *args,
                               const mx__dnnl_md *scratch_md, size_t scratch_size, void *scratch);

/* --- a cache of primitives ------------------------------------------------------------- */

/* Entries are entry_size bytes and begin with their key (key_size bytes,
 * compared by memcmp: keys must be memset before they are filled). create
 * fills a zeroed entry whose key is already in place: MX_OK with a kernel,
 * MX_NOT_SUPPORTED when oneDNN has none (remembered), another status with the
 * error set (tried again next time); clear frees what create made, from
 * any partial state. Both run under the cache's lock. */
#define MX__DNNL_CACHE_SIZE 128

typedef struct {
  void *entry; /* NULL: a free slot */
  int users;   /* threads running it now: never evicted while > 0 */
  bool kernel; /* false: oneDNN has no kernel for this key */
} mx__dnnl_slot;

typedef struct {
  const char *op; /* for messages: "mx_matmul" */
  size_t key_size, entry_size;
  mx_status (*create)(void *entry, const void *key);
  void (*clear)(void *entry);
  pthread_mutex_t lock;
  mx__dnnl_slot slot[MX__DNNL_CACHE_SIZE];
  int next; /* where the search for an entry to evict starts */
} mx__dnnl_cache;

#define MX__DNNL_CACHE_INIT(op_name, key_type, entry_type, create_fn, clear_fn)                                        \
  {                                                                                                                    \
    .op = (op_name), .key_size = sizeof(key_type), .entry_size = sizeof(entry_type), .create = (create_fn),            \
    .clear = (clear_fn), .lock = PTHREAD_MUTEX_INITIALIZER                                                             \
  }

/* The entry for key, with a kernel, held until mx__dnnl_cache_release;
 * NULL with *status MX_NOT_SUPPORTED (no kernel) or an error set. When every
 * slot is held, the entry is a temporary one that release destroys. */
void *mx__dnnl_cache_acquire(mx__dnnl_cache *c, const void *key, mx_status *status);
void mx__dnnl_cache_release(mx__dnnl_cache *c, void *entry);

#endif /* MX_HAVE_DNNL */

#endif
