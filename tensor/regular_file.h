/* Opening a file for reading only when it is a regular file, so that no
 * reader blocks on a FIFO or reads a device or a folder (not installed). */
#ifndef MX_TENSOR_REGULAR_FILE_H
#define MX_TENSOR_REGULAR_FILE_H

#include <sys/stat.h>

/* What a file that is not a regular one is, for messages: "a FIFO", "a
 * folder", "a character device", ... */
const char *mx__file_kind(mode_t mode);

/* Opens path read-only if it is a regular file (a link to one is followed)
 * and returns the descriptor, with *st filled by fstat. On failure returns
 * -1 and either sets *kind to mx__file_kind's words for what path is, or
 * sets *kind to NULL with errno saying why path could not be opened. The
 * open never waits: a FIFO put at path after the check is opened without
 * blocking, then refused. */
int mx__open_regular(const char *path, struct stat *st, const char **kind);

#endif
