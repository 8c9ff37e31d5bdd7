/* The cases appended after the basic ones (op_cases_basic.c): the rows that had no case, each with its forward
 * against float64, its autocast policy and its gradients, and the fused ops. The fuzz corpus stores case indices,
 * so new cases go at the end of this table. */
#include "op_case_table.h"

/* --- appended later: the rows that had no case (losses, nn and linear-algebra composites, distances,
 * grid_sample, multinomial, to_device, slice_backward). Constants in a case are exact in float16 and bfloat16
 * (+-1, halves), so the autocast check sees the same bits on either side of a cast. -------------------- */
/* (0, 1) from DOM_UNIT: probabilities for binary_cross_entropy (banned under autocast, so never in a region) */
#define PROB(x) mx_add_scalar(mx_mul_scalar(x, 0.5), 0.5)

/* losses: class targets in the functions, floating targets as inputs where the loss is smooth in them */
FN(cross_entropy_weighted, mx_cross_entropy(a, IDX(MX_SHAPE(3), 1, 0, 3), b, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.25))
FN(cross_entropy_ignore_none,
   mx_cross_entropy(a, IDX(MX_SHAPE(3), 2, -100, 0), NULL, MX_IGNORE_INDEX, MX_REDUCTION_NONE, 0))
FN(nll_loss_sum, mx_nll_loss(a, IDX(MX_SHAPE(3), 3, 1, 1), NULL, MX_IGNORE_INDEX, MX_REDUCTION_SUM))
FN(binary_cross_entropy, mx_binary_cross_entropy(PROB(a), PROB(b), NULL, MX_REDUCTION_MEAN))
/* soft targets as constants: computed from an input they would round differently in a 16-bit region */
FN(binary_cross_entropy_with_logits,
   mx_binary_cross_entropy_with_logits(a, CONST(a, MX_SHAPE(3, 4), 0, 0.25, 1, 0.5, 1, 0.75, 0, 0.25, 0.5, 1, 0, 0.75),
                                       NULL, MX_REDUCTION_MEAN, b))
FN(multilabel_margin_loss,
   mx_multilabel_margin_loss(a, IDX(MX_SHAPE(2, 4), 3, 0, -1, 0, 1, -1, 0, 0), MX_REDUCTION_MEAN))
FN(multi_margin_loss, mx_multi_margin_loss(a, IDX(MX_SHAPE(3), 1, 3, 0), 1, 1, b, MX_REDUCTION_MEAN))
FN(mse_loss, mx_mse_loss(a, b, MX_REDUCTION_MEAN))
FN(l1_loss, mx_l1_loss(a, b, MX_REDUCTION_SUM))
FN(smooth_l1_loss, mx_smooth_l1_loss(a, b, MX_REDUCTION_NONE, 0.5))
FN(huber_loss, mx_huber_loss(a, b, MX_REDUCTION_MEAN, 1))
FN(kl_div, mx_kl_div(a, b, MX_REDUCTION_BATCHMEAN, false))
FN(poisson_nll_loss, mx_poisson_nll_loss(a, b, true, false, 1e-8, MX_REDUCTION_MEAN))
FN(hinge_embedding_loss,
   mx_hinge_embedding_loss(a, CONST(a, MX_SHAPE(2, 3), 1, -1, -1, 1, -1, 1), 1, MX_REDUCTION_MEAN))
FN(soft_margin_loss, mx_soft_margin_loss(a, CONST(a, MX_SHAPE(2, 3), -1, 1, 1, -1, 1, 1), MX_REDUCTION_MEAN))
FN(margin_ranking_loss, mx_margin_ranking_loss(a, b, CONST(a, MX_SHAPE(4), 1, -1, 1, -1), 0.5, MX_REDUCTION_SUM))
FN(cosine_embedding_loss,
   mx_cosine_embedding_loss(a, b, CONST(a, MX_SHAPE(3), 1, -1, 1), 0, MX_REDUCTION_MEAN))
FN(triplet_margin_loss, mx_triplet_margin_loss(a, b, c, 1, 2, 1e-6, false, MX_REDUCTION_MEAN))

/* nn composites: a cell's weights and biases packed in one input (OP_MAX_IN is 3), cut apart by views so that
 * gradcheck reaches every one of them */
