/* Atomic, checked file writes: the target's checks, the temporary file and
 * its stale predecessors, the sync and the rename (see atomic_file.h). */
#include "tensor/atomic_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/base_internal.h"
#include "tensor/regular_file.h"

#define TMP_MARK ".mx-tmp."
/* The part of the target's name a temporary name repeats, short enough that
 * the mark, a pid and a count still fit in NAME_MAX (255). */
#define TMP_PREFIX_MAX 200

static bool is_control(unsigned char c) { return c < 0x20 || c == 0x7f; }

mx_status mx_path_check_characters(const char *op, const char *path) {
  if (!path) return mx__null_input(op, "path");
  if (!path[0]) return mx__error(MX_INVALID_ARGUMENT, "%s: the path is empty", op);
  const char *bad = path;
  while (*bad && !is_control((unsigned char)*bad)) bad++;
  if (!*bad) return MX_OK;
  char shown[600]; /* the path with its control characters as \xNN, cut short if long */
  size_t n = 0;
  for (const char *c = path; *c && n + 5 < sizeof shown; c++) {
    if (is_control((unsigned char)*c)) n += (size_t)snprintf(shown + n, 5, "\\x%02x", (unsigned char)*c);
    else shown[n++] = *c;
  }
  shown[n] = '\0';
  return mx__error(MX_INVALID_ARGUMENT, "%s: \"%s\": the path holds control character 0x%02x; such names are refused",
                   op, shown, (unsigned char)*bad);
}

/* Where a write to path lands: the folder and the name of the file replaced
 * (a link's target's), and that file's permission bits when it exists. */
typedef struct {
  char *dir, *name;
  bool exists;
  mode_t mode;
} target;

static void free_target(target *t) {
  free(t->dir);
  free(t->name);
  *t = (target){0};
}

/* Splits file (a path with no link at its end) into folder and name. */
static mx_status split(const char *op, const char *path, const char *file, target *t) {
  const char *slash = strrchr(file, '/');
  const char *name = slash ? slash + 1 : file;
  if (!*name) return mx__error(MX_INVALID_ARGUMENT, "%s: %s ends in '/': give a file's name", op, path);
  t->name = strdup(name);
  t->dir = slash ? strndup(file, slash == file ? 1 : (size_t)(slash - file)) : strdup(".");
  if (!t->name || !t->dir) return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", op, path);
  return MX_OK;
}

/* Checks path (see mx_output_path_check) and fills *t; on failure *t is
 * freed. */
static mx_status resolve_target(const char *op, const char *path, target *t) {
  *t = (target){0};
  if (mx_path_check_characters(op, path) != MX_OK) return mx_last_status();
  struct stat st;
  char *real = NULL; /* a link's target */
  if (lstat(path, &st) == 0) {
    if (S_ISLNK(st.st_mode)) {
      if (!(real = realpath(path, NULL)) || stat(real, &st) != 0) {
        int err = errno;
        free(real);
        return mx__error(MX_IO_ERROR,
                         "%s: %s is a symbolic link to nothing that can be written (%s); nothing was written", op, path,
                         strerror(err));
      }
      if (!S_ISREG(st.st_mode)) {
        mx__error(MX_INVALID_ARGUMENT, "%s: %s is a symbolic link to %s, %s, not a regular file; nothing was written",
                  op, path, real, mx__file_kind(st.st_mode));
        free(real);
        return MX_INVALID_ARGUMENT;
      }
    } else if (!S_ISREG(st.st_mode)) {
      return mx__error(MX_INVALID_ARGUMENT, "%s: %s is %s, not a regular file; nothing was written", op, path,
                       mx__file_kind(st.st_mode));
    }
    t->exists = true;
    t->mode = st.st_mode & 0777; /* no set-id bits on a data file */
  } else if (errno != ENOENT) {
    return mx__error(MX_IO_ERROR, "%s: %s: cannot look at it (%s)", op, path, strerror(errno));
  }
  mx_status status = split(op, path, real ? real : path, t);
  free(real);
  if (status == MX_OK) {
    if (stat(t->dir, &st) != 0)
      status = errno == ENOENT ? mx__error(MX_IO_ERROR, "%s: %s: the folder %s does not exist", op, path, t->dir)
                               : mx__error(MX_IO_ERROR, "%s: %s: cannot look at the folder %s (%s)", op, path, t->dir,
                                           strerror(errno));
    else if (!S_ISDIR(st.st_mode))
      status = mx__error(MX_IO_ERROR, "%s: %s: %s is not a folder", op, path, t->dir);
    else if (access(t->dir, W_OK | X_OK) != 0)
      status = mx__error(MX_IO_ERROR, "%s: %s: the folder %s is not writable (%s)", op, path, t->dir, strerror(errno));
  }
  if (status != MX_OK) free_target(t);
  return status;
}

