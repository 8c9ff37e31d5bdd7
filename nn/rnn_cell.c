/* The recurrent cells RNNCell, LSTMCell and GRUCell: one step of the cell ops, with PyTorch's parameters. */
#include <stdlib.h>

#include "nn/rnn_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"

static mx_tensor *forward_rnn_cell(mx_module *m, const mx_tensor *x);
static mx_tensor *forward_lstm_cell(mx_module *m, const mx_tensor *x);
static mx_tensor *forward_gru_cell(mx_module *m, const mx_tensor *x);

static const mx_module_type rnn_cell_type = {.name = "RNNCell", .forward = forward_rnn_cell, .free_self = free, .extra = mx__rnn_extra};
static const mx_module_type lstm_cell_type = {.name = "LSTMCell", .forward = forward_lstm_cell, .free_self = free, .extra = mx__rnn_extra};
static const mx_module_type gru_cell_type = {.name = "GRUCell", .forward = forward_gru_cell, .free_self = free, .extra = mx__rnn_extra};

static mx_module *cell_new(const char *fn, const mx_module_type *type, mx__rnn_kind kind, int64_t input_size,
                           int64_t hidden_size, bool bias, mx_generator *gen) {
  mx_rnn_opts opts = mx_rnn_defaults();
  opts.bias = bias;
  mx_module *m = mx__rnn_module_new(fn, type, kind, input_size, hidden_size, &opts);
  if (m && mx__rnn_add_weights(m, input_size, "", gen) != MX_OK) {
    mx_module_free(m);
    return NULL;
  }
  return m;
}

mx_module *mx_rnn_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_rnn_nonlinearity nonlinearity,
                           mx_generator *gen) {
  int kind = mx__rnn_kind_of("mx_rnn_cell_new", nonlinearity);
  if (kind < 0) return NULL;
  return cell_new("mx_rnn_cell_new", &rnn_cell_type, (mx__rnn_kind)kind, input_size, hidden_size, bias, gen);
}

mx_module *mx_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_generator *gen) {
  return cell_new("mx_lstm_cell_new", &lstm_cell_type, MX__RNN_LSTM, input_size, hidden_size, bias, gen);
}

mx_module *mx_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_generator *gen) {
  return cell_new("mx_gru_cell_new", &gru_cell_type, MX__RNN_GRU, input_size, hidden_size, bias, gen);
}

/* One step of m: x (B, input) or (input); h, c (B, hidden) or (hidden), NULL for zeros. Writes h' and, for an
 * LSTM cell, c' (each pointer may be NULL). fn NULL: called by mx_module_forward, which has checked m and x. */
static mx_status cell_forward(const char *fn, const mx_module_type *type, mx_module *m, const mx_tensor *x,
                              const mx_tensor *h, const mx_tensor *c, mx_tensor **h_out, mx_tensor **c_out) {
  if (h_out) *h_out = NULL;
  if (c_out) *c_out = NULL;
  if (fn && !mx__rnn_of(fn, m, type)) return mx_last_status();
  if (fn && !x) return mx__null_input(fn, "x");
  const mx__rnn *r = mx_module_self(m);
  char where[MX__RNN_WHERE], dims[MX__DIMS_STR];
  mx__rnn_where(fn, m, where);
  int ndim = mx_ndim(x);
  mx_shape xs = mx_shape_get(x);
  if (ndim != 1 && ndim != 2)
    return mx__error(MX_SHAPE_ERROR, "%sx must have shape (batch, input_size) or (input_size), got %s", where,
                     mx__dims_str(dims, xs.ndim, xs.d));
  if (mx__rnn_check_features(where, m, x) != MX_OK) return MX_SHAPE_ERROR;
  mx_shape state = ndim == 2 ? MX_SHAPE(xs.d[0], r->hidden_size) : MX_SHAPE(r->hidden_size);
  bool lstm = r->kind == MX__RNN_LSTM;
  if (mx__rnn_check_state(where, "h", h, state) != MX_OK) return MX_SHAPE_ERROR;
  if (lstm && mx__rnn_check_state(where, "c", c, state) != MX_OK) return MX_SHAPE_ERROR;

  mx_scope *scope = mx_scope_begin(); /* the zero states */
  if (!scope) return mx_last_status();
  const mx_tensor *h0 = h ? h : mx_zeros(state, mx_dtype_of(x), mx_device_of(x));
  const mx_tensor *c0 = !lstm ? NULL : c ? c : mx_zeros(state, mx_dtype_of(x), mx_device_of(x));
  mx__rnn_weights w = mx__rnn_weights_of(m, "");
  mx_tensor *h1 = NULL, *c1 = NULL;
  mx_status status = mx__rnn_step(r->kind, &w, x, h0, c0, &h1, lstm ? &c1 : NULL);
  return mx__rnn_finish(scope, status, lstm ? 2 : 1, (mx_tensor *[]){h1, c1}, (mx_tensor **[]){h_out, c_out});
}

mx_tensor *mx_rnn_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h) {
  mx_tensor *h1;
  cell_forward("mx_rnn_cell_forward", &rnn_cell_type, m, x, h, NULL, &h1, NULL);
  return h1;
}

mx_tensor *mx_gru_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h) {
  mx_tensor *h1;
  cell_forward("mx_gru_cell_forward", &gru_cell_type, m, x, h, NULL, &h1, NULL);
  return h1;
}

mx_status mx_lstm_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h, const mx_tensor *c,
                               mx_tensor **h_out, mx_tensor **c_out) {
  return cell_forward("mx_lstm_cell_forward", &lstm_cell_type, m, x, h, c, h_out, c_out);
}

static mx_tensor *forward_rnn_cell(mx_module *m, const mx_tensor *x) {
  mx_tensor *h1;
  cell_forward(NULL, &rnn_cell_type, m, x, NULL, NULL, &h1, NULL);
  return h1;
}

static mx_tensor *forward_lstm_cell(mx_module *m, const mx_tensor *x) {
  mx_tensor *h1;
  cell_forward(NULL, &lstm_cell_type, m, x, NULL, NULL, &h1, NULL);
  return h1;
}

static mx_tensor *forward_gru_cell(mx_module *m, const mx_tensor *x) {
  mx_tensor *h1;
  cell_forward(NULL, &gru_cell_type, m, x, NULL, NULL, &h1, NULL);
  return h1;
}
