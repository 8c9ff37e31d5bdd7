/* What the recurrent cells (nn/rnn_cell.c) and layers (nn/rnn.c) share, implemented in nn/rnn_base.c. */
#ifndef MX_NN_RNN_INTERNAL_H
#define MX_NN_RNN_INTERNAL_H

#include "kernels/base_internal.h"
#include "nn/rnn.h"
#include "tensor/scope.h"

typedef enum { MX__RNN_TANH, MX__RNN_RELU, MX__RNN_LSTM, MX__RNN_GRU } mx__rnn_kind;

/* A recurrent module's own data (its mx_module_self). */
typedef struct {
  mx__rnn_kind kind;
  int64_t input_size, hidden_size;
  mx_rnn_opts opts; /* a cell's: the defaults with its bias */
} mx__rnn;

/* The kind of a nonlinearity, or -1 with the error set when it is neither tanh nor relu. */
int mx__rnn_kind_of(const char *fn, mx_rnn_nonlinearity nonlinearity);

/* A new module of type around a new record (checks the sizes and options), with no parameters yet. */
mx_module *mx__rnn_module_new(const char *fn, const mx_module_type *type, mx__rnn_kind kind,
                              int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts);

/* Registers weight_ih<suffix> (G hidden, input_size), weight_hh<suffix> (G hidden, hidden) and, with
 * bias, bias_ih<suffix>, bias_hh<suffix> (G hidden), in that order, uniform in +-1/sqrt(hidden) from gen. */
mx_status mx__rnn_add_weights(mx_module *m, int64_t input_size, const char *suffix, mx_generator *gen);

/* The weights named with suffix ("", "_l1", "_l0_reverse"); no biases without bias. Borrowed. */
typedef struct {
  const mx_tensor *w_ih, *w_hh, *b_ih, *b_hh;
} mx__rnn_weights;
mx__rnn_weights mx__rnn_weights_of(const mx_module *m, const char *suffix);

/* One step of the kind's cell: h' (and c' for an LSTM, whose c must then be given), new handles. */
mx_status mx__rnn_step(mx__rnn_kind kind, const mx__rnn_weights *w, const mx_tensor *x, const mx_tensor *h,
                       const mx_tensor *c, mx_tensor **h_out, mx_tensor **c_out);

/* The module's record when m is of type (else NULL with "<fn>: the module must be <type>, got ..."). */
const mx__rnn *mx__rnn_of(const char *fn, const mx_module *m, const mx_module_type *type);

/* Ends a forward's scope: with status MX_OK every wanted result (wanted[k] non-NULL) moves out of it to
 * *wanted[k], all of them or none; a result that is NULL fails the forward. Returns the final status. */
mx_status mx__rnn_finish(mx_scope *scope, mx_status status, int n, mx_tensor *const *results,
                         mx_tensor **const *wanted);

/* "LSTM(4, 8, num_layers=2)": the module as summaries print it. */
#define MX__RNN_DESC 256
const char *mx__rnn_describe(const mx_module *m, char buf[MX__RNN_DESC]);

/* The start of a message about m's inputs: "<fn>: <module>: ", or "" for fn NULL (a call from
 * mx_module_forward, which puts its own words in front). */
#define MX__RNN_WHERE 320
const char *mx__rnn_where(const char *fn, const mx_module *m, char buf[MX__RNN_WHERE]);

/* The extra of every recurrent type: PyTorch's extra_repr ("4, 8, bias=False, batch_first=True"). */
void mx__rnn_extra(const mx_module *m, char *buf, size_t size);

/* x's last dim is the module's input_size (else "<where>x of shape [..] has n features, expected ..."). */
mx_status mx__rnn_check_features(const char *where, const mx_module *m, const mx_tensor *x);

/* A state (NULL: nothing to check) of shape want (else "<where><name> of shape [..], expected [..]"). */
mx_status mx__rnn_check_state(const char *where, const char *name, const mx_tensor *state, mx_shape want);

#endif
