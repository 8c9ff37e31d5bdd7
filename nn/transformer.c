/* TransformerEncoderLayer and TransformerDecoderLayer: attention, a feed-forward network, layer norms (pre or
 * post) and dropout, as torch.nn's with batch_first=True. */
#include <stdlib.h>

#include "nn/nn_internal.h"
#include "nn/transformer_internal.h"

mx_transformer_opts mx_transformer_defaults(void) {
  return (mx_transformer_opts){.dim_feedforward = 2048, .dropout = 0.1, .activation = MX_TRANSFORMER_RELU,
                               .layer_norm_eps = 1e-5, .norm_first = false};
}

typedef struct {
  int64_t d_model, nhead;
  mx_transformer_opts o;
  /* children (the module owns them); cross_attn and norm[2], drop[2] for the decoder only */
  mx_module *self_attn, *cross_attn, *linear1, *dropout, *linear2, *norm[3], *drop[3];
} layer_self;

static void layer_extra(const mx_module *m, char *buf, size_t size) {
  const layer_self *s = mx_module_self(m);
  char p[32];
  mx__float_repr(p, sizeof p, s->o.dropout);
  snprintf(buf, size, "d_model=%lld, nhead=%lld, dim_feedforward=%lld, dropout=%s, activation=%s, norm_first=%s",
           (long long)s->d_model, (long long)s->nhead, (long long)s->o.dim_feedforward, p,
           s->o.activation == MX_TRANSFORMER_GELU ? "gelu" : "relu", mx__bool_repr(s->o.norm_first));
}

/* --- the blocks --------------------------------------------------------------------------------------------------- */

/* drop(attention(x, kv, mask)); kv NULL: self-attention. A failure names the attention child. */
static mx_tensor *attention_block(mx_module *attn, mx_module *drop, const char *name, const mx_tensor *x,
                                  const mx_tensor *kv, const mx_attention_mask *mask) {
  mx_tensor *a = mx__multihead_attention(attn, x, kv ? kv : x, kv ? kv : x, mask);
  if (!a) {
    mx__error_prefix(name);
    return NULL;
  }
  return mx_module_forward(drop, a);
}

/* drop(linear2(dropout(activation(linear1(x))))) */
static mx_tensor *feed_forward_block(const layer_self *s, mx_module *drop, const mx_tensor *x) {
  mx_tensor *h = mx_module_forward(s->linear1, x);
  if (!h) return NULL;
  h = s->o.activation == MX_TRANSFORMER_GELU ? mx_gelu(h) : mx_relu(h);
  return mx_module_forward(drop, mx_module_forward(s->linear2, mx_module_forward(s->dropout, h)));
}

/* The residual step k of a layer: x + f(norm_k(x)) pre-norm, norm_k(x + f(x)) post-norm, with f one of the
 * blocks: attention over kv (NULL: x itself) under mask, or (attn NULL) the feed-forward network. */
static mx_tensor *residual(const layer_self *s, int k, const mx_tensor *x, mx_module *attn, const char *name,
                           const mx_tensor *kv, const mx_attention_mask *mask) {
  if (!x) return NULL;
  mx_module *norm = s->norm[k], *drop = s->drop[k];
  if (s->o.norm_first) {
    mx_tensor *xn = mx_module_forward(norm, x);
    if (!xn) return NULL;
    mx_tensor *f = attn ? attention_block(attn, drop, name, xn, kv, mask) : feed_forward_block(s, drop, xn);
    return f ? mx_add(x, f) : NULL;
  }
  mx_tensor *f = attn ? attention_block(attn, drop, name, x, kv, mask) : feed_forward_block(s, drop, x);
  return f ? mx_module_forward(norm, mx_add(x, f)) : NULL;
}

static mx_tensor *encode(mx_module *m, const mx_tensor *src, const mx_attention_mask *mask) {
  const layer_self *s = mx_module_self(m);
  mx_tensor *x = residual(s, 0, src, s->self_attn, "self_attn", NULL, mask);
  return residual(s, 1, x, NULL, NULL, NULL, NULL);
}

