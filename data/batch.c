/* Making one batch: the epoch's order, each sample read and transformed. */
#include "data/batch.h"

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

uint32_t mx__draw_word(mx__draws *d) {
  if (d->next % 4 == 0)
    d->block = mx__data_draw(d->seed, MX__DRAW_AUGMENT + ((uint32_t)(d->next / 4) << 8), d->epoch,
                             (uint64_t)d->index);
  return d->block.v[d->next++ % 4];
}

mx_status mx__batch_fill(const mx__batch_plan *p, int64_t start, int64_t count, float *x, int64_t *y, float *scratch,
                         char *error, size_t size) {
  const mx_dataset *ds = p->ds;
  int64_t sample = (int64_t)ds->c * ds->h * ds->w;
  for (int64_t i = 0; i < count; i++) {
    int64_t index = p->order[start + i];
    mx_status st = mx__dataset_read(ds, index, x + i * sample, y + i, error, size);
    if (st != MX_OK) return st;
    if (!p->transform) continue;
    mx__draws d = {.seed = p->seed, .epoch = p->epoch, .index = index};
    mx__transform_run(p->transform, x + i * sample, ds->c, ds->h, ds->w, &d, scratch);
  }
  return MX_OK;
}
