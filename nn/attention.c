/* MultiheadAttention on mx_scaled_dot_product_attention, and the positional embeddings (learned, sinusoidal). */
#include <math.h>
#include <stdlib.h>

#include "nn/nn_internal.h"
#include "nn/transformer_internal.h"

typedef struct {
  int64_t embed_dim, num_heads;
  double dropout;
  mx_tensor *in_proj_weight, *in_proj_bias; /* bias NULL without bias */
  mx_module *out_proj;
} mha_self;

static mx_status mha_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out);

static void mha_extra(const mx_module *m, char *buf, size_t size) {
  const mha_self *s = mx_module_self(m);
  char p[32];
  mx__float_repr(p, sizeof p, s->dropout);
  snprintf(buf, size, "embed_dim=%lld, num_heads=%lld, dropout=%s, batch_first=True", (long long)s->embed_dim,
           (long long)s->num_heads, p);
}

static const mx_module_type mha_type = {.name = "MultiheadAttention", .free_self = free, .extra = mha_extra,
                                        .forward_n = mha_forward_n};

mx_module *mx_multihead_attention_new(int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                                      mx_generator *gen) {
  if (embed_dim <= 0 || num_heads <= 0 || embed_dim % num_heads) {
    mx__error(MX_INVALID_ARGUMENT, "mx_multihead_attention_new: embed_dim (%lld) must be a positive multiple of "
              "num_heads (%lld)", (long long)embed_dim, (long long)num_heads);
    return NULL;
  }
  if (!(dropout >= 0 && dropout <= 1)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_multihead_attention_new: the dropout probability must be in [0, 1], got %g",
              dropout);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&mha_type, sizeof(mha_self));
  if (!m) return NULL;
  mha_self *s = mx_module_self(m);
  s->embed_dim = embed_dim, s->num_heads = num_heads, s->dropout = dropout;
  /* PyTorch's order: the tensors registered, out_proj made (Linear's init), then xavier on in_proj_weight */
  bool ok = (s->in_proj_weight = mx__add_parameter(m, "in_proj_weight", MX_SHAPE(3 * embed_dim, embed_dim))) &&
            (!bias || (s->in_proj_bias = mx__add_parameter(m, "in_proj_bias", MX_SHAPE(3 * embed_dim)))) &&
            (s->out_proj = mx_linear_new(embed_dim, embed_dim, bias, gen)) &&
            mx_module_add_child(m, "out_proj", s->out_proj) == MX_OK &&
            mx_init_xavier_uniform_(s->in_proj_weight, 1.0, gen) == MX_OK &&
            (!bias || (mx_init_zeros_(s->in_proj_bias) == MX_OK &&
                       mx_init_zeros_(mx_module_get_parameter(s->out_proj, "bias")) == MX_OK));
  if (!ok) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* Whether t has exactly the sizes want[0..n). */
static bool has_shape(const mx_tensor *t, int n, const int64_t *want) {
  if (mx_ndim(t) != n) return false;
  for (int i = 0; i < n; i++)
    if (mx_size(t, i) != want[i]) return false;
  return true;
}

static mx_status check_mask_dtype(const char *what, const mx_tensor *t) {
  mx_dtype d = mx_dtype_of(t);
  if (d == MX_BOOL || mx_dtype_is_floating(d)) return MX_OK;
  return mx__error(MX_DTYPE_ERROR, "%s must be bool or floating, got %s", what, mx_dtype_name(d));
}

/* The masks of one attention of n batches, h heads, l queries and s keys as mx_scaled_dot_product_attention takes
 * them: bool true where to attend, or floating (added), broadcasting to (n, h, l, s). *out NULL with *causal_only
 * when is_causal is the whole mask (the op's own flag), NULL without masks. */
