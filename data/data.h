/* Datasets, transforms and the data loader: MNIST-format IDX files (MNIST,
 * Fashion-MNIST; raw or gzipped), CIFAR-10 and CIFAR-100 binary files,
 * tensors in memory, a dataset of your own through two callbacks, a
 * synthetic generator; normalisation, random crop and flip, composed in
 * order; and a loader that shuffles, batches, transforms (on a background
 * thread if asked) and splits the samples between distributed ranks.
 *
 *     mx_dataset *train = mx_mnist_load("/usr/share/datasets/fashion-mnist", true);
 *     if (!train) { fprintf(stderr, "%s\n", mx_last_error()); return 1; }
 *     float mean = 0.2860f, std = 0.3530f;
 *     mx_transform *norm = mx_transform_normalize(&mean, &std, 1);
 *     mx_loader *l = mx_loader_new(train, &(mx_loader_options){
 *         .batch_size = 64, .shuffle = true, .seed = 1, .transform = norm, .background = true});
 *     for (int epoch = 0; epoch < 3; epoch++) {
 *       mx_loader_reset(l, epoch);                  // reshuffles
 *       mx_tensor *x, *y;                           // (64,1,28,28) f32, (64) i64
 *       while (mx_loader_next(l, &x, &y)) {
 *         mx_scope *s = mx_scope_begin();
 *         ...                                        // forward, backward, step
 *         mx_scope_end(s);
 *         mx_release(x);                            // made outside the scope
 *         mx_release(y);
 *       }
 *     }
 *     mx_loader_free(l);
 *     mx_transform_free(norm);
 *     mx_dataset_free(train);
 *
 * Files are untrusted: the header, the dimensions and the file's length
 * are checked before anything is allocated (a gzipped file's length as it
 * is inflated, within MX_DATA_MAX_FILE_BYTES), and a missing, wrong,
 * truncated or corrupt file fails with a message naming the file and what
 * was expected. Every function that fails returns NULL (or false, or a status
 * other than MX_OK) with mx_last_error() set.
 */
#ifndef MX_DATA_DATA_H
#define MX_DATA_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/base.h"
#include "tensor/scope.h"
#include "tensor/tensor.h"

MX_API_BEGIN

/* No file read here may hold more than this many bytes (MNIST's largest,
 * train-images, holds 47,040,016; a CIFAR-10 batch 30,730,000). */
#define MX_DATA_MAX_FILE_BYTES 100000000

/* --- datasets ------------------------------------------------------------------ */
/* A dataset of your own (mx_dataset_custom), like a PyTorch Dataset: length
 * gives the number of samples (asked once, when the dataset is made); get
 * writes sample index's elements as floats into x (the sample shape's
 * element count) and its label, in 0..classes-1, into *y, and returns
 * false on failure. get may run on the loader's worker thread, one call at
 * a time, and must not make or release mixgrad tensors; it may read user. */
typedef struct {
  int64_t (*length)(void *user);
  bool (*get)(void *user, int64_t index, float *x, int64_t *y);
  void *user;
} mx_dataset_callbacks;

/* n samples and their labels, held in one of three ways:
 * - images: bytes (the readers, mx_dataset_new, mx_dataset_synthetic).
 *   Sample i's pixels are the c*h*w bytes at images + i*c*h*w: c planes of h
 *   rows of w pixels (CHW, like CIFAR's records and the tensors the loader
 *   makes), label i is labels[i]. The loader turns pixel p into p / 255
 *   (as torchvision's ToTensor) before the transforms;
 * - values: floats (mx_dataset_from_tensors), sample i the c*h*w floats at
 *   values + i*c*h*w, label i targets[i];
 * - callbacks (mx_dataset_custom): images and values are NULL.
 * A sample is c x h x w; ndim says how batches show it: 3 as (B, c, h, w),
 * 2 as (B, h, w) (c is 1), 1 as (B, w) (c and h are 1). */
