/* The recurrent modules against PyTorch: every case of tests/fixtures/rnn_fixtures.txt (made by
 * tests/fixtures/make_rnn_fixtures.py): parameter names and shapes, outputs, final states and the gradients
 * of inputs, states and weights. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "torch_module_case.h"

#ifndef MX_FIXTURES_DIR
#error "MX_FIXTURES_DIR must name tests/fixtures"
#endif
#define FIXTURES MX_FIXTURES_DIR "/rnn_fixtures.txt"

/* The float32 modules against PyTorch's float64 answer for the same float32 weights and inputs, relative to
 * max(1, |expected|). A step rounds a few dozen times, and errors of order 1 units of float32's epsilon
 * compound over up to 2 layers x 4 steps, forwards and back: the worst seen is 3.7 eps (a weight gradient of
 * the bidirectional RNN); allow 32 eps (3.8e-6). */
#define TOLERANCE (32 * FLT_EPSILON)

#define MAX_NAMED 24

typedef struct {
  char id[96], kind[32];
  int64_t input_size, hidden_size;
  int num_layers, bias, batch_first, bidirectional;
  torch_named param[MAX_NAMED], input[3], weight[3], output[3], grad[MAX_NAMED];
  int n_param, n_input, n_weight, n_output, n_grad;
} rnn_case;

static bool parse_header(void *p, const char *line) {
  rnn_case *c = p;
  long long in, hidden;
  return sscanf(line, "case %95s %31s %lld %lld %d %d %d %d", c->id, c->kind, &in, &hidden, &c->num_layers,
                &c->bias, &c->batch_first, &c->bidirectional) == 8 &&
         (c->input_size = in, c->hidden_size = hidden, true);
}

/* "<param|input|weight|output|grad> <name> <tensor>" */
static bool parse_line(void *p, char *line) {
  rnn_case *c = p;
  char *save = NULL, *kind = strtok_r(line, " ", &save), *name = strtok_r(NULL, " ", &save);
  if (!kind || !name || strlen(name) >= sizeof c->param[0].name) return false;
  struct {
    const char *kind;
    torch_named *list;
    int *n, max;
  } lists[] = {{"param", c->param, &c->n_param, MAX_NAMED}, {"input", c->input, &c->n_input, 3},
               {"weight", c->weight, &c->n_weight, 3},      {"output", c->output, &c->n_output, 3},
               {"grad", c->grad, &c->n_grad, MAX_NAMED}};
  for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
    if (strcmp(kind, lists[k].kind)) continue;
    if (*lists[k].n == lists[k].max) return false;
    torch_named *e = &lists[k].list[(*lists[k].n)++];
    snprintf(e->name, sizeof e->name, "%s", name);
    return fx_parse_tensor(&save, &e->t, FX_DTYPE(MX_F32) | FX_DTYPE(MX_F64));
  }
  return false;
}

static void case_free(rnn_case *c) {
  torch_named *lists[] = {c->param, c->input, c->weight, c->output, c->grad};
  int counts[] = {c->n_param, c->n_input, c->n_weight, c->n_output, c->n_grad};
  for (int k = 0; k < 5; k++)
    for (int i = 0; i < counts[k]; i++) free(lists[k][i].t.v);
}

/* A float32 tensor of the fixture's values (in the current scope). */
static mx_tensor *tensor_of(const fx_tensor *t, bool requires_grad) {
  float *v = malloc(sizeof *v * (size_t)(t->n ? t->n : 1));
  for (int64_t i = 0; i < t->n; i++) v[i] = (float)t->v[i];
  mx_tensor *x = mx_from_data(v, t->shape, MX_F32, MX_CPU);
  free(v);
  cr_assert(x, "%s", mx_last_error());
  if (requires_grad) cr_assert_eq(mx_set_requires_grad(x, true), MX_OK, "%s", mx_last_error());
  return x;
}

