/* The data loader: a worker thread fills two batch buffers; the caller's thread makes the tensors. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "data/batch.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"
#include "tensor/scope.h"

/* Threads and ownership. The worker thread never calls mixgrad: it reads
 * the dataset and writes floats and int64s into two preallocated slots,
 * batch b into slots[b % 2]. The caller's thread copies a ready slot into
 * new tensors with mx_from_data, so every tensor is made on the caller's
 * thread, joins the scope open there (or belongs to the caller) and shares
 * nothing with the worker, whatever the caller keeps or releases. The
 * worker allocates nothing; the one thing it runs that can fail, a
 * custom dataset's get, leaves its status and words in the slot, and the
 * caller's thread reports them through mx_last_error(), as every other
 * failure (memory, starting the thread, making the tensors). One mutex
 * guards the slots' flags and the worker's state; the permutation is
 * rewritten only while the worker is idle (reset waits for it). */

typedef struct {
  float *x;       /* (batch_size, c, h, w) */
  int64_t *y;     /* (batch_size) */
  float *scratch; /* one sample, for the transforms */
  bool ready;     /* holds the batch the caller takes next from this slot */
  mx_status status; /* of filling it; not MX_OK: error says why */
  char error[256];
} slot;

struct mx_loader {
  const mx_dataset *ds;
  mx_loader_options opt;
  int64_t n;             /* samples per epoch: the shard's */
  int64_t *perm;         /* (ds->n) the epoch's permutation of the dataset */
  int64_t *order;        /* (n) the epoch's sample order: the shard's part of perm */
  int64_t batch_size;    /* min(opt.batch_size, n): a slot's capacity */
  int64_t batches, epoch;
  int64_t next; /* the caller's next batch */
  mx_status status;
  slot slots[2];
  /* with a worker thread; busy, stop, produce and the slots' flags under mu */
  bool threaded, busy, stop;
  int64_t produce; /* the worker's next batch */
  pthread_t thread;
  pthread_mutex_t mu;
  pthread_cond_t cv;
};

static int64_t batch_count(const mx_loader *l, int64_t b) {
  int64_t left = l->n - b * l->batch_size;
  return left < l->batch_size ? left : l->batch_size;
}

/* Fills s with batch b; plan was read under the lock (it names the epoch). */
static void fill(const mx_loader *l, const mx__batch_plan *plan, int64_t b, slot *s) {
  s->status = mx__batch_fill(plan, b * l->batch_size, batch_count(l, b), s->x, s->y, s->scratch, s->error,
                             sizeof s->error);
}

static mx__batch_plan plan_of(const mx_loader *l) {
  return (mx__batch_plan){.ds = l->ds, .order = l->order, .transform = l->opt.transform, .seed = l->opt.seed,
                          .epoch = l->epoch};
}

static void *worker(void *arg) {
  mx_loader *l = arg;
  pthread_mutex_lock(&l->mu);
  while (!l->stop) {
    int64_t b = l->produce;
    slot *s = &l->slots[b % 2];
    if (b >= l->batches || s->ready) { /* the epoch is done, or both slots are full */
      pthread_cond_wait(&l->cv, &l->mu);
      continue;
    }
    mx__batch_plan plan = plan_of(l);
    l->produce++;
    l->busy = true;
    pthread_mutex_unlock(&l->mu);
    fill(l, &plan, b, s);
    pthread_mutex_lock(&l->mu);
    l->busy = false;
    s->ready = true;
    pthread_cond_broadcast(&l->cv);
  }
  pthread_mutex_unlock(&l->mu);
  return NULL;
}

static void free_buffers(mx_loader *l) {
  if (l->perm != l->order) free(l->perm);
  free(l->order);
  for (int i = 0; i < 2; i++) {
    free(l->slots[i].x);
    free(l->slots[i].y);
    free(l->slots[i].scratch);
  }
  free(l);
}

/* Checks the dataset and the options; MX_OK or the error. */
static mx_status check(const char *op, const mx_dataset *ds, const mx_loader_options *o) {
  if (!ds || !o) return mx__null_input(op, ds ? "opts" : "dataset");
  if (mx__dataset_check(op, ds) != MX_OK) return mx_last_status();
  if (o->shards < 0 || o->shard < 0 || o->shard >= (o->shards > 1 ? o->shards : 1))
    return mx__error(MX_INVALID_ARGUMENT, "%s: shard %d of %d shards does not exist", op, o->shard, o->shards);
  if (o->batch_size < 1)
    return mx__error(MX_INVALID_ARGUMENT, "%s: batch_size must be positive, got %lld", op,
                     (long long)o->batch_size);
  return o->transform ? mx__transform_check(op, o->transform, ds->c, ds->h, ds->w) : MX_OK;
}

