/* Thread-local free lists for the small objects every op makes and drops:
 * tensor handles, storages, autograd state, graph nodes, op arguments.
 *
 * A training step's scope ends by freeing hundreds of them at once, more
 * than glibc's per-thread cache keeps (7 per size). The rest went to glibc's
 * shared bins, and the next step's ops paid for sorting and consolidating
 * them: malloc and free were 43% of the instructions of a tiny add with
 * autograd on. Here each thread keeps freed objects in 32-byte size
 * classes, up to 4096 objects and 1 MiB a class, and hands them out again.
 * The objects are plain malloc blocks, so any thread may free any of them,
 * and a thread's lists go back to malloc when it exits. Under
 * AddressSanitizer and valgrind the lists are off, so they still see each
 * use after free (as in kernels/cpu/host_cache.c). */
#include "tensor/object_cache.h"

#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

#define CLASS_BYTES 32
#define CLASSES 32   /* objects up to 1 KiB: a node of a many-input op fits */
#define KEEP 4096    /* objects per class and thread: a large step's worth */
#define KEEP_BYTES ((unsigned)1 << 20) /* and bytes: at most 32 MiB in all */

typedef struct free_object {
  struct free_object *next;
} free_object;

typedef struct {
  free_object *head[CLASSES];
  unsigned count[CLASSES];
  bool registered; /* for the exit destructor */
} free_lists;

static _Thread_local free_lists lists;

static pthread_key_t exit_key;
static bool enabled; /* set once, when the library loads */

static void release_lists(void *p) {
  free_lists *l = p;
  for (int c = 0; c < CLASSES; c++) {
    while (l->head[c]) {
      free_object *o = l->head[c];
      l->head[c] = o->next;
      free(o);
    }
    l->count[c] = 0;
  }
  l->registered = false;
}

__attribute__((constructor)) static void init(void) {
  enabled = pthread_key_create(&exit_key, release_lists) == 0;
#if defined(__SANITIZE_ADDRESS__)
  enabled = false;
#endif
#ifdef RUNNING_ON_VALGRIND
  if (RUNNING_ON_VALGRIND) enabled = false;
#endif
}

/* The class of a size, or -1 for sizes the lists do not keep. */
static int class_of(size_t bytes) {
  if (!enabled || bytes == 0 || bytes > CLASS_BYTES * CLASSES) return -1;
  return (int)((bytes - 1) / CLASS_BYTES);
}

/* This thread's lists. Each use of a shared library's thread-local is a
 * call to __tls_get_addr, and GCC repeats that call rather than keep the
 * address in a register; out of line, it runs once per function. */
__attribute__((noinline)) static free_lists *thread_lists(void) { return &lists; }

/* Whether class c holds all a thread keeps: KEEP objects, or KEEP_BYTES
 * (tested by multiplying; a division here was a visible cost per op). */
static bool full(unsigned count, int c) {
  return count >= KEEP || (count + 1) * (unsigned)(c + 1) * CLASS_BYTES > KEEP_BYTES;
}

void *mx__object_new(size_t bytes) {
  int c = class_of(bytes);
  if (c < 0) return calloc(1, bytes);
  free_lists *l = thread_lists();
  free_object *o = l->head[c];
  if (!o) return calloc(1, (size_t)(c + 1) * CLASS_BYTES); /* the whole class: any later size reuses it */
  l->head[c] = o->next;
  l->count[c]--;
  memset(o, 0, bytes);
  return o;
}

void mx__object_free(void *object, size_t bytes) {
  if (!object) return;
  int c = class_of(bytes);
  free_lists *l = thread_lists();
  if (c < 0 || full(l->count[c], c)) {
    free(object);
    return;
  }
  if (!l->registered) { /* the first keep on this thread: free the lists when it exits */
    if (pthread_setspecific(exit_key, l) != 0) {
      free(object);
      return;
    }
    l->registered = true;
  }
  free_object *o = object;
  o->next = l->head[c];
  l->head[c] = o;
  l->count[c]++;
}

size_t mx__object_cache_count(void) {
  size_t n = 0;
  const free_lists *l = thread_lists();
  for (int c = 0; c < CLASSES; c++) n += l->count[c];
  return n;
}
