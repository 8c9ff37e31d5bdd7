/* Scratch files for the suites that write them (checkpoint, data,
 * examples): a fresh directory per test, paths in it, reading a file back,
 * and the formatted text their assertions compare with. */
#ifndef MX_TESTS_COMMON_TMP_FILES_H
#define MX_TESTS_COMMON_TMP_FILES_H

#include <stddef.h>

/* The test's directory (made by make_tmp_dir, removed with everything in
 * it by remove_tmp_dir: a suite's .init and .fini). */
extern char tmp_dir[];
void make_tmp_dir(void);
void remove_tmp_dir(void);
/* printf's text in one of 16 rotating 4 KiB buffers, so an assertion can
 * build the strings it compares without freeing them. */
const char *fmt(const char *format, ...) __attribute__((format(printf, 1, 2)));
/* "<tmp_dir>/<name>", from fmt. */
const char *tmp_path(const char *name);
/* Makes the folder <tmp_dir>/<name>; returns its path. */
const char *tmp_subdir(const char *name);
/* The whole file, with a NUL after it (malloc'ed; the test fails when it
 * cannot be read); its size in *size unless size is NULL. */
char *read_file(const char *path, size_t *size);

#endif