typedef struct {
  uint8_t *images;
  uint8_t *labels; /* n labels in 0..classes-1 */
  int64_t n;
  int c, h, w;
  int classes;
  int ndim;
  float *values;
  int64_t *targets;
  mx_dataset_callbacks callbacks;
} mx_dataset;

/* n zeroed byte samples of c x h x w with labels in 0..classes-1. */
mx_dataset *mx_dataset_new(int64_t n, int c, int h, int w, int classes);
void mx_dataset_free(mx_dataset *ds); /* NULL is ignored */

/* The samples x (n, ...) of 1 to 3 dims each, of any dtype on any device,
 * and their labels y (n) of int64, int32 or uint8, in 0..65535 (the
 * dataset's classes: the largest label + 1), copied to the host as float32
 * and int64 (x and y can be released at once). */
mx_dataset *mx_dataset_from_tensors(const mx_tensor *x, const mx_tensor *y);

/* A dataset of your own: samples of the given shape (1 to 3 dims, as the
 * batches show them) with labels in 0..classes-1 (classes > 0), read
 * through cb (copied; cb->user must outlive the dataset). */
mx_dataset *mx_dataset_custom(const mx_dataset_callbacks *cb, mx_shape sample, int classes);

/* Sample index's elements as floats into x (c*h*w of them) and its label
 * into *y, as the loader reads them (bytes as p / 255, before any
 * transform). */
mx_status mx_dataset_get(const mx_dataset *ds, int64_t index, float *x, int64_t *y);

/* --- readers ------------------------------------------------------------------- */
/* An IDX image file (magic 0x00000803: n, rows, cols, then bytes) and its
 * IDX label file (magic 0x00000801: n, then bytes in 0..9), each gzipped or
 * raw (told apart by their content). The counts must agree. */
mx_dataset *mx_idx_load(const char *images_path, const char *labels_path);
/* MNIST-format files in dir: train-images-idx3-ubyte and
 * train-labels-idx1-ubyte (t10k-... when train is false), each tried as
 * NAME.gz, then NAME. Debian's dataset-fashion-mnist installs the .gz files
 * in /usr/share/datasets/fashion-mnist. */
mx_dataset *mx_mnist_load(const char *dir, bool train);
/* CIFAR-10 binary batch files: records of 1 label byte (0..9) and 3072
 * pixel bytes (32x32 red, then green, then blue), any whole number of them
 * per file, concatenated in the order given. Gzipped files are read too. */
mx_dataset *mx_cifar_load_files(const char *const *paths, int count);
/* data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin from
 * dir/cifar-10-batches-bin (the archive's layout) or dir itself. */
mx_dataset *mx_cifar_load(const char *dir, bool train);

/* CIFAR-100's two labellings: 20 superclasses or 100 classes. */
typedef enum { MX_CIFAR100_FINE, MX_CIFAR100_COARSE } mx_cifar100_labels;
/* CIFAR-100 binary files: records of a coarse label byte (0..19), a fine
 * label byte (0..99) and 3072 pixel bytes, as CIFAR-10's; the dataset's
 * labels are the fine ones (100 classes) or the coarse ones (20). */
mx_dataset *mx_cifar100_load_files(const char *const *paths, int count, mx_cifar100_labels labels);
/* train.bin or test.bin from dir/cifar-100-binary (the archive's layout) or dir itself. */
mx_dataset *mx_cifar100_load(const char *dir, bool train, mx_cifar100_labels labels);

/* n deterministic, learnable samples of c x h x w in 10 classes: class k
 * draws stripes at its own angle and frequency (a phase per channel) plus
 * per-pixel noise; labels are random. The same (n, c, h, w, seed) always
 * gives the same bytes. The demos' --synthetic N: (N, 1, 28, 28) for MNIST,
 * (N, 3, 32, 32) for CIFAR-10. */
mx_dataset *mx_dataset_synthetic(int64_t n, int c, int h, int w, uint64_t seed);

/* --- transforms ---------------------------------------------------------------- */
/* What the loader does to each sample (c x h x w floats) after reading it,
 * as torchvision's transforms do. The random ones draw from (seed, epoch,
 * sample index): the same loader seed gives the same crops and flips,
 * on the worker thread or not. */