mx_status mx_output_path_check(const char *op, const char *path) {
  target t;
  if (resolve_target(op, path, &t) != MX_OK) return mx_last_status();
  free_target(&t);
  return MX_OK;
}

/* --- temporary files --------------------------------------------------------------- */

/* Serialises this process's scans for stale files with its creations of new
 * ones, so a scan never takes another thread's file, just made and not yet
 * locked, for a stale one. Other processes' files are told apart by pid. */
static pthread_mutex_t tmp_lock = PTHREAD_MUTEX_INITIALIZER;
static atomic_uint tmp_count;

/* The pid in a name "<prefix>.mx-tmp.<pid>.<n>", or 0 when name is not one. */
static pid_t tmp_pid(const char *name, const char *prefix, size_t prefix_len) {
  if (strncmp(name, prefix, prefix_len) || strncmp(name + prefix_len, TMP_MARK, strlen(TMP_MARK))) return 0;
  const char *p = name + prefix_len + strlen(TMP_MARK);
  long pid = 0;
  for (; *p >= '0' && *p <= '9'; p++)
    if ((pid = pid * 10 + (*p - '0')) > 1L << 30) return 0;
  if (*p++ != '.' || !(*p >= '0' && *p <= '9')) return 0;
  while (*p >= '0' && *p <= '9') p++;
  return *p ? 0 : (pid_t)pid;
}

/* Removes name when it is a regular file nobody holds locked and its writer
 * is gone (or is this process: its own files in use are locked). */
