/* The recurrent modules beyond the PyTorch fixtures: parameter names, initialisation, summaries, dropout
 * between layers, autocast, memory, and the exact messages of bad arguments and inputs. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>
#include "tests/common/expect_error.h"
#include "../common/float_values.h"

static mx_rnn_opts opts(int num_layers, bool bias, bool batch_first, double dropout, bool bidirectional) {
  return (mx_rnn_opts){num_layers, bias, batch_first, dropout, bidirectional};
}

/* The summary of m: "LSTM(3, 4, num_layers=2)". */
static void describe(const mx_module *m, char *buf, size_t size) {
  char extra[160] = "";
  const mx_module_type *type = mx_module_type_of(m);
  if (type->extra) type->extra(m, extra, sizeof extra);
  snprintf(buf, size, "%s(%s)", type->name, extra);
}

static mx_tensor *randn(mx_shape shape, uint64_t seed) {
  mx_generator *gen = mx_generator_new(seed);
  mx_tensor *t = mx_randn(shape, MX_F32, MX_CPU, gen);
  mx_generator_free(gen);
  return t;
}

/* Copies every parameter of `from` named <stem><from_suffix> into <stem><to_suffix> of `to`. */
static void copy_weights(mx_module *to, const char *to_suffix, const mx_module *from, const char *from_suffix) {
  const char *stems[4] = {"weight_ih", "weight_hh", "bias_ih", "bias_hh"};
  for (int k = 0; k < 4; k++) {
    char a[64], b[64];
    snprintf(a, sizeof a, "%s%s", stems[k], to_suffix);
    snprintf(b, sizeof b, "%s%s", stems[k], from_suffix);
    mx_tensor *dst = mx_module_get_parameter(to, a);
    const mx_tensor *src = mx_module_get_parameter(from, b);
    cr_assert(dst && src, "no %s or %s", a, b);
    cr_assert_eq(mx_copy_(dst, src), MX_OK, "%s", mx_last_error());
  }
}

/* --- parameters -------------------------------------------------------------------------------------------- */

typedef struct {
  const char *name;
  mx_shape shape;
} expected_param;

static void expect_parameters(mx_module *m, int n, const expected_param *want) {
  cr_assert(m, "%s", mx_last_error());
  cr_assert_eq(mx_module_num_parameters(m), n);
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    cr_expect_str_eq(name, want[i].name, "parameter %d", i);
    mx_shape s = mx_shape_get(p);
    cr_expect_eq(s.ndim, want[i].shape.ndim, "%s", name);
    for (int d = 0; d < s.ndim && d < want[i].shape.ndim; d++)
      cr_expect_eq(s.d[d], want[i].shape.d[d], "%s dim %d: %lld", name, d, (long long)s.d[d]);
    cr_expect_eq(mx_dtype_of(p), MX_F32, "%s", name);
    cr_expect(mx_is_leaf(p) && mx_requires_grad(p), "%s must be a leaf that requires grad", name);
    total += mx_numel(p);
  }
  cr_expect_eq(mx_module_parameter_count(m), total);
  mx_module_free(m);
}

Test(rnn_params, cells_have_pytorchs_names_and_shapes) {
  expect_parameters(mx_rnn_cell_new(3, 4, true, MX_RNN_RELU, NULL), 4,
                    (expected_param[]){{"weight_ih", MX_SHAPE(4, 3)},
                                       {"weight_hh", MX_SHAPE(4, 4)},
                                       {"bias_ih", MX_SHAPE(4)},
                                       {"bias_hh", MX_SHAPE(4)}});
  expect_parameters(mx_lstm_cell_new(3, 4, true, NULL), 4,
                    (expected_param[]){{"weight_ih", MX_SHAPE(16, 3)},
                                       {"weight_hh", MX_SHAPE(16, 4)},
                                       {"bias_ih", MX_SHAPE(16)},
                                       {"bias_hh", MX_SHAPE(16)}});
  expect_parameters(mx_gru_cell_new(3, 4, false, NULL), 2,
                    (expected_param[]){{"weight_ih", MX_SHAPE(12, 3)}, {"weight_hh", MX_SHAPE(12, 4)}});
}

