/* What every recurrent module shares: its record, PyTorch-initialised weights, one cell step, the words of messages. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "nn/init.h"
#include "nn/rnn_internal.h"
#include "ops/ops.h"
#include "tensor/scope.h"

mx_rnn_opts mx_rnn_defaults(void) { return (mx_rnn_opts){.num_layers = 1, .bias = true}; }

int mx__rnn_kind_of(const char *fn, mx_rnn_nonlinearity nonlinearity) {
  if (nonlinearity == MX_RNN_TANH) return MX__RNN_TANH;
  if (nonlinearity == MX_RNN_RELU) return MX__RNN_RELU;
  mx__error(MX_INVALID_ARGUMENT, "%s: unknown nonlinearity %d (MX_RNN_TANH or MX_RNN_RELU)", fn, (int)nonlinearity);
  return -1;
}

/* Gates per step: G in the (G hidden) rows of the weights. */
static int64_t gates_of(mx__rnn_kind kind) { return kind == MX__RNN_LSTM ? 4 : kind == MX__RNN_GRU ? 3 : 1; }

mx_module *mx__rnn_module_new(const char *fn, const mx_module_type *type, mx__rnn_kind kind,
                              int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts) {
  if (input_size <= 0 || hidden_size <= 0) {
    mx__error(MX_INVALID_ARGUMENT, "%s: input_size %lld and hidden_size %lld must both be positive", fn,
              (long long)input_size, (long long)hidden_size);
    return NULL;
  }
  if (opts->num_layers < 1) {
    mx__error(MX_INVALID_ARGUMENT, "%s: num_layers is %d; it must be at least 1", fn, opts->num_layers);
    return NULL;
  }
  if (!(opts->dropout >= 0 && opts->dropout <= 1)) {
    mx__error(MX_INVALID_ARGUMENT, "%s: dropout %g is not a probability in [0, 1]", fn, opts->dropout);
    return NULL;
  }
  mx__rnn *r = malloc(sizeof *r);
  if (!r) {
    mx__error(MX_OUT_OF_MEMORY, "%s: out of memory", fn);
    return NULL;
  }
  *r = (mx__rnn){.kind = kind, .input_size = input_size, .hidden_size = hidden_size, .opts = *opts};
  return mx_module_new(type, r); /* which frees r when it fails */
}

mx_status mx__rnn_add_weights(mx_module *m, int64_t input_size, const char *suffix, mx_generator *gen) {
  const mx__rnn *r = mx_module_self(m);
  int64_t rows = gates_of(r->kind) * r->hidden_size;
  double bound = 1 / sqrt((double)r->hidden_size);
  const char *stems[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  mx_shape shapes[4] = {MX_SHAPE(rows, input_size), MX_SHAPE(rows, r->hidden_size), MX_SHAPE(rows), MX_SHAPE(rows)};
  for (int k = 0; k < (r->opts.bias ? 4 : 2); k++) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", stems[k], suffix);
    mx_tensor *t = mx_empty(shapes[k], MX_F32, MX_CPU);
    mx_status status = t ? mx_init_uniform_(t, -bound, bound, gen) : mx_last_status();
    if (status != MX_OK) {
      mx_release(t);
      return status;
    }
    if ((status = mx_module_add_parameter(m, name, t)) != MX_OK) return status; /* the module took t */
  }
  return MX_OK;
}

mx__rnn_weights mx__rnn_weights_of(const mx_module *m, const char *suffix) {
  const char *stems[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  const mx_tensor *w[4];
  for (int k = 0; k < 4; k++) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", stems[k], suffix);
    w[k] = mx_module_get_parameter(m, name);
  }
  return (mx__rnn_weights){w[0], w[1], w[2], w[3]};
}

mx_status mx__rnn_step(mx__rnn_kind kind, const mx__rnn_weights *w, const mx_tensor *x, const mx_tensor *h,
                       const mx_tensor *c, mx_tensor **h_out, mx_tensor **c_out) {
  switch (kind) {
  case MX__RNN_LSTM:
    return mx_lstm_cell(x, h, c, w->w_ih, w->w_hh, w->b_ih, w->b_hh, h_out, c_out);
  case MX__RNN_GRU:
    *h_out = mx_gru_cell(x, h, w->w_ih, w->w_hh, w->b_ih, w->b_hh);
    break;
  case MX__RNN_RELU:
    *h_out = mx_rnn_relu_cell(x, h, w->w_ih, w->w_hh, w->b_ih, w->b_hh);
    break;
  case MX__RNN_TANH:
    *h_out = mx_rnn_tanh_cell(x, h, w->w_ih, w->w_hh, w->b_ih, w->b_hh);
    break;
  }
  return *h_out ? MX_OK : mx_last_status();
}

