/* Writing safetensors files: the JSON header (cJSON), the tensors' bytes
 * with each one's checksum (xxHash's XXH3-64), written atomically through
 * tensor/atomic_file.h. */
#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "tensor/atomic_file.h"
#include "tensor/safetensors_internal.h"

static const char *const fn = "mx_safetensors_save";

/* --- checks ------------------------------------------------------------------------ */

static mx_status check_names(int n, const char *const *names, const char *what) {
  for (int i = 0; i < n; i++) {
    if (!names[i]) {
      char arg[48];
      snprintf(arg, sizeof arg, "%s[%d]", what, i);
      return mx__null_input(fn, arg);
    }
    if (!names[i][0]) return mx__error(MX_INVALID_ARGUMENT, "%s: %s[%d] is empty", fn, what, i);
  }
  bool failed;
  const char *dup = mx__safetensors_duplicate(n, names, &failed);
  if (failed) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
  if (dup) return mx__error(MX_INVALID_ARGUMENT, "%s: %s '%s' appears twice", fn, what, dup);
  return MX_OK;
}

static mx_status check_args(const char *path, int n, const char *const *names, const mx_tensor *const *tensors,
                            int n_meta, const char *const *keys, const char *const *values) {
  if (!path) return mx__null_input(fn, "path");
  if (n < 0 || n_meta < 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: %s is %d; it must be >= 0", fn, n < 0 ? "n" : "n_meta",
                     n < 0 ? n : n_meta);
  if (n > 0 && (!names || !tensors)) return mx__null_input(fn, names ? "tensors" : "names");
  if (n_meta > 0 && (!keys || !values)) return mx__null_input(fn, keys ? "meta_values" : "meta_keys");
  for (int i = 0; i < n; i++) {
    if (!tensors[i]) {
      char arg[32];
      snprintf(arg, sizeof arg, "tensors[%d]", i);
      return mx__null_input(fn, arg);
    }
  }
  if (check_names(n, names, "names") != MX_OK || check_names(n_meta, keys, "meta_keys") != MX_OK)
    return mx_last_status();
  for (int i = 0; i < n; i++)
    if (!strcmp(names[i], "__metadata__"))
      return mx__error(MX_INVALID_ARGUMENT, "%s: names[%d] is \"__metadata__\", the format's name for the metadata",
                       fn, i);
  for (int i = 0; i < n_meta; i++) {
    if (!values[i]) {
      char arg[32];
      snprintf(arg, sizeof arg, "meta_values[%d]", i);
      return mx__null_input(fn, arg);
    }
    if (!strncmp(keys[i], MX__SAFETENSORS_SUM_PREFIX, strlen(MX__SAFETENSORS_SUM_PREFIX)))
      return mx__error(MX_INVALID_ARGUMENT, "%s: meta_keys[%d] '%s' begins with '%s', which names the tensors' "
                       "checksums", fn, i, keys[i], MX__SAFETENSORS_SUM_PREFIX);
  }
  return MX_OK;
}

/* --- the header -------------------------------------------------------------------- */

/* An integer as a raw JSON number (cJSON would print large ones as doubles). */
static cJSON *json_int(int64_t v) {
  char digits[24];
  snprintf(digits, sizeof digits, "%" PRId64, v);
  return cJSON_CreateRaw(digits);
}

static bool add_int_array(cJSON *obj, const char *key, int n, const int64_t *v) {
  cJSON *a = cJSON_AddArrayToObject(obj, key);
  if (!a) return false;
  for (int i = 0; i < n; i++) {
    cJSON *item = json_int(v[i]);
    if (!item || !cJSON_AddItemToArray(a, item)) {
      cJSON_Delete(item);
      return false;
    }
  }
  return true;
}

static int64_t byte_size(const mx_tensor *t) { return mx_numel(t) * (int64_t)mx_dtype_size(mx_dtype_of(t)); }

/* Where header_json leaves tensor i's checksum: 16 bytes of 0x01, a byte
 * cJSON escapes inside every string it prints, so they appear nowhere else
 * in the text. write_contents finds them and writes the digits over them
 * once the bytes have been hashed on their way to the file. */
