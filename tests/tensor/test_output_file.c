/* The installed face of the atomic writer (tensor/output_file.h): whole files, aborts, refusals. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tensor/output_file.h"
#include "tests/common/expect_error.h"
#include "tests/common/tmp_files.h"

TestSuite(output_file, .init = make_tmp_dir, .fini = remove_tmp_dir);

static void expect_contents(const char *path, const char *want) {
  size_t size;
  char *got = read_file(path, &size);
  cr_assert_not_null(got, "%s unreadable", path);
  cr_expect(size == strlen(want) && !memcmp(got, want, size), "%s holds %.*s", path, (int)size, got);
  free(got);
}

Test(output_file, commit_replaces_abort_keeps) {
  const char *path = tmp_path("out.csv");
  mx_output_file *f = mx_output_file_begin("--metrics", path);
  cr_assert_not_null(f, "%s", mx_last_error());
  fputs("a,b\n", mx_output_file_stream(f));
  cr_assert_eq(mx_output_file_commit(f), MX_OK, "%s", mx_last_error());
  expect_contents(path, "a,b\n");
  f = mx_output_file_begin("--metrics", path);
  fputs("half", mx_output_file_stream(f));
  mx_output_file_abort(f);
  expect_contents(path, "a,b\n");
  mx_output_file_abort(NULL);
}

Test(output_file, refusals_name_the_op_and_path) {
  const char *fifo = tmp_path("fifo");
  cr_assert_eq(mkfifo(fifo, 0600), 0);
  EXPECT_ERROR(mx_output_file_begin("--plot", fifo), fmt("--plot: %s is a FIFO, not a regular file; nothing was written", fifo));
  EXPECT_STATUS_ERROR(mx_output_path_check("--plot", fifo), fmt("--plot: %s is a FIFO, not a regular file; nothing was written", fifo));
  EXPECT_STATUS_ERROR(mx_path_check_characters("--save", "a\nb"),
                      "--save: \"a\\x0ab\": the path holds control character 0x0a; such names are refused");
  cr_expect_eq(mx_path_check_characters("--save", "fine.ckpt"), MX_OK);
  EXPECT_ERROR(mx_output_file_begin("--plot", NULL), "mx_output_file_begin: argument 'path' is NULL");
  EXPECT_STATUS_ERROR(mx_output_file_commit(NULL), "mx_output_file_commit: argument 'file' is NULL");
  cr_expect_null(mx_output_file_stream(NULL));
}
