/* Trains a ResNet-9 (the DAWNBench shape) on CIFAR-10's binary batches, or
 * on generated CIFAR-shaped data with --synthetic N. `cifar10 --help` lists
 * the flags.
 *
 * The recipe: Nesterov SGD with weight decay under a one-cycle schedule,
 * label smoothing 0.2, per-channel normalisation, and random 32x32 crops of
 * the 4-pixel-padded image with horizontal flips. */
#include <stdio.h>
#include <string.h>

#include "examples/data/data.h"
#include "examples/train/trainer.h"
#include "mixgrad.h"

static const char *const models[] = {"resnet9"};
static const char *const classes[] = {"airplane", "automobile", "bird", "cat", "deer",
                                      "dog",      "frog",       "horse", "ship", "truck"};

/* conv3x3 (no bias: the batch norm has one) - batch norm - ReLU */
static mx_module *conv_bn(int64_t in, int64_t out) {
  return mx_sequential_new(3, (mx_module *[]){
                                  mx_conv2d_new(in, out, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, false, NULL),
                                  mx_batch_norm2d_new(out, 1e-5, 0.1, true, true), mx_relu_new()});
}

static mx_module *max_pool(int64_t k) { return mx_max_pool2d_new(MX_DIMS(k), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT); }

/* x + (conv_bn, conv_bn)(x) */
static mx_module *residual(int64_t c) {
  return mx_residual_new(mx_sequential_new(2, (mx_module *[]){conv_bn(c, c), conv_bn(c, c)}), NULL);
}

/* prep 64 | 128, pool, residual | 256, pool | 512, pool, residual | pool 4x4, linear 10 */
static mx_module *make_resnet9(void) {
  return mx_sequential_new(11, (mx_module *[]){conv_bn(3, 64), conv_bn(64, 128), max_pool(2), residual(128),
                                               conv_bn(128, 256), max_pool(2), conv_bn(256, 512), max_pool(2),
                                               residual(512), max_pool(4),
                                               mx_sequential_new(2, (mx_module *[]){
                                                                        mx_flatten_new(1, -1),
                                                                        mx_linear_new(512, 10, false, NULL)})});
}

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
  mx_module *net = make_resnet9();
  int rc = 1;
  if (!net) fprintf(stderr, "cifar10: %s\n", mx_last_error());
  else {
    static const float mean[3] = {0.4914f, 0.4822f, 0.4465f}, std[3] = {0.2470f, 0.2435f, 0.2616f};
    mx_demo_task task = {.title = flags.synthetic ? "synthetic ResNet-9" : "CIFAR-10 ResNet-9", .model = net,
                         .train = train, .test = test, .class_names = classes, .label_smoothing = 0.2,
                         .weight_decay = 5e-4, .sgd_momentum = 0.9, .mean = mean, .std = std, .crop_padding = 4,
                         .flip = true};
    rc = mx_demo_train(&task, &flags);
    mx_module_free(net);
  }
  mx_dataset_free(train);
  mx_dataset_free(test);
  return rc;
}
