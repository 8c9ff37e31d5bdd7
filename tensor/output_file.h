/* Writing a file of your own the way mixgrad writes its files (installed):
 * a reader, or a crash, sees the old file or the whole new one, never a
 * part, and nothing but a regular file (or a link to one) is replaced.
 *
 *     mx_output_file *f = mx_output_file_begin("--metrics", path);
 *     if (!f) { fprintf(stderr, "%s\n", mx_last_error()); return 1; }
 *     fprintf(mx_output_file_stream(f), "step,loss\n");
 *     if (mx_output_file_commit(f) != MX_OK) ...;   // or mx_output_file_abort(f)
 *
 * The rules are those of every file mixgrad writes (checkpoints, state
 * dicts): a path with a control character is refused; a folder, FIFO,
 * socket or device at path is refused ("--metrics: out.csv is a FIFO, not
 * a regular file; nothing was written"); the contents go to a temporary
 * file beside the target, synced and renamed over it. Messages begin
 * "<op>: <path>". */
#ifndef MX_TENSOR_OUTPUT_FILE_H
#define MX_TENSOR_OUTPUT_FILE_H

#include <stdio.h>

#include "kernels/base.h"

MX_API_BEGIN

typedef struct mx_output_file mx_output_file;

/* Checks path and opens its temporary file; NULL with the error set (and nothing left behind). */
mx_output_file *mx_output_file_begin(const char *op, const char *path);
/* Where the contents go (its descriptor may be handed to a child process). */
FILE *mx_output_file_stream(const mx_output_file *f);
/* Replaces the target with what was written; on failure the target stays as
 * it was. Frees f either way. */
mx_status mx_output_file_commit(mx_output_file *f);
/* Removes the temporary file and frees f, leaving the pending error as it is. NULL is ignored. */
void mx_output_file_abort(mx_output_file *f);

/* Whether path could be written now, as mx_output_file_begin checks it (a
 * missing or unwritable folder, a special file), without writing. */
mx_status mx_output_path_check(const char *op, const char *path);
/* Checks path's bytes only: a control character is refused. */
mx_status mx_path_check_characters(const char *op, const char *path);

MX_API_END

#endif
