/* Fuzz targets for the files mixgrad reads from outside (safetensors files,
 * training checkpoints, the demos' IDX and CIFAR-10 datasets) and for the
 * ops. Each file target takes any bytes, hands them to a reader as a file,
 * and checks what the reader promises: a file it accepts holds what it
 * says; a file it refuses gets an error naming the reader and the file, and
 * changes nothing. The ops target (ops.c) runs an op on inputs the bytes
 * describe: a result or a clear error, never a crash. A broken promise
 * aborts, which libFuzzer reports with the input that did it.
 *
 * Each target returns whether the reader accepted the bytes. libfuzzer.c
 * makes one libFuzzer executable per target (scripts/fuzz runs them);
 * tests/fuzz runs every target over its corpus in fuzz/corpus/, so each
 * input that once found a bug stays a test. */
#ifndef MX_FUZZ_H
#define MX_FUZZ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

bool mx_fuzz_safetensors(const uint8_t *data, size_t size);
bool mx_fuzz_checkpoint(const uint8_t *data, size_t size);
bool mx_fuzz_idx(const uint8_t *data, size_t size);
bool mx_fuzz_cifar(const uint8_t *data, size_t size);
bool mx_fuzz_ops(const uint8_t *data, size_t size);

/* The checkpoint the checkpoint target's run saves as made (a path). */
const char *mx_fuzz_checkpoint_reference(void);

/* A valid input for a target, made by mixgrad's own writers (seeds.c): the
 * seeds libFuzzer starts from, and the tests' inputs to mutate. */
typedef struct {
  const char *target; /* "safetensors", "checkpoint", "idx", "cifar" or "ops" */
  char name[64];      /* a file name for it */
  bool accepted;      /* the reader must accept it (an op may refuse its inputs) */
  bool refused;       /* the reader must refuse it: a broken file (a gzip trailer cut, ...) */
  uint8_t *data;      /* malloc'ed */
  size_t size;
} mx_fuzz_seed;

/* Every target's seeds (malloc'ed), *n of them. */
mx_fuzz_seed *mx_fuzz_seeds(int *n);
void mx_fuzz_seeds_free(mx_fuzz_seed *seeds, int n);
/* The target function called name, or NULL. */
bool (*mx_fuzz_target(const char *name))(const uint8_t *data, size_t size);

/* --- what the targets share (input_file.c) --- */

/* The path of a file called name in a private temporary folder, made on
 * first use and removed at exit. */
const char *mx_fuzz_path(const char *name);
/* The bytes of the file at path (malloc'ed; *size of them), or abort. */
uint8_t *mx_fuzz_read(const char *path, size_t *size);
/* Writes size bytes to the file called name there; returns its path. */
const char *mx_fuzz_write(const char *name, const uint8_t *data, size_t size);
/* Aborts with the message unless cond holds (a broken promise). */
void mx_fuzz_check(bool cond, const char *what);
/* A reader's refusal: the error is set, begins with the reader's name and
 * names the file (path, or other_path when not NULL), else abort; then the
 * error is cleared for the next input. */
void mx_fuzz_expect_refusal(const char *reader, const char *path, const char *other_path);

#endif
