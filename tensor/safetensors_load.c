/* Reading safetensors files, which are untrusted: the header length, the
 * JSON (cJSON), every entry's dtype, shape and byte range are checked
 * against the file before a tensor is allocated, and each tensor's bytes
 * against its checksum (xxHash's XXH3-64) when the file has them. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include "tensor/regular_file.h"
#include "tensor/safetensors_internal.h"

static const char *const fn = "mx_safetensors_load";

/* One tensor's entry in the header. */
typedef struct {
  const char *name; /* in the cJSON tree */
  mx_dtype dtype;
  int ndim;
  int64_t shape[MX_MAX_DIMS];
  int64_t begin, end;
  bool has_sum;
  XXH64_hash_t sum; /* the checksum the file records for its bytes */
} entry;

/* A checksum in the metadata, before it is matched to its tensor. */
typedef struct {
  const char *name; /* in the cJSON tree */
  XXH64_hash_t sum;
} checksum;

/* What a load holds while it runs. */
typedef struct {
  const char *path;
  FILE *fp;
  int64_t data_size; /* the bytes after the header */
  char *header;
  cJSON *root;
  entry *entries;
  int n;
  checksum *sums;
  int n_sums;
  mx_safetensors *out;
} loader;

/* The note of the last load on this thread ("" when there is none). */
static _Thread_local char note[1024];

const char *mx_safetensors_last_note(void) { return note[0] ? note : NULL; }

/* --- the header ---------------------------------------------------------------------- */

/* Opens the file, which must be a regular one (no FIFO may block the load);
 * *size: its length. */
static bool open_file(loader *L, int64_t *size) {
  struct stat st;
  const char *kind;
  int fd = mx__open_regular(L->path, &st, &kind);
  if (fd < 0) {
    if (kind) mx__error(MX_IO_ERROR, "%s: %s is %s, not a regular file", fn, L->path, kind);
    else mx__error(MX_IO_ERROR, "%s: %s: cannot open (%s)", fn, L->path, strerror(errno));
    return false;
  }
  if (!(L->fp = fdopen(fd, "rb"))) {
    close(fd);
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    return false;
  }
  *size = (int64_t)st.st_size;
  return true;
}

static bool read_header(loader *L) {
  int64_t size;
  if (!open_file(L, &size)) return false;
  unsigned char prefix[8];
  if (size < 8 || fread(prefix, 1, 8, L->fp) != 8) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the file has %lld bytes; a safetensors file starts with 8 giving the "
              "header's length", fn, L->path, (long long)size);
    return false;
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | prefix[i];
  if (n > (uint64_t)(size - 8)) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the header length %llu runs past the end of the file (%lld bytes)", fn,
              L->path, (unsigned long long)n, (long long)size);
    return false;
  }
  if (n > MX_SAFETENSORS_MAX_HEADER) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the header length %llu is over the limit of %d bytes", fn, L->path,
              (unsigned long long)n, MX_SAFETENSORS_MAX_HEADER);
    return false;
  }
  L->data_size = size - 8 - (int64_t)n;
  if (!(L->header = malloc((size_t)n + 1))) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory for a header of %llu bytes", fn, L->path,
              (unsigned long long)n);
    return false;
  }
  if (fread(L->header, 1, (size_t)n, L->fp) != (size_t)n) {
    mx__error(MX_IO_ERROR, "%s: %s: reading the header failed", fn, L->path);
    return false;
  }
  L->header[n] = '\0';
  const char *end = NULL;
  L->root = cJSON_ParseWithLengthOpts(L->header, (size_t)n, &end, false);
  if (!L->root) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the header is not valid JSON (at byte %td of %llu)", fn, L->path,
              end ? end - L->header : 0, (unsigned long long)n);
    return false;
  }
  for (const char *p = end; p < L->header + n; p++) {
    if (!strchr(" \t\r\n", *p) || !*p) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the header has bytes after its JSON (at byte %td of %llu)", fn, L->path,
                p - L->header, (unsigned long long)n);
      return false;
    }
  }
  if (!cJSON_IsObject(L->root)) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the header is not a JSON object", fn, L->path);
    return false;
  }
  return true;
}

/* --- entries ------------------------------------------------------------------------- */

/* A JSON number that is an integer in [0, 2^53]. */
static bool json_count(const cJSON *v, int64_t *out) {
  if (!cJSON_IsNumber(v)) return false;
  double d = v->valuedouble;
  if (!(d >= 0 && d <= 9007199254740992.0 && d == floor(d))) return false;
  *out = (int64_t)d;
  return true;
}

