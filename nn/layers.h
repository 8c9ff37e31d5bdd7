/* Layers and containers, as torch.nn has them: the same arguments, the
 * same parameter and buffer names and shapes, the same default
 * initialisation (PyTorch 1.13's reset_parameters, drawn from gen; NULL is
 * the default generator).
 *
 *     mx_module *net = mx_sequential_new(5, (mx_module *[]){
 *         mx_conv2d_new(1, 8, MX_DIMS(3), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 1, true, gen),
 *         mx_batch_norm2d_new(8, 1e-5, 0.1, true, true), mx_relu_new(),
 *         mx_flatten_new(1, -1), mx_linear_new(8 * 28 * 28, 10, true, gen)});
 *     mx_tensor *logits = mx_module_forward(net, images);   // (N, 10)
 *
 * Every constructor returns a module in training mode, or NULL with the
 * error set. A container takes the modules it is given (and frees them all
 * when it cannot be built, so a constructor's NULL can be passed straight
 * in and is reported once). Parameters are float32 on the CPU.
 *
 * Spatial arguments (kernel, stride, padding, dilation, output_padding) are
 * lists as the ops take them: one value per spatial dim, or one value for
 * all, or MX_DEFAULT for PyTorch's default (stride: 1 for convolutions, the
 * kernel for pooling; padding 0; dilation 1; output_padding 0).
 */
#ifndef MX_NN_LAYERS_H
#define MX_NN_LAYERS_H

#include "nn/module.h"

MX_API_BEGIN

/* --- containers -------------------------------------------------------------------------------------------------- */
/* The modules applied in turn; children named "0", "1", ... A Conv2d, a ReLU and a MaxPool2d run as one op (the
 * convolution's full-resolution output never stored), a ReLU followed by a MaxPool otherwise as mx_max_pool_relu,
 * and otherwise a Conv2d, a BatchNorm or a Linear followed by a ReLU runs as one fused op (mx_conv2d_relu,
 * mx_batch_norm_relu, mx_linear_relu): the same bits, fewer passes over memory (on CUDA mx_linear_relu is within
 * rounding: ops/ops.h), unless a hook or a summary watches one of the children fused. (oneDNN's fused convolution and
 * matmul turn a NaN sum into 0 where relu keeps NaN: ops/ops.h.) */
mx_module *mx_sequential_new(int n, mx_module *const *modules);
/* Appends m as the next child (the sequential takes it, even on failure). */
mx_status mx_sequential_append(mx_module *seq, mx_module *m);
/* body(x) + shortcut(x); shortcut NULL: body(x) + x. Children "body" and "shortcut". */
mx_module *mx_residual_new(mx_module *body, mx_module *shortcut);

/* --- linear ------------------------------------------------------------------------------------------------------ */
/* x (..., in) -> (..., out). weight (out, in), bias (out): U(-1/sqrt(in), 1/sqrt(in)). */
mx_module *mx_linear_new(int64_t in_features, int64_t out_features, bool bias, mx_generator *gen);
/* x1^T A x2 + b: weight (out, in1, in2), bias (out): U(-1/sqrt(in1), 1/sqrt(in1)). Its forward takes the two
 * inputs concatenated along the last dim, (..., in1 + in2); mx_bilinear_forward takes them apart. */
mx_module *mx_bilinear_new(int64_t in1_features, int64_t in2_features, int64_t out_features, bool bias,
                           mx_generator *gen);
mx_tensor *mx_bilinear_forward(mx_module *bilinear, const mx_tensor *x1, const mx_tensor *x2);

/* --- convolutions ----------------------------------------------------------------------------------------------- */
/* x (N, C_in, *S) -> (N, C_out, *S'). weight (C_out, C_in / groups, *kernel), bias (C_out), both
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with fan_in = C_in / groups * prod(kernel). */
mx_module *mx_conv1d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen);
mx_module *mx_conv2d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen);
mx_module *mx_conv3d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride, mx_shape padding,
                         mx_shape dilation, int64_t groups, bool bias, mx_generator *gen);