static mx_status merge_masks(const mx_attention_mask *mask, bool batched, int64_t n, int64_t h, int64_t l,
                             int64_t s, mx_tensor **out, bool *causal_only) {
  *out = NULL, *causal_only = false;
  if (!mask) return MX_OK;
  const mx_tensor *kpm = mask->key_padding_mask, *am = mask->attn_mask;
  if (!kpm && !am) {
    *causal_only = mask->is_causal;
    return MX_OK;
  }
  char got[MX__DIMS_STR], want[MX__DIMS_STR], want3[MX__DIMS_STR];
  mx_tensor *parts[3]; /* each true (or -inf) where blocked */
  int k = 0;
  if (kpm) {
    if (check_mask_dtype("key_padding_mask", kpm) != MX_OK) return mx_last_status();
    int64_t dims[2] = {n, s};
    if (!has_shape(kpm, batched ? 2 : 1, batched ? dims : dims + 1))
      return mx__error(MX_SHAPE_ERROR, "key_padding_mask must have shape %s (batch, keys), got %s",
                       mx__dims_str(want, batched ? 2 : 1, batched ? dims : dims + 1),
                       mx__dims_str(got, mx_ndim(kpm), mx_shape_get(kpm).d));
    parts[k++] = mx_reshape(kpm, MX_SHAPE(n, 1, 1, s));
  }
  if (am) {
    if (check_mask_dtype("attn_mask", am) != MX_OK) return mx_last_status();
    int64_t dims2[2] = {l, s}, dims3[3] = {n * h, l, s};
    if (has_shape(am, 2, dims2)) parts[k++] = mx_reshape(am, mx_shape_get(am));
    else if (has_shape(am, 3, dims3)) parts[k++] = mx_reshape(am, MX_SHAPE(n, h, l, s));
    else
      return mx__error(MX_SHAPE_ERROR, "attn_mask must have shape %s (queries, keys) or %s (batch * heads, queries, "
                       "keys), got %s", mx__dims_str(want, 2, dims2), mx__dims_str(want3, 3, dims3),
                       mx__dims_str(got, mx_ndim(am), mx_shape_get(am).d));
  }
  mx_device device = mx_device_of(kpm ? kpm : am);
  if (mask->is_causal) /* key j > query i is blocked */
    parts[k++] = mx_gt(mx_reshape(mx_arange(0, (double)s, 1, MX_I64, device), MX_SHAPE(1, s)),
                       mx_reshape(mx_arange(0, (double)l, 1, MX_I64, device), MX_SHAPE(l, 1)));
  mx_dtype floating = MX_BOOL;
  for (int i = 0; i < k; i++)
    if (parts[i] && floating == MX_BOOL && mx_dtype_of(parts[i]) != MX_BOOL) floating = mx_dtype_of(parts[i]);
  mx_tensor *merged = NULL;
  for (int i = 0; i < k; i++) {
    mx_tensor *p = parts[i];
    if (floating == MX_BOOL) {
      merged = i ? mx_logical_or(merged, p) : p;
      continue;
    }
    if (p && mx_dtype_of(p) == MX_BOOL) p = mx_masked_fill(mx_zeros(mx_shape_get(p), floating, device), p, -INFINITY);
    merged = i ? mx_add(merged, p) : p;
  }
  *out = floating == MX_BOOL ? mx_logical_not(merged) : merged;
  return *out ? MX_OK : mx_last_status();
}

/* (n, len, h d) -> (n, h, len, d) */
static mx_tensor *split_heads(const mx_tensor *x, int64_t n, int64_t len, int64_t h) {
  return mx_transpose(mx_reshape(x, MX_SHAPE(n, len, h, -1)), 1, 2);
}

