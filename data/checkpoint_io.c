/* The plumbing under state dicts and checkpoints: lists of named tensors
 * and metadata to write; a file being read, checked name by name. */
#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/checkpoint_internal.h"
#include "tensor/scope.h"

/* --- writing ------------------------------------------------------------------------ */

/* A malloc'ed printf of fmt, or NULL. */
static char *vformat(const char *fmt, va_list ap) {
  va_list copy;
  va_copy(copy, ap);
  int len = vsnprintf(NULL, 0, fmt, copy);
  va_end(copy);
  char *s = len >= 0 ? malloc((size_t)len + 1) : NULL;
  if (s) vsnprintf(s, (size_t)len + 1, fmt, ap);
  return s;
}

void mx__ckpt_add_tensor(mx__ckpt_writer *w, const mx_tensor *t, bool owned, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *name = vformat(fmt, ap);
  va_end(ap);
  if (name && w->n == w->capacity) {
    int capacity = w->capacity ? 2 * w->capacity : 32;
    mx__ckpt_entry *grown = realloc(w->entries, (size_t)capacity * sizeof *grown);
    if (grown) w->entries = grown, w->capacity = capacity;
  }
  if (!name || w->n == w->capacity) {
    free(name);
    if (owned) mx_release((mx_tensor *)t);
    w->failed = true;
    return;
  }
  w->entries[w->n++] = (mx__ckpt_entry){name, t, owned};
}

void mx__ckpt_add_meta(mx__ckpt_writer *w, const char *value, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  char *key = vformat(fmt, ap), *copy = strdup(value);
  va_end(ap);
  if (key && copy && w->n_meta == w->meta_capacity) {
    int capacity = w->meta_capacity ? 2 * w->meta_capacity : 32;
    char **grown = realloc(w->meta, 2 * (size_t)capacity * sizeof *grown);
    if (grown) w->meta = grown, w->meta_capacity = capacity;
  }
  if (!key || !copy || w->n_meta == w->meta_capacity) {
    free(key);
    free(copy);
    w->failed = true;
    return;
  }
  w->meta[2 * w->n_meta] = key;
  w->meta[2 * w->n_meta++ + 1] = copy;
}

void mx__ckpt_add_f64(mx__ckpt_writer *w, const char *key, double v) {
  char text[32];
  snprintf(text, sizeof text, "%.17g", v); /* 17 digits: strtod gives the same double back */
  mx__ckpt_add_meta(w, text, "%s", key);
}

void mx__ckpt_add_i64(mx__ckpt_writer *w, const char *key, int64_t v) {
  char text[32];
  snprintf(text, sizeof text, "%" PRId64, v);
  mx__ckpt_add_meta(w, text, "%s", key);
}

mx_status mx__ckpt_add_module(const char *fn, mx__ckpt_writer *w, const mx_module *m, const char *prefix) {
  if (!m) return mx__null_input(fn, "model");
  int np = mx_module_num_parameters(m), nb = mx_module_num_buffers(m);
  for (int i = 0; i < np + nb; i++) {
    const char *name;
    const mx_tensor *t = i < np ? mx_module_parameter(m, i, &name) : mx_module_buffer(m, i - np, &name);
    mx__ckpt_add_tensor(w, t, false, "%s%s", prefix, name);
  }
  return MX_OK;
}

mx_status mx__ckpt_write(const char *fn, mx__ckpt_writer *w, const char *path) {
  const char **names = malloc(sizeof *names * ((size_t)w->n + 1));
  const char **keys = malloc(sizeof *keys * ((size_t)w->n_meta + 1));
  const char **values = malloc(sizeof *values * ((size_t)w->n_meta + 1));
  const mx_tensor **tensors = malloc(sizeof *tensors * ((size_t)w->n + 1));
  mx_status status = MX_OK;
  if (w->failed || !names || !keys || !values || !tensors) {
    status = mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory listing the tensors", fn, path);
  } else {
    for (int i = 0; i < w->n; i++) names[i] = w->entries[i].name, tensors[i] = w->entries[i].tensor;
    for (int i = 0; i < w->n_meta; i++) keys[i] = w->meta[2 * i], values[i] = w->meta[2 * i + 1];
    if (mx_safetensors_save(path, w->n, names, tensors, w->n_meta, keys, values) != MX_OK)
      status = mx__error_prefix(fn);
  }
  free(names);
  free(keys);
  free(values);
  free(tensors);
  return status;
}

void mx__ckpt_writer_free(mx__ckpt_writer *w) {
  for (int i = 0; i < w->n; i++) {
    free(w->entries[i].name);
    if (w->entries[i].owned) mx_release((mx_tensor *)w->entries[i].tensor);
  }
  for (int i = 0; i < 2 * w->n_meta; i++) free(w->meta[i]);
  free(w->entries);
  free(w->meta);
}

/* --- reading ------------------------------------------------------------------------ */

mx_status mx__ckpt_open(mx__ckpt_reader *r, const char *fn, const char *path) {
  *r = (mx__ckpt_reader){.fn = fn, .path = path};
  if (!(r->file = mx_safetensors_load(path))) return mx__error_prefix(fn);
  int n = mx_safetensors_count(r->file);
  if (!(r->used = calloc((size_t)n + 1, sizeof *r->used))) {
    mx__ckpt_close(r);
    return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, path);
  }
  return MX_OK;
}

void mx__ckpt_close(mx__ckpt_reader *r) {
  mx_safetensors_free(r->file);
  free(r->used);
  r->file = NULL;
  r->used = NULL;
}