Test(rnn_params, layers_have_pytorchs_names_and_shapes) {
  mx_rnn_opts o = opts(2, true, false, 0, true);
  expect_parameters(mx_lstm_new(3, 4, &o, NULL), 16,
                    (expected_param[]){
                        {"weight_ih_l0", MX_SHAPE(16, 3)},         {"weight_hh_l0", MX_SHAPE(16, 4)},
                        {"bias_ih_l0", MX_SHAPE(16)},              {"bias_hh_l0", MX_SHAPE(16)},
                        {"weight_ih_l0_reverse", MX_SHAPE(16, 3)}, {"weight_hh_l0_reverse", MX_SHAPE(16, 4)},
                        {"bias_ih_l0_reverse", MX_SHAPE(16)},      {"bias_hh_l0_reverse", MX_SHAPE(16)},
                        {"weight_ih_l1", MX_SHAPE(16, 8)},         {"weight_hh_l1", MX_SHAPE(16, 4)},
                        {"bias_ih_l1", MX_SHAPE(16)},              {"bias_hh_l1", MX_SHAPE(16)},
                        {"weight_ih_l1_reverse", MX_SHAPE(16, 8)}, {"weight_hh_l1_reverse", MX_SHAPE(16, 4)},
                        {"bias_ih_l1_reverse", MX_SHAPE(16)},      {"bias_hh_l1_reverse", MX_SHAPE(16)}});
  o = opts(3, false, true, 0, false);
  expect_parameters(mx_gru_new(3, 4, &o, NULL), 6,
                    (expected_param[]){{"weight_ih_l0", MX_SHAPE(12, 3)},
                                       {"weight_hh_l0", MX_SHAPE(12, 4)},
                                       {"weight_ih_l1", MX_SHAPE(12, 4)},
                                       {"weight_hh_l1", MX_SHAPE(12, 4)},
                                       {"weight_ih_l2", MX_SHAPE(12, 4)},
                                       {"weight_hh_l2", MX_SHAPE(12, 4)}});
  expect_parameters(mx_rnn_new(3, 4, MX_RNN_TANH, NULL, NULL), 4,
                    (expected_param[]){{"weight_ih_l0", MX_SHAPE(4, 3)},
                                       {"weight_hh_l0", MX_SHAPE(4, 4)},
                                       {"bias_ih_l0", MX_SHAPE(4)},
                                       {"bias_hh_l0", MX_SHAPE(4)}});
}

/* Every weight and bias within +-1/sqrt(hidden), and spread over that range like U(-b, b). */
static void expect_uniform_init(mx_module *m, double bound) {
  cr_assert(m, "%s", mx_last_error());
  double lo = INFINITY, hi = -INFINITY, sum = 0, sum_sq = 0;
  int64_t n = 0;
  for (int i = 0; i < mx_module_num_parameters(m); i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    float *v = values(p);
    for (int64_t k = 0; k < mx_numel(p); k++) {
      cr_assert(fabs(v[k]) <= bound, "%s[%lld] = %g is outside +-%g", name, (long long)k, v[k], bound);
      lo = fmin(lo, v[k]), hi = fmax(hi, v[k]);
      sum += v[k], sum_sq += (double)v[k] * v[k];
      n++;
    }
    free(v);
  }
  /* n >= 2000 draws: the extremes come within 1% of the bounds, the mean within 5 standard errors of 0 and
   * the variance within 10% of b^2 / 3 */
  cr_expect_gt(n, 2000);
  cr_expect_lt(lo, -0.99 * bound, "smallest %g", lo);
  cr_expect_gt(hi, 0.99 * bound, "largest %g", hi);
  double mean = sum / (double)n, var = sum_sq / (double)n - mean * mean;
  cr_expect_lt(fabs(mean), 5 * bound / sqrt(3.0 * (double)n), "mean %g", mean);
  cr_expect_lt(fabs(var / (bound * bound / 3) - 1), 0.1, "variance %g, expected %g", var, bound * bound / 3);
  mx_module_free(m);
}

Test(rnn_params, start_uniform_within_one_over_sqrt_hidden) {
  mx_generator *gen = mx_generator_new(11);
  mx_rnn_opts o = opts(2, true, false, 0, true);
  expect_uniform_init(mx_lstm_new(10, 16, &o, gen), 0.25);
  expect_uniform_init(mx_gru_new(7, 25, &o, gen), 0.2);
  expect_uniform_init(mx_rnn_new(30, 25, MX_RNN_RELU, &o, gen), 0.2);
  expect_uniform_init(mx_lstm_cell_new(20, 16, true, gen), 0.25);
  expect_uniform_init(mx_gru_cell_new(20, 100, true, gen), 0.1);
  expect_uniform_init(mx_rnn_cell_new(40, 36, true, MX_RNN_TANH, gen), 1 / 6.0);
  mx_generator_free(gen);
}

