/* The autocast cast cache: casts of weights reused within a region, per
 * thread. An entry keeps its source and its cast alive until the outermost
 * region ends, and remembers the source's version, so a weight changed in
 * place inside the region is cast afresh instead of served stale. */
#include <stdlib.h>

#include "amp/amp_internal.h"

typedef struct {
  mx_tensor *source;
  mx_dtype dtype;
  uint64_t version;
  mx_tensor *cast;
} cache_entry;

static _Thread_local cache_entry *entries;
static _Thread_local int count, capacity;

static void drop(int i) {
  mx__decref(entries[i].source);
  mx__decref(entries[i].cast);
  entries[i] = entries[--count];
}

mx_tensor *mx__cast_cache_find(mx_tensor *source, mx_dtype dtype) {
  for (int i = 0; i < count; i++) {
    if (entries[i].source != source || entries[i].dtype != dtype) continue;
    if (entries[i].version == mx_version(source)) return entries[i].cast;
    drop(i); /* stale: the weight changed in place since */
    return NULL;
  }
  return NULL;
}

mx_status mx__cast_cache_add(mx_tensor *source, mx_dtype dtype, mx_tensor *cast) {
  if (count == capacity) {
    int grown = capacity ? 2 * capacity : 16;
    cache_entry *e = realloc(entries, sizeof *e * (size_t)grown);
    if (!e) return mx__error(MX_OUT_OF_MEMORY, "autocast: out of memory growing the cast cache");
    entries = e;
    capacity = grown;
  }
  entries[count++] = (cache_entry){mx__retain(source), dtype, mx_version(source), mx__retain(cast)};
  return MX_OK;
}

void mx__cast_cache_clear(void) {
  while (count) drop(count - 1);
  free(entries);
  entries = NULL;
  capacity = 0;
}

int64_t mx__cast_cache_entries(void) { return count; }

void mx_autocast_clear_cache(void) { mx__cast_cache_clear(); }
