/* What state dicts and training checkpoints share: a list of named tensors
 * and metadata to write, and a file being read with the tensors it has
 * used (not installed). */
#ifndef MX_DATA_CHECKPOINT_INTERNAL_H
#define MX_DATA_CHECKPOINT_INTERNAL_H

#include "kernels/base_internal.h"
#include "data/checkpoint.h"
#include "tensor/safetensors.h"

/* --- writing ------------------------------------------------------------------------ */

typedef struct {
  char *name;
  const mx_tensor *tensor;
  bool owned; /* a handle the list releases */
} mx__ckpt_entry;

typedef struct {
  int n, capacity;
  mx__ckpt_entry *entries;
  int n_meta, meta_capacity;
  char **meta; /* key, value, key, value, ... */
  bool failed; /* memory ran out: writing reports it */
} mx__ckpt_writer;

/* Adds t under the printf-formatted name; with owned the list releases t. */
void mx__ckpt_add_tensor(mx__ckpt_writer *w, const mx_tensor *t, bool owned, const char *fmt, ...) MX__PRINTF(4, 5);
/* Adds the metadata key (printf-formatted) with the value. */
void mx__ckpt_add_meta(mx__ckpt_writer *w, const char *value, const char *fmt, ...) MX__PRINTF(3, 4);
/* Numbers as metadata, written so that they read back exactly. */
void mx__ckpt_add_f64(mx__ckpt_writer *w, const char *key, double v);
void mx__ckpt_add_i64(mx__ckpt_writer *w, const char *key, int64_t v);
/* The module's parameters and buffers under prefix + their dotted names. */
mx_status mx__ckpt_add_module(const char *fn, mx__ckpt_writer *w, const mx_module *m, const char *prefix);
/* Saves the list to path, naming fn in any error. */
mx_status mx__ckpt_write(const char *fn, mx__ckpt_writer *w, const char *path);
void mx__ckpt_writer_free(mx__ckpt_writer *w);

/* --- reading ------------------------------------------------------------------------ */

typedef struct {
  const char *fn, *path;
  mx_safetensors *file;
  bool *used; /* per tensor of the file */
} mx__ckpt_reader;

mx_status mx__ckpt_open(mx__ckpt_reader *r, const char *fn, const char *path);
void mx__ckpt_close(mx__ckpt_reader *r);
/* The file's tensor `name` (marked used), checked to have the shape and
 * dtype `whose` ("the module") has; NULL with the error set. */
mx_tensor *mx__ckpt_tensor(mx__ckpt_reader *r, const char *name, const mx_tensor *like, const char *whose);
/* Checks that the file has every parameter and buffer of m under prefix. */
mx_status mx__ckpt_check_module(mx__ckpt_reader *r, const mx_module *m, const char *prefix);
/* Copies them into m (after the check). */
mx_status mx__ckpt_copy_module(mx__ckpt_reader *r, mx_module *m, const char *prefix);
/* An error for the first tensor no check used, except those whose names
 * begin with one of the n ignored prefixes. */
mx_status mx__ckpt_check_unused(mx__ckpt_reader *r, int n, const char *const *ignored);
/* Metadata: present (else an error), and parsed to the end. */
const char *mx__ckpt_meta(mx__ckpt_reader *r, const char *key);
mx_status mx__ckpt_f64(mx__ckpt_reader *r, const char *key, double *out);
mx_status mx__ckpt_i64(mx__ckpt_reader *r, const char *key, int64_t *out);
mx_status mx__ckpt_u64(mx__ckpt_reader *r, const char *key, uint64_t *out);
mx_status mx__ckpt_bool(mx__ckpt_reader *r, const char *key, bool *out);

#endif