/* The JSON of v for a message, cut to fit. */
static const char *json_str(const cJSON *v, char *buf, size_t size) {
  char *text = cJSON_PrintUnformatted(v);
  snprintf(buf, size, "%s", text ? text : "?");
  if (text && strlen(text) >= size && size > 4) memcpy(buf + size - 4, "...", 4);
  free(text);
  return buf;
}

static bool bad_entry(const loader *L, const char *name, const char *why, const cJSON *v) {
  char buf[64];
  mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': %s%s%s", fn, L->path, name, why, v ? " " : "",
            v ? json_str(v, buf, sizeof buf) : "");
  return false;
}

static bool parse_entry(const loader *L, const cJSON *item, entry *e) {
  const char *name = e->name = item->string;
  if (!cJSON_IsObject(item)) return bad_entry(L, name, "the entry is not a JSON object but", item);
  const cJSON *dtype = cJSON_GetObjectItemCaseSensitive(item, "dtype");
  const cJSON *shape = cJSON_GetObjectItemCaseSensitive(item, "shape");
  const cJSON *offsets = cJSON_GetObjectItemCaseSensitive(item, "data_offsets");
  if (!cJSON_IsString(dtype)) return bad_entry(L, name, "\"dtype\" is missing or not a string", NULL);
  if ((e->dtype = mx__safetensors_dtype(dtype->valuestring)) == MX_DTYPE_COUNT) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': unknown dtype '%s' (mixgrad reads %s)", fn, L->path, name,
              dtype->valuestring, MX__SAFETENSORS_CODES);
    return false;
  }
  if (!cJSON_IsArray(shape)) return bad_entry(L, name, "\"shape\" is missing or not a list", NULL);
  if ((e->ndim = cJSON_GetArraySize(shape)) > MX_MAX_DIMS) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': shape has %d dims; mixgrad tensors have at most %d", fn,
              L->path, name, e->ndim, MX_MAX_DIMS);
    return false;
  }
  int64_t numel, d = 0;
  const cJSON *v;
  cJSON_ArrayForEach(v, shape) {
    if (!json_count(v, &e->shape[d++])) return bad_entry(L, name, "shape holds a size that is not an integer >= 0:", v);
  }
  /* numel * 8 bytes (the widest dtype) must fit as well */
  if (mx__numel_overflows(e->ndim, e->shape, &numel) || numel > INT64_MAX / 8)
    return bad_entry(L, name, "shape has too many elements:", shape);
  if (!offsets) return bad_entry(L, name, "\"data_offsets\" is missing", NULL);
  if (!cJSON_IsArray(offsets) || cJSON_GetArraySize(offsets) != 2 || !json_count(offsets->child, &e->begin) ||
      !json_count(offsets->child->next, &e->end))
    return bad_entry(L, name, "\"data_offsets\" is not a list of two integers >= 0:", offsets);
  char dims[MX__DIMS_STR];
  int64_t need = numel * (int64_t)mx_dtype_size(e->dtype);
  if (e->end < e->begin) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': data_offsets [%lld, %lld] end before they begin", fn, L->path,
              name, (long long)e->begin, (long long)e->end);
    return false;
  }
  if (e->end - e->begin != need) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': data_offsets [%lld, %lld] hold %lld bytes but shape %s %s "
              "needs %lld", fn, L->path, name, (long long)e->begin, (long long)e->end,
              (long long)(e->end - e->begin), mx__dims_str(dims, e->ndim, e->shape), mx_dtype_name(e->dtype),
              (long long)need);
    return false;
  }
  if (e->end > L->data_size) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': data_offsets [%lld, %lld] run past the end of the data (%lld "
              "bytes follow the header)", fn, L->path, name, (long long)e->begin, (long long)e->end,
              (long long)L->data_size);
    return false;
  }
  return true;
}

/* A checksum entry of the metadata: 16 hex digits. */
static bool parse_checksum(loader *L, const cJSON *v) {
  const char *digits = v->valuestring;
  size_t len = strspn(digits, "0123456789abcdefABCDEF");
  if (len != MX__SAFETENSORS_SUM_DIGITS || digits[len]) {
    char buf[64];
    mx__error(MX_CORRUPT_DATA, "%s: %s: metadata '%s' is %s, not a checksum of %d hex digits", fn, L->path,
              v->string, json_str(v, buf, sizeof buf), MX__SAFETENSORS_SUM_DIGITS);
    return false;
  }
  L->sums[L->n_sums++] = (checksum){v->string + strlen(MX__SAFETENSORS_SUM_PREFIX), strtoull(digits, NULL, 16)};
  return true;
}