static mx_tensor *decode(mx_module *m, const mx_tensor *tgt, const mx_tensor *memory,
                         const mx_attention_mask *tgt_mask, const mx_attention_mask *memory_mask) {
  const layer_self *s = mx_module_self(m);
  mx_tensor *x = residual(s, 0, tgt, s->self_attn, "self_attn", NULL, tgt_mask);
  x = residual(s, 1, x, s->cross_attn, "multihead_attn", memory, memory_mask);
  return residual(s, 2, x, NULL, NULL, NULL, NULL);
}

/* --- module types ------------------------------------------------------------------------------------------------ */

/* {src, src_key_padding_mask, src_mask}: mx_module_forward's call too */
static mx_status encoder_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  if (n_in > 3 || n_out != 1)
    return mx__error(MX_INVALID_ARGUMENT, "takes 1 to 3 inputs (src, src_key_padding_mask, src_mask) and gives 1 "
                     "output, got %d and %d", n_in, n_out);
  if (!in[0]) return mx__error(MX_NULL_INPUT, "src (in[0]) is NULL");
  mx_attention_mask mask = {.key_padding_mask = n_in > 1 ? in[1] : NULL, .attn_mask = n_in > 2 ? in[2] : NULL};
  out[0] = encode(m, in[0], &mask);
  return out[0] ? MX_OK : mx_last_status();
}

/* {tgt, memory, tgt_key_padding_mask, tgt_mask, memory_key_padding_mask, memory_mask} */
static mx_status decoder_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  if (n_in < 2 || n_in > 6 || n_out != 1)
    return mx__error(MX_INVALID_ARGUMENT, "takes 2 to 6 inputs (tgt, memory, tgt_key_padding_mask, tgt_mask, "
                     "memory_key_padding_mask, memory_mask) and gives 1 output, got %d and %d", n_in, n_out);
  if (!in[0] || !in[1]) return mx__error(MX_NULL_INPUT, "%s is NULL", !in[0] ? "tgt (in[0])" : "memory (in[1])");
  const mx_tensor *opt[4] = {NULL, NULL, NULL, NULL};
  for (int i = 2; i < n_in; i++) opt[i - 2] = in[i];
  mx_attention_mask tgt_mask = {.key_padding_mask = opt[0], .attn_mask = opt[1]};
  mx_attention_mask memory_mask = {.key_padding_mask = opt[2], .attn_mask = opt[3]};
  out[0] = decode(m, in[0], in[1], &tgt_mask, &memory_mask);
  return out[0] ? MX_OK : mx_last_status();
}

static const mx_module_type encoder_type = {.name = "TransformerEncoderLayer", .free_self = free,
                                            .extra = layer_extra, .forward_n = encoder_forward_n};
static const mx_module_type decoder_type = {.name = "TransformerDecoderLayer", .free_self = free,
                                            .extra = layer_extra, .forward_n = decoder_forward_n};

/* Registers child under name (the module takes it) and returns it, or NULL. */
static mx_module *add(mx_module *m, const char *name, mx_module *child) {
  return child && mx_module_add_child(m, name, child) == MX_OK ? child : NULL;
}