mx_tensor *mx__multihead_attention(mx_module *m, const mx_tensor *query, const mx_tensor *key,
                                   const mx_tensor *value, const mx_attention_mask *mask) {
  const mha_self *s = mx_module_self(m);
  if (!key) key = query;
  if (!value) value = key;
  bool self_attention = query == key && key == value;
  int nd = mx_ndim(query);
  if (nd != 2 && nd != 3) {
    mx__error(MX_SHAPE_ERROR, "expected a query (N, L, E) or unbatched (L, E), got %d dims", nd);
    return NULL;
  }
  if (mx_ndim(key) != nd || mx_ndim(value) != nd) {
    mx__error(MX_SHAPE_ERROR, "query, key and value must have the same number of dims, got %d, %d and %d", nd,
              mx_ndim(key), mx_ndim(value));
    return NULL;
  }
  int64_t e = s->embed_dim, h = s->num_heads;
  if (mx_size(query, -1) != e || mx_size(key, -1) != e || mx_size(value, -1) != e) {
    mx__error(MX_SHAPE_ERROR, "query, key and value need embed_dim = %lld features (last dim), got %lld, %lld and %lld",
              (long long)e, (long long)mx_size(query, -1), (long long)mx_size(key, -1), (long long)mx_size(value, -1));
    return NULL;
  }
  if (mx_size(key, -2) != mx_size(value, -2)) {
    mx__error(MX_SHAPE_ERROR, "key and value have different lengths (%lld != %lld)", (long long)mx_size(key, -2),
              (long long)mx_size(value, -2));
    return NULL;
  }
  if (nd == 3 && (mx_size(key, 0) != mx_size(query, 0) || mx_size(value, 0) != mx_size(query, 0))) {
    mx__error(MX_SHAPE_ERROR, "query, key and value have different batch sizes (%lld, %lld and %lld)",
              (long long)mx_size(query, 0), (long long)mx_size(key, 0), (long long)mx_size(value, 0));
    return NULL;
  }
  bool batched = nd == 3;
  int64_t n = batched ? mx_size(query, 0) : 1, l = mx_size(query, -2), len_s = mx_size(key, -2);
  mx_tensor *merged;
  bool causal_only;
  if (merge_masks(mask, batched, n, h, l, len_s, &merged, &causal_only) != MX_OK) return NULL;

  const mx_tensor *w = s->in_proj_weight, *b = s->in_proj_bias;
  mx_tensor *q, *k, *v;
  if (self_attention) { /* one product for the three projections */
    mx_tensor *qkv[3];
    if (mx_chunk(mx_linear(query, w, b), 3, -1, qkv, 3) != 3) return NULL;
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    mx_tensor *proj[3];
    const mx_tensor *in[3] = {query, key, value};
    for (int i = 0; i < 3; i++)
      proj[i] = mx_linear(in[i], mx_narrow(w, 0, i * e, e), b ? mx_narrow(b, 0, i * e, e) : NULL);
    q = proj[0], k = proj[1], v = proj[2];
  }
  double p = mx_module_is_training(m) ? s->dropout : 0.0;
  mx_tensor *o = mx_scaled_dot_product_attention(split_heads(q, n, l, h), split_heads(k, n, len_s, h),
                                                 split_heads(v, n, len_s, h), merged, p, causal_only, 0.0, NULL);
  if (!o) return NULL;
  o = mx_reshape(mx_transpose(o, 1, 2), batched ? MX_SHAPE(n, l, e) : MX_SHAPE(l, e)); /* (n, l, h, d) joined */
  return o ? mx_module_forward(s->out_proj, o) : NULL;
}

mx_tensor *mx__typed_forward(const char *fn, mx_module *m, mx_tensor *(*apply)(mx_module *m, void *ctx), void *ctx) {
  mx_scope *scope = mx_scope_begin();
  if (!scope) return NULL;
  mx_tensor *y = apply(m, ctx);
  if (y) mx_keep(y);
  else mx__error_prefix(fn);
  mx_scope_end(scope);
  return y;
}

/* {query, key, value, key_padding_mask, attn_mask}: mx_module_forward's call too (self-attention) */
static mx_status mha_forward_n(mx_module *m, int n_in, const mx_tensor *const *in, int n_out, mx_tensor **out) {
  if (n_in > 5 || n_out != 1)
    return mx__error(MX_INVALID_ARGUMENT, "takes 1 to 5 inputs (query, key, value, key_padding_mask, attn_mask) "
                     "and gives 1 output, got %d and %d", n_in, n_out);
  if (!in[0]) return mx__error(MX_NULL_INPUT, "the query (in[0]) is NULL");
  mx_attention_mask mask = {.key_padding_mask = n_in > 3 ? in[3] : NULL, .attn_mask = n_in > 4 ? in[4] : NULL};
  out[0] = mx__multihead_attention(m, in[0], n_in > 1 ? in[1] : NULL, n_in > 2 ? in[2] : NULL, &mask);
  return out[0] ? MX_OK : mx_last_status();
}

typedef struct {
  const mx_tensor *query, *key, *value;
  const mx_attention_mask *mask;
} mha_call;

static mx_tensor *apply_mha(mx_module *m, void *ctx) {
  const mha_call *c = ctx;
  return mx__multihead_attention(m, c->query, c->key, c->value, c->mask);
}

