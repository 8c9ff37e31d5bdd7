/* Trains a ResNet-9 (the DAWNBench shape) on CIFAR-10's binary batches, or
 * on generated CIFAR-shaped data with --synthetic N. `cifar10 --help` lists
 * the flags.
 *
 * The recipe: Nesterov SGD with weight decay under a one-cycle schedule,
 * label smoothing 0.2, per-channel normalisation, and random 32x32 crops of
 * the 4-pixel-padded image with horizontal flips. */
#include <stdio.h>
#include <string.h>

#include "examples/train/models.h"
#include "examples/train/trainer.h"
#include "mixgrad.h"

static const char *const models[] = {"resnet9"};
static const char *const classes[] = {"airplane", "automobile", "bird", "cat", "deer",
                                      "dog",      "frog",       "horse", "ship", "truck"};

int main(int argc, char **argv) {
  mx_demo_flags flags = {.model = "resnet9", .amp = MX_BF16, .device = MX_CPU, .epochs = 10, .batch = 128,
                         .lr = 0.1, .optimizer = "sgd", .seed = 1, .data = "."};
  mx_demo_usage usage = {
      .program = "cifar10",
      .summary = "Trains a ResNet-9 (DAWNBench shape) on CIFAR-10 with label smoothing and one-cycle Nesterov SGD.",
      .models = models, .n_models = 1,
      .data_help = "the folder holding cifar-10-batches-bin/ (or its files) from "
                   "https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz (default .)"};
  int parsed = mx_demo_parse_flags(argc, argv, &usage, &flags);
  if (parsed) return parsed == 1 ? 0 : 2;
  mx_manual_seed(flags.seed);

  mx_dataset *train, *test;
  if (flags.synthetic) {
    train = mx_dataset_synthetic(flags.synthetic, 3, 32, 32, flags.seed);
    test = mx_dataset_synthetic(flags.synthetic / 5, 3, 32, 32, flags.seed + 1);
  } else {
    train = mx_cifar_load(flags.data, true);
    test = train ? mx_cifar_load(flags.data, false) : NULL;
  }
  if (!train || !test) {
    fprintf(stderr, "cifar10: %s\n", mx_last_error());
    fprintf(stderr, "cifar10: get the data with\n"
                    "  wget https://www.cs.toronto.edu/~kriz/cifar-10-binary.tar.gz && tar xzf cifar-10-binary.tar.gz\n"
                    "then pass --data with the folder that holds cifar-10-batches-bin, or try --synthetic 5000\n");
    mx_dataset_free(train);
    return 1;
  }
  /* Training: a random 32x32 crop of the image padded by 4 pixels, flipped half the time, then normalised. */
  static const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
  mx_transform *augment = mx_transform_compose(
      (mx_transform *[]){mx_transform_random_crop(4), mx_transform_random_flip(), mx_transform_normalize(mean, std, 3)},
      3);
  mx_transform *normalize = augment ? mx_transform_normalize(mean, std, 3) : NULL;
  mx_module *net = normalize ? mx_demo_resnet9() : NULL;
  int rc = 1;
  if (!net) fprintf(stderr, "cifar10: %s\n", mx_last_error());
  else {
    mx_demo_task task = {.title = flags.synthetic ? "synthetic ResNet-9" : "CIFAR-10 ResNet-9", .model = net,
                         .train = train, .test = test, .class_names = classes, .label_smoothing = 0.2,
                         .weight_decay = 5e-4, .sgd_momentum = 0.9, .train_transform = augment,
                         .test_transform = normalize};
    rc = mx_demo_train(&task, &flags);
    mx_module_free(net);
  }
  mx_transform_free(augment);
  mx_transform_free(normalize);
  mx_dataset_free(train);
  mx_dataset_free(test);
  return rc;
}
