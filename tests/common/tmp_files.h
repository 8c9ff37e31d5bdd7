/* Scratch files for the suites that write them (checkpoint, data,
 * examples): a fresh directory per test, paths in it, and reading a file
 * back. */
#ifndef MX_TESTS_COMMON_TMP_FILES_H
#define MX_TESTS_COMMON_TMP_FILES_H

#include <stddef.h>

/* The test's directory (made by make_tmp_dir, removed with everything in
 * it by remove_tmp_dir: a suite's .init and .fini). */
extern char tmp_dir[];
void make_tmp_dir(void);
void remove_tmp_dir(void);
/* "<tmp_dir>/<name>" in one of a few rotating buffers. */
const char *tmp_path(const char *name);
/* Makes the folder <tmp_dir>/<name>; returns its path. */
const char *tmp_subdir(const char *name);
/* The whole file, with a NUL after it (malloc'ed; the test fails when it
 * cannot be read); its size in *size unless size is NULL. */
char *read_file(const char *path, size_t *size);

#endif
