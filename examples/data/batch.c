/* Making one batch: the epoch's order, normalisation by lookup, random crop and flip. */
#include "examples/data/batch.h"

void mx__batch_lut(float *lut, int c, const float *mean, const float *std) {
  for (int ch = 0; ch < c; ch++) {
    float m = mean ? mean[ch] : 0.0f, s = std ? std[ch] : 1.0f;
    for (int p = 0; p < 256; p++) lut[ch * 256 + p] = ((float)p / 255.0f - m) / s;
  }
}

void mx__batch_order(int64_t *order, int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  for (int64_t i = 0; i < n; i++) order[i] = i;
  if (!shuffle) return;
  for (int64_t i = n - 1; i > 0; i--) {
    mx_philox_block r = mx__data_draw(seed, MX__DRAW_SHUFFLE, epoch, (uint64_t)i);
    uint64_t bits = (uint64_t)r.v[0] << 32 | r.v[1];
    int64_t j = (int64_t)(bits % (uint64_t)(i + 1)); /* bias below n / 2^64 */
    int64_t t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
}

mx__augment mx__batch_augment_draw(uint64_t seed, int64_t epoch, int64_t index, int pad, bool flip) {
  mx_philox_block r = mx__data_draw(seed, MX__DRAW_AUGMENT, epoch, (uint64_t)index);
  uint32_t span = 2u * (uint32_t)pad + 1u;
  return (mx__augment){.dy = (int)(r.v[0] % span), .dx = (int)(r.v[1] % span),
                       .flip = flip && (r.v[2] & 1u)};
}

void mx__batch_sample(float *dst, const uint8_t *src, int c, int h, int w, const float *lut, int pad,
                      mx__augment a) {
  for (int ch = 0; ch < c; ch++) {
    const float *map = lut + ch * 256;
    for (int y = 0; y < h; y++) {
      float *out = dst + ((int64_t)ch * h + y) * w;
      int sy = y + a.dy - pad;
      if (sy < 0 || sy >= h) { /* a row of padding */
        for (int x = 0; x < w; x++) out[x] = map[0];
        continue;
      }
      const uint8_t *row = src + ((int64_t)ch * h + sy) * w;
      for (int x = 0; x < w; x++) {
        int sx = (a.flip ? w - 1 - x : x) + a.dx - pad;
        out[x] = sx >= 0 && sx < w ? map[row[sx]] : map[0];
      }
    }
  }
}

void mx__batch_fill(const mx__batch_plan *p, int64_t start, int64_t count, float *x, int64_t *y) {
  const mx_dataset *ds = p->ds;
  int64_t sample = (int64_t)ds->c * ds->h * ds->w;
  for (int64_t i = 0; i < count; i++) {
    int64_t index = p->order[start + i];
    /* without augmentation the draw is dy = dx = 0, no flip: a plain copy */
    mx__augment a = mx__batch_augment_draw(p->seed, p->epoch, index, p->pad, p->flip);
    mx__batch_sample(x + i * sample, ds->images + index * sample, ds->c, ds->h, ds->w, p->lut,
                     p->pad, a);
    y[i] = ds->labels[index];
  }
}