static mx_module *module_of(const rnn_case *c) {
  mx_rnn_opts o = mx_rnn_defaults();
  o.num_layers = c->num_layers, o.bias = c->bias, o.batch_first = c->batch_first;
  o.bidirectional = c->bidirectional;
  int64_t in = c->input_size, hidden = c->hidden_size;
  const char *k = c->kind;
  if (!strcmp(k, "rnn_cell_tanh")) return mx_rnn_cell_new(in, hidden, c->bias, MX_RNN_TANH, NULL);
  if (!strcmp(k, "rnn_cell_relu")) return mx_rnn_cell_new(in, hidden, c->bias, MX_RNN_RELU, NULL);
  if (!strcmp(k, "lstm_cell")) return mx_lstm_cell_new(in, hidden, c->bias, NULL);
  if (!strcmp(k, "gru_cell")) return mx_gru_cell_new(in, hidden, c->bias, NULL);
  if (!strcmp(k, "rnn_tanh")) return mx_rnn_new(in, hidden, MX_RNN_TANH, &o, NULL);
  if (!strcmp(k, "rnn_relu")) return mx_rnn_new(in, hidden, MX_RNN_RELU, &o, NULL);
  if (!strcmp(k, "lstm")) return mx_lstm_new(in, hidden, &o, NULL);
  if (!strcmp(k, "gru")) return mx_gru_new(in, hidden, &o, NULL);
  cr_assert_fail("unknown kind %s", k);
  return NULL;
}

/* got (a float32 tensor) is expected elementwise within TOLERANCE (the first mismatch is reported). */
static void expect_close(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want) {
  cr_assert(got, "%s: %s is missing (%s)", id, what, mx_last_error());
  cr_assert(torch_same_shape(mx_shape_get(got), want->shape), "%s: %s has %d dims, expected %d", id, what, mx_ndim(got),
            want->shape.ndim);
  cr_assert_eq(mx_dtype_of(got), MX_F32, "%s: %s is %s", id, what, mx_dtype_name(mx_dtype_of(got)));
  float *v = malloc(sizeof *v * (size_t)want->n);
  cr_assert_eq(mx_to_host(got, v, sizeof *v * (size_t)want->n), MX_OK, "%s", mx_last_error());
  for (int64_t i = 0; i < want->n; i++) {
    double scale = fabs(want->v[i]) > 1 ? fabs(want->v[i]) : 1;
    if (!(fabs(v[i] - want->v[i]) <= TOLERANCE * scale)) {
      cr_expect_fail("%s: %s[%lld] is %.9g, PyTorch says %.12g", id, what, (long long)i, v[i], want->v[i]);
      break;
    }
  }
  free(v);
}

/* The typed forward of the case's module: outputs[k] for the names out, h_n, c_n (NULL where none). */
static void forward(const rnn_case *c, mx_module *m, mx_tensor *const in[3], mx_tensor *outs[3]) {
  const char *k = c->kind;
  mx_status status = MX_OK;
  outs[0] = outs[1] = outs[2] = NULL;
  if (!strncmp(k, "rnn_cell", 8)) outs[1] = mx_rnn_cell_forward(m, in[0], in[1]);
  else if (!strcmp(k, "gru_cell")) outs[1] = mx_gru_cell_forward(m, in[0], in[1]);
  else if (!strcmp(k, "lstm_cell")) status = mx_lstm_cell_forward(m, in[0], in[1], in[2], &outs[1], &outs[2]);
  else if (!strcmp(k, "lstm")) status = mx_lstm_forward(m, in[0], in[1], in[2], &outs[0], &outs[1], &outs[2]);
  else if (!strcmp(k, "gru")) status = mx_gru_forward(m, in[0], in[1], &outs[0], &outs[1]);
  else status = mx_rnn_forward(m, in[0], in[1], &outs[0], &outs[1]);
  cr_assert_eq(status, MX_OK, "%s: %s", c->id, mx_last_error());
  cr_assert(outs[1], "%s: %s", c->id, mx_last_error());
}

ParameterizedTestParameters(rnn_torch, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(fx_count_cases(FIXTURES), &n); /* -1 for a missing file: the test reports it */
  return cr_make_param_array(int, ids, n);
}

