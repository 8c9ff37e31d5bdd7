/* The recurrent layers RNN, LSTM and GRU: their cells run over a sequence, stacked, in one or two directions. */
#include <stdio.h>
#include <stdlib.h>

#include "nn/rnn_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"

static mx_tensor *forward_rnn(mx_module *m, const mx_tensor *x);
static mx_tensor *forward_lstm(mx_module *m, const mx_tensor *x);
static mx_tensor *forward_gru(mx_module *m, const mx_tensor *x);

static const mx_module_type rnn_type = {.name = "RNN", .forward = forward_rnn, .free_self = free, .extra = mx__rnn_extra};
static const mx_module_type lstm_type = {.name = "LSTM", .forward = forward_lstm, .free_self = free, .extra = mx__rnn_extra};
static const mx_module_type gru_type = {.name = "GRU", .forward = forward_gru, .free_self = free, .extra = mx__rnn_extra};

/* "_l<layer>" or "_l<layer>_reverse": the suffix of a direction's weights. */
static void suffix_of(char buf[32], int layer, int dir) { snprintf(buf, 32, "_l%d%s", layer, dir ? "_reverse" : ""); }

static mx_module *layer_new(const char *fn, const mx_module_type *type, mx__rnn_kind kind, int64_t input_size,
                            int64_t hidden_size, const mx_rnn_opts *opts, mx_generator *gen) {
  mx_rnn_opts o = opts ? *opts : mx_rnn_defaults();
  mx_module *m = mx__rnn_module_new(fn, type, kind, input_size, hidden_size, &o);
  if (!m) return NULL;
  int dirs = o.bidirectional ? 2 : 1;
  for (int layer = 0; layer < o.num_layers; layer++)
    for (int dir = 0; dir < dirs; dir++) {
      char suffix[32];
      suffix_of(suffix, layer, dir);
      if (mx__rnn_add_weights(m, layer ? dirs * hidden_size : input_size, suffix, gen) != MX_OK) {
        mx_module_free(m);
        return NULL;
      }
    }
  return m;
}

mx_module *mx_rnn_new(int64_t input_size, int64_t hidden_size, mx_rnn_nonlinearity nonlinearity,
                      const mx_rnn_opts *opts, mx_generator *gen) {
  int kind = mx__rnn_kind_of("mx_rnn_new", nonlinearity);
  if (kind < 0) return NULL;
  return layer_new("mx_rnn_new", &rnn_type, (mx__rnn_kind)kind, input_size, hidden_size, opts, gen);
}

mx_module *mx_lstm_new(int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts, mx_generator *gen) {
  return layer_new("mx_lstm_new", &lstm_type, MX__RNN_LSTM, input_size, hidden_size, opts, gen);
}

mx_module *mx_gru_new(int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts, mx_generator *gen) {
  return layer_new("mx_gru_new", &gru_type, MX__RNN_GRU, input_size, hidden_size, opts, gen);
}

/* A layer's step-by-step state: where the sequence stands and what each direction left. */
typedef struct {
  const mx__rnn *r;
  int64_t steps, batch;
  const mx_tensor *h0, *c0; /* (layers D, N, hidden) or NULL */
  mx_tensor **hs;           /* [steps]: one direction's outputs */
  mx_tensor **h_n, **c_n;   /* [layers D]: the last states */
} run;

/* Direction dir of layer `layer` over seq (steps, N, features): its outputs (steps, N, hidden). */
static mx_tensor *run_direction(run *s, const mx_module *m, const mx_tensor *seq, int layer, int dir) {
  const mx__rnn *r = s->r;
  int index = layer * (r->opts.bidirectional ? 2 : 1) + dir;
  mx_shape state = MX_SHAPE(s->batch, r->hidden_size);
  mx_dtype dtype = mx_dtype_of(seq);
  mx_device device = mx_device_of(seq);
  mx_tensor *h = s->h0 ? mx_select(s->h0, 0, index) : mx_zeros(state, dtype, device);
  mx_tensor *c = NULL;
  if (r->kind == MX__RNN_LSTM) c = s->c0 ? mx_select(s->c0, 0, index) : mx_zeros(state, dtype, device);
  char suffix[32];
  suffix_of(suffix, layer, dir);
  mx__rnn_weights w = mx__rnn_weights_of(m, suffix);
  for (int64_t k = 0; k < s->steps; k++) {
    int64_t t = dir ? s->steps - 1 - k : k;
    if (mx__rnn_step(r->kind, &w, mx_select(seq, 0, t), h, c, &h, r->kind == MX__RNN_LSTM ? &c : NULL) != MX_OK)
      return NULL;
    s->hs[t] = h;
  }
  s->h_n[index] = h;
  if (c) s->c_n[index] = c;
  return mx_stack((int)s->steps, s->hs, 0);
}

/* Every layer over seq (steps, N, input): the last layer's outputs (steps, N, D hidden); s->h_n, s->c_n
 * filled. In training, dropout between layers. */
static mx_tensor *run_layers(run *s, const mx_module *m, const mx_tensor *seq) {
  const mx__rnn *r = s->r;
  int dirs = r->opts.bidirectional ? 2 : 1;
  mx_tensor *out = NULL;
  for (int layer = 0; layer < r->opts.num_layers; layer++) {
    if (layer && r->opts.dropout > 0 && mx_module_is_training(m))
      seq = out = mx_dropout(out, r->opts.dropout, true, NULL);
    mx_tensor *outs[2] = {NULL, NULL};
    for (int dir = 0; dir < dirs; dir++)
      if (!(outs[dir] = run_direction(s, m, seq, layer, dir))) return NULL;
    seq = out = dirs == 2 ? mx_cat(2, outs, -1) : outs[0];
  }
  return out;
}