mx_tensor *mx__ckpt_tensor(mx__ckpt_reader *r, const char *name, const mx_tensor *like, const char *whose) {
  int i = mx_safetensors_find(r->file, name);
  if (i < 0) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: missing tensor '%s'", r->fn, r->path, name);
    return NULL;
  }
  mx_tensor *t = mx_safetensors_tensor(r->file, i);
  mx_shape have = mx_shape_get(t), want = mx_shape_get(like);
  if (have.ndim != want.ndim || memcmp(have.d, want.d, sizeof(int64_t) * (size_t)want.ndim)) {
    char a[MX__DIMS_STR], b[MX__DIMS_STR];
    mx__error(MX_SHAPE_ERROR, "%s: %s: tensor '%s' has shape %s in the file but %s in %s", r->fn, r->path, name,
              mx__dims_str(a, have.ndim, have.d), mx__dims_str(b, want.ndim, want.d), whose);
    return NULL;
  }
  if (mx_dtype_of(t) != mx_dtype_of(like)) {
    mx__error(MX_DTYPE_ERROR, "%s: %s: tensor '%s' is %s in the file but %s in %s", r->fn, r->path, name,
              mx_dtype_name(mx_dtype_of(t)), mx_dtype_name(mx_dtype_of(like)), whose);
    return NULL;
  }
  r->used[i] = true;
  return t;
}

/* Member i of m (parameters, then buffers); *name: prefix + its name, malloc'ed. */
static mx_tensor *member(const mx_module *m, int i, int np, const char *prefix, char **name) {
  const char *own;
  mx_tensor *t = i < np ? mx_module_parameter(m, i, &own) : mx_module_buffer(m, i - np, &own);
  size_t size = strlen(prefix) + strlen(own) + 1;
  if ((*name = malloc(size))) snprintf(*name, size, "%s%s", prefix, own);
  return t;
}

mx_status mx__ckpt_check_module(mx__ckpt_reader *r, const mx_module *m, const char *prefix) {
  int np = mx_module_num_parameters(m), nb = mx_module_num_buffers(m);
  for (int i = 0; i < np + nb; i++) {
    char *name;
    const mx_tensor *t = member(m, i, np, prefix, &name);
    bool ok = name && mx__ckpt_tensor(r, name, t, "the module");
    if (!name) mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", r->fn, r->path);
    free(name);
    if (!ok) return mx_last_status();
  }
  return MX_OK;
}

mx_status mx__ckpt_copy_module(mx__ckpt_reader *r, mx_module *m, const char *prefix) {
  int np = mx_module_num_parameters(m), nb = mx_module_num_buffers(m);
  for (int i = 0; i < np + nb; i++) {
    char *name;
    mx_tensor *t = member(m, i, np, prefix, &name);
    if (!name) return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", r->fn, r->path);
    mx_status status = mx_copy_(t, mx_safetensors_get(r->file, name));
    free(name);
    if (status != MX_OK) return mx__error_prefix(r->fn);
  }
  return MX_OK;
}

mx_status mx__ckpt_check_unused(mx__ckpt_reader *r, int n, const char *const *ignored) {
  for (int i = 0; i < mx_safetensors_count(r->file); i++) {
    const char *name = mx_safetensors_name(r->file, i);
    bool skip = r->used[i];
    for (int k = 0; k < n && !skip; k++) skip = !strncmp(name, ignored[k], strlen(ignored[k]));
    if (!skip) return mx__error(MX_CORRUPT_DATA, "%s: %s: unexpected tensor '%s'", r->fn, r->path, name);
  }
  return MX_OK;
}

const char *mx__ckpt_meta(mx__ckpt_reader *r, const char *key) {
  const char *v = mx_safetensors_metadata(r->file, key);
  if (!v) mx__error(MX_CORRUPT_DATA, "%s: %s: missing metadata '%s'", r->fn, r->path, key);
  return v;
}

static mx_status not_a(mx__ckpt_reader *r, const char *key, const char *v, const char *what) {
  return mx__error(MX_CORRUPT_DATA, "%s: %s: metadata '%s' is '%s', not %s", r->fn, r->path, key, v, what);
}

mx_status mx__ckpt_f64(mx__ckpt_reader *r, const char *key, double *out) {
  const char *v = mx__ckpt_meta(r, key);
  if (!v) return mx_last_status();
  char *end;
  *out = strtod(v, &end);
  return *v && !*end ? MX_OK : not_a(r, key, v, "a number");
}

mx_status mx__ckpt_i64(mx__ckpt_reader *r, const char *key, int64_t *out) {
  const char *v = mx__ckpt_meta(r, key);
  if (!v) return mx_last_status();
  char *end;
  errno = 0;
  long long x = strtoll(v, &end, 10);
  *out = x;
  return *v && !*end && errno == 0 ? MX_OK : not_a(r, key, v, "an integer");
}

mx_status mx__ckpt_u64(mx__ckpt_reader *r, const char *key, uint64_t *out) {
  const char *v = mx__ckpt_meta(r, key);
  if (!v) return mx_last_status();
  char *end;
  errno = 0;
  unsigned long long x = strtoull(v, &end, 10);
  *out = x;
  return *v >= '0' && *v <= '9' && !*end && errno == 0 ? MX_OK : not_a(r, key, v, "an unsigned integer");
}

mx_status mx__ckpt_bool(mx__ckpt_reader *r, const char *key, bool *out) {
  const char *v = mx__ckpt_meta(r, key);
  if (!v) return mx_last_status();
  *out = !strcmp(v, "true");
  return *out || !strcmp(v, "false") ? MX_OK : not_a(r, key, v, "true or false");
}
