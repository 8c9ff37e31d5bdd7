/* Named tensors on disk in the safetensors format (the one Hugging Face
 * publishes): readable by Python's safetensors, and checked on the way in.
 *
 *     const char *names[] = {"fc.weight", "fc.bias"};
 *     const mx_tensor *ts[] = {w, b};
 *     const char *keys[] = {"epoch"}, *values[] = {"3"};
 *     if (mx_safetensors_save("model.safetensors", 2, names, ts, 1, keys, values) != MX_OK)
 *       fprintf(stderr, "%s\n", mx_last_error());
 *
 *     mx_safetensors *f = mx_safetensors_load("model.safetensors");
 *     if (!f) fprintf(stderr, "%s\n", mx_last_error());
 *     // mx_safetensors_load: model.safetensors: tensor 'fc.weight': data_offsets
 *     //   [0, 100] hold 100 bytes but shape [10,10] float32 needs 400
 *     mx_tensor *w2 = mx_safetensors_get(f, "fc.weight");   // borrowed, on the CPU
 *     const char *epoch = mx_safetensors_metadata(f, "epoch");
 *     mx_safetensors_free(f);                                 // w2 goes with it
 *
 * The file: 8 bytes holding the header's length N (little-endian), N bytes
 * of JSON — {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets":
 * [begin, end]}, ..., "__metadata__": {"key": "value"}} padded with spaces
 * to a multiple of 8 — then the tensors' bytes, row-major and little-endian,
 * one after another with no gap. dtypes: F32, F64, F16, BF16, I64, I32, U8,
 * BOOL (mixgrad's eight).
 *
 * mixgrad adds to the metadata the checksum of each tensor's bytes:
 * "xxh3_64:<name>" holding their XXH3-64 hash (xxHash) as 16 hex digits,
 * which other readers see as plain metadata. Loading checks every tensor
 * against its checksum and hides these keys from the metadata; a file
 * without them (an older mixgrad's, or another tool's) loads unchecked,
 * and mx_safetensors_last_note says so.
 *
 * Saving is atomic: the bytes go to a temporary file beside path, are
 * flushed to the disk and renamed over path, so a crash or a failure leaves
 * either the old file or the new one, never half of one; the next save
 * removes a killed save's temporary file. path must be absent or a regular
 * file (a symbolic link to one is written through); a folder, FIFO or
 * device is refused and left as it was. Tensors may be strided views and
 * live on any device. Loading treats the file as untrusted: every size is
 * checked against the file before anything is allocated, and a truncated or
 * corrupt file is an error naming the file and the tensor.
 */
#ifndef MX_TENSOR_SAFETENSORS_H
#define MX_TENSOR_SAFETENSORS_H

#include "tensor/tensor.h"

MX_API_BEGIN

/* The largest JSON header a file may have (the Rust library's limit). */
#define MX_SAFETENSORS_MAX_HEADER (100 * 1000 * 1000)

/* Writes n tensors under unique, non-empty names (not "__metadata__"), in
 * that order, and n_meta string pairs as "__metadata__" (none: n_meta 0,
 * keys and values may be NULL). */
mx_status mx_safetensors_save(const char *path, int n, const char *const *names, const mx_tensor *const *tensors,
                              int n_meta, const char *const *meta_keys, const char *const *meta_values);

/* A file read into memory: its tensors (CPU, contiguous, in the order of
 * their bytes in the file) and its metadata. */
typedef struct mx_safetensors mx_safetensors;

mx_safetensors *mx_safetensors_load(const char *path);
/* Frees the file and every tensor it holds. NULL is ignored. */
void mx_safetensors_free(mx_safetensors *f);

int mx_safetensors_count(const mx_safetensors *f);
/* Tensor i's name and the tensor (borrowed: they live until
 * mx_safetensors_free; mx_clone a tensor to keep it longer). */
const char *mx_safetensors_name(const mx_safetensors *f, int i);
mx_tensor *mx_safetensors_tensor(const mx_safetensors *f, int i);
/* The tensor called name (borrowed), or NULL without an error when the file
 * has none; its index with mx_safetensors_find (-1 when absent). */
mx_tensor *mx_safetensors_get(const mx_safetensors *f, const char *name);
int mx_safetensors_find(const mx_safetensors *f, const char *name);

/* The metadata: pairs by index, or a value by key (NULL when absent). */
int mx_safetensors_metadata_count(const mx_safetensors *f);
const char *mx_safetensors_metadata_key(const mx_safetensors *f, int i);
const char *mx_safetensors_metadata_value(const mx_safetensors *f, int i);
const char *mx_safetensors_metadata(const mx_safetensors *f, const char *key);

/* What the last load on this thread (mx_safetensors_load, and so
 * mx_module_load and mx_checkpoint_load) has to say beside success: NULL
 * when every tensor was checked against its checksum (or the file has no
 * tensors, or the load failed), otherwise one line such as "run.ckpt: the
 * file has no checksums (an older mixgrad's, or another tool's): its
 * tensors were loaded unchecked". The next load replaces it. */
const char *mx_safetensors_last_note(void);

MX_API_END

#endif