/* Same seed, same module; the default generator when gen is NULL. */
Test(rnn_params, init_draws_from_the_generator) {
  mx_generator *g1 = mx_generator_new(3), *g2 = mx_generator_new(3), *g3 = mx_generator_new(4);
  mx_module *a = mx_gru_new(3, 4, NULL, g1), *b = mx_gru_new(3, 4, NULL, g2), *c = mx_gru_new(3, 4, NULL, g3);
  mx_manual_seed(5);
  mx_module *d = mx_gru_new(3, 4, NULL, NULL);
  mx_manual_seed(5);
  mx_module *e = mx_gru_new(3, 4, NULL, NULL);
  for (int i = 0; i < 4; i++) {
    const char *name;
    mx_tensor *pa = mx_module_parameter(a, i, &name);
    cr_expect_eq(max_abs_diff(pa, mx_module_parameter(b, i, NULL)), 0, "%s: same seed", name);
    cr_expect_gt(max_abs_diff(pa, mx_module_parameter(c, i, NULL)), 0, "%s: another seed", name);
    cr_expect_eq(max_abs_diff(mx_module_parameter(d, i, NULL), mx_module_parameter(e, i, NULL)), 0,
                 "%s: the default generator", name);
  }
  mx_module *modules[] = {a, b, c, d, e};
  for (int i = 0; i < 5; i++) mx_module_free(modules[i]);
  mx_generator_free(g1), mx_generator_free(g2), mx_generator_free(g3);
}

/* --- summaries --------------------------------------------------------------------------------------------- */

static void expect_summary(mx_module *m, const char *want) {
  cr_assert(m, "%s", mx_last_error());
  char got[200];
  describe(m, got, sizeof got);
  cr_expect_str_eq(got, want);
  mx_module_free(m);
}

/* PyTorch's repr of the same modules (the RNN layer adds its nonlinearity when it is relu). */
Test(rnn_summary, prints_like_pytorch) {
  expect_summary(mx_rnn_cell_new(3, 4, true, MX_RNN_TANH, NULL), "RNNCell(3, 4)");
  expect_summary(mx_rnn_cell_new(3, 4, false, MX_RNN_RELU, NULL), "RNNCell(3, 4, bias=False, nonlinearity=relu)");
  expect_summary(mx_lstm_cell_new(3, 4, false, NULL), "LSTMCell(3, 4, bias=False)");
  expect_summary(mx_gru_cell_new(3, 4, true, NULL), "GRUCell(3, 4)");
  mx_rnn_opts o = opts(2, true, false, 0, true);
  expect_summary(mx_lstm_new(3, 4, &o, NULL), "LSTM(3, 4, num_layers=2, bidirectional=True)");
  o = opts(2, false, true, 0.5, false);
  expect_summary(mx_gru_new(3, 4, &o, NULL), "GRU(3, 4, num_layers=2, bias=False, batch_first=True, dropout=0.5)");
  expect_summary(mx_rnn_new(3, 4, MX_RNN_TANH, NULL, NULL), "RNN(3, 4)");
  expect_summary(mx_rnn_new(3, 4, MX_RNN_RELU, NULL, NULL), "RNN(3, 4, nonlinearity=relu)");
}

Test(rnn_summary, defaults_are_pytorchs) {
  mx_rnn_opts o = mx_rnn_defaults();
  cr_expect_eq(o.num_layers, 1);
  cr_expect(o.bias);
  cr_expect_not(o.batch_first);
  cr_expect_eq(o.dropout, 0);
  cr_expect_not(o.bidirectional);
}

/* --- dropout between layers ---------------------------------------------------------------------------------- */

/* With p = 1 in training every input of layer 1 is dropped: the output is that of layer 1 alone on zeros,
 * while layer 0's final state is untouched. In eval the dropout is off: the output of the same weights with
 * dropout 0. */
