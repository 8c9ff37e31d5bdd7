/* mx_safetensors_load on any bytes. Accepted, the file is what the format
 * says (tensor/safetensors.h): its tensors' bytes, in order, are exactly
 * the bytes after the header, bools are 0 or 1, names are unique and found
 * by name, and every metadata key finds its value. */
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"

/* The header's length from the first 8 bytes (little-endian). */
static uint64_t header_length(const uint8_t *data) {
  uint64_t n = 0;
  for (int i = 7; i >= 0; i--) n = n << 8 | data[i];
  return n;
}

static void check_tensors(const mx_safetensors *f, const uint8_t *data, size_t size) {
  mx_fuzz_check(size >= 8 && header_length(data) <= size - 8, "an accepted file has a header inside it");
  size_t at = 8 + (size_t)header_length(data);
  for (int i = 0; i < mx_safetensors_count(f); i++) {
    const char *name = mx_safetensors_name(f, i);
    mx_tensor *t = mx_safetensors_tensor(f, i);
    mx_fuzz_check(name && t, "every tensor has a name");
    mx_fuzz_check(mx_safetensors_find(f, name) == i && mx_safetensors_get(f, name) == t,
                  "a tensor is found by its name");
    mx_dtype dtype = mx_dtype_of(t);
    size_t bytes = (size_t)mx_numel(t) * mx_dtype_size(dtype);
    mx_fuzz_check(bytes <= size - at, "a tensor's bytes lie inside the file");
    uint8_t *copy = malloc(bytes ? bytes : 1);
    mx_fuzz_check(copy && mx_to_host(t, copy, bytes) == MX_OK, "a tensor's bytes can be read");
    mx_fuzz_check(memcmp(copy, data + at, bytes) == 0, "a tensor holds the file's bytes, in the file's order");
    for (size_t k = 0; dtype == MX_BOOL && k < bytes; k++) mx_fuzz_check(copy[k] <= 1, "bools are 0 or 1");
    free(copy);
    at += bytes;
  }
  mx_fuzz_check(at == size, "the tensors' bytes end the file");
}

bool mx_fuzz_safetensors(const uint8_t *data, size_t size) {
  const char *path = mx_fuzz_write("input.safetensors", data, size);
  mx_safetensors *f = mx_safetensors_load(path);
  if (!f) {
    mx_fuzz_expect_refusal("mx_safetensors_load", path, NULL);
    return false;
  }
  check_tensors(f, data, size);
  for (int i = 0; i < mx_safetensors_metadata_count(f); i++) {
    const char *key = mx_safetensors_metadata_key(f, i), *value = mx_safetensors_metadata_value(f, i);
    mx_fuzz_check(key && value, "every metadata entry has a key and a value");
    mx_fuzz_check(mx_safetensors_metadata(f, key) == value, "a metadata value is found by its key");
  }
  mx_safetensors_free(f);
  return true;
}