/* weight (C_in, C_out / groups, *kernel), bias (C_out), both U(-1/sqrt(fan_in), 1/sqrt(fan_in)) with PyTorch's
 * fan_in of that weight, C_out / groups * prod(kernel). output_padding < stride or dilation. */
mx_module *mx_conv_transpose1d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen);
mx_module *mx_conv_transpose2d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen);
mx_module *mx_conv_transpose3d_new(int64_t in_channels, int64_t out_channels, mx_shape kernel, mx_shape stride,
                                   mx_shape padding, mx_shape output_padding, mx_shape dilation, int64_t groups,
                                   bool bias, mx_generator *gen);

/* --- normalisation ---------------------------------------------------------------------------------------------- */
/* Over (N, C) or (N, C, L) (1d), (N, C, H, W) (2d), (N, C, D, H, W) (3d). affine: weight (ones) and bias (zeros),
 * (C). track_running_stats: buffers running_mean (zeros), running_var (ones), num_batches_tracked (int64 0-d);
 * training uses the batch's statistics and updates them (momentum NAN: a cumulative average, PyTorch's None),
 * eval uses them. Without running statistics both modes use the batch's. PyTorch: 1e-5, 0.1, true, true. */
mx_module *mx_batch_norm1d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats);
mx_module *mx_batch_norm2d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats);
mx_module *mx_batch_norm3d_new(int64_t num_features, double eps, double momentum, bool affine,
                                bool track_running_stats);
/* Over the trailing normalized_shape dims; weight (ones) and bias (zeros) of that shape. PyTorch: 1e-5, true. */
mx_module *mx_layer_norm_new(mx_shape normalized_shape, double eps, bool elementwise_affine);
/* x (N, C, *); weight (ones) and bias (zeros), (C). PyTorch: 1e-5, true. */
mx_module *mx_group_norm_new(int64_t num_groups, int64_t num_channels, double eps, bool affine);

/* --- pooling over (N, C, *S) ---------------------------------------------------------------------------------- */
mx_module *mx_max_pool1d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation);
mx_module *mx_max_pool2d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation);
mx_module *mx_max_pool3d_new(mx_shape kernel, mx_shape stride, mx_shape padding, mx_shape dilation);
/* PyTorch: count_include_pad true. */
mx_module *mx_avg_pool1d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad);
mx_module *mx_avg_pool2d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad);
mx_module *mx_avg_pool3d_new(mx_shape kernel, mx_shape stride, mx_shape padding, bool count_include_pad);
/* (..., H, W) -> (..., out_h, out_w) */
mx_module *mx_adaptive_avg_pool2d_new(int64_t out_h, int64_t out_w);

/* --- activations --------------------------------------------------------------------------------------------- */
mx_module *mx_relu_new(void);
mx_module *mx_leaky_relu_new(double negative_slope); /* PyTorch: 0.01 */
/* weight (num_parameters): 1, or one per channel (dim 1), filled with init. PyTorch: 1, 0.25. */
mx_module *mx_prelu_new(int64_t num_parameters, double init);
mx_module *mx_gelu_new(bool tanh_approximation); /* PyTorch: approximate='none' (false) */
mx_module *mx_silu_new(void);
mx_module *mx_tanh_new(void);
mx_module *mx_sigmoid_new(void);
mx_module *mx_softmax_new(int dim);
mx_module *mx_log_softmax_new(int dim);

/* --- the rest -------------------------------------------------------------------------------------------------- */
/* Zeroes elements with probability p and scales the rest by 1/(1-p) in training mode, drawing from gen at each
 * forward (NULL: the default generator; gen must outlive the module); the identity in eval mode. */
mx_module *mx_dropout_new(double p, mx_generator *gen);
/* int64 indices (...) -> (..., dim). weight (num_embeddings, dim): N(0, 1), with row padding_idx zeroed and left
 * without gradient (negative counts from the end; MX_NO_PADDING_IDX for none). */
#define MX_NO_PADDING_IDX INT64_MIN
mx_module *mx_embedding_new(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, mx_generator *gen);
/* PyTorch: 1, -1 */
mx_module *mx_flatten_new(int start_dim, int end_dim);
mx_module *mx_identity_new(void);

MX_API_END

#endif