static bool parse_metadata(loader *L, const cJSON *meta) {
  if (!cJSON_IsObject(meta)) {
    char buf[64];
    mx__error(MX_CORRUPT_DATA, "%s: %s: \"__metadata__\" is not a JSON object but %s", fn, L->path,
              json_str(meta, buf, sizeof buf));
    return false;
  }
  int n = cJSON_GetArraySize(meta);
  mx_safetensors *f = L->out;
  f->keys = calloc((size_t)n + 1, sizeof *f->keys);
  f->values = calloc((size_t)n + 1, sizeof *f->values);
  L->sums = calloc((size_t)n + 1, sizeof *L->sums);
  if (!f->keys || !f->values || !L->sums) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    return false;
  }
  const cJSON *v;
  cJSON_ArrayForEach(v, meta) {
    if (!cJSON_IsString(v)) {
      char buf[64];
      mx__error(MX_CORRUPT_DATA, "%s: %s: metadata '%s' is not a string but %s", fn, L->path, v->string,
                json_str(v, buf, sizeof buf));
      return false;
    }
    if (!strncmp(v->string, MX__SAFETENSORS_SUM_PREFIX, strlen(MX__SAFETENSORS_SUM_PREFIX))) {
      if (!parse_checksum(L, v)) return false;
      continue;
    }
    f->keys[f->n_meta] = strdup(v->string);
    f->values[f->n_meta] = strdup(v->valuestring);
    f->n_meta++;
    if (!f->keys[f->n_meta - 1] || !f->values[f->n_meta - 1]) {
      mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
      return false;
    }
  }
  bool failed;
  const char *dup = mx__safetensors_duplicate(f->n_meta, (const char *const *)f->keys, &failed);
  if (failed || dup) {
    mx__error(failed ? MX_OUT_OF_MEMORY : MX_CORRUPT_DATA, "%s: %s: %s%s%s", fn, L->path,
              failed ? "out of memory" : "metadata key '", failed ? "" : dup, failed ? "" : "' appears twice");
    return false;
  }
  return true;
}

static bool parse_entries(loader *L) {
  int count = cJSON_GetArraySize(L->root);
  const char **names = calloc((size_t)count + 1, sizeof *names);
  L->entries = calloc((size_t)count + 1, sizeof *L->entries);
  if (!names || !L->entries) {
    free(names);
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    return false;
  }
  bool ok = true, seen_meta = false;
  const cJSON *item;
  cJSON_ArrayForEach(item, L->root) {
    if (!ok) break;
    if (!strcmp(item->string, "__metadata__")) {
      if (seen_meta) mx__error(MX_CORRUPT_DATA, "%s: %s: \"__metadata__\" appears twice", fn, L->path);
      ok = !seen_meta && parse_metadata(L, item);
      seen_meta = true;
    } else if ((ok = parse_entry(L, item, &L->entries[L->n]))) {
      names[L->n++] = item->string;
    }
  }
  bool failed = false;
  const char *dup = ok ? mx__safetensors_duplicate(L->n, names, &failed) : NULL;
  if (failed || dup) {
    ok = false;
    if (failed) mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    else mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s' appears twice", fn, L->path, dup);
  }
  free(names);
  return ok;
}

/* --- checksums ---------------------------------------------------------------------- */

static int by_name(const void *a, const void *b) {
  return strcmp((*(const entry *const *)a)->name, (*(const entry *const *)b)->name);
}

/* Gives each tensor its checksum: a file has one for every tensor, or none
 * (an older mixgrad's file, or another tool's). */
static bool match_checksums(loader *L) {
  if (L->n_sums == 0) return true;
  entry **sorted = malloc(sizeof *sorted * ((size_t)L->n + 1));
  if (!sorted) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    return false;
  }
  for (int i = 0; i < L->n; i++) sorted[i] = &L->entries[i];
  qsort(sorted, (size_t)L->n, sizeof *sorted, by_name);
  bool ok = true;
  for (int k = 0; ok && k < L->n_sums; k++) {
    entry key = {.name = L->sums[k].name}, *wanted = &key;
    entry **hit = bsearch(&wanted, sorted, (size_t)L->n, sizeof *sorted, by_name);
    if (!hit || (*hit)->has_sum) {
      mx__error(MX_CORRUPT_DATA, hit ? "%s: %s: metadata key '%s%s' appears twice"
                                     : "%s: %s: metadata '%s%s' is the checksum of a tensor the file does not have",
                fn, L->path, MX__SAFETENSORS_SUM_PREFIX, L->sums[k].name);
      ok = false;
    } else {
      (*hit)->has_sum = true;
      (*hit)->sum = L->sums[k].sum;
    }
  }
  for (int i = 0; ok && i < L->n; i++) {
    if (!L->entries[i].has_sum) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s' has no checksum, though the file's other tensors have theirs",
                fn, L->path, L->entries[i].name);
      ok = false;
    }
  }
  free(sorted);
  return ok;
}

