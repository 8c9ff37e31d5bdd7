/* The remaining layers: Dropout, Embedding, Flatten and Identity. */
#include <stdlib.h>

#include "autograd/autograd.h"
#include "nn/nn_internal.h"

/* --- Dropout ------------------------------------------------------------------------------------------------------ */

typedef struct {
  double p;
  mx_generator *gen;
} dropout_self;

static mx_tensor *dropout_forward(mx_module *m, const mx_tensor *x) {
  const dropout_self *s = mx_module_self(m);
  return mx_dropout(x, s->p, mx_module_is_training(m), s->gen);
}

static void dropout_extra(const mx_module *m, char *buf, size_t size) {
  char p[32];
  mx__float_repr(p, sizeof p, ((const dropout_self *)mx_module_self(m))->p);
  snprintf(buf, size, "p=%s", p);
}

static const mx_module_type dropout_type = {.name = "Dropout", .forward = dropout_forward, .free_self = free,
                                            .extra = dropout_extra};

mx_module *mx_dropout_new(double p, mx_generator *gen) {
  if (!(p >= 0 && p <= 1)) {
    mx__error(MX_INVALID_ARGUMENT, "mx_dropout_new: the probability p must be in [0, 1], got %g", p);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&dropout_type, sizeof(dropout_self));
  if (m) *(dropout_self *)mx_module_self(m) = (dropout_self){p, gen};
  return m;
}

/* --- Embedding ---------------------------------------------------------------------------------------------------- */

typedef struct {
  int64_t num, dim, padding_idx; /* padding_idx in [0, num), or -1 for none */
  mx_tensor *weight;
} embedding_self;

static mx_tensor *embedding_forward(mx_module *m, const mx_tensor *x) {
  const embedding_self *s = mx_module_self(m);
  mx_tensor *y = mx_embedding(s->weight, x);
  if (!y || s->padding_idx < 0 || !mx_is_grad_enabled() || !mx_requires_grad(s->weight)) return y;
  /* The padding row's value without its gradient: rows looked up at padding_idx are taken from a detached copy. */
  mx_tensor *padded = mx_unsqueeze(mx_eq_scalar(x, (double)s->padding_idx), -1);
  return mx_where(padded, mx_detach(y), y);
}

static void embedding_extra(const mx_module *m, char *buf, size_t size) {
  const embedding_self *s = mx_module_self(m);
  snprintf(buf, size, "%lld, %lld", (long long)s->num, (long long)s->dim);
  if (s->padding_idx >= 0) mx__append(buf, size, ", padding_idx=%lld", (long long)s->padding_idx);
}

static const mx_module_type embedding_type = {.name = "Embedding", .forward = embedding_forward, .free_self = free,
                                              .extra = embedding_extra};

mx_module *mx_embedding_new(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx, mx_generator *gen) {
  const char *fn = "mx_embedding_new";
  if (num_embeddings <= 0 || embedding_dim <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: num_embeddings (%lld) and embedding_dim (%lld) must be positive", fn,
              (long long)num_embeddings, (long long)embedding_dim);
    return NULL;
  }
  if (padding_idx != MX_NO_PADDING_IDX && (padding_idx >= num_embeddings || padding_idx < -num_embeddings)) {
    mx__error(MX_INDEX_ERROR, "%s: padding_idx %lld is out of range for %lld embeddings", fn, (long long)padding_idx,
              (long long)num_embeddings);
    return NULL;
  }
  mx_module *m = mx__module_alloc(&embedding_type, sizeof(embedding_self));
  if (!m) return NULL;
  embedding_self *s = mx_module_self(m);
  s->num = num_embeddings, s->dim = embedding_dim;
  s->padding_idx = padding_idx == MX_NO_PADDING_IDX ? -1 : padding_idx < 0 ? padding_idx + num_embeddings : padding_idx;
  s->weight = mx__add_parameter(m, "weight", MX_SHAPE(num_embeddings, embedding_dim));
  mx_status status = s->weight ? mx_init_normal_(s->weight, 0, 1, gen) : mx_last_status();
  if (status == MX_OK && s->padding_idx >= 0) {
    mx_scope *scope = mx_scope_begin();
    MX_NO_GRAD { status = mx_fill_(mx_select(s->weight, 0, s->padding_idx), 0); }
    mx_scope_end(scope);
  }
  if (status != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

/* --- Flatten, Identity ------------------------------------------------------------------------------------------ */

typedef struct {
  int start, end;
} flatten_self;

static mx_tensor *flatten_forward(mx_module *m, const mx_tensor *x) {
  const flatten_self *s = mx_module_self(m);
  return mx_flatten(x, s->start, s->end);
}

static void flatten_extra(const mx_module *m, char *buf, size_t size) {
  const flatten_self *s = mx_module_self(m);
  snprintf(buf, size, "start_dim=%d, end_dim=%d", s->start, s->end);
}

static const mx_module_type flatten_type = {.name = "Flatten", .forward = flatten_forward, .free_self = free,
                                            .extra = flatten_extra};

mx_module *mx_flatten_new(int start_dim, int end_dim) {
  mx_module *m = mx__module_alloc(&flatten_type, sizeof(flatten_self));
  if (m) *(flatten_self *)mx_module_self(m) = (flatten_self){start_dim, end_dim};
  return m;
}

static mx_tensor *identity_forward(mx_module *m, const mx_tensor *x) { return mx_reshape(x, mx_shape_get(x)); }

static const mx_module_type identity_type = {.name = "Identity", .forward = identity_forward};

mx_module *mx_identity_new(void) { return mx_module_new(&identity_type, NULL); }