/* PyTorch's registration order, which is also the order parameters are drawn in. */
static mx_module *layer_new(const char *fn, const mx_module_type *type, bool decoder, int64_t d_model, int64_t nhead,
                            const mx_transformer_opts *opts, mx_generator *gen) {
  mx_transformer_opts o = opts ? *opts : mx_transformer_defaults();
  if (d_model <= 0 || nhead <= 0 || d_model % nhead || o.dim_feedforward <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: d_model (%lld) must be a positive multiple of nhead (%lld), and "
              "dim_feedforward (%lld) positive", fn, (long long)d_model, (long long)nhead,
              (long long)o.dim_feedforward);
    return NULL;
  }
  if (!(o.dropout >= 0 && o.dropout <= 1) || !(o.layer_norm_eps >= 0) ||
      (o.activation != MX_TRANSFORMER_RELU && o.activation != MX_TRANSFORMER_GELU)) {
    mx__error(MX_INVALID_ARGUMENT, "%s: needs dropout in [0, 1] (got %g), layer_norm_eps >= 0 (got %g) and "
              "activation MX_TRANSFORMER_RELU or MX_TRANSFORMER_GELU (got %d)", fn, o.dropout, o.layer_norm_eps,
              (int)o.activation);
    return NULL;
  }
  mx_module *m = mx__module_alloc(type, sizeof(layer_self));
  if (!m) return NULL;
  layer_self *s = mx_module_self(m);
  s->d_model = d_model, s->nhead = nhead, s->o = o;
  int norms = decoder ? 3 : 2;
  static const char *const norm_names[3] = {"norm1", "norm2", "norm3"}, *const drop_names[3] = {"dropout1",
                                                                                                "dropout2",
                                                                                                "dropout3"};
  bool ok = (s->self_attn = add(m, "self_attn", mx_multihead_attention_new(d_model, nhead, o.dropout, true, gen))) &&
            (!decoder ||
             (s->cross_attn = add(m, "multihead_attn", mx_multihead_attention_new(d_model, nhead, o.dropout, true,
                                                                                  gen)))) &&
            (s->linear1 = add(m, "linear1", mx_linear_new(d_model, o.dim_feedforward, true, gen))) &&
            (s->dropout = add(m, "dropout", mx_dropout_new(o.dropout, NULL))) &&
            (s->linear2 = add(m, "linear2", mx_linear_new(o.dim_feedforward, d_model, true, gen)));
  for (int k = 0; ok && k < norms; k++)
    ok = (s->norm[k] = add(m, norm_names[k], mx_layer_norm_new(MX_SHAPE(d_model), o.layer_norm_eps, true))) != NULL;
  for (int k = 0; ok && k < norms; k++)
    ok = (s->drop[k] = add(m, drop_names[k], mx_dropout_new(o.dropout, NULL))) != NULL;
  if (!ok) {
    mx__error_prefix(fn);
    mx_module_free(m);
    return NULL;
  }
  return m;
}

mx_module *mx_transformer_encoder_layer_new(int64_t d_model, int64_t nhead, const mx_transformer_opts *opts,
                                            mx_generator *gen) {
  return layer_new("mx_transformer_encoder_layer_new", &encoder_type, false, d_model, nhead, opts, gen);
}

mx_module *mx_transformer_decoder_layer_new(int64_t d_model, int64_t nhead, const mx_transformer_opts *opts,
                                            mx_generator *gen) {
  return layer_new("mx_transformer_decoder_layer_new", &decoder_type, true, d_model, nhead, opts, gen);
}

/* --- typed forwards ---------------------------------------------------------------------------------------------- */

typedef struct {
  const mx_tensor *x, *memory;
  const mx_attention_mask *mask, *memory_mask;
} layer_call;

static mx_tensor *apply_encoder(mx_module *m, void *ctx) {
  const layer_call *c = ctx;
  return encode(m, c->x, c->mask);
}

static mx_tensor *apply_decoder(mx_module *m, void *ctx) {
  const layer_call *c = ctx;
  return decode(m, c->x, c->memory, c->mask, c->memory_mask);
}

/* The checks every typed forward makes: the tensors given, the module of the right type. */
static bool check_call(const char *fn, const mx_module *m, const mx_module_type *type, const char *x_name,
                       const mx_tensor *x, const mx_tensor *memory) {
  if (!m || !x || (type == &decoder_type && !memory)) {
    mx__null_input(fn, !m ? "layer" : !x ? x_name : "memory");
    return false;
  }
  if (mx_module_type_of(m) != type) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the module is a %s, not a %s", fn, mx_module_type_of(m)->name, type->name);
    return false;
  }
  return true;
}

mx_tensor *mx_transformer_encoder_layer_forward(mx_module *layer, const mx_tensor *src,
                                                const mx_attention_mask *mask) {
  static const char fn[] = "mx_transformer_encoder_layer_forward";
  if (!check_call(fn, layer, &encoder_type, "src", src, NULL)) return NULL;
  layer_call c = {.x = src, .mask = mask};
  return mx__typed_forward(fn, layer, apply_encoder, &c);
}

mx_tensor *mx_transformer_decoder_layer_forward(mx_module *layer, const mx_tensor *tgt, const mx_tensor *memory,
                                                const mx_attention_mask *tgt_mask,
                                                const mx_attention_mask *memory_mask) {
  static const char fn[] = "mx_transformer_decoder_layer_forward";
  if (!check_call(fn, layer, &decoder_type, "tgt", tgt, memory)) return NULL;
  layer_call c = {.x = tgt, .memory = memory, .mask = tgt_mask, .memory_mask = memory_mask};
  return mx__typed_forward(fn, layer, apply_decoder, &c);
}
