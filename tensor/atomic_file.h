/* Writing a file so that a reader (or a crash) sees the old file or the
 * whole new one, never a part, and never replaces something that is not a
 * regular file: the one way every file mixgrad writes reaches the disk
 * (checkpoints, state dicts, the demos' metrics and pictures); installed,
 * so a program's own outputs can go the same way.
 *
 *     mx_atomic_file f;
 *     if (mx_atomic_begin(&f, "mx_safetensors_save", path) != MX_OK) return mx_last_status();
 *     fwrite(bytes, 1, n, f.fp);          // or hand fileno(f.fp) to a child process
 *     return mx_atomic_commit(&f);        // mx_atomic_abort(&f) to give up instead
 *
 * The rules:
 * - a path holding a control character (a byte below 0x20, or 0x7f) is
 *   refused, so no name can break a line of a script or a log;
 * - the target may be absent or a regular file; a folder, FIFO, socket or
 *   device is refused ("/dev/null is a character device, ..."), nothing
 *   replaced. A symbolic link is written through: the file it points to is
 *   replaced (the link stays a link); a link to anything else, or to nothing,
 *   is refused;
 * - the contents go to "<name>.mx-tmp.<pid>.<n>" in the target's folder
 *   (<name> cut to 200 bytes), flock'ed while it is written, then synced and
 *   renamed over the target, and the folder synced; a replaced file's
 *   permission bits carry over to the new one;
 * - a save first removes the temporary files of earlier saves to the same
 *   name that were killed: those whose process is gone, or is this one, and
 *   that nobody holds locked. Other files are never touched. */
#ifndef MX_TENSOR_ATOMIC_FILE_H
#define MX_TENSOR_ATOMIC_FILE_H

#include <stdio.h>

#include "kernels/base.h"

MX_API_BEGIN

typedef struct {
  FILE *fp;        /* where the contents go */
  const char *op;  /* the caller's name, for messages */
  char *path;      /* the path as given, for messages */
  char *dir;       /* the folder of the file replaced (a link's target's folder) */
  char *name;      /* that file's name in it */
  char *tmp;       /* the temporary file's name in it */
  int dir_fd;
} mx_atomic_file;

/* Checks that path can be written: no control characters, the target absent
 * or a regular file (through a link), its folder existing and writable.
 * Errors name op and path: "<op>: <path>: the folder /x does not exist". */
mx_status mx_output_path_check(const char *op, const char *path);

/* Checks path's bytes only: "<op>: \"a\x0ab\": the path holds control
 * character 0x0a; such names are refused". */
mx_status mx_path_check_characters(const char *op, const char *path);

/* Checks path as mx_output_path_check does, removes stale temporary files
 * and creates a new one, open in f->fp. On failure nothing is left behind
 * and *f needs no cleanup. */
mx_status mx_atomic_begin(mx_atomic_file *f, const char *op, const char *path);

/* Flushes and syncs f->fp, renames the temporary file over the target and
 * syncs the folder. On failure the temporary file is removed and the target
 * left as it was. Frees *f either way. */
mx_status mx_atomic_commit(mx_atomic_file *f);

/* Removes the temporary file and frees *f, leaving the pending error as it is. */
void mx_atomic_abort(mx_atomic_file *f);

MX_API_END

#endif
