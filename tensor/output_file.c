/* The installed face of the atomic writer (tensor/atomic_file.h): an opaque handle around it. */
#include "tensor/output_file.h"

#include <stdlib.h>

#include "kernels/base_internal.h"
#include "tensor/atomic_file.h"

struct mx_output_file {
  mx__atomic_file file;
};

mx_output_file *mx_output_file_begin(const char *op, const char *path) {
  if (!op || !path) {
    mx__null_input("mx_output_file_begin", op ? "path" : "op");
    return NULL;
  }
  mx_output_file *f = malloc(sizeof *f);
  if (!f) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", op, path);
    return NULL;
  }
  if (mx__atomic_begin(&f->file, op, path) != MX_OK) {
    free(f);
    return NULL;
  }
  return f;
}

FILE *mx_output_file_stream(const mx_output_file *f) { return f ? f->file.fp : NULL; }

mx_status mx_output_file_commit(mx_output_file *f) {
  if (!f) return mx__null_input("mx_output_file_commit", "file");
  mx_status st = mx__atomic_commit(&f->file);
  free(f);
  return st;
}

void mx_output_file_abort(mx_output_file *f) {
  if (!f) return;
  mx__atomic_abort(&f->file);
  free(f);
}

mx_status mx_output_path_check(const char *op, const char *path) {
  if (!op || !path) return mx__null_input("mx_output_path_check", op ? "path" : "op");
  return mx__output_path_check(op, path);
}

mx_status mx_path_check_characters(const char *op, const char *path) {
  if (!op || !path) return mx__null_input("mx_path_check_characters", op ? "path" : "op");
  return mx__path_check_characters(op, path);
}
