/* Scopes: each thread's stack of open scopes owns the handles made in it. */
#include <stdlib.h>
#include <string.h>

#include "tensor/object_cache.h"
#include "tensor/tensor_impl.h"

/* The dispatcher opens a scope around every op, whose results are few:
 * their handles fit in the scope itself, with no allocation of their own. */
#define INLINE_HANDLES 4

struct mx_scope {
  mx_scope *parent;
  mx_tensor **handles; /* released slots are NULL; inline_handles until they fill */
  size_t count, capacity;
  mx_tensor *inline_handles[INLINE_HANDLES];
};

static _Thread_local mx_scope *innermost;

mx_scope *mx_scope_begin(void) {
  mx_scope *s = mx__object_new(sizeof *s);
  if (!s) {
    mx__error(MX_OUT_OF_MEMORY, "mx_scope_begin: out of memory");
    return NULL;
  }
  s->handles = s->inline_handles;
  s->capacity = INLINE_HANDLES;
  s->parent = innermost;
  innermost = s;
  return s;
}

static mx_status scope_push(mx_scope *s, mx_tensor *t) {
  if (s->count == s->capacity) {
    size_t capacity = s->capacity < 64 ? 64 : 2 * s->capacity;
    bool was_inline = s->handles == s->inline_handles;
    mx_tensor **grown = realloc(was_inline ? NULL : s->handles, capacity * sizeof *grown);
    if (!grown) return mx__error(MX_OUT_OF_MEMORY, "scope: out of memory tracking a tensor");
    if (was_inline) memcpy(grown, s->inline_handles, sizeof s->inline_handles);
    s->handles = grown;
    s->capacity = capacity;
  }
  t->owner = s;
  t->owner_slot = s->count;
  s->handles[s->count++] = t;
  return MX_OK;
}

static void scope_forget(mx_tensor *t) {
  if (t->owner) t->owner->handles[t->owner_slot] = NULL;
  t->owner = NULL;
}

mx_status mx__scope_adopt(mx_tensor *t) {
  t->owner = NULL;
  return innermost ? scope_push(innermost, t) : MX_OK;
}

static void scope_free(mx_scope *s) {
  for (size_t i = 0; i < s->count; i++) {
    mx_tensor *t = s->handles[i];
    if (!t) continue;
    t->owner = NULL;
    mx__decref(t);
  }
  if (s->handles != s->inline_handles) free(s->handles);
  mx__object_free(s, sizeof *s);
}

void mx_scope_end(mx_scope *scope) {
  if (!scope) return;
  mx_scope *s = innermost;
  while (s && s != scope) s = s->parent;
  if (!s) {
    mx__error(MX_STATE_ERROR, "mx_scope_end: the scope is not open on this thread");
    return;
  }
  while (innermost != scope) { /* inner scopes left open end too */
    mx_scope *inner = innermost;
    innermost = inner->parent;
    scope_free(inner);
  }
  innermost = scope->parent;
  scope_free(scope);
}

mx_tensor *mx_keep(mx_tensor *t) {
  if (!t || !t->owner) return t;
  mx_scope *parent = t->owner->parent;
  scope_forget(t);
  if (parent && scope_push(parent, t) != MX_OK) {
    mx__decref(t); /* cannot be tracked: fail rather than leak */
    return NULL;
  }
  return t;
}

void mx_release(mx_tensor *t) {
  if (!t) return;
  scope_forget(t);
  mx__decref(t);
}
