/* Reading untrusted data files through zlib (gzip or raw), lengths checked before allocating. */
#include "examples/data/data_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "examples/data/data.h"
#include "kernels/base_internal.h"

#define READ_BUFFER (1 << 17) /* zlib's input buffer */
#define FIRST_CHUNK (1 << 20) /* gzipped data grows its buffer from here */

mx_status mx__data_open(mx__data_file *f, const char *op, const char *path) {
  *f = (mx__data_file){.op = op, .path = path, .end = ""};
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return mx__error(MX_IO_ERROR, "%s: %s: cannot open: %s", op, path, strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return mx__error(MX_IO_ERROR, "%s: %s: not a regular file", op, path);
  }
  f->size = st.st_size;
  f->gz = gzdopen(fd, "rb");
  if (!f->gz) {
    close(fd);
    return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory opening the file", op, path);
  }
  gzbuffer(f->gz, READ_BUFFER);
  f->raw = gzdirect(f->gz) == 1; /* looks at the first bytes for gzip's magic */
  return MX_OK;
}

void mx__data_close(mx__data_file *f) {
  if (f->gz) gzclose(f->gz);
  f->gz = NULL;
}

/* zlib's message without its "<fd:N>: " prefix. */
static const char *zlib_words(const char *msg) {
  const char *colon = strstr(msg, ": ");
  return colon ? colon + 2 : msg;
}

int64_t mx__data_read(mx__data_file *f, void *buf, int64_t n) {
  int64_t got = 0;
  f->end = "";
  while (got < n) {
    int64_t left = n - got;
    unsigned chunk = left > (1 << 30) ? 1u << 30 : (unsigned)left;
    int r = gzread(f->gz, (uint8_t *)buf + got, chunk);
    int errnum = Z_OK;
    const char *msg = r <= 0 ? gzerror(f->gz, &errnum) : "";
    if (r < 0 && errnum == Z_ERRNO) {
      mx__error(MX_IO_ERROR, "%s: %s: read failed: %s", f->op, f->path, strerror(errno));
      return -1;
    }
    if (r < 0) {
      mx__error(MX_CORRUPT_DATA, "%s: %s: corrupt gzip data (%s)", f->op, f->path, zlib_words(msg));
      return -1;
    }
    if (r == 0) {
      if (errnum == Z_BUF_ERROR) f->end = " (the gzip stream ends early)";
      break;
    }
    got += r;
  }
  f->offset += got;
  return got;
}

/* Fails the read of `expected` bytes after `start`: "expected N bytes (what), got M". */
static void *short_or_long(mx__data_file *f, int64_t start, int64_t expected, const char *what,
                           const char *got) {
  mx__error(MX_CORRUPT_DATA, "%s: %s: expected %lld bytes (%s), got %s", f->op, f->path,
            (long long)(start + expected), what, got);
  return NULL;
}

/* A gzip stream cut short: "<op>: <path>: the gzip stream ends early, after N bytes". */
static void *ended_early(mx__data_file *f) {
  mx__error(MX_CORRUPT_DATA, "%s: %s: the gzip stream ends early, after %lld bytes", f->op, f->path,
            (long long)f->offset);
  return NULL;
}

/* Reads into *buf until the data ends or limit bytes are in, growing the
 * buffer geometrically from `first` (gzip's true length is known only by
 * reading it). Returns the count, or -1 with the error set. */
static int64_t read_growing(mx__data_file *f, uint8_t **buf, int64_t first, int64_t limit) {
  int64_t cap = first < 1 ? 1 : first, got = 0;
  if (cap > limit) cap = limit;
  *buf = malloc(cap > 0 ? (size_t)cap : 1);
  for (;;) {
    if (!*buf) {
      mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory reading %lld bytes", f->op, f->path,
                (long long)cap);
      return -1;
    }
    int64_t r = mx__data_read(f, *buf + got, cap - got);
    if (r < 0) break;
    got += r;
    if (got < cap || cap == limit) return got;
    cap = 2 * cap < limit ? 2 * cap : limit;
    uint8_t *grown = realloc(*buf, (size_t)cap);
    if (!grown) free(*buf);
    *buf = grown;
  }
  free(*buf);
  *buf = NULL;
  return -1;
}

uint8_t *mx__data_read_rest(mx__data_file *f, int64_t expected, const char *what) {
  int64_t start = f->offset;
  char got[64];
  if (f->raw && f->size != start + expected) {
    snprintf(got, sizeof got, "%lld", (long long)f->size);
    return short_or_long(f, start, expected, what, got);
  }
  uint8_t *buf;
  int64_t n = read_growing(f, &buf, f->raw ? expected : FIRST_CHUNK, expected);
  if (n < 0) return NULL;
  uint8_t extra;
  int64_t more = n == expected ? mx__data_read(f, &extra, 1) : 0;
  if (n < expected || more != 0) {
    free(buf);
    if (more < 0) return NULL;
    if (more > 0) return short_or_long(f, start, expected, what, "more");
    snprintf(got, sizeof got, "%lld%s", (long long)(start + n), f->end);
    return short_or_long(f, start, expected, what, got);
  }
  if (*f->end) { /* every byte came, but not the gzip trailer that checks them */
    free(buf);
    return ended_early(f);
  }
  return buf;
}

uint8_t *mx__data_read_all(mx__data_file *f, int64_t *len) {
  int64_t limit = MX_DATA_MAX_FILE_BYTES - f->offset;
  if (f->raw && f->size > MX_DATA_MAX_FILE_BYTES) {
    mx__error(MX_CORRUPT_DATA, "%s: %s: %lld bytes, more than the %d-byte limit", f->op, f->path,
              (long long)f->size, MX_DATA_MAX_FILE_BYTES);
    return NULL;
  }
  uint8_t *buf;
  int64_t n = read_growing(f, &buf, f->raw ? f->size - f->offset : FIRST_CHUNK, limit);
  if (n < 0) return NULL;
  uint8_t extra;
  int64_t more = n == limit ? mx__data_read(f, &extra, 1) : 0;
  if (more != 0 || *f->end) {
    free(buf);
    if (more > 0)
      mx__error(MX_CORRUPT_DATA, "%s: %s: more than the %d-byte limit once decompressed", f->op,
                f->path, MX_DATA_MAX_FILE_BYTES);
    return more == 0 ? ended_early(f) : NULL;
  }
  *len = n;
  return buf;
}

bool mx__data_exists(const char *path) {
  struct stat st;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}