static mx_tensor *part(mx_tensor *packed, int64_t at, mx_shape shape) {
  int64_t n = 1;
  for (int d = 0; d < shape.ndim; d++) n *= shape.d[d];
  return mx_reshape(mx_narrow(packed, 0, at, n), shape);
}
/* x (2, 3), h (2, 4); gates * 4 rows of w_ih (3 columns) and w_hh (4 columns), then the two biases */
#define CELL_ARGS(gates, p)                                                                        \
  part(p, 0, MX_SHAPE(4 * (gates), 3)), part(p, 12 * (gates), MX_SHAPE(4 * (gates), 4)),          \
      part(p, 28 * (gates), MX_SHAPE(4 * (gates))), part(p, 32 * (gates), MX_SHAPE(4 * (gates)))
static mx_tensor *lstm_cell_h_and_c(mx_tensor *x, mx_tensor *hc, mx_tensor *p) {
  mx_tensor *h = NULL, *c = NULL;
  if (mx_lstm_cell(x, mx_select(hc, 0, 0), mx_select(hc, 0, 1), CELL_ARGS(4, p), &h, &c) != MX_OK) return NULL;
  return mx_cat(NLIST(h, c), 1);
}
FN(linear, mx_linear(a, b, c))
FN(linear_nobias, mx_linear(a, b, NULL))
FN(prelu, mx_prelu(a, b))
FN(rnn_tanh_cell, mx_rnn_tanh_cell(a, b, CELL_ARGS(1, c)))
FN(rnn_relu_cell, mx_rnn_relu_cell(a, b, CELL_ARGS(1, c)))
FN(lstm_cell, lstm_cell_h_and_c(a, b, c))
FN(gru_cell, mx_gru_cell(a, b, CELL_ARGS(3, c)))
FN(scaled_dot_product_attention, mx_scaled_dot_product_attention(a, b, c, NULL, 0, false, 0, NULL))
FN(scaled_dot_product_attention_causal, mx_scaled_dot_product_attention(a, b, c, NULL, 0, true, 0.5, NULL))
FN(bilinear, mx_bilinear(a, b, c, NULL))

/* linear-algebra composites */
FN(chain_matmul, mx_chain_matmul(NLIST(a, b, c)))
FN(multi_dot, mx_multi_dot(NLIST(a, b, c)))
FN(einsum_batched, mx_einsum("bij,bkj->bik", NLIST(a, b)))
FN(einsum_trace_outer, mx_einsum("ii,j->j", NLIST(a, b)))
FN(cross, mx_cross(a, b, 1))
FN(tensordot, mx_tensordot(a, b, 2))

/* norms and distances */
FN(normalize, mx_normalize(a, 2, 1, 1e-12))
FN(dist, mx_dist(a, b, 2))
FN(dist_p1, mx_dist(a, b, 1))
FN(cdist, mx_cdist(a, b, 2))
FN(pdist, mx_pdist(a, 2))
FN(cosine_similarity, mx_cosine_similarity(a, b, 1, 1e-8))
FN(renorm, mx_renorm(a, 2, 0, 1.5))

/* grid_sample: sampling points inside the input, bilinear and nearest */
FN(grid_sample_bilinear, mx_grid_sample(a, b, MX_GRID_BILINEAR, MX_GRID_PAD_ZEROS, false))
FN(grid_sample_border_aligned, mx_grid_sample(a, b, MX_GRID_BILINEAR, MX_GRID_PAD_BORDER, true))
FN(grid_sample_nearest, mx_grid_sample(a, b, MX_GRID_NEAREST, MX_GRID_PAD_REFLECTION, false))

/* multinomial: int64 draws from a generator seeded in the case, so every run draws the same */
static mx_tensor *multinomial_seeded(mx_tensor *probs, bool replacement) {
  mx_generator *gen = mx_generator_new(20261126u);
  mx_tensor *out = gen ? mx_multinomial(probs, 3, replacement, gen) : NULL;
  mx_generator_free(gen);
  return out;
}
FN(multinomial, multinomial_seeded(a, true))
FN(multinomial_no_replacement, multinomial_seeded(a, false))

/* to_device (the CPU, the only device a test build has) and slice's gradient as a function of the grad */
FN(to_device, mx_to_device(a, MX_CPU))
VJP(slice_backward, mx_slice(x, 1, 1, 4, 2), op_case_zero_leaf(MX_SHAPE(2, 5), in[0]), in[0])

