/* Scratch files for the checkpoint suite: a fresh directory per test. */
#include "test_files.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

char tmp_dir[256];

void make_tmp_dir(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/mx_checkpoint_XXXXXX");
  cr_assert_not_null(mkdtemp(tmp_dir));
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

void remove_tmp_dir(void) {
  if (tmp_dir[0]) nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tmp_path(const char *name) {
  static char buffers[4][1024];
  static int next;
  char *p = buffers[next++ % 4];
  snprintf(p, 1024, "%s/%s", tmp_dir, name);
  return p;
}

char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  char *bytes = malloc((size_t)n + 1);
  cr_assert_eq(fread(bytes, 1, (size_t)n, f), (size_t)n);
  fclose(f);
  if (size) *size = (size_t)n;
  return bytes;
}
