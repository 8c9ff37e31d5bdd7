/* Internal: making one batch from a dataset (shuffle, normalise, crop, flip), with no mixgrad state. */
#ifndef MX_EXAMPLES_DATA_BATCH_H
#define MX_EXAMPLES_DATA_BATCH_H

#include "examples/data/data.h"
#include "kernels/math.h"

/* Independent random streams, one Philox block per (stream, epoch, index). */
enum { MX__DRAW_SHUFFLE = 1, MX__DRAW_AUGMENT = 2, MX__DRAW_SYNTHETIC = 3 };

static inline mx_philox_block mx__data_draw(uint64_t seed, uint32_t stream, int64_t epoch,
                                            uint64_t index) {
  mx_philox_block ctr = {{(uint32_t)index, (uint32_t)(index >> 32), (uint32_t)epoch, stream}};
  return mx_philox4x32_10(ctr, seed);
}

/* lut[ch * 256 + p] = (p / 255 - mean[ch]) / std[ch]; mean, std may be NULL (0, 1). */
void mx__batch_lut(float *lut, int c, const float *mean, const float *std);

/* The n sample indices of an epoch: 0..n-1, or with shuffle a Fisher-Yates
 * permutation drawing position i's partner from block (seed, epoch, i). */
void mx__batch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

/* One sample's augmentation: the crop's corner in the padded image and the flip. */
typedef struct {
  int dy, dx;
  bool flip;
} mx__augment;

/* Sample `index`'s draw in `epoch`: dy, dx uniform in 0..2*pad, flip with
 * probability 1/2 when flip is asked for. */
mx__augment mx__batch_augment_draw(uint64_t seed, int64_t epoch, int64_t index, int pad, bool flip);

/* dst (c, h, w) floats = the normalised crop of src (c, h, w bytes) padded
 * by pad zero pixels, at a's corner, then mirrored if a.flip:
 * dst[ch][y][x] = lut[ch][src[ch][y + dy - pad][x' + dx - pad]] with
 * x' = w - 1 - x when flipped (else x), lut[ch][0] outside the image. */
void mx__batch_sample(float *dst, const uint8_t *src, int c, int h, int w, const float *lut, int pad,
                      mx__augment a);

/* Everything a batch is made from. */
typedef struct {
  const mx_dataset *ds;
  const int64_t *order; /* the epoch's sample order */
  const float *lut;
  uint64_t seed;
  int64_t epoch;
  int pad;
  bool flip;
} mx__batch_plan;

/* x (count, c, h, w) and y (count) from samples order[start .. start+count). */
void mx__batch_fill(const mx__batch_plan *p, int64_t start, int64_t count, float *x, int64_t *y);

#endif