/* The checks and the shapes: x (L, N, input), (N, L, input) when batch_first or (L, input); h0, c0 (layers D,
 * N, hidden) or (layers D, hidden). Writes out, h_n and c_n (LSTM) where wanted, new handles. fn NULL: called
 * by mx_module_forward, which has checked m and x. */
static mx_status layer_forward(const char *fn, const mx_module_type *type, mx_module *m, const mx_tensor *x,
                               const mx_tensor *h0, const mx_tensor *c0, mx_tensor **out, mx_tensor **h_n,
                               mx_tensor **c_n) {
  mx_tensor **wanted[3] = {out, h_n, c_n};
  for (int k = 0; k < 3; k++)
    if (wanted[k]) *wanted[k] = NULL;
  if (fn && !mx__rnn_of(fn, m, type)) return mx_last_status();
  if (fn && !x) return mx__null_input(fn, "x");
  const mx__rnn *r = mx_module_self(m);
  bool lstm = r->kind == MX__RNN_LSTM, batch_first = r->opts.batch_first;
  char where[MX__RNN_WHERE], dims[MX__DIMS_STR];
  mx__rnn_where(fn, m, where);
  int ndim = mx_ndim(x);
  mx_shape xs = mx_shape_get(x);
  if (ndim != 2 && ndim != 3)
    return mx__error(MX_SHAPE_ERROR, "%sx must have shape (%s, input_size) or unbatched (seq_len, input_size), got %s",
                     where, batch_first ? "batch, seq_len" : "seq_len, batch", mx__dims_str(dims, xs.ndim, xs.d));
  if (mx__rnn_check_features(where, m, x) != MX_OK) return MX_SHAPE_ERROR;
  bool batched = ndim == 3;
  int64_t steps = batched && batch_first ? xs.d[1] : xs.d[0], batch = !batched ? 1 : batch_first ? xs.d[0] : xs.d[1];
  if (steps == 0)
    return mx__error(MX_SHAPE_ERROR, "%sx of shape %s is an empty sequence", where, mx__dims_str(dims, xs.ndim, xs.d));
  int64_t states = (int64_t)r->opts.num_layers * (r->opts.bidirectional ? 2 : 1);
  mx_shape state = batched ? MX_SHAPE(states, batch, r->hidden_size) : MX_SHAPE(states, r->hidden_size);
  if (mx__rnn_check_state(where, "h0", h0, state) != MX_OK) return MX_SHAPE_ERROR;
  if (lstm && mx__rnn_check_state(where, "c0", c0, state) != MX_OK) return MX_SHAPE_ERROR;

  run s = {.r = r, .steps = steps, .batch = batch};
  s.hs = malloc(sizeof *s.hs * (size_t)steps);
  s.h_n = calloc((size_t)states, sizeof *s.h_n);
  s.c_n = calloc((size_t)states, sizeof *s.c_n);
  mx_scope *scope = s.hs && s.h_n && s.c_n ? mx_scope_begin() : NULL; /* every step's intermediates */
  mx_status status = MX_OK;
  if (!scope) {
    status = mx__error(MX_OUT_OF_MEMORY, "%sout of memory for a sequence of %lld steps", where, (long long)steps);
  } else {
    /* the sequence as (steps, N, features), the states as (layers D, N, hidden) */
    const mx_tensor *seq = !batched ? mx_unsqueeze(x, 1) : batch_first ? mx_transpose(x, 0, 1) : x;
    s.h0 = h0 && !batched ? mx_unsqueeze(h0, 1) : h0;
    s.c0 = lstm && c0 && !batched ? mx_unsqueeze(c0, 1) : lstm ? c0 : NULL;
    mx_tensor *o = run_layers(&s, m, seq);
    mx_tensor *hn = o ? mx_stack((int)states, s.h_n, 0) : NULL;
    mx_tensor *cn = o && lstm ? mx_stack((int)states, s.c_n, 0) : NULL;
    if (!batched) {
      o = mx_squeeze(o, 1);
      hn = mx_squeeze(hn, 1);
      if (lstm) cn = mx_squeeze(cn, 1);
    } else if (batch_first) {
      o = mx_transpose(o, 0, 1);
    }
    status = mx__rnn_finish(scope, MX_OK, lstm ? 3 : 2, (mx_tensor *[]){o, hn, cn}, wanted);
  }
  free(s.hs);
  free(s.h_n);
  free(s.c_n);
  return status;
}

mx_status mx_rnn_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, mx_tensor **out, mx_tensor **h_n) {
  return layer_forward("mx_rnn_forward", &rnn_type, m, x, h0, NULL, out, h_n, NULL);
}

mx_status mx_gru_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, mx_tensor **out, mx_tensor **h_n) {
  return layer_forward("mx_gru_forward", &gru_type, m, x, h0, NULL, out, h_n, NULL);
}

mx_status mx_lstm_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, const mx_tensor *c0,
                          mx_tensor **out, mx_tensor **h_n, mx_tensor **c_n) {
  return layer_forward("mx_lstm_forward", &lstm_type, m, x, h0, c0, out, h_n, c_n);
}

static mx_tensor *forward_rnn(mx_module *m, const mx_tensor *x) {
  mx_tensor *out;
  layer_forward(NULL, &rnn_type, m, x, NULL, NULL, &out, NULL, NULL);
  return out;
}

static mx_tensor *forward_lstm(mx_module *m, const mx_tensor *x) {
  mx_tensor *out;
  layer_forward(NULL, &lstm_type, m, x, NULL, NULL, &out, NULL, NULL);
  return out;
}

static mx_tensor *forward_gru(mx_module *m, const mx_tensor *x) {
  mx_tensor *out;
  layer_forward(NULL, &gru_type, m, x, NULL, NULL, &out, NULL, NULL);
  return out;
}
