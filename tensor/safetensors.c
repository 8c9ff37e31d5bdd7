/* A loaded safetensors file: its tensors and metadata by index or name,
 * and the dtype codes and name checks the reader and writer share. */
#include <stdlib.h>
#include <string.h>

#include "tensor/safetensors_internal.h"

static const char *const codes[] = {
#define X(name, ctype, size, str) #name,
    MX_DTYPE_MAP(X)
#undef X
};
_Static_assert(sizeof codes / sizeof *codes == MX_DTYPE_COUNT, "one safetensors code per dtype");

const char *mx__safetensors_code(mx_dtype dtype) { return codes[dtype]; }

mx_dtype mx__safetensors_dtype(const char *code) {
  for (int d = 0; d < MX_DTYPE_COUNT; d++)
    if (!strcmp(code, codes[d])) return (mx_dtype)d;
  return MX_DTYPE_COUNT;
}

static int compare_strings(const void *a, const void *b) {
  return strcmp(*(const char *const *)a, *(const char *const *)b);
}

const char *mx__safetensors_duplicate(int n, const char *const *strings, bool *failed) {
  *failed = false;
  if (n < 2) return NULL;
  const char **sorted = malloc(sizeof *sorted * (size_t)n);
  if (!sorted) {
    *failed = true;
    return NULL;
  }
  memcpy(sorted, strings, sizeof *sorted * (size_t)n);
  qsort(sorted, (size_t)n, sizeof *sorted, compare_strings);
  const char *dup = NULL;
  for (int i = 1; i < n && !dup; i++)
    if (!strcmp(sorted[i - 1], sorted[i])) dup = sorted[i];
  free(sorted);
  return dup;
}

void mx_safetensors_free(mx_safetensors *f) {
  if (!f) return;
  for (int i = 0; i < f->n; i++) {
    free(f->names[i]);
    if (f->tensors[i]) mx__decref(f->tensors[i]);
  }
  for (int i = 0; i < f->n_meta; i++) {
    free(f->keys[i]);
    free(f->values[i]);
  }
  free(f->names);
  free(f->tensors);
  free(f->keys);
  free(f->values);
  free(f);
}

/* f and i checked, naming fn; false with the error set. */
static bool valid_index(const char *fn, const mx_safetensors *f, int i, int count, const char *what) {
  if (!f) {
    mx__null_input(fn, "f");
    return false;
  }
  if (i < 0 || i >= count) {
    mx__error(MX_INDEX_ERROR, "%s: %s %d is out of range (the file has %d)", fn, what, i, count);
    return false;
  }
  return true;
}

int mx_safetensors_count(const mx_safetensors *f) {
  if (!f) {
    mx__null_input("mx_safetensors_count", "f");
    return 0;
  }
  return f->n;
}

const char *mx_safetensors_name(const mx_safetensors *f, int i) {
  return valid_index("mx_safetensors_name", f, i, f ? f->n : 0, "tensor") ? f->names[i] : NULL;
}

mx_tensor *mx_safetensors_tensor(const mx_safetensors *f, int i) {
  return valid_index("mx_safetensors_tensor", f, i, f ? f->n : 0, "tensor") ? f->tensors[i] : NULL;
}

int mx_safetensors_find(const mx_safetensors *f, const char *name) {
  if (!f || !name) {
    mx__null_input("mx_safetensors_find", f ? "name" : "f");
    return -1;
  }
  for (int i = 0; i < f->n; i++)
    if (!strcmp(f->names[i], name)) return i;
  return -1;
}

mx_tensor *mx_safetensors_get(const mx_safetensors *f, const char *name) {
  if (!f || !name) {
    mx__null_input("mx_safetensors_get", f ? "name" : "f");
    return NULL;
  }
  int i = mx_safetensors_find(f, name);
  return i >= 0 ? f->tensors[i] : NULL;
}

int mx_safetensors_metadata_count(const mx_safetensors *f) {
  if (!f) {
    mx__null_input("mx_safetensors_metadata_count", "f");
    return 0;
  }
  return f->n_meta;
}

const char *mx_safetensors_metadata_key(const mx_safetensors *f, int i) {
  return valid_index("mx_safetensors_metadata_key", f, i, f ? f->n_meta : 0, "metadata entry") ? f->keys[i] : NULL;
}

const char *mx_safetensors_metadata_value(const mx_safetensors *f, int i) {
  return valid_index("mx_safetensors_metadata_value", f, i, f ? f->n_meta : 0, "metadata entry") ? f->values[i]
                                                                                                 : NULL;
}

const char *mx_safetensors_metadata(const mx_safetensors *f, const char *key) {
  if (!f || !key) {
    mx__null_input("mx_safetensors_metadata", f ? "key" : "f");
    return NULL;
  }
  for (int i = 0; i < f->n_meta; i++)
    if (!strcmp(f->keys[i], key)) return f->values[i];
  return NULL;
}
