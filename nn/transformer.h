/* Attention and Transformer layers, as torch.nn has them with
 * batch_first=True: MultiheadAttention, TransformerEncoderLayer and
 * TransformerDecoderLayer, plus positional embeddings (learned, or the fixed
 * sinusoidal table of "Attention Is All You Need").
 *
 *     mx_transformer_opts o = mx_transformer_defaults();
 *     o.dim_feedforward = 256, o.activation = MX_TRANSFORMER_GELU, o.norm_first = true;
 *     mx_module *block = mx_transformer_encoder_layer_new(64, 4, &o, NULL);   // d_model 64, 4 heads
 *     mx_attention_mask causal = {.is_causal = true};                        // a GPT's block
 *     mx_tensor *y = mx_transformer_encoder_layer_forward(block, x, &causal); // x, y (N, L, 64)
 *
 *     mx_module *pos = mx_positional_embedding_new(128, 64, NULL);           // up to 128 positions
 *     mx_tensor *h = mx_module_forward(pos, mx_module_forward(tok_emb, idx)); // + weight[:L]
 *
 * Parameters have PyTorch's names, shapes and initialisation, so state dicts
 * carry over: MultiheadAttention has in_proj_weight (3 E, E: the query, key
 * and value projections stacked; Xavier-uniform), in_proj_bias (3 E, zeros)
 * and the child out_proj, a Linear (E, E) whose bias starts at zero. The
 * encoder layer has the children self_attn, linear1 (d_model to
 * dim_feedforward), dropout, linear2, norm1, norm2, dropout1, dropout2; the
 * decoder layer adds multihead_attn (attention over the memory), norm3 and
 * dropout3. Parameters are float32 on the CPU, drawn from gen (NULL: the
 * default generator) in PyTorch's order. Dropout draws from the default
 * generator at each forward in training mode (mx_module_train(m, false) for
 * eval); a checkpoint's generator state replays it.
 *
 * Shapes are batch-first: query (N, L, E), key and value (N, S, E), out
 * (N, L, E); unbatched (L, E) and (S, E) work too. Masks follow PyTorch's
 * MultiheadAttention, which is the opposite of the boolean convention of
 * mx_scaled_dot_product_attention: a bool mask is true where attention is
 * NOT allowed, a floating mask is added to the scores (-INFINITY blocks).
 * A query row left with nothing to attend to gives zeros (PyTorch: NaN).
 * The attention itself is mx_scaled_dot_product_attention, so the layers
 * differentiate (twice too) and autocast like their ops: under bf16 or f16
 * autocast the projections and the attention run in the low precision (as
 * PyTorch's scaled_dot_product_attention does), layer norm in float32.
 */
#ifndef MX_NN_TRANSFORMER_H
#define MX_NN_TRANSFORMER_H

#include "nn/module.h"

MX_API_BEGIN

/* The masks of one attention (any may be NULL / false). */
typedef struct {
  /* (L, S), or (N num_heads, L, S) per batch and head: bool true = blocked, or floating, added */
  const mx_tensor *attn_mask;
  /* (N, S), or (S) unbatched: bool true = a padding key, ignored; or floating, added */
  const mx_tensor *key_padding_mask;
  /* query i attends to keys j <= i only. PyTorch 2 takes is_causal as a hint about attn_mask; here it is
   * the mask itself (attn_mask may stay NULL; given too, both apply). */
  bool is_causal;
} mx_attention_mask;

/* --- MultiheadAttention --------------------------------------------------------------------------------------- */
/* embed_dim split over num_heads heads (embed_dim % num_heads == 0); dropout on the attention weights in
 * training; bias: in_proj_bias and out_proj.bias. PyTorch: 0.0, true (kdim, vdim, add_bias_kv and
 * add_zero_attn are not offered: keys and values have embed_dim features). */
mx_module *mx_multihead_attention_new(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                      mx_generator *gen);
/* The attention output (N, L, E) (PyTorch's need_weights=False: the weights are not returned). mask may be
 * NULL. mx_module_forward(m, x) is self-attention without masks; mx_module_forward_n takes {query, key, value,
 * key_padding_mask, attn_mask} (key NULL: the query; value NULL: the key; the masks NULL: none) to one output. */
mx_tensor *mx_multihead_attention_forward(mx_module *mha, const mx_tensor *query, const mx_tensor *key,
                                          const mx_tensor *value, const mx_attention_mask *mask);

/* --- Transformer layers ------------------------------------------------------------------------------------------ */
typedef enum { MX_TRANSFORMER_RELU, MX_TRANSFORMER_GELU } mx_transformer_activation;

typedef struct {
  int64_t dim_feedforward;              /* the feed-forward network's hidden size */
  double dropout;                       /* after attention, inside and after the feed-forward network */
  mx_transformer_activation activation; /* the feed-forward network's (GELU: the exact one) */
  double layer_norm_eps;
  bool norm_first;                      /* pre-norm (x + f(norm(x))) instead of post-norm (norm(x + f(x))) */
} mx_transformer_opts;

/* PyTorch's defaults: 2048, 0.1, ReLU, 1e-5, post-norm. */
mx_transformer_opts mx_transformer_defaults(void);

/* torch.nn.TransformerEncoderLayer(d_model, nhead, ..., batch_first=True). NULL opts: the defaults. */
mx_module *mx_transformer_encoder_layer_new(int64_t d_model, int64_t nhead, const mx_transformer_opts *opts,
                                            mx_generator *gen);
/* torch.nn.TransformerDecoderLayer(d_model, nhead, ..., batch_first=True). */
mx_module *mx_transformer_decoder_layer_new(int64_t d_model, int64_t nhead, const mx_transformer_opts *opts,
                                            mx_generator *gen);

/* src (N, L, d_model) -> (N, L, d_model) with its self-attention masked by mask (NULL: none).
 * mx_module_forward(m, src) is the same without masks; mx_module_forward_n takes {src, src_key_padding_mask,
 * src_mask}. */
mx_tensor *mx_transformer_encoder_layer_forward(mx_module *layer, const mx_tensor *src,
                                                const mx_attention_mask *mask);
/* tgt (N, L, d_model) attending to itself (tgt_mask) and to memory (N, S, d_model) (memory_mask) ->
 * (N, L, d_model). mx_module_forward_n takes {tgt, memory, tgt_key_padding_mask, tgt_mask,
 * memory_key_padding_mask, memory_mask}; mx_module_forward, one tensor, refuses (no memory). */
mx_tensor *mx_transformer_decoder_layer_forward(mx_module *layer, const mx_tensor *tgt, const mx_tensor *memory,
                                                const mx_attention_mask *tgt_mask,
                                                const mx_attention_mask *memory_mask);

/* --- positional embeddings: x (..., L, dim) -> x + table[:L] (L <= max_len) ---------------------------------- */
/* Learned: parameter weight (max_len, dim), N(0, 0.02) as GPT-2's. */
mx_module *mx_positional_embedding_new(int64_t max_len, int64_t dim, mx_generator *gen);
/* Fixed: buffer pe (max_len, dim), pe[p, 2i] = sin(p / 10000^(2i / dim)), pe[p, 2i + 1] = cos(the same). */
mx_module *mx_sinusoidal_positional_encoding_new(int64_t max_len, int64_t dim);

MX_API_END

#endif
