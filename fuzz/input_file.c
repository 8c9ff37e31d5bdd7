/* The temporary files the fuzz targets hand their bytes to readers in. */
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"

static char dir[64];

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

static void remove_dir(void) { nftw(dir, remove_entry, 8, FTW_DEPTH | FTW_PHYS); }

const char *mx_fuzz_path(const char *name) {
  static char path[16][256];
  static int next;
  if (!dir[0]) {
    snprintf(dir, sizeof dir, "/tmp/mx_fuzz_XXXXXX");
    mx_fuzz_check(mkdtemp(dir) != NULL, "cannot make a temporary folder");
    atexit(remove_dir);
  }
  char *p = path[next++ % 16];
  snprintf(p, sizeof path[0], "%s/%s", dir, name);
  return p;
}

uint8_t *mx_fuzz_read(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  mx_fuzz_check(f && fseek(f, 0, SEEK_END) == 0, "a file to read opens");
  long n = ftell(f);
  uint8_t *bytes = malloc(n > 0 ? (size_t)n : 1);
  rewind(f);
  mx_fuzz_check(n >= 0 && bytes && fread(bytes, 1, (size_t)n, f) == (size_t)n, "a file to read reads");
  fclose(f);
  *size = (size_t)n;
  return bytes;
}

const char *mx_fuzz_write(const char *name, const uint8_t *data, size_t size) {
  const char *path = mx_fuzz_path(name);
  FILE *f = fopen(path, "wb");
  mx_fuzz_check(f != NULL, "cannot open a temporary file");
  mx_fuzz_check(fwrite(data, 1, size, f) == size && fclose(f) == 0, "cannot write a temporary file");
  return path;
}

void mx_fuzz_check(bool cond, const char *what) {
  if (cond) return;
  fprintf(stderr, "fuzz: broken promise: %s (last error: %s)\n", what, mx_last_error());
  abort();
}

void mx_fuzz_expect_refusal(const char *reader, const char *path, const char *other_path) {
  const char *error = mx_last_error();
  mx_fuzz_check(mx_last_status() != MX_OK, "a refused file sets an error");
  mx_fuzz_check(strncmp(error, reader, strlen(reader)) == 0 && error[strlen(reader)] == ':',
                "the error begins with the reader's name");
  mx_fuzz_check(strstr(error, path) || (other_path && strstr(error, other_path)), "the error names the file");
  mx_clear_error();
}
