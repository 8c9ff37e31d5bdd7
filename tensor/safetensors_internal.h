/* What the safetensors reader and writer share (not installed). */
#ifndef MX_TENSOR_SAFETENSORS_INTERNAL_H
#define MX_TENSOR_SAFETENSORS_INTERNAL_H

#include "tensor/safetensors.h"
#include "tensor/tensor_impl.h"

/* The format stores numbers little-endian; mixgrad's storage is the host's. */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "mixgrad's safetensors I/O assumes a little-endian host"
#endif

struct mx_safetensors {
  int n;
  char **names;
  mx_tensor **tensors; /* references of the file's own, out of any scope */
  int n_meta;
  char **keys, **values;
};

/* Each tensor's checksum is metadata: the key is this prefix and the
 * tensor's name, the value the XXH3-64 hash of its bytes in the file as 16
 * lowercase hex digits, as Python's xxhash.xxh3_64(data).hexdigest() and
 * `xxhsum -H3` print it. The loader checks and hides these keys. */
#define MX__SAFETENSORS_SUM_PREFIX "xxh3_64:"
#define MX__SAFETENSORS_SUM_DIGITS 16

/* The format's dtype code ("F32", "BF16", ...): mixgrad's enum names. */
const char *mx__safetensors_code(mx_dtype dtype);
/* The dtype of a code, or MX_DTYPE_COUNT for an unknown one. */
mx_dtype mx__safetensors_dtype(const char *code);
/* "F32, F64, ..." for messages. */
#define MX__SAFETENSORS_CODES "F32, F64, F16, BF16, I64, I32, U8, BOOL"

/* The first duplicate among n strings (sorted copies compared), or NULL;
 * *failed is set when memory ran out. */
const char *mx__safetensors_duplicate(int n, const char *const *strings, bool *failed);

#endif
