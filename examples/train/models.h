/* The demos' networks, shared with the benchmarks (bench/train_step.c), so
 * that what is timed is what the demos train. Parameters are drawn from the
 * default generator; NULL with the error set on failure. */
#ifndef MX_EXAMPLES_TRAIN_MODELS_H
#define MX_EXAMPLES_TRAIN_MODELS_H

#include "nn/layers.h"

/* 784-512-512-10 with ReLUs, from (N, 1, 28, 28). */
mx_module *mx_demo_mlp(void);
/* conv3x3(32)-ReLU-pool, conv3x3(64)-ReLU-pool, 128 hidden units, 10 classes, from (N, 1, 28, 28). */
mx_module *mx_demo_cnn(void);
/* The DAWNBench ResNet-9, from (N, 3, 32, 32): prep 64 | 128, pool, residual | 256, pool | 512, pool,
 * residual | pool 4x4, linear 10, times 0.125; every conv 3x3 without bias, then batch norm and ReLU. */
mx_module *mx_demo_resnet9(void);

#endif