Test(rnn_dropout, drops_between_layers_in_training_only) {
  mx_scope *s = mx_scope_begin();
  mx_rnn_opts o = opts(2, true, false, 1.0, false);
  mx_module *two = mx_gru_new(3, 4, &o, NULL);
  o.dropout = 0;
  mx_module *plain = mx_gru_new(3, 4, &o, NULL);
  mx_module *top = mx_gru_new(4, 4, NULL, NULL);
  cr_assert(two && plain && top, "%s", mx_last_error());
  copy_weights(plain, "_l0", two, "_l0");
  copy_weights(plain, "_l1", two, "_l1");
  copy_weights(top, "_l0", two, "_l1");
  mx_tensor *x = randn(MX_SHAPE(5, 2, 3), 1);

  mx_tensor *out, *h_n, *eval_out, *eval_h_n, *plain_out, *top_out, *top_h_n;
  cr_assert_eq(mx_gru_forward(two, x, NULL, &out, &h_n), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_gru_forward(top, mx_zeros(MX_SHAPE(5, 2, 4), MX_F32, MX_CPU), NULL, &top_out, &top_h_n), MX_OK);
  cr_expect_lt(max_abs_diff(out, top_out), 1e-6);
  cr_expect_lt(max_abs_diff(mx_select(h_n, 0, 1), mx_select(top_h_n, 0, 0)), 1e-6);

  mx_module_train(two, false);
  cr_assert_eq(mx_gru_forward(two, x, NULL, &eval_out, &eval_h_n), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_gru_forward(plain, x, NULL, &plain_out, NULL), MX_OK, "%s", mx_last_error());
  cr_expect_eq(max_abs_diff(eval_out, plain_out), 0);
  cr_expect_gt(max_abs_diff(eval_out, out), 1e-3, "training and eval must differ");
  cr_expect_eq(max_abs_diff(mx_select(eval_h_n, 0, 0), mx_select(h_n, 0, 0)), 0, "layer 0 sees no dropout");
  mx_module_free(two), mx_module_free(plain), mx_module_free(top);
  mx_scope_end(s);
}