static void remove_if_stale(int dir_fd, const char *name, pid_t pid) {
  if (pid != getpid() && !(kill(pid, 0) != 0 && errno == ESRCH)) return; /* the writer may still run */
  struct stat before, opened;
  if (fstatat(dir_fd, name, &before, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(before.st_mode)) return;
  int fd = openat(dir_fd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  bool unlocked = flock(fd, LOCK_EX | LOCK_NB) == 0;
  /* Without locks on this file system, a gone writer's file is still stale. */
  bool stale = unlocked || (errno != EWOULDBLOCK && pid != getpid());
  struct stat now;
  if (stale && fstat(fd, &opened) == 0 && fstatat(dir_fd, name, &now, AT_SYMLINK_NOFOLLOW) == 0 &&
      now.st_ino == opened.st_ino && now.st_dev == opened.st_dev)
    unlinkat(dir_fd, name, 0);
  close(fd);
}

/* Removes the stale temporary files of saves to name in the folder. */
static void remove_stale(int dir_fd, const char *name) {
  int fd = dup(dir_fd);
  DIR *dir = fd >= 0 ? fdopendir(fd) : NULL;
  if (!dir) {
    if (fd >= 0) close(fd);
    return; /* only tidying: the save goes on */
  }
  size_t prefix_len = strlen(name) < TMP_PREFIX_MAX ? strlen(name) : TMP_PREFIX_MAX;
  for (struct dirent *e; (e = readdir(dir)) != NULL;) {
    pid_t pid = tmp_pid(e->d_name, name, prefix_len);
    if (pid > 0) remove_if_stale(dir_fd, e->d_name, pid);
  }
  closedir(dir);
}

/* Creates f->tmp in the folder, locked, with the replaced file's mode. */
static mx_status create_tmp(mx_atomic_file *f, const target *t) {
  int name_len = strlen(t->name) < TMP_PREFIX_MAX ? (int)strlen(t->name) : TMP_PREFIX_MAX;
  size_t size = (size_t)name_len + 64;
  if (!(f->tmp = malloc(size))) return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", f->op, f->path);
  int fd = -1;
  pthread_mutex_lock(&tmp_lock);
  remove_stale(f->dir_fd, t->name);
  for (int tries = 0; fd < 0 && tries < 100; tries++) { /* a name left by a killed process of this pid: the next */
    unsigned n = atomic_fetch_add(&tmp_count, 1);
    snprintf(f->tmp, size, "%.*s" TMP_MARK "%ld.%u", name_len, t->name, (long)getpid(), n);
    fd = openat(f->dir_fd, f->tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, t->exists ? t->mode : 0666);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd >= 0) flock(fd, LOCK_EX | LOCK_NB); /* best effort: tells other threads' scans the file is in use */
  pthread_mutex_unlock(&tmp_lock);
  if (fd < 0)
    return mx__error(MX_IO_ERROR, "%s: %s: cannot create the temporary file %s/%s (%s)", f->op, f->path, f->dir,
                     f->tmp, strerror(errno));
  /* the umask applied at creation; a replaced file keeps its exact bits */
  if ((t->exists && fchmod(fd, t->mode) != 0) || !(f->fp = fdopen(fd, "wb"))) {
    mx__error(MX_IO_ERROR, "%s: %s: cannot set up the temporary file %s/%s (%s)", f->op, f->path, f->dir, f->tmp,
              strerror(errno));
    close(fd);
    unlinkat(f->dir_fd, f->tmp, 0);
    return MX_IO_ERROR;
  }
  return MX_OK;
}

static void free_file(mx_atomic_file *f) {
  if (f->dir_fd >= 0) close(f->dir_fd);
  free(f->path);
  free(f->dir);
  free(f->name);
  free(f->tmp);
  *f = (mx_atomic_file){.dir_fd = -1};
}

mx_status mx_atomic_begin(mx_atomic_file *f, const char *op, const char *path) {
  *f = (mx_atomic_file){.op = op, .dir_fd = -1};
  target t;
  if (resolve_target(op, path, &t) != MX_OK) return mx_last_status();
  f->dir = t.dir, f->name = t.name;
  if (!(f->path = strdup(path))) {
    mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory", op, path);
  } else if ((f->dir_fd = open(f->dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
    mx__error(MX_IO_ERROR, "%s: %s: cannot open the folder %s (%s)", op, path, f->dir, strerror(errno));
  } else if (create_tmp(f, &t) == MX_OK) {
    return MX_OK;
  }
  free_file(f);
  return mx_last_status();
}

mx_status mx_atomic_commit(mx_atomic_file *f) {
  const char *op = f->op, *path = f->path;
  mx_status status = MX_OK;
  if (fflush(f->fp) != 0 || ferror(f->fp) || fsync(fileno(f->fp)) != 0)
    status = mx__error(MX_IO_ERROR, "%s: %s: writing failed (%s)", op, path, strerror(errno));
  struct stat st; /* something other than a regular file put there since begin is not replaced either */
  if (status == MX_OK && fstatat(f->dir_fd, f->name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISREG(st.st_mode))
    status = mx__error(MX_INVALID_ARGUMENT, "%s: %s is %s, not a regular file; nothing was written", op, path,
                       mx__file_kind(st.st_mode));
  /* renamed while still open and locked, so no scan takes it for stale */
  if (status == MX_OK && renameat(f->dir_fd, f->tmp, f->dir_fd, f->name) != 0)
    status = mx__error(MX_IO_ERROR, "%s: %s: cannot rename the temporary file %s over it (%s)", op, path, f->tmp,
                       strerror(errno));
  if (status != MX_OK) unlinkat(f->dir_fd, f->tmp, 0);
  if (fclose(f->fp) != 0 && status == MX_OK) /* flushed and synced already: this only releases the lock */
    status = mx__error(MX_IO_ERROR, "%s: %s: closing failed (%s)", op, path, strerror(errno));
  if (status == MX_OK && fsync(f->dir_fd) != 0 && errno != EINVAL) /* EINVAL: the file system syncs no folders */
    status = mx__error(MX_IO_ERROR, "%s: %s: the file was written but its folder %s could not be synced (%s)", op,
                       path, f->dir, strerror(errno));
  free_file(f);
  return status;
}

void mx_atomic_abort(mx_atomic_file *f) {
  if (!f->fp) return;
  fclose(f->fp);
  unlinkat(f->dir_fd, f->tmp, 0);
  free_file(f);
}
