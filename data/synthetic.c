/* A synthetic, learnable dataset of any image shape: one stripe pattern per class plus noise. */
#include <math.h>
#include <stdlib.h>

#include "data/batch.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"

/* Class k's stripes: (fy, fx) cycles over the image's height and width.
 * Distinct frequencies are orthogonal over the grid, so the classes are far
 * apart even for a linear model, yet a crop of a few pixels keeps them. */
static const int frequency[10][2] = {{0, 1}, {1, 0}, {1, 1}, {1, -1}, {0, 2},
                                     {2, 0}, {1, 2}, {2, 1}, {2, -1}, {1, -2}};

#define AMPLITUDE 60.0 /* of the stripes, around mid grey (128) */
#define NOISE 60.0     /* each pixel moves uniformly within +-NOISE */

mx_dataset *mx_dataset_synthetic(int64_t n, int c, int h, int w, uint64_t seed) {
  static const char *op = "mx_dataset_synthetic";
  mx_dataset *ds = mx__dataset_new(op, n, c, h, w, 10);
  if (!ds) return NULL;
  int64_t sample = (int64_t)c * h * w;
  float *pattern = malloc((size_t)(10 * sample) * sizeof *pattern); /* (10, c, h, w) */
  if (!pattern) {
    mx_dataset_free(ds);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for the class patterns", op);
    return NULL;
  }
  for (int k = 0; k < 10; k++)
    for (int64_t p = 0; p < sample; p++) {
      int ch = (int)(p / ((int64_t)h * w)), y = (int)(p / w % h), x = (int)(p % w);
      double phase = (double)frequency[k][0] * y / h + (double)frequency[k][1] * x / w + ch / 3.0;
      pattern[k * sample + p] = (float)(128.0 + AMPLITUDE * cos(6.283185307179586 * phase));
    }
  for (int64_t i = 0; i < n; i++) {
    /* block (i, 0) draws the label; block (i, 1 + p / 16) the noise of pixels p */
    int k = (int)(mx__data_draw(seed, MX__DRAW_SYNTHETIC, 0, (uint64_t)i).v[0] % 10);
    ds->labels[i] = (uint8_t)k;
    uint8_t *img = ds->images + i * sample;
    mx_philox_block noise = {{0, 0, 0, 0}};
    for (int64_t p = 0; p < sample; p++) {
      if (p % 16 == 0) noise = mx__data_draw(seed, MX__DRAW_SYNTHETIC, 1 + p / 16, (uint64_t)i);
      int byte = (int)(noise.v[p % 16 / 4] >> (8 * (p % 4)) & 0xff);
      float v = pattern[k * sample + p] + (float)(NOISE * (byte - 127.5) / 127.5);
      img[p] = (uint8_t)(v < 0.0f ? 0.0f : v > 255.0f ? 255.0f : nearbyintf(v));
    }
  }
  free(pattern);
  return ds;
}
