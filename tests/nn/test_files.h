/* Scratch files for the checkpoint suite: a fresh directory per test. */
#ifndef MX_TESTS_NN_TEST_FILES_H
#define MX_TESTS_NN_TEST_FILES_H

#include <stddef.h>

/* The test's directory (made by make_tmp_dir, removed with everything in
 * it by remove_tmp_dir: a suite's .init and .fini). */
extern char tmp_dir[];
void make_tmp_dir(void);
void remove_tmp_dir(void);
/* "<tmp_dir>/<name>" in one of a few rotating buffers. */
const char *tmp_path(const char *name);
/* The whole file (malloc'ed; the test fails when it cannot be read); its
 * size in *size unless size is NULL. */
char *read_file(const char *path, size_t *size);

#endif
