/* Internal: reading an untrusted data file, gzipped or raw, with checked lengths. */
#ifndef MX_DATA_DATA_FILE_H
#define MX_DATA_DATA_FILE_H

#include <stdbool.h>
#include <stdint.h>
#include <zlib.h>

#include "kernels/base.h"

/* An open file. Messages read "<op>: <path>: ...". */
typedef struct {
  const char *op, *path;
  int fd;
  bool raw;          /* not gzipped: size is its length */
  int64_t size;      /* bytes on disk */
  int64_t offset;    /* bytes read (decompressed) so far */
  const char *end;   /* why the last read came up short: "" at a clean end */
  z_stream z;        /* inflating the gzip members; its input is `in` */
  bool inflating;    /* z is initialised */
  bool member_ended; /* inflate said Z_STREAM_END: the last member's trailer (CRC, length) checked out */
  bool input_ended;  /* read(2) said the file has no more bytes */
  uint8_t *in;       /* the input buffer */
} mx__data_file;

/* Opens path; a missing file, an unreadable one, or anything but a regular
 * file (a folder, a FIFO, a device: refused without blocking) is an error. */
mx_status mx__data_open(mx__data_file *f, const char *op, const char *path);
void mx__data_close(mx__data_file *f);

/* Reads up to n bytes into buf; returns how many (fewer at the end of the
 * data, with f->end saying why), or -1 with the error set on a read error
 * or corrupt gzip data. Gzipped data ends cleanly only where zlib's inflate
 * reported the end of a member (Z_STREAM_END, after checking its CRC and
 * length) and no byte follows but another member. */
int64_t mx__data_read(mx__data_file *f, void *buf, int64_t n);

/* Reads exactly `expected` more bytes into a buffer it mallocs, and checks
 * that nothing follows them. On a short or long file the message is
 * "<op>: <path>: expected <total> bytes (<what>), got <actual>", where total
 * and actual count the bytes already read too. expected must be at most
 * MX_DATA_MAX_FILE_BYTES. */
uint8_t *mx__data_read_rest(mx__data_file *f, int64_t expected, const char *what);

/* Reads everything left (at most MX_DATA_MAX_FILE_BYTES in all) into a
 * buffer it mallocs; *len is its length. */
uint8_t *mx__data_read_all(mx__data_file *f, int64_t *len);

/* Whether anything is at path (mx__data_open says what is wrong with
 * something that is not a regular file). */
bool mx__data_exists(const char *path);

#endif
