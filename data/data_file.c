/* Reading untrusted data files, gzip (zlib's inflate, trailers checked) or raw, lengths checked before allocating. */
#include "data/data_file.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "data/data.h"
#include "kernels/base_internal.h"
#include "tensor/regular_file.h"

#define READ_BUFFER (1 << 17) /* inflate's input buffer */
#define FIRST_CHUNK (1 << 20) /* gzipped data grows its buffer from here */

/* Moves the unread input to the front of the buffer and reads more after it;
 * at the end of the file sets input_ended. False with the error set. */
static bool refill(mx__data_file *f) {
  memmove(f->in, f->z.next_in, f->z.avail_in);
  f->z.next_in = f->in;
  while (!f->input_ended && f->z.avail_in < READ_BUFFER) {
    ssize_t r = read(f->fd, f->in + f->z.avail_in, READ_BUFFER - f->z.avail_in);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      mx__error(MX_IO_ERROR, "%s: %s: read failed: %s", f->op, f->path, strerror(errno));
      return false;
    }
    if (r == 0) f->input_ended = true;
    f->z.avail_in += (uInt)r;
    if (r > 0) break; /* what one read gives is enough to go on with */
  }
  return true;
}

/* Whether the unread input begins with gzip's magic bytes. */
static bool starts_member(const mx__data_file *f) {
  return f->z.avail_in >= 2 && f->z.next_in[0] == 0x1f && f->z.next_in[1] == 0x8b;
}

mx_status mx__data_open(mx__data_file *f, const char *op, const char *path) {
  *f = (mx__data_file){.op = op, .path = path, .fd = -1, .end = ""};
  struct stat st;
  const char *kind;
  if ((f->fd = mx__open_regular(path, &st, &kind)) < 0) {
    if (kind) return mx__error(MX_IO_ERROR, "%s: %s is %s, not a regular file", op, path, kind);
    return mx__error(MX_IO_ERROR, "%s: %s: cannot open: %s", op, path, strerror(errno));
  }
  f->size = st.st_size;
  if (!(f->in = malloc(READ_BUFFER))) {
    mx__data_close(f);
    return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory opening the file", op, path);
  }
  f->z.next_in = f->in;
  if (!refill(f)) {
    mx__data_close(f);
    return mx_last_status();
  }
  f->raw = !starts_member(f); /* as gzip(1) and zlib's gzread decide */
  if (!f->raw) {
    int r = inflateInit2(&f->z, 15 + 16); /* 32 KiB windows, gzip wrapper only */
    f->inflating = r == Z_OK;
    if (!f->inflating) {
      mx__data_close(f);
      return mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory opening the file", op, path);
    }
  }
  return MX_OK;
}

void mx__data_close(mx__data_file *f) {
  if (f->inflating) inflateEnd(&f->z);
  if (f->fd >= 0) close(f->fd);
  free(f->in);
  f->inflating = false;
  f->fd = -1;
  f->in = NULL;
}

/* Bytes handed to inflate so far: where a message says the trouble is. */
static int64_t input_offset(const mx__data_file *f) {
  off_t at = lseek(f->fd, 0, SEEK_CUR);
  return at < 0 ? -1 : (int64_t)at - (int64_t)f->z.avail_in;
}

/* Raw bytes: those the first refill took, then straight from the file. */
static int64_t read_raw(mx__data_file *f, uint8_t *buf, int64_t n) {
  int64_t got = n < (int64_t)f->z.avail_in ? n : (int64_t)f->z.avail_in;
  memcpy(buf, f->z.next_in, (size_t)got);
  f->z.next_in += got;
  f->z.avail_in -= (uInt)got;
  while (got < n) {
    size_t chunk = n - got > (1 << 30) ? (size_t)1 << 30 : (size_t)(n - got);
    ssize_t r = read(f->fd, buf + got, chunk);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      mx__error(MX_IO_ERROR, "%s: %s: read failed: %s", f->op, f->path, strerror(errno));
      return -1;
    }
    if (r == 0) break;
    got += r;
  }
  return got;
}

/* Gzip data through inflate, member after member. */
static int64_t read_gzip(mx__data_file *f, uint8_t *buf, int64_t n) {
  int64_t got = 0;
  while (got < n) {
    if (f->z.avail_in < 2 && !f->input_ended && !refill(f)) return -1;
    if (f->member_ended) {
      if (f->z.avail_in == 0) break; /* the clean end: every member's trailer checked */
      if (!starts_member(f)) {
        mx__error(MX_CORRUPT_DATA, "%s: %s: the file goes on after its gzip data ends (at byte %lld of %lld)",
                  f->op, f->path, (long long)input_offset(f), (long long)f->size);
        return -1;
      }
      inflateReset(&f->z);
      f->member_ended = false;
    }
    if (f->z.avail_in == 0) { /* the data stopped before inflate saw the member's end */
      f->end = " (the gzip stream ends early)";
      break;
    }
    uInt chunk = n - got > (1 << 30) ? 1u << 30 : (uInt)(n - got);
    f->z.next_out = buf + got;
    f->z.avail_out = chunk;
    int r = inflate(&f->z, Z_NO_FLUSH);
    got += chunk - f->z.avail_out;
    if (r == Z_STREAM_END) {
      f->member_ended = true;
    } else if (r == Z_MEM_ERROR) {
      mx__error(MX_OUT_OF_MEMORY, "%s: %s: out of memory inflating the data", f->op, f->path);
      return -1;
    } else if (r != Z_OK && r != Z_BUF_ERROR) { /* Z_BUF_ERROR: it wants more input */
      mx__error(MX_CORRUPT_DATA, "%s: %s: corrupt gzip data (%s)", f->op, f->path, f->z.msg ? f->z.msg : zError(r));
      return -1;
    }
  }
  return got;
}

int64_t mx__data_read(mx__data_file *f, void *buf, int64_t n) {
  f->end = "";
  int64_t got = f->raw ? read_raw(f, buf, n) : read_gzip(f, buf, n);
  if (got > 0) f->offset += got;
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
  return stat(path, &st) == 0;
}