mx_loader *mx_loader_new(const mx_dataset *ds, const mx_loader_options *opts) {
  static const char *op = "mx_loader_new";
  if (check(op, ds, opts) != MX_OK) return NULL;
  mx_loader *l = calloc(1, sizeof *l);
  if (!l) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", op);
    return NULL;
  }
  l->ds = ds;
  l->opt = *opts;
  int shards = opts->shards > 1 ? opts->shards : 1;
  /* padded: ceil(n / shards) each; uneven: the positions shard, shard +
   * shards, ... below n (none when shard >= n) */
  l->n = opts->uneven_shards ? (ds->n - opts->shard + shards - 1) / shards : (ds->n + shards - 1) / shards;
  l->batch_size = opts->batch_size < l->n ? opts->batch_size : l->n;
  l->batches = l->n / opts->batch_size + (!opts->drop_last && l->n % opts->batch_size != 0);
  int64_t sample = (int64_t)ds->c * ds->h * ds->w, capacity = l->batch_size > 0 ? l->batch_size : 1;
  l->order = malloc((size_t)(l->n > 0 ? l->n : 1) * sizeof *l->order);
  l->perm = shards > 1 ? malloc((size_t)ds->n * sizeof *l->perm) : l->order;
  bool ok = l->order && l->perm;
  for (int i = 0; i < 2; i++) {
    l->slots[i].x = malloc((size_t)(capacity * sample) * sizeof(float));
    l->slots[i].y = malloc((size_t)capacity * sizeof(int64_t));
    l->slots[i].scratch = malloc((size_t)sample * sizeof(float));
    ok = ok && l->slots[i].x && l->slots[i].y && l->slots[i].scratch;
  }
  if (!ok) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory for batches of %lld samples of %dx%dx%d", op,
              (long long)l->batch_size, ds->c, ds->h, ds->w);
    free_buffers(l); /* l with them */
    return NULL;
  }
  mx_loader_reset(l, 0); /* the order exists before the worker can read it */
  if (!opts->background) return l;
  pthread_mutex_init(&l->mu, NULL);
  pthread_cond_init(&l->cv, NULL);
  l->threaded = true;
  int rc = pthread_create(&l->thread, NULL, worker, l);
  if (rc != 0) {
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
    free_buffers(l);
    mx__error(MX_BACKEND_ERROR, "%s: cannot start the loader thread: %s", op, strerror(rc));
    return NULL;
  }
  return l;
}

void mx_loader_free(mx_loader *l) {
  if (!l) return;
  if (l->threaded) {
    pthread_mutex_lock(&l->mu);
    l->stop = true;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
    pthread_join(l->thread, NULL);
    pthread_mutex_destroy(&l->mu);
    pthread_cond_destroy(&l->cv);
  }
  free_buffers(l);
}

int64_t mx_loader_batches(const mx_loader *l) { return l ? l->batches : 0; }

const int64_t *mx_loader_order(const mx_loader *l) { return l ? l->order : NULL; }

mx_status mx_loader_status(const mx_loader *l) { return l ? l->status : MX_NULL_INPUT; }

mx_status mx_loader_reset(mx_loader *l, int64_t epoch) {
  if (!l) return mx__null_input("mx_loader_reset", "loader");
  if (epoch < 0 || epoch > UINT32_MAX) /* the epoch is one 32-bit word of the Philox counter */
    return mx__error(MX_INVALID_ARGUMENT, "mx_loader_reset: epoch must be in 0..%u, got %lld",
                     UINT32_MAX, (long long)epoch);
  if (l->threaded) {
    pthread_mutex_lock(&l->mu);
    while (l->busy) pthread_cond_wait(&l->cv, &l->mu);
  }
  l->epoch = epoch;
  mx__batch_order(l->perm, l->ds->n, l->opt.shuffle, l->opt.seed, epoch);
  for (int64_t k = 0; l->perm != l->order && k < l->n; k++) /* the shard's part, wrapping into any padding */
    l->order[k] = l->perm[(l->opt.shard + k * l->opt.shards) % l->ds->n];
  l->slots[0].ready = l->slots[1].ready = false;
  l->produce = 0;
  l->next = 0;
  l->status = MX_OK;
  if (l->threaded) {
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
  }
  return MX_OK;
}

bool mx_loader_next(mx_loader *l, mx_tensor **x, mx_tensor **y) {
  if (x) *x = NULL;
  if (y) *y = NULL;
  if (!l || !x || !y) {
    mx__null_input("mx_loader_next", !l ? "loader" : !x ? "x" : "y");
    return false;
  }
  l->status = MX_OK;
  if (l->next >= l->batches) return false;
  int64_t b = l->next;
  slot *s = &l->slots[b % 2];
  if (l->threaded) {
    pthread_mutex_lock(&l->mu);
    while (!s->ready) pthread_cond_wait(&l->cv, &l->mu);
    pthread_mutex_unlock(&l->mu);
  } else {
    mx__batch_plan plan = plan_of(l);
    fill(l, &plan, b, s);
  }
  if (s->status != MX_OK) { /* the slot stays ready: the next call reads this batch again */
    l->status = mx__error(s->status, "mx_loader_next: %s", s->error);
    return false;
  }
  const mx_dataset *ds = l->ds;
  int64_t count = batch_count(l, b);
  int64_t chw[3] = {ds->c, ds->h, ds->w};
  mx_shape shape = {.ndim = 1 + ds->ndim, .d = {count}}; /* (count, the sample's last ndim of c, h, w) */
  memcpy(shape.d + 1, chw + 3 - ds->ndim, (size_t)ds->ndim * sizeof *chw);
  mx_tensor *tx = mx_from_data(s->x, shape, MX_F32, MX_CPU);
  mx_tensor *ty = tx ? mx_from_data(s->y, MX_SHAPE(count), MX_I64, MX_CPU) : NULL;
  if (!ty) { /* the slot stays ready: the next call tries this batch again */
    mx_release(tx);
    l->status = mx__error_prefix("mx_loader_next");
    return false;
  }
  if (l->threaded) {
    pthread_mutex_lock(&l->mu);
    s->ready = false;
    pthread_cond_broadcast(&l->cv);
    pthread_mutex_unlock(&l->mu);
  }
  l->next++;
  *x = tx;
  *y = ty;
  return true;
}
