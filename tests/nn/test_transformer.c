/* The attention and Transformer modules beyond the PyTorch fixtures: the module tree and its names,
 * initialisation, causality, fully masked rows, dropout in training and eval, the positional embeddings, and the
 * exact messages of bad arguments and inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>
#include "tests/common/expect_error.h"
#include "../common/float_values.h"

static mx_tensor *randn(mx_shape shape, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_randn(shape, MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  cr_assert(t, "%s", mx_last_error());
  return t;
}

static double max_abs(const mx_tensor *t) {
  float *v = values(t);
  double m = 0;
  for (int64_t i = 0; i < mx_numel(t); i++) m = fmax(m, fabs(v[i]));
  free(v);
  return m;
}

static mx_transformer_opts small_opts(double dropout, bool norm_first) {
  mx_transformer_opts o = mx_transformer_defaults();
  o.dim_feedforward = 16, o.dropout = dropout, o.norm_first = norm_first;
  return o;
}

/* "Type(extra)" as a summary prints a module. */
static void describe(const mx_module *m, char *buf, size_t size) {
  char extra[200] = "";
  const mx_module_type *type = mx_module_type_of(m);
  if (type->extra) type->extra(m, extra, sizeof extra);
  snprintf(buf, size, "%s(%s)", type->name, extra);
}

/* --- the module tree ---------------------------------------------------------------------------------------------- */

Test(transformer, defaults_are_pytorchs) {
  mx_transformer_opts o = mx_transformer_defaults();
  cr_expect_eq(o.dim_feedforward, 2048);
  cr_expect_eq(o.dropout, 0.1);
  cr_expect_eq(o.activation, MX_TRANSFORMER_RELU);
  cr_expect_eq(o.layer_norm_eps, 1e-5);
  cr_expect_not(o.norm_first);
}

/* Children in PyTorch's order, and parameter counts as torch.nn's (600 and 904 for d_model 8, dim_feedforward 16). */
Test(transformer, children_and_parameters_as_pytorch) {
  mx_transformer_opts o = small_opts(0.1, false);
  mx_module *enc = mx_transformer_encoder_layer_new(8, 2, &o, NULL), *dec = mx_transformer_decoder_layer_new(8, 2, &o, NULL);
  cr_assert(enc && dec, "%s", mx_last_error());
  static const char *const enc_children[] = {"self_attn", "linear1", "dropout", "linear2", "norm1", "norm2",
                                             "dropout1",  "dropout2"};
  static const char *const dec_children[] = {"self_attn", "multihead_attn", "linear1", "dropout",  "linear2", "norm1",
                                             "norm2",     "norm3",          "dropout1", "dropout2", "dropout3"};
  cr_assert_eq(mx_module_num_children(enc), 8);
  for (int i = 0; i < 8; i++) {
    const char *name;
    mx_module_child(enc, i, &name);
    cr_expect_str_eq(name, enc_children[i]);
  }
  cr_assert_eq(mx_module_num_children(dec), 11);
  for (int i = 0; i < 11; i++) {
    const char *name;
    mx_module_child(dec, i, &name);
    cr_expect_str_eq(name, dec_children[i]);
  }
  cr_expect_eq(mx_module_parameter_count(enc), 600);
  cr_expect_eq(mx_module_parameter_count(dec), 904);
  char buf[300];
  describe(enc, buf, sizeof buf);
  cr_expect_str_eq(buf, "TransformerEncoderLayer(d_model=8, nhead=2, dim_feedforward=16, dropout=0.1, "
                        "activation=relu, norm_first=False)");
  describe(mx_module_get_child(dec, "multihead_attn"), buf, sizeof buf);
  cr_expect_str_eq(buf, "MultiheadAttention(embed_dim=8, num_heads=2, dropout=0.1, batch_first=True)");
  mx_module_free(enc);
  mx_module_free(dec);
}