/* The tensor's bytes against the checksum the file records for them. */
static bool check_sum(const loader *L, const entry *e, const void *data, size_t bytes) {
  if (!e->has_sum) return true;
  XXH64_hash_t got = XXH3_64bits(bytes ? data : "", bytes);
  if (got == e->sum) return true;
  mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': its %zu bytes hash to %016llx but the file records %016llx "
            "(XXH3-64): the data is corrupt", fn, L->path, e->name, bytes, (unsigned long long)got,
            (unsigned long long)e->sum);
  return false;
}

/* --- the layout ---------------------------------------------------------------------- */

static int by_offsets(const void *a, const void *b) {
  const entry *x = a, *y = b;
  if (x->begin != y->begin) return x->begin < y->begin ? -1 : 1;
  return (x->end > y->end) - (x->end < y->end);
}

/* The tensors' bytes tile the data exactly: no overlap, no gap, no tail. */
static bool check_layout(loader *L) {
  qsort(L->entries, (size_t)L->n, sizeof *L->entries, by_offsets);
  int64_t expected = 0;
  for (int i = 0; i < L->n; i++) {
    const entry *e = &L->entries[i];
    if (e->begin < expected) {
      const entry *p = &L->entries[i - 1];
      mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': data_offsets [%lld, %lld] overlap those of tensor '%s' "
                "[%lld, %lld]", fn, L->path, e->name, (long long)e->begin, (long long)e->end, p->name,
                (long long)p->begin, (long long)p->end);
      return false;
    }
    if (e->begin > expected) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: the bytes [%lld, %lld) of the data belong to no tensor (tensor '%s' "
                "begins at %lld)", fn, L->path, (long long)expected, (long long)e->begin, e->name,
                (long long)e->begin);
      return false;
    }
    expected = e->end;
  }
  if (expected != L->data_size) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: the bytes [%lld, %lld) of the data belong to no tensor", fn, L->path,
              (long long)expected, (long long)L->data_size);
    return false;
  }
  return true;
}

/* --- the tensors --------------------------------------------------------------------- */

static bool read_tensors(loader *L) {
  mx_safetensors *f = L->out;
  f->names = calloc((size_t)L->n + 1, sizeof *f->names);
  f->tensors = calloc((size_t)L->n + 1, sizeof *f->tensors);
  if (!f->names || !f->tensors) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
    return false;
  }
  for (int i = 0; i < L->n; i++) {
    const entry *e = &L->entries[i];
    mx_tensor *t = mx_empty(mx_shape_of(e->ndim, e->shape), e->dtype, MX_CPU);
    if (!t) {
      mx__error_prefix(fn);
      return false;
    }
    mx__retain(t);
    mx_release(t); /* out of any open scope: the file holds the one reference */
    f->tensors[f->n] = t;
    if (!(f->names[f->n++] = strdup(e->name))) {
      mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, L->path);
      return false;
    }
    size_t bytes = (size_t)(e->end - e->begin);
    unsigned char *data = mx_data_ptr(t);
    if (bytes > 0 && fread(data, 1, bytes, L->fp) != bytes) {
      mx__error(MX_IO_ERROR, "%s: %s: tensor '%s': reading its %zu bytes failed (%s)", fn, L->path, e->name, bytes,
                ferror(L->fp) ? strerror(errno) : "the file ended early");
      return false;
    }
    if (!check_sum(L, e, data, bytes)) return false;
    for (size_t k = 0; e->dtype == MX_BOOL && k < bytes; k++) {
      if (data[k] > 1) {
        mx__error(MX_CORRUPT_DATA, "%s: %s: tensor '%s': bool element %zu is %u; bools are 0 or 1", fn, L->path,
                  e->name, k, data[k]);
        return false;
      }
    }
  }
  return true;
}

mx_safetensors *mx_safetensors_load(const char *path) {
  if (!path) {
    mx__null_input(fn, "path");
    return NULL;
  }
  note[0] = '\0';
  loader L = {.path = path, .out = calloc(1, sizeof(mx_safetensors))};
  if (!L.out) mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, path);
  bool ok = L.out && read_header(&L) && parse_entries(&L) && match_checksums(&L) && check_layout(&L) &&
            read_tensors(&L);
  if (ok && L.n > 0 && L.n_sums == 0)
    snprintf(note, sizeof note, "%s: the file has no checksums (an older mixgrad's, or another tool's): its "
             "tensors were loaded unchecked", path);
  if (L.fp) fclose(L.fp);
  cJSON_Delete(L.root);
  free(L.header);
  free(L.entries);
  free(L.sums);
  if (!ok) {
    mx_safetensors_free(L.out);
    return NULL;
  }
  return L.out;
}