#define SUM_PLACEHOLDER "\"\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\x01\""
_Static_assert(sizeof SUM_PLACEHOLDER == MX__SAFETENSORS_SUM_DIGITS + 3, "quotes around one byte per digit");

/* Adds tensor `name`'s checksum entry, its value a placeholder. */
static bool add_sum_placeholder(cJSON *meta, const char *name) {
  size_t size = strlen(MX__SAFETENSORS_SUM_PREFIX) + strlen(name) + 1;
  char *key = malloc(size);
  cJSON *value = key ? cJSON_CreateRaw(SUM_PLACEHOLDER) : NULL;
  if (value) snprintf(key, size, "%s%s", MX__SAFETENSORS_SUM_PREFIX, name);
  bool ok = value && cJSON_AddItemToObject(meta, key, value);
  if (!ok) cJSON_Delete(value);
  free(key);
  return ok;
}

/* The header's JSON text (malloc'ed), or NULL when memory ran out; the
 * metadata ends with a checksum placeholder per tensor, in their order. */
static char *header_json(int n, const char *const *names, const mx_tensor *const *tensors, int n_meta,
                         const char *const *keys, const char *const *values) {
  cJSON *root = cJSON_CreateObject();
  bool ok = root != NULL;
  if (ok && n_meta + n > 0) {
    cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
    ok = meta != NULL;
    for (int i = 0; ok && i < n_meta; i++) ok = cJSON_AddStringToObject(meta, keys[i], values[i]) != NULL;
    for (int i = 0; ok && i < n; i++) ok = add_sum_placeholder(meta, names[i]);
  }
  int64_t offset = 0;
  for (int i = 0; ok && i < n; i++) {
    const mx_tensor *t = tensors[i];
    mx_shape shape = mx_shape_get(t);
    int64_t offsets[2] = {offset, offset + byte_size(t)};
    offset = offsets[1];
    cJSON *entry = cJSON_AddObjectToObject(root, names[i]);
    ok = entry && cJSON_AddStringToObject(entry, "dtype", mx__safetensors_code(mx_dtype_of(t))) &&
         add_int_array(entry, "shape", shape.ndim, shape.d) && add_int_array(entry, "data_offsets", 2, offsets);
  }
  char *text = ok ? cJSON_PrintUnformatted(root) : NULL;
  cJSON_Delete(root);
  return text;
}

/* --- the file ---------------------------------------------------------------------- */

/* The offsets in the file of the n checksum placeholders in json (malloc'ed), or NULL with the error set. */
static off_t *find_sum_placeholders(const char *path, const char *json, int n) {
  off_t *at = malloc(sizeof *at * ((size_t)n + 1));
  if (!at) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, path);
    return NULL;
  }
  int found = 0;
  for (const char *p = strchr(json, '\x01'); p && found < n; p = strchr(p + MX__SAFETENSORS_SUM_DIGITS, '\x01'))
    at[found++] = 8 + (off_t)(p - json);
  if (found != n) {
    mx__error(MX_STATE_ERROR, "%s: %s: the header holds %d checksum places for %d tensors", fn, path, found, n);
    free(at);
    return NULL;
  }
  return at;
}

/* Writes each tensor's checksum over its placeholder in the header. */
static bool write_sums(FILE *fp, int n, const off_t *at, const XXH64_hash_t *sums) {
  bool ok = fflush(fp) == 0;
  for (int i = 0; ok && i < n; i++) {
    char digits[MX__SAFETENSORS_SUM_DIGITS + 1];
    snprintf(digits, sizeof digits, "%016" PRIx64, (uint64_t)sums[i]);
    ok = pwrite(fileno(fp), digits, MX__SAFETENSORS_SUM_DIGITS, at[i]) == MX__SAFETENSORS_SUM_DIGITS;
  }
  return ok;
}

/* Writes the tensors' bytes to fp, gathering on the host those that are
 * elsewhere or strided, and hashes each on its way into sums[i]; false with
 * the error set. */
