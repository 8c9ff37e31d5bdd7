/* Prepared casts: a weight's 16-bit cast that the optimizer step writes
 * while it updates the weight, for autocast's first cast of it in the next
 * step (tensor_impl.h says how the rooms share them). */
#include <stdlib.h>
#include <string.h>

#include "kernels/cuda_graph.h"
#include "tensor/tensor_impl.h"

static atomic_int enabled = -1; /* -1: not read from the environment yet */

bool mx__prepared_casts_enabled(void) {
  int on = atomic_load_explicit(&enabled, memory_order_relaxed);
  if (on < 0) {
    const char *env = getenv("MX_PREPARED_CASTS");
    on = !(env && strcmp(env, "0") == 0);
    atomic_store(&enabled, on);
  }
  return on;
}

void mx__prepared_casts_set_enabled(bool on) { atomic_store(&enabled, on); }

/* Whether every write to t's data bumps its version: not so for inference
 * storage, nor for storage whose address mx_data_ptr handed out. */
static bool versioned(const mx_tensor *t) {
  return !t->storage->inference && !atomic_load_explicit(&t->storage->exposed, memory_order_relaxed);
}

void mx__prepared_cast_want(mx_tensor *t, mx_dtype dtype) {
  if (mx__prepared_casts_enabled()) atomic_store_explicit(&t->cast_wanted, (int)dtype + 1, memory_order_relaxed);
}

/* While a CUDA graph is captured, none are made or taken: a replay runs no
 * host code, so a cast attached during the capture would never be handed
 * on, and one taken would be read by every replay, however often the
 * captured step rewrites the weight. The captured forward casts afresh. */
static bool capturing(const mx_tensor *t) { return t->device == MX_CUDA && mx_cuda_graph_capturing(); }

mx_dtype mx__prepared_cast_asked(mx_tensor *t) {
  int wanted = atomic_exchange_explicit(&t->cast_wanted, 0, memory_order_relaxed);
  return wanted && versioned(t) && mx__prepared_casts_enabled() && !capturing(t) ? (mx_dtype)(wanted - 1)
                                                                                   : MX_DTYPE_COUNT;
}

/* The dtype, storage id and version are written before the cast is
 * published, and a thread takes it with one exchange: two threads never
 * both get it. (A step that writes t while another thread casts it races
 * on t's data anyway.) */
void mx__prepared_cast_set(mx_tensor *t, mx_tensor *cast) {
  if (cast)
    t->cast_dtype = cast->dtype, t->cast_storage = t->storage->id, t->cast_version = atomic_load(&t->storage->version);
  mx_tensor *old = atomic_exchange(&t->cast_ready, cast);
  if (old) mx__decref(old);
}

mx_tensor *mx__prepared_cast_take(mx_tensor *t, mx_dtype dtype) {
  if (!atomic_load(&t->cast_ready) || t->cast_dtype != dtype) return NULL; /* another dtype's: left for its use */
  mx_tensor *cast = atomic_exchange(&t->cast_ready, NULL);
  if (!cast) return NULL;
  bool current = cast->device == t->device && t->cast_storage == t->storage->id &&
                 t->cast_version == atomic_load(&t->storage->version) && versioned(t) && !capturing(t);
  if (current) return cast;
  mx__decref(cast); /* stale (the weight was written, moved or exposed since), or met in a capture */
  return NULL;
}
