/* MNIST-format folders (MNIST, Fashion-MNIST): finding the IDX files, gzipped or raw. */
#include <limits.h>
#include <stdio.h>

#include "data/data_file.h"
#include "data/data_internal.h"
#include "kernels/base_internal.h"

/* Writes dir/name.gz or else dir/name, whichever exists, into path. */
static mx_status find(const char *op, const char *dir, const char *name, char *path, size_t size) {
  const char *suffixes[] = {".gz", ""};
  for (int i = 0; i < 2; i++) {
    if ((size_t)snprintf(path, size, "%s/%s%s", dir, name, suffixes[i]) >= size)
      return mx__error(MX_INVALID_ARGUMENT, "%s: %s: the path is too long", op, dir);
    if (mx__data_exists(path)) return MX_OK;
  }
  return mx__error(MX_IO_ERROR, "%s: %s: no %s.gz or %s there", op, dir, name, name);
}

mx_dataset *mx_mnist_load(const char *dir, bool train) {
  static const char *op = "mx_mnist_load";
  if (!dir) {
    mx__null_input(op, "dir");
    return NULL;
  }
  const char *prefix = train ? "train" : "t10k";
  char images_name[32], labels_name[32], images[PATH_MAX], labels[PATH_MAX];
  snprintf(images_name, sizeof images_name, "%s-images-idx3-ubyte", prefix);
  snprintf(labels_name, sizeof labels_name, "%s-labels-idx1-ubyte", prefix);
  if (find(op, dir, images_name, images, sizeof images) != MX_OK ||
      find(op, dir, labels_name, labels, sizeof labels) != MX_OK)
    return NULL;
  return mx__idx_load(op, images, labels);
}
