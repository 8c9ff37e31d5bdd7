/* Transforms of one sample (normalise, random crop with padding, horizontal flip) and their composition. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch.h"
#include "kernels/base_internal.h"

typedef enum { NORMALIZE, RANDOM_CROP, RANDOM_FLIP, COMPOSE } transform_kind;

struct mx_transform {
  transform_kind kind;
  int channels;       /* NORMALIZE: mean and std hold this many */
  float *mean, *std;
  int padding;        /* RANDOM_CROP */
  mx_transform **items; /* COMPOSE: applied in order, owned */
  int count;
};

static mx_transform *transform_new(const char *op, transform_kind kind) {
  mx_transform *t = calloc(1, sizeof *t);
  if (!t) mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  else t->kind = kind;
  return t;
}

mx_transform *mx_transform_normalize(const float *mean, const float *std, int channels) {
  static const char *op = "mx_transform_normalize";
  if (!mean || !std) {
    mx__null_input(op, mean ? "std" : "mean");
    return NULL;
  }
  if (channels < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: channels must be positive, got %d", op, channels);
    return NULL;
  }
  for (int ch = 0; ch < channels; ch++) {
    if (!isfinite(mean[ch])) {
      mx__error(MX_INVALID_ARGUMENT, "%s: mean[%d] must be finite, got %g", op, ch, mean[ch]);
      return NULL;
    }
    if (!(std[ch] > 0.0f && isfinite(std[ch]))) {
      mx__error(MX_INVALID_ARGUMENT, "%s: std[%d] must be positive and finite, got %g", op, ch, std[ch]);
      return NULL;
    }
  }
  mx_transform *t = transform_new(op, NORMALIZE);
  if (!t) return NULL;
  t->channels = channels;
  t->mean = malloc((size_t)channels * sizeof *t->mean);
  t->std = malloc((size_t)channels * sizeof *t->std);
  if (!t->mean || !t->std) {
    mx_transform_free(t);
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  memcpy(t->mean, mean, (size_t)channels * sizeof *t->mean);
  memcpy(t->std, std, (size_t)channels * sizeof *t->std);
  return t;
}

mx_transform *mx_transform_random_crop(int padding) {
  static const char *op = "mx_transform_random_crop";
  if (padding < 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: padding must be at least 0, got %d", op, padding);
    return NULL;
  }
  mx_transform *t = transform_new(op, RANDOM_CROP);
  if (t) t->padding = padding;
  return t;
}

mx_transform *mx_transform_random_flip(void) { return transform_new("mx_transform_random_flip", RANDOM_FLIP); }

mx_transform *mx_transform_compose(mx_transform *const *transforms, int count) {
  static const char *op = "mx_transform_compose";
  mx_transform *t = NULL;
  if (!transforms || count < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: expected at least one transform, got %d", op, transforms ? count : 0);
    return NULL; /* nothing to take over */
  }
  int missing = -1;
  for (int i = 0; i < count && missing < 0; i++)
    if (!transforms[i]) missing = i;
  if (missing >= 0) {
    if (mx_last_status() == MX_OK) mx__error(MX_NULL_INPUT, "%s: transform %d is NULL", op, missing);
    else mx__error_prefix(op);
  } else if ((t = transform_new(op, COMPOSE)) && !(t->items = malloc((size_t)count * sizeof *t->items))) {
    free(t);
    t = NULL;
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
  }
  if (!t) {
    for (int i = 0; i < count; i++) mx_transform_free(transforms[i]);
    return NULL;
  }
  memcpy(t->items, transforms, (size_t)count * sizeof *t->items);
  t->count = count;
  return t;
}

void mx_transform_free(mx_transform *t) {
  if (!t) return;
  for (int i = 0; i < t->count; i++) mx_transform_free(t->items[i]);
  free(t->items);
  free(t->mean);
  free(t->std);
  free(t);
}

mx_status mx__transform_check(const char *op, const mx_transform *t, int c, int h, int w) {
  int side = h < w ? h : w;
  switch (t->kind) {
  case NORMALIZE:
    if (t->channels != c)
      return mx__error(MX_SHAPE_ERROR, "%s: the normalisation has %d channels, the samples (%dx%dx%d) %d", op,
                       t->channels, c, h, w, c);
    return MX_OK;
  case RANDOM_CROP:
    if (t->padding > side)
      return mx__error(MX_INVALID_ARGUMENT, "%s: the random crop's padding must be in 0..%d for samples of %dx%dx%d, got %d",
                       op, side, c, h, w, t->padding);
    return MX_OK;
  case RANDOM_FLIP:
    return MX_OK;
  case COMPOSE:
    for (int i = 0; i < t->count; i++)
      if (mx__transform_check(op, t->items[i], c, h, w) != MX_OK) return mx_last_status();
    return MX_OK;
  }
  return MX_OK;
}

/* x = x's crop at (dy, dx) of x padded by pad zeros on each side. */
static void crop(float *x, int c, int h, int w, int pad, int dy, int dx, float *scratch) {
  memcpy(scratch, x, (size_t)c * h * w * sizeof *x);
  for (int ch = 0; ch < c; ch++)
    for (int y = 0; y < h; y++) {
      float *out = x + ((int64_t)ch * h + y) * w;
      int sy = y + dy - pad;
      if (sy < 0 || sy >= h) { /* a row of padding */
        for (int xi = 0; xi < w; xi++) out[xi] = 0.0f;
        continue;
      }
      const float *row = scratch + ((int64_t)ch * h + sy) * w;
      for (int xi = 0; xi < w; xi++) {
        int sx = xi + dx - pad;
        out[xi] = sx >= 0 && sx < w ? row[sx] : 0.0f;
      }
    }
}

static void flip(float *x, int c, int h, int w) {
  for (int64_t r = 0; r < (int64_t)c * h; r++)
    for (int a = 0, b = w - 1; a < b; a++, b--) {
      float t = x[r * w + a];
      x[r * w + a] = x[r * w + b];
      x[r * w + b] = t;
    }
}

void mx__transform_run(const mx_transform *t, float *x, int c, int h, int w, mx__draws *d, float *scratch) {
  switch (t->kind) {
  case NORMALIZE:
    for (int ch = 0; ch < c; ch++) {
      float m = t->mean[ch], s = t->std[ch], *plane = x + (int64_t)ch * h * w;
      for (int64_t p = 0; p < (int64_t)h * w; p++) plane[p] = (plane[p] - m) / s;
    }
    return;
  case RANDOM_CROP: {
    uint32_t span = 2u * (uint32_t)t->padding + 1u;
    int dy = (int)(mx__draw_word(d) % span), dx = (int)(mx__draw_word(d) % span);
    if (dy != t->padding || dx != t->padding) crop(x, c, h, w, t->padding, dy, dx, scratch);
    return;
  }
  case RANDOM_FLIP:
    if (mx__draw_word(d) & 1u) flip(x, c, h, w);
    return;
  case COMPOSE:
    for (int i = 0; i < t->count; i++) mx__transform_run(t->items[i], x, c, h, w, d, scratch);
    return;
  }
}

mx_status mx_transform_apply(const mx_transform *t, float *x, int c, int h, int w, uint64_t seed, int64_t epoch,
                             int64_t index) {
  static const char *op = "mx_transform_apply";
  if (!t || !x) return mx__null_input(op, t ? "x" : "transform");
  if (c < 1 || h < 1 || w < 1 || (int64_t)c * h * w > MX_DATA_MAX_FILE_BYTES)
    return mx__error(MX_INVALID_ARGUMENT, "%s: a sample of %dx%dx%d: every size must be positive (at most %d elements)",
                     op, c, h, w, MX_DATA_MAX_FILE_BYTES);
  if (epoch < 0 || epoch > UINT32_MAX || index < 0)
    return mx__error(MX_INVALID_ARGUMENT, "%s: epoch must be in 0..%u and index at least 0, got %lld and %lld", op,
                     UINT32_MAX, (long long)epoch, (long long)index);
  if (mx__transform_check(op, t, c, h, w) != MX_OK) return mx_last_status();
  float *scratch = malloc((size_t)c * h * w * sizeof *scratch);
  if (!scratch) return mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for a sample of %dx%dx%d", op, c, h, w);
  mx__draws d = {.seed = seed, .epoch = epoch, .index = index};
  mx__transform_run(t, x, c, h, w, &d, scratch);
  free(scratch);
  return MX_OK;
}