mx_tensor *mx_multihead_attention_forward(mx_module *mha, const mx_tensor *query, const mx_tensor *key,
                                          const mx_tensor *value, const mx_attention_mask *mask) {
  static const char fn[] = "mx_multihead_attention_forward";
  if (!mha || !query) {
    mx__null_input(fn, !mha ? "mha" : "query");
    return NULL;
  }
  if (mx_module_type_of(mha) != &mha_type) {
    mx__error(MX_INVALID_ARGUMENT, "%s: the module is a %s, not a MultiheadAttention", fn, mx_module_type_of(mha)->name);
    return NULL;
  }
  mha_call c = {query, key, value, mask};
  return mx__typed_forward(fn, mha, apply_mha, &c);
}

/* --- positional embeddings ------------------------------------------------------------------------------------ */

typedef struct {
  int64_t max_len, dim;
  mx_tensor *table; /* (max_len, dim): the parameter or the buffer */
} positional_self;

static mx_tensor *positional_forward(mx_module *m, const mx_tensor *x) {
  const positional_self *s = mx_module_self(m);
  char dims[MX__DIMS_STR];
  if (mx_ndim(x) < 2 || mx_size(x, -1) != s->dim) {
    mx__error(MX_SHAPE_ERROR, "expected x (..., L, %lld), got %s", (long long)s->dim,
              mx__dims_str(dims, mx_ndim(x), mx_shape_get(x).d));
    return NULL;
  }
  int64_t len = mx_size(x, -2);
  if (len > s->max_len) {
    mx__error(MX_SHAPE_ERROR, "the sequence has %lld positions, more than max_len %lld", (long long)len,
              (long long)s->max_len);
    return NULL;
  }
  return mx_add(x, mx_narrow(s->table, 0, 0, len));
}

static void positional_extra(const mx_module *m, char *buf, size_t size) {
  const positional_self *s = mx_module_self(m);
  snprintf(buf, size, "max_len=%lld, dim=%lld", (long long)s->max_len, (long long)s->dim);
}

static const mx_module_type learned_type = {.name = "PositionalEmbedding", .forward = positional_forward,
                                            .free_self = free, .extra = positional_extra};
static const mx_module_type sinusoidal_type = {.name = "SinusoidalPositionalEncoding", .forward = positional_forward,
                                               .free_self = free, .extra = positional_extra};

static mx_module *positional_new(const char *fn, const mx_module_type *type, int64_t max_len, int64_t dim) {
  if (max_len <= 0 || dim <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: max_len (%lld) and dim (%lld) must be positive", fn, (long long)max_len,
              (long long)dim);
    return NULL;
  }
  mx_module *m = mx__module_alloc(type, sizeof(positional_self));
  if (m) *(positional_self *)mx_module_self(m) = (positional_self){.max_len = max_len, .dim = dim};
  return m;
}

mx_module *mx_positional_embedding_new(int64_t max_len, int64_t dim, mx_generator *gen) {
  mx_module *m = positional_new("mx_positional_embedding_new", &learned_type, max_len, dim);
  if (!m) return NULL;
  positional_self *s = mx_module_self(m);
  if (!(s->table = mx__add_parameter(m, "weight", MX_SHAPE(max_len, dim))) ||
      mx_init_normal_(s->table, 0.0, 0.02, gen) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

mx_module *mx_sinusoidal_positional_encoding_new(int64_t max_len, int64_t dim) {
  mx_module *m = positional_new("mx_sinusoidal_positional_encoding_new", &sinusoidal_type, max_len, dim);
  if (!m) return NULL;
  positional_self *s = mx_module_self(m);
  int64_t n;
  float *pe = mx__mul_overflows(max_len, dim, &n) ? NULL : malloc(sizeof *pe * (size_t)n);
  if (!pe) {
    mx__error(MX_OUT_OF_MEMORY, "mx_sinusoidal_positional_encoding_new: no memory for a (%lld, %lld) table",
              (long long)max_len, (long long)dim);
    mx_module_free(m);
    return NULL;
  }
  for (int64_t p = 0; p < max_len; p++)
    for (int64_t i = 0; i < dim; i++) {
      double angle = (double)p * exp(-log(10000.0) * (double)(i - i % 2) / (double)dim);
      pe[p * dim + i] = (float)(i % 2 ? cos(angle) : sin(angle));
    }
  s->table = mx__add_buffer(m, "pe", mx_from_data(pe, MX_SHAPE(max_len, dim), MX_F32, MX_CPU));
  free(pe);
  if (!s->table) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}
