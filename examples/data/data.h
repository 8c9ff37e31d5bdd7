/* Datasets and a data loader for the demos: MNIST-format IDX files (MNIST,
 * Fashion-MNIST; raw or gzipped), CIFAR-10 binary batches, a synthetic
 * generator, and a loader that shuffles, batches, normalises and augments
 * on a background thread.
 *
 *     mx_dataset *train = mx_mnist_load("/usr/share/datasets/fashion-mnist", true);
 *     if (!train) { fprintf(stderr, "%s\n", mx_last_error()); return 1; }
 *     float mean = 0.2860f, std = 0.3530f;
 *     mx_loader *l = mx_loader_new(train, &(mx_loader_options){
 *         .batch_size = 64, .shuffle = true, .seed = 1,
 *         .mean = &mean, .std = &std, .background = true});
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
 *     mx_dataset_free(train);
 *
 * Files are untrusted: the header, the dimensions and the file's length
 * are checked before anything is allocated (a gzipped file's length as it
 * is inflated, within MX_DATA_MAX_FILE_BYTES), and a missing, wrong,
 * truncated or corrupt file fails with a message naming the file and what
 * was expected. Every function that fails returns NULL (or false, or a status
 * other than MX_OK) with mx_last_error() set.
 */
#ifndef MX_EXAMPLES_DATA_DATA_H
#define MX_EXAMPLES_DATA_DATA_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/base.h"
#include "tensor/scope.h"
#include "tensor/tensor.h"

#ifdef __cplusplus
extern "C" {
#endif

/* No file read here may hold more than this many bytes (MNIST's largest,
 * train-images, holds 47,040,016; a CIFAR-10 batch 30,730,000). */
#define MX_DATA_MAX_FILE_BYTES 100000000

/* Images as bytes and their labels. Sample i's pixels are the c*h*w bytes
 * at images + i*c*h*w: c planes of h rows of w pixels (CHW, like CIFAR's
 * records and the tensors the loader makes). */
typedef struct {
  uint8_t *images;
  uint8_t *labels; /* n labels in 0..classes-1 */
  int64_t n;
  int c, h, w;
  int classes;
} mx_dataset;

/* n zeroed samples of c x h x w with labels in 0..classes-1. */
mx_dataset *mx_dataset_new(int64_t n, int c, int h, int w, int classes);
void mx_dataset_free(mx_dataset *ds); /* NULL is ignored */

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
 * per file, concatenated in the order given. */
mx_dataset *mx_cifar_load_files(const char *const *paths, int count);
/* data_batch_1.bin .. data_batch_5.bin (train) or test_batch.bin from
 * dir/cifar-10-batches-bin (the archive's layout) or dir itself. */
mx_dataset *mx_cifar_load(const char *dir, bool train);

/* n deterministic, learnable samples of c x h x w in 10 classes: class k
 * draws stripes at its own angle and frequency (a phase per channel) plus
 * per-pixel noise; labels are random. The same (n, c, h, w, seed) always
 * gives the same bytes. The demos' --synthetic N: (N, 1, 28, 28) for MNIST,
 * (N, 3, 32, 32) for CIFAR-10. */
mx_dataset *mx_dataset_synthetic(int64_t n, int c, int h, int w, uint64_t seed);

/* --- the loader ---------------------------------------------------------------- */
typedef struct {
  int64_t batch_size; /* > 0 */
  bool shuffle;       /* a new permutation each epoch, from (seed, epoch) */
  bool drop_last;     /* drop the last, smaller batch */
  uint64_t seed;      /* shuffling and augmentation */
  /* x = (pixel / 255 - mean[ch]) / std[ch]; c values each (copied), or
   * NULL for mean 0 and std 1. */
  const float *mean, *std;
  /* Augmentation, as torchvision's RandomCrop(padding=crop_padding) then
   * RandomHorizontalFlip (CIFAR: 4 and true): a crop at a random offset of
   * the image padded with crop_padding black (0) pixels on each side, then
   * a mirror image with probability 1/2. Drawn from (seed, epoch, sample). */
  int crop_padding;
  bool flip;
  bool background; /* prepare the next batches on a worker thread */
  /* Data parallelism, as PyTorch's DistributedSampler: with shards > 1 the
   * loader serves samples shard, shard + shards, shard + 2 shards, ... of
   * each epoch's order, padded with its first samples to a multiple of
   * shards, so every shard gets ceil(n / shards) and the ranks take their
   * steps together. 0 or 1: every sample. */
  int shards, shard;
  /* No padding: shard s gets the positions s, s + shards, ... below n
   * (floor or ceil of n / shards), so every sample is served once: for
   * test passes, which take no steps together. */
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
/* The next batch: *x (B, c, h, w) float32 and *y (B) int64 on the CPU,
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

#ifdef __cplusplus
}
#endif

#endif
