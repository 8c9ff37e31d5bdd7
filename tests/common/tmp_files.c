#include "tmp_files.h"

#include <criterion/criterion.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

char tmp_dir[256];

void make_tmp_dir(void) {
  snprintf(tmp_dir, sizeof tmp_dir, "/tmp/mx_test_XXXXXX");
  cr_assert_not_null(mkdtemp(tmp_dir));
}

static int remove_entry(const char *path, const struct stat *st, int type, struct FTW *ftw) {
  (void)st, (void)type, (void)ftw;
  return remove(path);
}

void remove_tmp_dir(void) {
  if (tmp_dir[0]) nftw(tmp_dir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *fmt(const char *format, ...) {
  static char buffers[16][4096];
  static int next;
  char *buf = buffers[next++ % 16];
  va_list ap;
  va_start(ap, format);
  vsnprintf(buf, sizeof buffers[0], format, ap);
  va_end(ap);
  return buf;
}

const char *tmp_path(const char *name) { return fmt("%s/%s", tmp_dir, name); }

const char *tmp_subdir(const char *name) {
  const char *p = tmp_path(name);
  cr_assert_eq(mkdir(p, 0700), 0, "cannot make %s", p);
  return p;
}

char *read_file(const char *path, size_t *size) {
  FILE *f = fopen(path, "rb");
  cr_assert_not_null(f, "cannot open %s", path);
  cr_assert_eq(fseek(f, 0, SEEK_END), 0);
  long n = ftell(f);
  cr_assert_geq(n, 0);
  rewind(f);
  char *bytes = malloc((size_t)n + 1);
  cr_assert_not_null(bytes);
  cr_assert_eq(fread(bytes, 1, (size_t)n, f), (size_t)n, "cannot read %s", path);
  fclose(f);
  bytes[n] = '\0';
  if (size) *size = (size_t)n;
  return bytes;
}