mx_status mx__rnn_finish(mx_scope *scope, mx_status status, int n, mx_tensor *const *results,
                         mx_tensor **const *wanted) {
  for (int k = 0; k < n && status == MX_OK; k++)
    if (!results[k]) status = mx_last_status();
  for (int k = 0; k < n && status == MX_OK; k++)
    if (wanted[k] && !(*wanted[k] = mx_keep(results[k]))) status = mx_last_status();
  for (int k = 0; k < n && status != MX_OK; k++)
    if (wanted[k] && *wanted[k]) {
      mx_release(*wanted[k]);
      *wanted[k] = NULL;
    }
  mx_scope_end(scope);
  return status;
}

const char *mx__rnn_describe(const mx_module *m, char buf[MX__RNN_DESC]) {
  const mx_module_type *type = mx_module_type_of(m);
  char extra[MX__RNN_DESC - 64] = ""; /* room for the name */
  if (type->extra) type->extra(m, extra, sizeof extra);
  snprintf(buf, MX__RNN_DESC, "%s(%s)", type->name, extra);
  return buf;
}

const mx__rnn *mx__rnn_of(const char *fn, const mx_module *m, const mx_module_type *type) {
  if (!m) {
    mx__null_input(fn, "m");
    return NULL;
  }
  if (mx_module_type_of(m) != type) {
    char desc[MX__RNN_DESC];
    mx__error(MX_INVALID_ARGUMENT, "%s: the module must be %s, got %s", fn, type->name, mx__rnn_describe(m, desc));
    return NULL;
  }
  return mx_module_self(m);
}

void mx__rnn_extra(const mx_module *m, char *buf, size_t size) {
  const mx__rnn *r = mx_module_self(m);
  const mx_rnn_opts *o = &r->opts;
  char layers[32] = "", dropout[40] = "";
  if (o->num_layers != 1) snprintf(layers, sizeof layers, ", num_layers=%d", o->num_layers);
  if (o->dropout != 0) snprintf(dropout, sizeof dropout, ", dropout=%g", o->dropout);
  snprintf(buf, size, "%lld, %lld%s%s%s%s%s%s", (long long)r->input_size, (long long)r->hidden_size, layers,
           o->bias ? "" : ", bias=False", o->batch_first ? ", batch_first=True" : "", dropout,
           o->bidirectional ? ", bidirectional=True" : "", r->kind == MX__RNN_RELU ? ", nonlinearity=relu" : "");
}

const char *mx__rnn_where(const char *fn, const mx_module *m, char buf[MX__RNN_WHERE]) {
  char desc[MX__RNN_DESC];
  if (fn) snprintf(buf, MX__RNN_WHERE, "%s: %s: ", fn, mx__rnn_describe(m, desc));
  else buf[0] = '\0';
  return buf;
}

mx_status mx__rnn_check_features(const char *where, const mx_module *m, const mx_tensor *x) {
  const mx__rnn *r = mx_module_self(m);
  int64_t features = mx_size(x, -1);
  if (features == r->input_size) return MX_OK;
  char dims[MX__DIMS_STR];
  mx_shape s = mx_shape_get(x);
  return mx__error(MX_SHAPE_ERROR, "%sx of shape %s has %lld features, expected input_size %lld", where,
                   mx__dims_str(dims, s.ndim, s.d), (long long)features, (long long)r->input_size);
}

mx_status mx__rnn_check_state(const char *where, const char *name, const mx_tensor *state, mx_shape want) {
  if (!state) return MX_OK;
  mx_shape s = mx_shape_get(state);
  bool fits = s.ndim == want.ndim;
  for (int d = 0; fits && d < s.ndim; d++) fits = s.d[d] == want.d[d];
  if (fits) return MX_OK;
  char got[MX__DIMS_STR], expected[MX__DIMS_STR];
  return mx__error(MX_SHAPE_ERROR, "%s%s of shape %s, expected %s", where, name, mx__dims_str(got, s.ndim, s.d),
                   mx__dims_str(expected, want.ndim, want.d));
}