typedef struct mx_transform mx_transform;

/* x = (x - mean[ch]) / std[ch] for each of the channels (copied; the
 * samples must have as many); std > 0, both finite. */
mx_transform *mx_transform_normalize(const float *mean, const float *std, int channels);
/* torchvision's RandomCrop(size of the image, padding): a crop at a random
 * offset of the image padded with `padding` zeros on each side (0 up to
 * the image's smaller side). */
mx_transform *mx_transform_random_crop(int padding);
/* torchvision's RandomHorizontalFlip: a mirror image with probability 1/2. */
mx_transform *mx_transform_random_flip(void);
/* The transforms applied in the order given. It takes them over: they are
 * freed with it, or at once when it fails (a NULL among them, a failed
 * transform's result, fails it, keeping that failure's message). */
mx_transform *mx_transform_compose(mx_transform *const *transforms, int count);
void mx_transform_free(mx_transform *t); /* NULL is ignored */
/* Applies t to one sample x (c x h x w floats) in place, drawing as the
 * loader does for sample `index` in `epoch` with this seed. The random
 * transforms read the sample's words of randomness in order: a crop two
 * (its row, then its column offset), a flip one. */
mx_status mx_transform_apply(const mx_transform *t, float *x, int c, int h, int w, uint64_t seed, int64_t epoch,
                             int64_t index);

/* --- the loader ---------------------------------------------------------------- */
typedef struct {
  int64_t batch_size; /* > 0 */
  bool shuffle;       /* a new permutation each epoch, from (seed, epoch) */
  bool drop_last;     /* drop the last, smaller batch */
  uint64_t seed;      /* shuffling and the random transforms */
  /* Applied to every sample (NULL: none); must outlive the loader. The
   * CIFAR demo's augmentation: compose(random_crop(4), random_flip(),
   * normalize(...)). */
  const mx_transform *transform;
  bool background; /* prepare the next batches on a worker thread */
  /* Data parallelism, as PyTorch's DistributedSampler: with shards > 1 the
   * loader serves samples shard, shard + shards, shard + 2 shards, ... of
   * each epoch's order. The tail: padded with the order's first samples to
   * a multiple of shards, so every shard gets ceil(n / shards) and the
   * ranks take their steps together (up to shards - 1 samples are served
   * twice an epoch). 0 or 1: every sample. */
  int shards, shard;
  /* No padding: shard s gets the positions s, s + shards, ... below n
   * (floor or ceil of n / shards), so over all shards every sample is
   * served exactly once: for test passes, which take no steps together. */
  bool uneven_shards;
} mx_loader_options;

typedef struct mx_loader mx_loader;

/* Reads ds (which must outlive the loader) and starts at epoch 0. */
mx_loader *mx_loader_new(const mx_dataset *ds, const mx_loader_options *opts);
/* Stops the worker thread (if any) and frees the loader. NULL is ignored. */
void mx_loader_free(mx_loader *l);
/* Batches per epoch: ceil(n / batch_size), or floor with drop_last (n:
 * the samples of this loader's shard). */
int64_t mx_loader_batches(const mx_loader *l);
/* Starts epoch `epoch` (>= 0) from its first batch, with its permutation. */
mx_status mx_loader_reset(mx_loader *l, int64_t epoch);
/* The next batch: *x (B, sample shape) float32 and *y (B) int64 on the CPU,
 * new handles made on the calling thread (so they belong to the scope open
 * there, or to the caller, who releases them). Returns false at the end of
 * the epoch, and on failure, when mx_loader_status() is not MX_OK; *x and
 * *y are NULL then. */
bool mx_loader_next(mx_loader *l, mx_tensor **x, mx_tensor **y);
/* MX_OK unless the last mx_loader_next failed. */
mx_status mx_loader_status(const mx_loader *l);
/* The current epoch's order: n sample indices (of its shard), batch b the slice
 * [b * batch_size, (b + 1) * batch_size). */
const int64_t *mx_loader_order(const mx_loader *l);

MX_API_END

#endif