/* in_proj_weight Xavier-uniform (bound sqrt(6 / (E + 3 E))), biases zero, out_proj.weight Linear's
 * U(-1/sqrt(E), 1/sqrt(E)); drawn from gen, so two modules from one seed are equal. */
Test(transformer, initialisation_as_pytorch) {
  mx_generator *g1 = mx_generator_new(5), *g2 = mx_generator_new(5);
  mx_module *a = mx_multihead_attention_new(64, 4, 0.0, true, g1), *b = mx_multihead_attention_new(64, 4, 0.0, true, g2);
  cr_assert(a && b, "%s", mx_last_error());
  double bound = sqrt(6.0 / (64 + 3 * 64)), linear_bound = 1 / sqrt(64.0);
  double in_max = max_abs(mx_module_get_parameter(a, "in_proj_weight"));
  cr_expect(in_max <= bound && in_max > 0.99 * bound, "max |in_proj_weight| %g, bound %g", in_max, bound);
  double out_max = max_abs(mx_module_get_parameter(a, "out_proj.weight"));
  cr_expect(out_max <= linear_bound && out_max > 0.98 * linear_bound, "max |out_proj.weight| %g", out_max);
  cr_expect_eq(max_abs(mx_module_get_parameter(a, "in_proj_bias")), 0);
  cr_expect_eq(max_abs(mx_module_get_parameter(a, "out_proj.bias")), 0);
  for (int i = 0; i < mx_module_num_parameters(a); i++)
    cr_expect_eq(max_abs_diff(mx_module_parameter(a, i, NULL), mx_module_parameter(b, i, NULL)), 0);
  mx_module *no_bias = mx_multihead_attention_new(8, 2, 0.0, false, NULL);
  cr_assert(no_bias);
  cr_expect_eq(mx_module_num_parameters(no_bias), 2); /* in_proj_weight, out_proj.weight */
  mx_module_free(no_bias);
  mx_module_free(a);
  mx_module_free(b);
  mx_generator_free(g1);
  mx_generator_free(g2);
}

/* --- behaviour ---------------------------------------------------------------------------------------------------- */

/* With is_causal, position i sees nothing after it: changing the last positions leaves the first ones alone. */
Test(transformer, causal_outputs_ignore_later_positions) {
  mx_transformer_opts o = small_opts(0.0, true);
  mx_module *enc = mx_transformer_encoder_layer_new(8, 2, &o, NULL);
  cr_assert(enc, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 6, 8), 1);
  mx_tensor *x2 = mx_cat(2, (mx_tensor *[]){mx_narrow(x, 1, 0, 4), randn(MX_SHAPE(2, 2, 8), 2)}, 1);
  mx_attention_mask causal = {.is_causal = true};
  mx_tensor *y = mx_transformer_encoder_layer_forward(enc, x, &causal);
  mx_tensor *y2 = mx_transformer_encoder_layer_forward(enc, x2, &causal);
  cr_assert(y && y2, "%s", mx_last_error());
  cr_expect_leq(max_abs_diff(mx_narrow(y, 1, 0, 4), mx_narrow(y2, 1, 0, 4)), 1e-6);
  cr_expect_gt(max_abs_diff(mx_narrow(y, 1, 4, 2), mx_narrow(y2, 1, 4, 2)), 1e-2);
  /* and without the mask the first positions do see the change */
  cr_expect_gt(max_abs_diff(mx_narrow(mx_module_forward(enc, x), 1, 0, 4), mx_narrow(mx_module_forward(enc, x2), 1, 0, 4)),
               1e-3);
  mx_scope_end(s);
  mx_module_free(enc);
}