/* p = 0.5 draws its mask from the default generator: reseeding repeats it, and gradients flow through it. */
Test(rnn_dropout, draws_from_the_default_generator) {
  mx_scope *s = mx_scope_begin();
  mx_rnn_opts o = opts(3, true, true, 0.5, true);
  mx_module *lstm = mx_lstm_new(3, 4, &o, NULL);
  cr_assert(lstm, "%s", mx_last_error());
  mx_tensor *x = randn(MX_SHAPE(2, 6, 3), 2), *out[3];
  for (int k = 0; k < 3; k++) {
    if (k < 2) mx_manual_seed(99);
    cr_assert_eq(mx_lstm_forward(lstm, x, NULL, NULL, &out[k], NULL, NULL), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(max_abs_diff(out[0], out[1]), 0, "the same seed gives the same masks");
  cr_expect_gt(max_abs_diff(out[0], out[2]), 0, "the stream moves on");
  cr_assert_eq(mx_backward(mx_sum(out[0], MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  for (int i = 0; i < mx_module_num_parameters(lstm); i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(lstm, i, &name);
    cr_expect(mx_grad_of(p), "%s has no gradient", name);
  }
  mx_module_free(lstm);
  mx_scope_end(s);
}

/* --- autocast and memory ----------------------------------------------------------------------------------- */

/* Under CPU autocast the cells run in bfloat16 (their policy is LOWER); the float32 parameters get float32
 * gradients. bf16 keeps 8 bits: outputs of order 1 within a few 2^-8 of float32's. */
Test(rnn_amp, autocast_runs_the_steps_in_bfloat16) {
  mx_scope *s = mx_scope_begin();
  mx_rnn_opts o = opts(2, true, false, 0, true);
  mx_module *lstm = mx_lstm_new(8, 16, &o, NULL);
  cr_assert(lstm, "%s", mx_last_error());
  mx_tensor *x = randn(MX_SHAPE(4, 3, 8), 3), *out32, *out16, *h16, *c16;
  cr_assert_eq(mx_lstm_forward(lstm, x, NULL, NULL, &out32, NULL, NULL), MX_OK, "%s", mx_last_error());
  MX_AUTOCAST(MX_CPU, MX_BF16, true, true) {
    cr_assert_eq(mx_lstm_forward(lstm, x, NULL, NULL, &out16, &h16, &c16), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(mx_dtype_of(out16), MX_BF16);
  cr_expect_eq(mx_dtype_of(h16), MX_BF16);
  cr_expect_eq(mx_dtype_of(c16), MX_BF16);
  double d = max_abs_diff(mx_to_dtype(out16, MX_F32), out32);
  cr_expect_lt(d, 0.05, "bf16 and f32 differ by %g", d);
  cr_expect_gt(d, 0, "autocast must change the arithmetic");
  cr_assert_eq(mx_backward(mx_sum(mx_to_dtype(out16, MX_F32), MX_ALL_DIMS, false), NULL, false), MX_OK, "%s",
               mx_last_error());
  mx_tensor *g = mx_grad_of(mx_module_get_parameter(lstm, "weight_hh_l1_reverse"));
  cr_assert(g, "no gradient");
  cr_expect_eq(mx_dtype_of(g), MX_F32);
  mx_module_free(lstm);
  mx_scope_end(s);
}

/* A forward called outside any scope leaves nothing behind but its results; releasing them frees the graph. */
Test(rnn_memory, forward_keeps_only_its_results) {
  mx_rnn_opts o = opts(2, true, true, 0, true);
  mx_module *lstm = mx_lstm_new(3, 4, &o, NULL);
  mx_module *cell = mx_gru_cell_new(3, 4, true, NULL);
  mx_tensor *x = randn(MX_SHAPE(2, 5, 3), 4), *xc = randn(MX_SHAPE(2, 3), 5);
  int64_t before = mx_memory_stats_get(MX_CPU).live_tensors;
  for (int grad = 0; grad < 2; grad++) {
    bool previous = mx_set_grad_enabled(grad);
    mx_tensor *out, *h_n, *c_n;
    cr_assert_eq(mx_lstm_forward(lstm, x, NULL, NULL, &out, &h_n, &c_n), MX_OK, "%s", mx_last_error());
    mx_tensor *h1 = mx_gru_cell_forward(cell, xc, NULL), *y = mx_module_forward(lstm, x);
    cr_assert(h1 && y, "%s", mx_last_error());
    if (!grad) /* with grad mode on, the graph holds the tensors it saved too */
      cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before + 5);
    mx_release(out), mx_release(h_n), mx_release(c_n), mx_release(h1), mx_release(y);
    cr_expect_eq(mx_memory_stats_get(MX_CPU).live_tensors, before, "grad mode %d", grad);
    mx_set_grad_enabled(previous);
  }
  mx_release(x), mx_release(xc);
  mx_module_free(lstm), mx_module_free(cell);
}

/* --- errors ---------------------------------------------------------------------------------------------------- */

Test(rnn_errors, bad_constructor_arguments) {
  EXPECT_ERROR(mx_lstm_new(0, 4, NULL, NULL), "mx_lstm_new: input_size 0 and hidden_size 4 must both be positive");
  EXPECT_ERROR(mx_gru_cell_new(3, -1, true, NULL),
               "mx_gru_cell_new: input_size 3 and hidden_size -1 must both be positive");
  mx_rnn_opts o = opts(0, true, false, 0, false);
  EXPECT_ERROR(mx_gru_new(3, 4, &o, NULL), "mx_gru_new: num_layers is 0; it must be at least 1");
  o = opts(2, true, false, 1.5, false);
  EXPECT_ERROR(mx_rnn_new(3, 4, MX_RNN_TANH, &o, NULL), "mx_rnn_new: dropout 1.5 is not a probability in [0, 1]");
  o.dropout = NAN;
  EXPECT_ERROR(mx_lstm_new(3, 4, &o, NULL), "mx_lstm_new: dropout nan is not a probability in [0, 1]");
  EXPECT_ERROR(mx_rnn_cell_new(3, 4, true, (mx_rnn_nonlinearity)7, NULL),
               "mx_rnn_cell_new: unknown nonlinearity 7 (MX_RNN_TANH or MX_RNN_RELU)");
  EXPECT_ERROR(mx_rnn_new(3, 4, (mx_rnn_nonlinearity)-1, NULL, NULL),
               "mx_rnn_new: unknown nonlinearity -1 (MX_RNN_TANH or MX_RNN_RELU)");
}

Test(rnn_errors, wrong_input_sizes_name_the_module_and_the_sizes) {
  mx_scope *s = mx_scope_begin();
  mx_rnn_opts o = opts(2, true, false, 0, false);
  mx_module *lstm = mx_lstm_new(4, 5, &o, NULL);
  o = opts(1, true, true, 0, true);
  mx_module *gru = mx_gru_new(4, 5, &o, NULL);
  mx_module *rnn = mx_rnn_new(4, 5, MX_RNN_RELU, NULL, NULL);
  mx_tensor *out = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU), *h_n = out, *c_n = out;
  EXPECT_STATUS_ERROR(mx_lstm_forward(lstm, mx_zeros(MX_SHAPE(3, 2, 7), MX_F32, MX_CPU), NULL, NULL, &out, &h_n, &c_n),
                      "mx_lstm_forward: LSTM(4, 5, num_layers=2): x of shape [3,2,7] has 7 features, expected "
                      "input_size 4");
  cr_expect(!out && !h_n && !c_n, "failed calls set their results to NULL");
  EXPECT_STATUS_ERROR(mx_lstm_forward(lstm, mx_zeros(MX_SHAPE(3, 2, 4, 1), MX_F32, MX_CPU), NULL, NULL, &out, NULL,
                                      NULL),
                      "mx_lstm_forward: LSTM(4, 5, num_layers=2): x must have shape (seq_len, batch, input_size) or "
                      "unbatched (seq_len, input_size), got [3,2,4,1]");
  EXPECT_STATUS_ERROR(mx_gru_forward(gru, mx_zeros(MX_SHAPE(4), MX_F32, MX_CPU), NULL, &out, NULL),
                      "mx_gru_forward: GRU(4, 5, batch_first=True, bidirectional=True): x must have shape (batch, "
                      "seq_len, input_size) or unbatched (seq_len, input_size), got [4]");
  EXPECT_STATUS_ERROR(mx_lstm_forward(lstm, mx_zeros(MX_SHAPE(3, 2, 4), MX_F32, MX_CPU),
                                      mx_zeros(MX_SHAPE(1, 2, 5), MX_F32, MX_CPU), NULL, &out, NULL, NULL),
                      "mx_lstm_forward: LSTM(4, 5, num_layers=2): h0 of shape [1,2,5], expected [2,2,5]");
  EXPECT_STATUS_ERROR(mx_lstm_forward(lstm, mx_zeros(MX_SHAPE(3, 2, 4), MX_F32, MX_CPU), NULL,
                                      mx_zeros(MX_SHAPE(2, 3, 5), MX_F32, MX_CPU), &out, NULL, NULL),
                      "mx_lstm_forward: LSTM(4, 5, num_layers=2): c0 of shape [2,3,5], expected [2,2,5]");
  /* batch_first: x (N=3, L=2, 4), so h0 is (2 directions, 3, 5) */
  EXPECT_STATUS_ERROR(mx_gru_forward(gru, mx_zeros(MX_SHAPE(3, 2, 4), MX_F32, MX_CPU),
                                     mx_zeros(MX_SHAPE(2, 2, 5), MX_F32, MX_CPU), &out, NULL),
                      "mx_gru_forward: GRU(4, 5, batch_first=True, bidirectional=True): h0 of shape [2,2,5], "
                      "expected [2,3,5]");
  EXPECT_STATUS_ERROR(mx_gru_forward(gru, mx_zeros(MX_SHAPE(6, 4), MX_F32, MX_CPU),
                                     mx_zeros(MX_SHAPE(2, 1, 5), MX_F32, MX_CPU), &out, NULL),
                      "mx_gru_forward: GRU(4, 5, batch_first=True, bidirectional=True): h0 of shape [2,1,5], "
                      "expected [2,5]");
  EXPECT_STATUS_ERROR(mx_rnn_forward(rnn, mx_zeros(MX_SHAPE(0, 2, 4), MX_F32, MX_CPU), NULL, &out, NULL),
                      "mx_rnn_forward: RNN(4, 5, nonlinearity=relu): x of shape [0,2,4] is an empty sequence");
  EXPECT_ERROR(mx_module_forward(lstm, mx_zeros(MX_SHAPE(3, 2, 7), MX_F32, MX_CPU)),
               "mx_module_forward: LSTM: x of shape [3,2,7] has 7 features, expected input_size 4");
  mx_module_free(lstm), mx_module_free(gru), mx_module_free(rnn);
  mx_scope_end(s);
}

Test(rnn_errors, wrong_cell_input_sizes_name_the_module_and_the_sizes) {
  mx_scope *s = mx_scope_begin();
  mx_module *lstm = mx_lstm_cell_new(4, 5, true, NULL), *gru = mx_gru_cell_new(4, 5, false, NULL);
  mx_module *rnn = mx_rnn_cell_new(4, 5, true, MX_RNN_RELU, NULL);
  mx_tensor *h = mx_ones(MX_SHAPE(1), MX_F32, MX_CPU), *c = h;
  EXPECT_STATUS_ERROR(mx_lstm_cell_forward(lstm, mx_zeros(MX_SHAPE(2, 3), MX_F32, MX_CPU), NULL, NULL, &h, &c),
                      "mx_lstm_cell_forward: LSTMCell(4, 5): x of shape [2,3] has 3 features, expected input_size 4");
  cr_expect(!h && !c, "failed calls set their results to NULL");
  EXPECT_STATUS_ERROR(mx_lstm_cell_forward(lstm, mx_zeros(MX_SHAPE(2, 4), MX_F32, MX_CPU), NULL,
                                           mx_zeros(MX_SHAPE(5), MX_F32, MX_CPU), &h, &c),
                      "mx_lstm_cell_forward: LSTMCell(4, 5): c of shape [5], expected [2,5]");
  EXPECT_ERROR(mx_gru_cell_forward(gru, mx_zeros(MX_SHAPE(2, 4), MX_F32, MX_CPU),
                                   mx_zeros(MX_SHAPE(3, 5), MX_F32, MX_CPU)),
               "mx_gru_cell_forward: GRUCell(4, 5, bias=False): h of shape [3,5], expected [2,5]");
  EXPECT_ERROR(mx_rnn_cell_forward(rnn, mx_zeros(MX_SHAPE(1, 2, 4), MX_F32, MX_CPU), NULL),
               "mx_rnn_cell_forward: RNNCell(4, 5, nonlinearity=relu): x must have shape (batch, input_size) or "
               "(input_size), got [1,2,4]");
  EXPECT_ERROR(mx_module_forward(gru, mx_zeros(MX_SHAPE(6), MX_F32, MX_CPU)),
               "mx_module_forward: GRUCell: x of shape [6] has 6 features, expected input_size 4");
  mx_module_free(lstm), mx_module_free(gru), mx_module_free(rnn);
  mx_scope_end(s);
}

Test(rnn_errors, wrong_module_or_null_arguments) {
  mx_scope *s = mx_scope_begin();
  mx_module *gru = mx_gru_new(4, 5, NULL, NULL), *cell = mx_lstm_cell_new(4, 5, true, NULL);
  mx_tensor *x = mx_zeros(MX_SHAPE(3, 2, 4), MX_F32, MX_CPU), *out;
  EXPECT_STATUS_ERROR(mx_lstm_forward(gru, x, NULL, NULL, &out, NULL, NULL),
                      "mx_lstm_forward: the module must be LSTM, got GRU(4, 5)");
  EXPECT_ERROR(mx_gru_cell_forward(cell, x, NULL),
               "mx_gru_cell_forward: the module must be GRUCell, got LSTMCell(4, 5)");
  EXPECT_ERROR(mx_rnn_cell_forward(gru, x, NULL), "mx_rnn_cell_forward: the module must be RNNCell, got GRU(4, 5)");
  EXPECT_STATUS_ERROR(mx_rnn_forward(cell, x, NULL, &out, NULL),
                      "mx_rnn_forward: the module must be RNN, got LSTMCell(4, 5)");
  EXPECT_STATUS_ERROR(mx_gru_forward(NULL, x, NULL, &out, NULL), "mx_gru_forward: argument 'm' is NULL");
  EXPECT_STATUS_ERROR(mx_gru_forward(gru, NULL, NULL, &out, NULL), "mx_gru_forward: argument 'x' is NULL");
  EXPECT_STATUS_ERROR(mx_lstm_cell_forward(cell, NULL, NULL, NULL, &out, NULL),
                      "mx_lstm_cell_forward: argument 'x' is NULL");
  mx_module_free(gru), mx_module_free(cell);
  mx_scope_end(s);
}
