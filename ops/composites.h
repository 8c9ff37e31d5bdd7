/* Composite ops: layers, recurrent cells, attention, products of several
 * tensors, norms and distances, written with other mx ops (so they run on
 * every device and differentiate, twice too, without formulas of their
 * own). Each applies its autocast policy once, at its entry (ops/ops.def).
 *
 *     mx_tensor *y = mx_linear(x, w, b);                   // x @ w^T + b
 *     mx_tensor *h2 = mx_gru_cell(x, h, w_ih, w_hh, b_ih, b_hh);
 *     mx_tensor *s = mx_einsum("bij,bjk->bik", 2, (mx_tensor *[]){a, b});
 *     mx_tensor *d = mx_cdist(x1, x2, 2.0);                // (..., P, R)
 *
 * Optional tensors (biases, the attention mask) may be NULL. Included by
 * ops/ops.h.
 */
#ifndef MX_OPS_COMPOSITES_H
#define MX_OPS_COMPOSITES_H

#include "tensor/tensor.h"

MX_API_BEGIN

/* --- layers (autocast: lower precision) ---------------------------------------------- */
/* x (..., in) @ weight^T (weight (out, in), or (in) for no out dim) + bias (out); a 2-d weight with a
 * bias (out) runs as mx_linear_bias, one rounding of a 16-bit result as in PyTorch */
mx_tensor *mx_linear(const mx_tensor *x, const mx_tensor *weight, const mx_tensor *bias);
/* x where x > 0, else weight * x; weight: 1 element, or one per channel (dim 1) */
mx_tensor *mx_prelu(const mx_tensor *x, const mx_tensor *weight);

/* --- recurrent cells, PyTorch's layouts (autocast: lower precision) -------------------
 * x (B, I) or (I) unbatched; h, c (B, H) or (H); w_ih (G H, I); w_hh (G H, H);
 * b_ih, b_hh (G H) or NULL. G = 1 (RNN), 4 (LSTM: gates i, f, g, o), 3 (GRU: r, z, n). */
/* h' = tanh(x w_ih^T + b_ih + h w_hh^T + b_hh) (relu for rnn_relu_cell) */
mx_tensor *mx_rnn_tanh_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                            const mx_tensor *b_ih, const mx_tensor *b_hh);
mx_tensor *mx_rnn_relu_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                            const mx_tensor *b_ih, const mx_tensor *b_hh);
/* c' = f c + i g, h' = o tanh(c'); writes new handles to h_out and c_out (either may be NULL) */
mx_status mx_lstm_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *c, const mx_tensor *w_ih,
                       const mx_tensor *w_hh, const mx_tensor *b_ih, const mx_tensor *b_hh, mx_tensor **h_out,
                       mx_tensor **c_out);
/* n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h */
mx_tensor *mx_gru_cell(const mx_tensor *x, const mx_tensor *h, const mx_tensor *w_ih, const mx_tensor *w_hh,
                       const mx_tensor *b_ih, const mx_tensor *b_hh);

/* --- attention (autocast: lower precision) ---------------------------------------------
 * softmax(q k^T scale + mask) v: q (..., L, E), k (..., S, E), v (..., S, Ev), batch dims
 * broadcasting. attn_mask (broadcasting to (..., L, S)): bool, true where to attend, or
 * floating, added; NULL for none. is_causal: row i attends to columns j <= i (not with a
 * mask). dropout_p > 0 drops attention weights with gen (NULL: the default generator).
 * scale 0: 1 / sqrt(E). A row with nothing to attend to gives zeros. */
mx_tensor *mx_scaled_dot_product_attention(const mx_tensor *q, const mx_tensor *k, const mx_tensor *v,
                                           const mx_tensor *attn_mask, double dropout_p, bool is_causal, double scale,
                                           mx_generator *gen);

/* --- products of several tensors ----------------------------------------------------------- */
/* A product of matrices in the cheapest order (the matrix-chain program); multi_dot's first
 * and last tensors may be vectors (a row and a column, dropped from the result). Lower
 * precision under autocast. */