/* A query with every key masked attends to nothing: zeros, so the output is out_proj's bias (PyTorch: NaN). */
Test(transformer, fully_masked_rows_give_the_output_bias) {
  mx_module *mha = mx_multihead_attention_new(8, 2, 0.0, true, NULL);
  cr_assert(mha, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *bias = mx_module_get_parameter(mha, "out_proj.bias");
  cr_assert_eq(mx_copy_(bias, randn(MX_SHAPE(8), 3)), MX_OK);
  mx_tensor *x = randn(MX_SHAPE(2, 3, 8), 4);
  bool pad[6] = {false, false, true, true, true, true}; /* batch 1: every key is padding */
  mx_attention_mask mask = {.key_padding_mask = mx_from_data(pad, MX_SHAPE(2, 3), MX_BOOL, MX_CPU)};
  mx_tensor *y = mx_multihead_attention_forward(mha, x, NULL, NULL, &mask);
  cr_assert(y, "%s", mx_last_error());
  cr_expect_eq(max_abs_diff(mx_select(y, 0, 1), mx_expand(bias, MX_SHAPE(3, 8))), 0);
  cr_expect_gt(max_abs_diff(mx_select(y, 0, 0), mx_expand(bias, MX_SHAPE(3, 8))), 1e-3);
  mx_scope_end(s);
  mx_module_free(mha);
}

/* Dropout acts in training only, draws from the default generator (a seed replays it) and leaves eval mode equal
 * to the same weights without dropout. */
Test(transformer, dropout_in_training_only) {
  mx_transformer_opts with = small_opts(0.5, false), without = small_opts(0.0, false);
  mx_module *a = mx_transformer_encoder_layer_new(8, 2, &with, NULL), *b = mx_transformer_encoder_layer_new(8, 2, &without, NULL);
  cr_assert(a && b, "%s", mx_last_error());
  for (int i = 0; i < mx_module_num_parameters(a); i++)
    cr_assert_eq(mx_copy_(mx_module_parameter(b, i, NULL), mx_module_parameter(a, i, NULL)), MX_OK);
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 5, 8), 6);
  mx_manual_seed(7);
  mx_tensor *t1 = mx_module_forward(a, x);
  mx_manual_seed(7);
  mx_tensor *t2 = mx_module_forward(a, x);
  mx_tensor *plain = mx_module_forward(b, x);
  cr_assert(t1 && t2 && plain, "%s", mx_last_error());
  cr_expect_eq(max_abs_diff(t1, t2), 0, "the same seed gives the same masks");
  cr_expect_gt(max_abs_diff(t1, plain), 0.1, "training drops");
  mx_module_train(a, false);
  cr_expect_eq(max_abs_diff(mx_module_forward(a, x), plain), 0, "eval does not");
  mx_scope_end(s);
  mx_module_free(a);
  mx_module_free(b);
}

/* mx_module_forward_n reaches the decoder with its memory; mx_module_forward cannot. */
Test(transformer, decoder_through_forward_n) {
  mx_transformer_opts o = small_opts(0.0, true);
  mx_module *dec = mx_transformer_decoder_layer_new(8, 2, &o, NULL);
  cr_assert(dec, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *tgt = randn(MX_SHAPE(2, 3, 8), 8), *memory = randn(MX_SHAPE(2, 5, 8), 9), *y = NULL;
  cr_assert_eq(mx_module_forward_n(dec, 2, (const mx_tensor *[]){tgt, memory}, 1, &y), MX_OK, "%s", mx_last_error());
  cr_expect_eq(max_abs_diff(y, mx_transformer_decoder_layer_forward(dec, tgt, memory, NULL, NULL)), 0);
  EXPECT_ERROR(mx_module_forward(dec, tgt),
               "mx_module_forward: TransformerDecoderLayer: takes 2 to 6 inputs (tgt, memory, tgt_key_padding_mask, "
               "tgt_mask, memory_key_padding_mask, memory_mask) and gives 1 output, got 1 and 1");
  mx_scope_end(s);
  mx_module_free(dec);
}

/* --- positional embeddings -------------------------------------------------------------------------------------- */

Test(positional, sinusoidal_table) {
  mx_module *pe = mx_sinusoidal_positional_encoding_new(16, 6);
  cr_assert(pe, "%s", mx_last_error());
  cr_expect_eq(mx_module_num_parameters(pe), 0);
  mx_tensor *table = mx_module_get_buffer(pe, "pe");
  cr_assert(table);
  for (int p = 0; p < 16; p++)
    for (int i = 0; i < 6; i++) {
      double angle = p / pow(10000.0, (i - i % 2) / 6.0);
      double want = i % 2 ? cos(angle) : sin(angle);
      cr_expect_float_eq(mx_at(table, MX_SHAPE(p, i)), want, 1e-6, "pe[%d, %d]", p, i);
    }
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 5, 6), 10);
  mx_tensor *y = mx_module_forward(pe, x);
  cr_expect_eq(max_abs_diff(y, mx_add(x, mx_narrow(table, 0, 0, 5))), 0);
  mx_scope_end(s);
  mx_module_free(pe);
}

