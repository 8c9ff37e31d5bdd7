/* mixgrad: a small deep-learning framework in C with automatic mixed
 * precision built into its core. Include this one header.
 *
 *     #include <mixgrad.h>
 *
 *     mx_scope *s = mx_scope_begin();
 *     mx_tensor *x = mx_randn(MX_SHAPE(2, 3), MX_F32, MX_CPU, NULL);
 *     mx_tensor *h = mx_to_dtype(x, MX_BF16);    // rounded to nearest even
 *     mx_print(h);
 *     mx_scope_end(s);
 *
 * The rooms, bottom up: kernels/ (dtypes, devices, errors, scalar math,
 * CPU and CUDA kernels), tensor/ (the tensor object, scopes, memory
 * statistics), ops/ and autograd/ (the op table and its dispatcher, the
 * differentiable ops, backward), optim/ (SGD, Adam, AdamW, schedules,
 * clipping), amp/ (autocast, the GradScaler), nn/ (modules, layers,
 * initialisation), data/ (state dicts and training checkpoints) and dist/
 * (data parallelism across processes).
 */
#ifndef MIXGRAD_H
#define MIXGRAD_H

#include "amp/amp.h"
#include "autograd/autograd.h"
#include "data/data.h"
#include "dist/dist.h"
#include "kernels/base.h"
#include "kernels/cuda_graph.h"
#include "kernels/math.h"
#include "nn/activation_checkpoint.h"
#include "data/checkpoint.h"
#include "nn/init.h"
#include "nn/layers.h"
#include "nn/module.h"
#include "nn/rnn.h"
#include "nn/transformer.h"
#include "ops/ops.h"
#include "optim/clip.h"
#include "optim/optimizer.h"
#include "optim/schedule.h"
#include "tensor/output_file.h"
#include "tensor/safetensors.h"
#include "tensor/scope.h"
#include "tensor/tensor.h"

#endif
