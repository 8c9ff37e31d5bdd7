/* Thread-local free lists for the small objects every op makes and drops
 * (not installed). */
#ifndef MX_TENSOR_OBJECT_CACHE_H
#define MX_TENSOR_OBJECT_CACHE_H

#include <stddef.h>

/* `bytes` of zeroed memory, or NULL when out of memory. Give it back with
 * mx__object_free and the same size; plain free() is also right. */
void *mx__object_new(size_t bytes);
void mx__object_free(void *object, size_t bytes);

/* How many freed objects this thread keeps for reuse (for the tests). */
size_t mx__object_cache_count(void);

#endif