/* The learned table starts N(0, 0.02) and gets the gradient of the positions used: the sum over the batch. */
Test(positional, learned_table_and_its_gradient) {
  mx_module *pe = mx_positional_embedding_new(512, 64, NULL);
  cr_assert(pe, "%s", mx_last_error());
  mx_tensor *w = mx_module_get_parameter(pe, "weight");
  cr_assert(w);
  mx_scope *s = mx_scope_begin();
  double std = mx_item(mx_std(w, MX_ALL_DIMS, 1, false));
  cr_expect(std > 0.019 && std < 0.021, "std %g", std);
  mx_tensor *x = randn(MX_SHAPE(3, 4, 64), 11), *up = randn(MX_SHAPE(3, 4, 64), 12);
  mx_tensor *y = mx_module_forward(pe, x);
  cr_assert_eq(mx_backward(mx_sum(mx_mul(y, up), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  mx_tensor *g = mx_grad_of(w);
  cr_expect_leq(max_abs_diff(mx_narrow(g, 0, 0, 4), mx_sum(up, MX_DIMS(0), false)), 1e-6);
  cr_expect_eq(max_abs(mx_narrow(g, 0, 4, 508)), 0);
  mx_scope_end(s);
  mx_module_free(pe);
}

/* --- errors ------------------------------------------------------------------------------------------------------- */

Test(transformer_errors, constructors) {
  EXPECT_ERROR(mx_multihead_attention_new(10, 3, 0.0, true, NULL),
               "mx_multihead_attention_new: embed_dim (10) must be a positive multiple of num_heads (3)");
  EXPECT_ERROR(mx_multihead_attention_new(8, 2, 1.5, true, NULL),
               "mx_multihead_attention_new: the dropout probability must be in [0, 1], got 1.5");
  mx_transformer_opts o = small_opts(0.0, false);
  EXPECT_ERROR(mx_transformer_encoder_layer_new(8, 3, &o, NULL),
               "mx_transformer_encoder_layer_new: d_model (8) must be a positive multiple of nhead (3), and "
               "dim_feedforward (16) positive");
  o.activation = (mx_transformer_activation)7;
  EXPECT_ERROR(mx_transformer_decoder_layer_new(8, 2, &o, NULL),
               "mx_transformer_decoder_layer_new: needs dropout in [0, 1] (got 0), layer_norm_eps >= 0 (got 1e-05) "
               "and activation MX_TRANSFORMER_RELU or MX_TRANSFORMER_GELU (got 7)");
  EXPECT_ERROR(mx_positional_embedding_new(0, 8, NULL),
               "mx_positional_embedding_new: max_len (0) and dim (8) must be positive");
  EXPECT_ERROR(mx_sinusoidal_positional_encoding_new(4, -1),
               "mx_sinusoidal_positional_encoding_new: max_len (4) and dim (-1) must be positive");
}

Test(transformer_errors, inputs_and_masks) {
  mx_module *mha = mx_multihead_attention_new(8, 2, 0.0, true, NULL), *lin = mx_linear_new(8, 8, true, NULL);
  mx_transformer_opts o = small_opts(0.0, false);
  mx_module *enc = mx_transformer_encoder_layer_new(8, 2, &o, NULL), *pe = mx_positional_embedding_new(4, 8, NULL);
  cr_assert(mha && lin && enc && pe, "%s", mx_last_error());
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = randn(MX_SHAPE(2, 5, 8), 1), *x6 = randn(MX_SHAPE(2, 5, 6), 2), *kv = randn(MX_SHAPE(3, 4, 8), 3);
  const char *fn = "mx_multihead_attention_forward: ";
  char want[400];
#define WANT(text) (snprintf(want, sizeof want, "%s%s", fn, text), want)
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x6, NULL, NULL, NULL),
               WANT("query, key and value need embed_dim = 8 features (last dim), got 6, 6 and 6"));
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x, kv, kv, NULL),
               WANT("query, key and value have different batch sizes (2, 3 and 3)"));
  EXPECT_ERROR(mx_multihead_attention_forward(mha, randn(MX_SHAPE(8), 4), NULL, NULL, NULL),
               WANT("expected a query (N, L, E) or unbatched (L, E), got 1 dims"));
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x, x, randn(MX_SHAPE(2, 4, 8), 5), NULL),
               WANT("key and value have different lengths (5 != 4)"));
  mx_attention_mask bad = {.key_padding_mask = mx_zeros(MX_SHAPE(2, 4), MX_BOOL, MX_CPU)};
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x, NULL, NULL, &bad),
               WANT("key_padding_mask must have shape [2,5] (batch, keys), got [2,4]"));
  bad = (mx_attention_mask){.key_padding_mask = mx_zeros(MX_SHAPE(2, 5), MX_I64, MX_CPU)};
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x, NULL, NULL, &bad),
               WANT("key_padding_mask must be bool or floating, got int64"));
  bad = (mx_attention_mask){.attn_mask = mx_zeros(MX_SHAPE(5, 4), MX_BOOL, MX_CPU)};
  EXPECT_ERROR(mx_multihead_attention_forward(mha, x, NULL, NULL, &bad),
               WANT("attn_mask must have shape [5,5] (queries, keys) or [4,5,5] (batch * heads, queries, keys), got "
                    "[5,4]"));
  EXPECT_ERROR(mx_multihead_attention_forward(lin, x, NULL, NULL, NULL),
               WANT("the module is a Linear, not a MultiheadAttention"));
  EXPECT_ERROR(mx_multihead_attention_forward(mha, NULL, NULL, NULL, NULL), WANT("argument 'query' is NULL"));
  /* inside a layer the attention is named */
  EXPECT_ERROR(mx_module_forward(enc, x6), "mx_module_forward: TransformerEncoderLayer: self_attn: query, key and "
                                           "value need embed_dim = 8 features (last dim), got 6, 6 and 6");
  EXPECT_ERROR(mx_transformer_encoder_layer_forward(enc, x, &bad),
               "mx_transformer_encoder_layer_forward: self_attn: attn_mask must have shape [5,5] (queries, keys) or "
               "[4,5,5] (batch * heads, queries, keys), got [5,4]");
  EXPECT_ERROR(mx_transformer_encoder_layer_forward(mha, x, NULL),
               "mx_transformer_encoder_layer_forward: the module is a MultiheadAttention, not a "
               "TransformerEncoderLayer");
  EXPECT_ERROR(mx_module_forward(pe, x),
               "mx_module_forward: PositionalEmbedding: the sequence has 5 positions, more than max_len 4");
  EXPECT_ERROR(mx_module_forward(pe, x6), "mx_module_forward: PositionalEmbedding: expected x (..., L, 8), got [2,5,6]");
#undef WANT
  mx_scope_end(s);
  mx_module_free(mha);
  mx_module_free(lin);
  mx_module_free(enc);
  mx_module_free(pe);
}
