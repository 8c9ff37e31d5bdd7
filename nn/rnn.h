/* Recurrent modules, PyTorch's: the cells RNNCell, LSTMCell and GRUCell,
 * and the layers RNN, LSTM and GRU that run them over a sequence.
 *
 *     mx_rnn_opts o = mx_rnn_defaults();
 *     o.num_layers = 2, o.batch_first = true, o.bidirectional = true;
 *     mx_module *lstm = mx_lstm_new(32, 64, &o, NULL);      // U(-1/8, 1/8) weights
 *     mx_tensor *out, *h_n, *c_n;                           // x (N, L, 32)
 *     mx_lstm_forward(lstm, x, NULL, NULL, &out, &h_n, &c_n);
 *     // out (N, L, 2 * 64); h_n, c_n (2 * 2, N, 64): layer 0 forward,
 *     // layer 0 reverse, layer 1 forward, layer 1 reverse
 *     mx_tensor *y = mx_module_forward(lstm, x);            // out, zero states
 *
 * Parameters have PyTorch's names, shapes and gate order (LSTM: i, f, g, o;
 * GRU: r, z, n), so state dicts carry over: a cell has weight_ih
 * (G hidden, input), weight_hh (G hidden, hidden), bias_ih and bias_hh
 * (G hidden), G being 1 (RNN), 4 (LSTM) or 3 (GRU); a layer has
 * weight_ih_l<k>, weight_hh_l<k>, bias_ih_l<k>, bias_hh_l<k> per layer k
 * (input size: input_size for layer 0, D hidden after it, D = 2 when
 * bidirectional) and the same with _reverse for the reverse direction.
 * All start uniform in [-1/sqrt(hidden), 1/sqrt(hidden)], drawn from gen
 * (NULL: the default generator) in that order. Modules are float32 on the
 * CPU, like a fresh torch.nn module.
 *
 * Shapes: a cell takes x (B, input) or unbatched (input), h and c (B,
 * hidden) or (hidden). A layer takes x (L, N, input), (N, L, input) when
 * batch_first, or unbatched (L, input); h0 and c0 (D num_layers, N, hidden)
 * or unbatched (D num_layers, hidden); out is (L, N, D hidden), (N, L,
 * D hidden) or (L, D hidden), h_n and c_n have h0's shape. Missing states
 * (NULL) are zeros of x's dtype. Every output pointer may be NULL (not
 * wanted); on failure the wanted ones are set to NULL. Between layers the
 * output goes through dropout (the default generator) when the module is
 * training. The steps are the ops mx_rnn_tanh_cell, mx_rnn_relu_cell,
 * mx_lstm_cell and mx_gru_cell (ops/composites.h), so the modules
 * differentiate, twice too, and autocast like them.
 */
#ifndef MX_NN_RNN_H
#define MX_NN_RNN_H

#include "nn/module.h"

MX_API_BEGIN

typedef enum { MX_RNN_TANH, MX_RNN_RELU } mx_rnn_nonlinearity;

/* The options of a layer (torch.nn.RNN/LSTM/GRU's keywords). */
typedef struct {
  int num_layers;     /* stacked layers, each fed the one below's output */
  bool bias;          /* bias_ih and bias_hh in every layer */
  bool batch_first;   /* x and out (N, L, features) instead of (L, N, features) */
  double dropout;     /* probability of dropping an output of every layer but the last, in training */
  bool bidirectional; /* a reverse direction in every layer, its output concatenated */
} mx_rnn_opts;

/* PyTorch's defaults: 1 layer, bias, (L, N, features), no dropout, one direction. */
mx_rnn_opts mx_rnn_defaults(void);

/* --- cells: one step --------------------------------------------------------------------- */
/* torch.nn.RNNCell: h' = tanh(W_ih x + b_ih + W_hh h + b_hh) (relu for MX_RNN_RELU) */
mx_module *mx_rnn_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_rnn_nonlinearity nonlinearity,
                           mx_generator *gen);
/* torch.nn.LSTMCell: c' = f c + i g, h' = o tanh(c') */
mx_module *mx_lstm_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_generator *gen);
/* torch.nn.GRUCell: n = tanh(W_in x + b_in + r (W_hn h + b_hn)), h' = (1 - z) n + z h */
mx_module *mx_gru_cell_new(int64_t input_size, int64_t hidden_size, bool bias, mx_generator *gen);

/* h' for x and h (NULL: zeros); mx_module_forward(m, x) is the same with h NULL. */
mx_tensor *mx_rnn_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h);
mx_tensor *mx_gru_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h);
/* h' and c' for x, h and c (either NULL: zeros); mx_module_forward(m, x) returns h'. */
mx_status mx_lstm_cell_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h, const mx_tensor *c,
                               mx_tensor **h_out, mx_tensor **c_out);

/* --- layers: a sequence ----------------------------------------------------------------------- */
/* NULL opts: mx_rnn_defaults(). */
mx_module *mx_rnn_new(int64_t input_size, int64_t hidden_size, mx_rnn_nonlinearity nonlinearity,
                      const mx_rnn_opts *opts, mx_generator *gen);
mx_module *mx_lstm_new(int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts, mx_generator *gen);
mx_module *mx_gru_new(int64_t input_size, int64_t hidden_size, const mx_rnn_opts *opts, mx_generator *gen);

/* The output sequence and the last states for x and the first states (NULL:
 * zeros); mx_module_forward(m, x) returns out with zero states. */
mx_status mx_rnn_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, mx_tensor **out, mx_tensor **h_n);
mx_status mx_gru_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, mx_tensor **out, mx_tensor **h_n);
mx_status mx_lstm_forward(mx_module *m, const mx_tensor *x, const mx_tensor *h0, const mx_tensor *c0,
                          mx_tensor **out, mx_tensor **h_n, mx_tensor **c_n);

MX_API_END

#endif