ParameterizedTest(int *k, rnn_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s (run tests/fixtures/make_rnn_fixtures.py)", FIXTURES);
  rnn_case *c = calloc(1, sizeof *c);
  cr_assert(fx_load_case(FIXTURES, *k, c, parse_header, parse_line), "case %d of %s does not parse", *k, FIXTURES);
  mx_module *m = module_of(c);
  cr_assert(m, "%s: %s", c->id, mx_last_error());
  mx_scope *s = mx_scope_begin();
  torch_set_parameters(c->id, c->param, c->n_param, m);

  static const char *const in_names[3] = {"x", "h0", "c0"}, *const out_names[3] = {"out", "h_n", "c_n"};
  mx_tensor *in[3] = {NULL, NULL, NULL}, *outs[3];
  for (int i = 0; i < 3; i++) {
    const fx_tensor *t = torch_find(c->input, c->n_input, in_names[i]);
    if (t) in[i] = tensor_of(t, true);
  }
  cr_assert(in[0], "%s has no input x", c->id);
  forward(c, m, in, outs);

  mx_tensor *loss = mx_scalar(0, MX_F32, MX_CPU);
  for (int i = 0; i < 3; i++) {
    const fx_tensor *want = torch_find(c->output, c->n_output, out_names[i]);
    cr_assert_eq(!want, !outs[i], "%s: %s is %s", c->id, out_names[i], outs[i] ? "unexpected" : "missing");
    if (!want) continue;
    expect_close(c->id, out_names[i], outs[i], want);
    const fx_tensor *w = torch_find(c->weight, c->n_weight, out_names[i]);
    cr_assert(w, "%s has no weight for %s", c->id, out_names[i]);
    loss = mx_add(loss, mx_sum(mx_mul(outs[i], tensor_of(w, false)), MX_ALL_DIMS, false));
  }
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s: %s", c->id, mx_last_error());
  for (int i = 0; i < c->n_grad; i++) {
    const char *name = c->grad[i].name;
    int j = 0;
    while (j < 3 && strcmp(in_names[j], name)) j++;
    const mx_tensor *of = j < 3 ? in[j] : mx_module_get_parameter(m, name);
    cr_assert(of, "%s: no tensor %s to check the gradient of", c->id, name);
    char what[64];
    snprintf(what, sizeof what, "d loss / d %s", name);
    expect_close(c->id, what, mx_grad_of(of), &c->grad[i].t);
  }
  cr_expect_eq(c->n_grad, c->n_input + c->n_param, "%s: a gradient is missing from the fixture", c->id);

  /* Without states, mx_module_forward is the typed call: the output sequence (a cell's h'), bit for bit. */
  if (!in[1]) {
    mx_tensor *y = mx_module_forward(m, in[0]);
    torch_expect_identical(c->id, "mx_module_forward", y, outs[0] ? outs[0] : outs[1]);
  }
  mx_scope_end(s);
  mx_module_free(m);
  case_free(c);
  free(c);
}

/* The fixture holds what the suite promises: each cell, both nonlinearities, 2-layer LSTM and GRU both
 * ways round, bidirectional, unbatched, without bias, without states. */
Test(rnn_torch, fixture_covers_every_configuration) {
  static const char *const ids[] = {"rnn_cell_tanh",
                                    "rnn_cell_relu",
                                    "lstm_cell",
                                    "gru_cell",
                                    "lstm_cell_unbatched",
                                    "gru_cell_unbatched_zero_state",
                                    "lstm_2_layers",
                                    "lstm_2_layers_batch_first",
                                    "lstm_2_layers_bidirectional",
                                    "lstm_2_layers_bidirectional_batch_first_zero_state",
                                    "lstm_2_layers_bidirectional_unbatched",
                                    "gru_2_layers",
                                    "gru_2_layers_batch_first_zero_state",
                                    "gru_2_layers_bidirectional",
                                    "gru_2_layers_bidirectional_batch_first",
                                    "rnn_tanh_2_layers_bidirectional_batch_first",
                                    "rnn_relu_2_layers_no_bias_zero_state"};
  char *text = fx_read_file(FIXTURES);
  cr_assert(text, "cannot read %s", FIXTURES);
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    char line[128];
    snprintf(line, sizeof line, "\ncase %s ", ids[i]);
    cr_expect(strstr(text, line), "%s has no case %s", FIXTURES, ids[i]);
  }
  free(text);
}