mx_tensor *mx_chain_matmul(int n, mx_tensor *const *matrices);
mx_tensor *mx_multi_dot(int n, mx_tensor *const *tensors);
/* Einstein summation, as torch.einsum: "ij,jk->ik", implicit output ("ij,jk": the
 * subscripts used once, in order), repeated subscripts for diagonals ("ii->i"), "..."
 * for broadcast dims; letters a-z, A-Z. One bmm per pair of operands, left to right.
 * Lower precision under autocast. */
mx_tensor *mx_einsum(const char *equation, int n, mx_tensor *const *operands);
/* x1^T A x2 + b: x1 (..., in1), x2 (..., in2), weight (out, in1, in2), bias (out) or NULL.
 * Promotes under autocast. */
mx_tensor *mx_bilinear(const mx_tensor *x1, const mx_tensor *x2, const mx_tensor *weight, const mx_tensor *bias);
/* The cross product along dim (size 3), broadcasting. Promotes under autocast. */
mx_tensor *mx_cross(const mx_tensor *a, const mx_tensor *b, int dim);
/* Contracts a's last `dims` dims with b's first ones, or the listed dims pairwise.
 * Promotes under autocast. */
mx_tensor *mx_tensordot(const mx_tensor *a, const mx_tensor *b, int64_t dims);
mx_tensor *mx_tensordot_dims(const mx_tensor *a, const mx_tensor *b, mx_shape dims_a, mx_shape dims_b);

/* --- norms and distances (autocast: float32) ------------------------------------------------
 * p: any p > 0, INFINITY, 0 (counts non-zeros; gradient 0); -INFINITY and p < 0 for dist,
 * normalize. The gradient of a norm is 0 where the norm is 0. */
/* x / max(||x||_p, eps) along dim (PyTorch: p 2, dim 1, eps 1e-12) */
mx_tensor *mx_normalize(const mx_tensor *x, double p, int dim, double eps);
/* ||a - b||_p over all elements, broadcasting */
mx_tensor *mx_dist(const mx_tensor *a, const mx_tensor *b, double p);
/* x1 (..., P, M), x2 (..., R, M) -> (..., P, R): the p-norm distances of rows, p >= 0 */
mx_tensor *mx_cdist(const mx_tensor *x1, const mx_tensor *x2, double p);
/* x (N, M) -> (N (N - 1) / 2): the distances of rows i < j, row-major, p >= 0 */
mx_tensor *mx_pdist(const mx_tensor *x, double p);
/* sum((x1 / max(||x1||, eps)) (x2 / max(||x2||, eps))) along dim, x1 and x2 broadcasting
 * (PyTorch: dim 1, eps 1e-8) */
mx_tensor *mx_cosine_similarity(const mx_tensor *x1, const mx_tensor *x2, int dim, double eps);
/* The slices along dim whose p-norm exceeds maxnorm scaled down to it (p > 0) */
mx_tensor *mx_renorm(const mx_tensor *x, double p, int dim, double maxnorm);

/* --- sampling (autocast: promote) ------------------------------------------------------------
 * F.grid_sample for 2-d inputs: input (N, C, H_in, W_in), grid (N, H_out, W_out, 2) of (x, y)
 * in [-1, 1] (x along W) -> (N, C, H_out, W_out). align_corners: -1 and 1 are the centres of
 * the corner pixels (else their outer edges). Differentiable in input and grid (nearest: the
 * grid's gradient is 0, and nearest rounds halves to even, as PyTorch). */
typedef enum { MX_GRID_BILINEAR, MX_GRID_NEAREST } mx_grid_mode;
typedef enum { MX_GRID_PAD_ZEROS, MX_GRID_PAD_BORDER, MX_GRID_PAD_REFLECTION } mx_grid_padding;
mx_tensor *mx_grid_sample(const mx_tensor *input, const mx_tensor *grid, mx_grid_mode mode, mx_grid_padding padding,
                          bool align_corners);

MX_API_END

#endif