static bool write_tensors(FILE *fp, const char *path, int n, const mx_tensor *const *tensors, XXH64_hash_t *sums) {
  void *buffer = NULL;
  bool ok = true;
  for (int i = 0; ok && i < n; i++) {
    const mx_tensor *t = tensors[i];
    size_t bytes = (size_t)byte_size(t);
    const void *data = bytes ? mx_data_ptr(t) : "";
    if (bytes && (mx_device_of(t) != MX_CPU || !mx_is_contiguous(t))) { /* gathered on the host, row-major */
      free(buffer);
      if (!(buffer = malloc(bytes))) {
        mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory gathering tensor %d (%zu bytes)", fn, path, i, bytes);
        ok = false;
      } else if (mx_to_host(t, buffer, bytes) != MX_OK) {
        mx__error_prefix(fn);
        ok = false;
      }
      data = buffer;
    }
    if (!ok) break;
    sums[i] = XXH3_64bits(data, bytes); /* the very bytes written: hashing needs no copy of its own */
    if (fwrite(data, 1, bytes, fp) != bytes) {
      mx__error(MX_IO_ERROR, "%s: %s: writing failed (%s)", fn, path, strerror(errno));
      ok = false;
    }
  }
  free(buffer);
  return ok;
}

/* Writes the header and the tensors to fp, then the tensors' checksums over
 * their placeholders in the header; false with the error set. */
static bool write_contents(FILE *fp, const char *path, const char *json, int n, const mx_tensor *const *tensors) {
  size_t len = strlen(json), padded = (len + 7) / 8 * 8;
  off_t *sum_at = find_sum_placeholders(path, json, n);
  XXH64_hash_t *sums = sum_at ? malloc(sizeof *sums * ((size_t)n + 1)) : NULL;
  if (sum_at && !sums) mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", fn, path);
  bool ok = sums != NULL;
  unsigned char prefix[8];
  for (int i = 0; i < 8; i++) prefix[i] = (unsigned char)((uint64_t)padded >> (8 * i));
  bool header = ok && fwrite(prefix, 1, 8, fp) == 8 && fwrite(json, 1, len, fp) == len;
  for (size_t i = len; header && i < padded; i++) header = fputc(' ', fp) != EOF;
  if (ok && !header) {
    mx__error(MX_IO_ERROR, "%s: %s: writing failed (%s)", fn, path, strerror(errno));
    ok = false;
  }
  ok = ok && write_tensors(fp, path, n, tensors, sums);
  if (ok && !(write_sums(fp, n, sum_at, sums) && fflush(fp) == 0 && fsync(fileno(fp)) == 0)) {
    mx__error(MX_IO_ERROR, "%s: %s: writing failed (%s)", fn, path, strerror(errno));
    ok = false;
  }
  free(sum_at);
  free(sums);
  return ok;
}

/* Writes the file through the atomic-file module: a temporary file in the
 * target's folder, synced and renamed over it; on any failure path is left
 * as it was. */
static mx_status write_atomically(const char *path, const char *json, int n, const mx_tensor *const *tensors) {
  mx_atomic_file file;
  if (mx_atomic_begin(&file, fn, path) != MX_OK) return mx_last_status();
  if (!write_contents(file.fp, path, json, n, tensors)) {
    mx_atomic_abort(&file);
    return mx_last_status();
  }
  return mx_atomic_commit(&file);
}

mx_status mx_safetensors_save(const char *path, int n, const char *const *names, const mx_tensor *const *tensors,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values) {
  if (check_args(path, n, names, tensors, n_meta, meta_keys, meta_values) != MX_OK) return mx_last_status();
  char *json = header_json(n, names, tensors, n_meta, meta_keys, meta_values);
  if (!json) return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory writing the header", fn, path);
  size_t len = strlen(json);
  mx_status status = len > MX_SAFETENSORS_MAX_HEADER
                         ? mx__error(MX_INVALID_ARGUMENT, "%s: %s: the header would take %zu bytes, over the "
                                     "format's limit of %d", fn, path, len, MX_SAFETENSORS_MAX_HEADER)
                         : write_atomically(path, json, n, tensors);
  free(json);
  return status;
}
