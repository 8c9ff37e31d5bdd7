/* Opening a file for reading only when it is a regular file: checked with
 * stat before the open and with fstat after it. */
#include "tensor/regular_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <unistd.h>

const char *mx__file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "a special file";
}

int mx__open_regular(const char *path, struct stat *st, const char **kind) {
  *kind = NULL;
  if (stat(path, st) != 0) return -1;
  if (!S_ISREG(st->st_mode)) {
    *kind = mx__file_kind(st->st_mode);
    return -1;
  }
  /* O_NONBLOCK: should path become a FIFO between the stat and the open, the
   * open returns at once instead of waiting for a writer (for a regular file
   * the flag changes nothing); O_NOCTTY: a terminal never becomes ours. */
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return -1;
  if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
    int err = errno;
    if (!S_ISREG(st->st_mode)) *kind = mx__file_kind(st->st_mode);
    close(fd);
    errno = err;
    return -1;
  }
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) fcntl(fd, F_SETFL, flags & ~O_NONBLOCK); /* reads of the file block as usual */
  return fd;
}