/* convolution + ReLU as one op (stride 2 and padding: a window reaching into the zeros) */
FN(conv2d_relu, mx_conv2d_relu(a, b, c, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1))
/* batch norm with relu fused, training and eval */
FN(batch_norm_relu_train, mx_batch_norm_relu(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, true, 0.1, 1e-5))
FN(batch_norm_relu_eval, mx_batch_norm_relu(a, RUNNING_MEAN(a), RUNNING_VAR(a), b, c, false, 0.1, 1e-5))
/* the copy into channels-last strides */
FN(to_channels_last, mx_to_channels_last(a))
/* linear + ReLU as one op (x 3-d: its rows folded into one product) */
FN(linear_relu, mx_linear_relu(a, b, c))
/* linear with a bias as one op (x 3-d: its rows folded into one product) */
FN(linear_bias, mx_linear_bias(a, b, c))
/* max pooling of relu(x) as one op: overlapping windows reaching into the padding, and the CNNs' 2x2 tiles */
FN(max_pool_relu, mx_max_pool_relu(a, 2, MX_SHAPE(3, 2), MX_SHAPE(2, 1), MX_SHAPE(1, 0), MX_DEFAULT))
FN(max_pool_relu_2x2, mx_max_pool_relu(a, 2, MX_SHAPE(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT))
/* the weight's and the bias's gradients of a convolution (one op, conv_backward_weight_bias) as functions of x and
 * of the output's gradient gy, dw flattened and db after it: gradcheck differentiates both outputs */
static mx_tensor *f_conv_backward_weight_bias(int n, mx_tensor *const *in, void *ctx) {
  (void)n, (void)ctx;
  mx_tensor *x = in[0], *gy = in[1], *w = op_case_zero_leaf(MX_SHAPE(3, 2, 3, 3), x), *b = op_case_zero_leaf(MX_SHAPE(3), x);
  if (!w || !b) return NULL;
  bool create = mx_is_grad_enabled(), previous = mx_set_grad_enabled(true);
  mx_tensor *y = mx_conv2d(x, w, b, MX_SHAPE(2), MX_SHAPE(1), MX_DEFAULT, 1), *leaves[2] = {w, b}, *g[2] = {0};
  mx_status status = y ? mx_grad(1, &y, 2, leaves, &gy, create, create, false, g) : mx_last_status();
  mx_set_grad_enabled(previous);
  mx_tensor *parts[2] = {status == MX_OK ? mx_flatten(g[0], 0, -1) : NULL, g[1]};
  return parts[0] && parts[1] ? mx_cat(2, parts, 0) : NULL;
}

const op_case op_cases_appended[] = {
    /* appended later (the fuzz corpus stores case indices: append only): the rows that had no case, each with
     * its forward against float64, its autocast policy and its gradients. The losses' class targets are in the
     * functions; the cells pack weights and biases into their third input. No PyTorch line in ops_fixtures.txt
     * (NF): the losses, composites, grid_sample and multinomial are compared with PyTorch in their own suites.
     * The variants of a row (linear_nobias, dist_p1, ...) stop at gradcheck (GC) to keep the suite short: each
     * row's first case runs gradgradcheck. multinomial: int64 draws, no gradient. */
    CASE2(cross_entropy_weighted, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE1(cross_entropy_ignore_none, SH(3, 4), ANY, GG | NF),
    CASE1(nll_loss_sum, SH(3, 4), ANY, GG | NF),
    CASE2(binary_cross_entropy, SH(2, 3), UNIT, SH(2, 3), UNIT, GG | NF),
    CASE2(binary_cross_entropy_with_logits, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE1(multilabel_margin_loss, SH(2, 4), ANY, GG | NF),
    CASE2(multi_margin_loss, SH(3, 4), ANY, SH(4), POS, GG | NF),
    CASE2(mse_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(l1_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(smooth_l1_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(huber_loss, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(kl_div, SH(2, 3), ANY, SH(2, 3), POS, GG | NF),
    CASE2(poisson_nll_loss, SH(2, 3), ANY, SH(2, 3), POS, GG | NF),
    CASE1(hinge_embedding_loss, SH(2, 3), ANY, GG | NF),
    CASE1(soft_margin_loss, SH(2, 3), ANY, GG | NF),
    CASE2(margin_ranking_loss, SH(4), ANY, SH(4), ANY, GG | NF),
    CASE2(cosine_embedding_loss, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE3(triplet_margin_loss, SH(3, 4), ANY, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE3(linear, SH(2, 3), ANY, SH(4, 3), ANY, SH(4), ANY, GG | NF),
    CASE2(linear_nobias, SH(2, 3, 3), ANY, SH(2, 3), ANY, GC | NF),
    CASE2(prelu, SH(2, 3, 4), AWAY, SH(3), ANY, GG | NF),
    CASE3(rnn_tanh_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(36), ANY, GG | NF),
    CASE3(rnn_relu_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(36), ANY, GG | NF),
    CASE3(lstm_cell, SH(2, 3), ANY, SH(2, 2, 4), ANY, SH(144), ANY, GG | NF),
    CASE3(gru_cell, SH(2, 3), ANY, SH(2, 4), ANY, SH(108), ANY, GG | NF),
    CASE3(scaled_dot_product_attention, SH(2, 3, 4), ANY, SH(2, 5, 4), ANY, SH(2, 5, 2), ANY, GG | NF),
    CASE3(scaled_dot_product_attention_causal, SH(3, 4), ANY, SH(3, 4), ANY, SH(3, 2), ANY, GC | NF),
    CASE3(bilinear, SH(2, 3), ANY, SH(2, 4), ANY, SH(2, 3, 4), ANY, GG | NF),
    CASE3(chain_matmul, SH(2, 3), ANY, SH(3, 4), ANY, SH(4, 2), ANY, GG | NF),
    CASE3(multi_dot, SH(3), ANY, SH(3, 4), ANY, SH(4), ANY, GG | NF),
    CASE2(einsum_batched, SH(2, 3, 4), ANY, SH(2, 2, 4), ANY, GG | NF),
    CASE2(einsum_trace_outer, SH(3, 3), ANY, SH(2), ANY, GC | NF),
    CASE2(cross, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(tensordot, SH(2, 3, 4), ANY, SH(3, 4, 2), ANY, GG | NF),
    CASE1(normalize, SH(3, 4), ANY, GG | NF),
    CASE2(dist, SH(2, 3), ANY, SH(2, 3), ANY, GG | NF),
    CASE2(dist_p1, SH(2, 3), ANY, SH(2, 3), ANY, GC | NF),
    CASE2(cdist, SH(3, 4), ANY, SH(2, 4), ANY, GG | NF),
    CASE1(pdist, SH(4, 3), ANY, GG | NF),
    CASE2(cosine_similarity, SH(3, 4), ANY, SH(3, 4), ANY, GG | NF),
    CASE1(renorm, SH(3, 4), ANY, GG | NF),
    CASE2(grid_sample_bilinear, SH(1, 2, 3, 4), ANY, SH(1, 2, 3, 2), UNIT, GG | NF),
    CASE2(grid_sample_border_aligned, SH(2, 1, 3, 3), ANY, SH(2, 2, 2, 2), UNIT, GC | NF),
    CASE2(grid_sample_nearest, SH(1, 2, 3, 4), ANY, SH(1, 2, 3, 2), UNIT, GC | NF),
    CASE1(multinomial, SH(2, 4), POS, NF),
    CASE1(multinomial_no_replacement, SH(2, 4), POS, NF),
    CASE1(to_device, SH(2, 3), ANY, GG | NF),
    CASE1(slice_backward, SH(2, 2), ANY, GG | NF),
    CASE3(conv2d_relu, SH(2, 2, 5, 5), ANY, SH(3, 2, 3, 3), ANY, SH(3), ANY, GG | NF),
    /* batch_norm_relu (tests/ops/test_batch_norm_fused.c: the bits of batch_norm then relu) */
    CASE3(batch_norm_relu_train, SH(4, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GG | NF),
    CASE3(batch_norm_relu_eval, SH(2, 3, 2), ANY, SH(3), ANY, SH(3), ANY, GC | NF),
    CASE1(to_channels_last, SH(2, 3, 2, 2), ANY, GG | NF),
    /* linear_relu (tests/ops/test_linear_relu.c: the bits of linear then relu) */
    CASE3(linear_relu, SH(2, 3, 4), ANY, SH(5, 4), ANY, SH(5), ANY, GG | NF),
    /* linear_bias (tests/ops/test_linear_rounding.c: one rounding of a 16-bit product plus bias) */
    CASE3(linear_bias, SH(2, 3, 4), ANY, SH(5, 4), ANY, SH(5), ANY, GG | NF),
    /* max_pool_relu (tests/ops/test_max_pool_relu.c: the bits of relu then max_pool) */
    CASE1(max_pool_relu, SH(1, 2, 5, 5), AWAY, GG | NF),
    CASE1(max_pool_relu_2x2, SH(2, 3, 4, 6), AWAY, GC | NF),
    /* conv_backward_weight_bias: x, then the gradient of conv2d's output (stride 2, padding 1) */
    CASE2(conv_backward_weight_bias, SH(2, 2, 5, 5), ANY, SH(2, 3, 3, 3), ANY, GG | NF),
};

const int op_cases_appended_count = (int)(sizeof op_cases_appended / sizeof op_cases_appended[0]);
