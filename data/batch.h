/* Internal: making one batch from a dataset (order, read, transform), with no mixgrad state. */
#ifndef MX_DATA_BATCH_H
#define MX_DATA_BATCH_H

#include "data/data.h"
#include "kernels/math.h"

/* Independent random streams, one Philox block per (stream, epoch, index). */
enum { MX__DRAW_SHUFFLE = 1, MX__DRAW_AUGMENT = 2, MX__DRAW_SYNTHETIC = 3 };

static inline mx_philox_block mx__data_draw(uint64_t seed, uint32_t stream, int64_t epoch,
                                            uint64_t index) {
  mx_philox_block ctr = {{(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)epoch, stream}};
  return mx_philox4x32_10(ctr, seed);
}

/* The n sample indices of an epoch: 0..n-1, or with shuffle a Fisher-Yates
 * permutation drawing position i's partner from block (seed, epoch, i). */
void mx__batch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

/* One sample's words of randomness for the transforms, in order: word k is
 * word k % 4 of block (seed, MX__DRAW_AUGMENT + (k / 4 << 8), epoch, index). */
typedef struct {
  uint64_t seed;
  int64_t epoch, index;
  int next;              /* the next word's number */
  mx_philox_block block; /* the block holding it, once next % 4 != 0 */
} mx__draws;

uint32_t mx__draw_word(mx__draws *d);

/* Whether t fits samples of c x h x w: MX_OK or "<op>: ..." set. */
mx_status mx__transform_check(const char *op, const mx_transform *t, int c, int h, int w);

/* Applies t (checked) to x in place; scratch holds c*h*w floats. */
void mx__transform_run(const mx_transform *t, float *x, int c, int h, int w, mx__draws *d, float *scratch);

/* Reads sample index (in range) into x and *y: MX_OK, or a status and why
 * in error (of `size` bytes). */
mx_status mx__dataset_read(const mx_dataset *ds, int64_t index, float *x, int64_t *y, char *error, size_t size);

/* Everything a batch is made from. */
typedef struct {
  const mx_dataset *ds;
  const int64_t *order; /* the epoch's sample order */
  const mx_transform *transform;
  uint64_t seed;
  int64_t epoch;
} mx__batch_plan;

/* x (count, sample) and y (count) from samples order[start .. start+count);
 * scratch holds one sample. MX_OK, or a status and why in error (of `size` bytes). */
mx_status mx__batch_fill(const mx__batch_plan *p, int64_t start, int64_t count, float *x, int64_t *y, float *scratch,
                    char *error, size_t size);

#endif
