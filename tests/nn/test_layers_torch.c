/* Layers against PyTorch (tests/fixtures/nn_fixtures.txt, made by tests/fixtures/make_nn_fixtures.py): with the
 * same weights, the same outputs, input and parameter gradients and running statistics, and the same parameter,
 * buffer and state_dict names. */
#include <criterion/criterion.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../ops/fixture_io.h"

#define NN_FIXTURES MX_FIXTURES_DIR "/nn_fixtures.txt"
#define MAX_ITEMS 12
#define MAX_INPUTS 4

typedef struct {
  char name[64];
  fx_tensor t;
} named_fx;

typedef struct {
  bool train;
  named_fx param[MAX_ITEMS], buffer[MAX_ITEMS], gparam[MAX_ITEMS], after[MAX_ITEMS];
  int n_param, n_buffer, n_gparam, n_after;
  char statedict[2 * MAX_ITEMS][64];
  int n_statedict;
  fx_tensor input[MAX_INPUTS], output, gy, gx;
  int n_input;
  bool has_gx;
} nn_case;

static void parse_named(char **save, named_fx *list, int *n) {
  cr_assert_lt(*n, MAX_ITEMS);
  named_fx *e = &list[(*n)++];
  snprintf(e->name, sizeof e->name, "%s", strtok_r(NULL, " ", save));
  cr_assert(fx_parse_tensor(save, &e->t, FX_DTYPE(MX_F64) | FX_DTYPE(MX_I64)), "bad tensor %s", e->name);
}

/* The case named id, parsed from the fixture file. */
static void load_case(const char *id, nn_case *c) {
  memset(c, 0, sizeof *c);
  char *buf = fx_read_file(NN_FIXTURES);
  cr_assert_not_null(buf, "cannot read %s", NN_FIXTURES);
  char header[96];
  snprintf(header, sizeof header, "\ncase %s\n", id);
  char *start = strstr(buf, header);
  cr_assert_not_null(start, "case %s is missing from %s", id, NN_FIXTURES);
  char *lines = NULL, *save = NULL;
  bool ended = false;
  char *line = strtok_r(start + strlen(header), "\n", &lines);
  for (; line && !ended; line = strtok_r(NULL, "\n", &lines)) {
    char *key = strtok_r(line, " ", &save);
    unsigned dtypes = FX_DTYPE(MX_F64) | FX_DTYPE(MX_I64);
    if (!strcmp(key, "end")) ended = true;
    else if (!strcmp(key, "mode")) c->train = !strcmp(strtok_r(NULL, " ", &save), "train");
    else if (!strcmp(key, "param")) parse_named(&save, c->param, &c->n_param);
    else if (!strcmp(key, "buffer")) parse_named(&save, c->buffer, &c->n_buffer);
    else if (!strcmp(key, "gparam")) parse_named(&save, c->gparam, &c->n_gparam);
    else if (!strcmp(key, "after")) parse_named(&save, c->after, &c->n_after);
    else if (!strcmp(key, "statedict"))
      for (char *k; (k = strtok_r(NULL, " ", &save));) snprintf(c->statedict[c->n_statedict++], 64, "%s", k);
    else if (!strcmp(key, "input"))
      cr_assert(c->n_input < MAX_INPUTS && fx_parse_tensor(&save, &c->input[c->n_input++], dtypes));
    else if (!strcmp(key, "output")) cr_assert(fx_parse_tensor(&save, &c->output, dtypes));
    else if (!strcmp(key, "gy")) cr_assert(fx_parse_tensor(&save, &c->gy, dtypes));
    else if (!strcmp(key, "gx")) cr_assert(c->has_gx = fx_parse_tensor(&save, &c->gx, dtypes));
    else cr_assert_fail("case %s: unknown line '%s'", id, key);
  }
  cr_assert(ended, "case %s has no end", id);
  free(buf);
}

static void free_case(nn_case *c) {
  for (int i = 0; i < c->n_param; i++) free(c->param[i].t.v);
  for (int i = 0; i < c->n_buffer; i++) free(c->buffer[i].t.v);
  for (int i = 0; i < c->n_gparam; i++) free(c->gparam[i].t.v);
  for (int i = 0; i < c->n_after; i++) free(c->after[i].t.v);
  for (int i = 0; i < c->n_input; i++) free(c->input[i].v);
  free(c->output.v), free(c->gy.v), free(c->gx.v);
}

/* The fixture's values as a tensor of dtype (in the current scope). */
static mx_tensor *tensor_of(const fx_tensor *t, mx_dtype dtype) {
  mx_tensor *x = mx_to_dtype(mx_from_data(t->v, t->shape, MX_F64, MX_CPU), dtype);
  cr_assert_not_null(x, "%s", mx_last_error());
  return x;
}

static void expect_shape(const char *what, const mx_tensor *a, mx_shape want) {
  mx_shape got = mx_shape_get(a);
  cr_assert_eq(got.ndim, want.ndim, "%s: %d dims, PyTorch %d", what, got.ndim, want.ndim);
  for (int d = 0; d < got.ndim; d++)
    cr_assert_eq(got.d[d], want.d[d], "%s: size %lld in dim %d, PyTorch %lld", what, (long long)got.d[d], d,
                 (long long)want.d[d]);
}

/* a (float32, any shape) against PyTorch's float64 values: float32 rounding through reductions of up to 64 terms
 * stays within 64 ulp of the largest value. NULL a means zeros (a gradient never computed). */
static void expect_close(const char *id, const char *what, const mx_tensor *a, const fx_tensor *want) {
  double scale = 1;
  for (int64_t k = 0; k < want->n; k++) scale = fmax(scale, fabs(want->v[k]));
  double tol = 64 * FLT_EPSILON * scale;
  double *got = calloc((size_t)want->n + 1, sizeof *got);
  if (a) {
    expect_shape(what, a, want->shape);
    cr_assert_eq(mx_to_host(mx_to_dtype(a, MX_F64), got, sizeof(double) * (size_t)want->n), MX_OK, "%s",
                 mx_last_error());
  }
  for (int64_t k = 0; k < want->n; k++)
    cr_expect(fabs(got[k] - want->v[k]) <= tol, "%s: %s[%lld] = %.9g, PyTorch %.9g (tolerance %.3g)", id, what,
              (long long)k, got[k], want->v[k], tol);
  free(got);
}

static void run_case(const char *id, mx_module *m) {
  cr_assert_not_null(m, "%s: %s", id, mx_last_error());
  nn_case c;
  load_case(id, &c);
  mx_module_train(m, c.train);
  mx_scope *s = mx_scope_begin();

  /* the names, in PyTorch's order, and the fixture's values */
  cr_assert_eq(mx_module_num_parameters(m), c.n_param, "%s: %d parameters, PyTorch %d", id,
               mx_module_num_parameters(m), c.n_param);
  for (int i = 0; i < c.n_param; i++) {
    const char *name;
    mx_tensor *p = mx_module_parameter(m, i, &name);
    cr_expect_str_eq(name, c.param[i].name, "%s: parameter %d", id, i);
    expect_shape(name, p, c.param[i].t.shape);
    cr_assert_eq(mx_copy_(p, tensor_of(&c.param[i].t, MX_F64)), MX_OK, "%s", mx_last_error());
  }
  cr_assert_eq(mx_module_num_buffers(m), c.n_buffer, "%s: %d buffers, PyTorch %d", id, mx_module_num_buffers(m),
               c.n_buffer);
  for (int i = 0; i < c.n_buffer; i++) {
    const char *name;
    mx_tensor *b = mx_module_buffer(m, i, &name);
    cr_expect_str_eq(name, c.buffer[i].name, "%s: buffer %d", id, i);
    cr_expect_eq(mx_dtype_of(b), c.buffer[i].t.dtype == MX_I64 ? MX_I64 : MX_F32, "%s: buffer %s's dtype", id, name);
    expect_shape(name, b, c.buffer[i].t.shape);
    cr_assert_eq(mx_copy_(b, tensor_of(&c.buffer[i].t, MX_F64)), MX_OK, "%s", mx_last_error());
  }
  cr_expect_eq(c.n_statedict, c.n_param + c.n_buffer, "%s: state_dict has %d keys", id, c.n_statedict);
  for (int k = 0; k < c.n_statedict; k++)
    cr_expect(mx_module_get_parameter(m, c.statedict[k]) || mx_module_get_buffer(m, c.statedict[k]),
              "%s: state_dict key %s is neither a parameter nor a buffer", id, c.statedict[k]);

  /* the forwards, then the gradients of sum(y * gy) */
  mx_tensor *x = NULL, *y = NULL;
  for (int j = 0; j < c.n_input; j++) {
    bool indices = c.input[j].dtype == MX_I64;
    x = tensor_of(&c.input[j], indices ? MX_I64 : MX_F32);
    if (!indices) cr_assert_eq(mx_set_requires_grad(x, true), MX_OK);
    y = mx_module_forward(m, x);
    cr_assert_not_null(y, "%s: %s", id, mx_last_error());
  }
  expect_close(id, "y", y, &c.output);
  cr_assert_eq(mx_backward(mx_sum(mx_mul(y, tensor_of(&c.gy, MX_F32)), MX_ALL_DIMS, false), NULL, false), MX_OK,
               "%s: %s", id, mx_last_error());
  if (c.has_gx) expect_close(id, "grad x", mx_grad_of(x), &c.gx);
  cr_assert_eq(c.n_gparam, c.n_param);
  for (int i = 0; i < c.n_gparam; i++)
    expect_close(id, c.gparam[i].name, mx_grad_of(mx_module_get_parameter(m, c.gparam[i].name)), &c.gparam[i].t);
  for (int i = 0; i < c.n_after; i++)
    expect_close(id, c.after[i].name, mx_module_get_buffer(m, c.after[i].name), &c.after[i].t);

  mx_scope_end(s);
  mx_module_free(m);
  free_case(&c);
}

#define LAYER_CASE(id, make) \
  Test(nn_torch, id) { run_case(#id, make); }

LAYER_CASE(linear, mx_linear_new(4, 3, true, NULL))
LAYER_CASE(linear_batched_nobias, mx_linear_new(5, 2, false, NULL))
LAYER_CASE(bilinear, mx_bilinear_new(3, 2, 4, true, NULL))
LAYER_CASE(conv1d_stride2_pad1_groups2,
           mx_conv1d_new(4, 6, MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DEFAULT, 2, true, NULL))
LAYER_CASE(conv2d_mixed, mx_conv2d_new(3, 4, MX_DIMS(3, 2), MX_DIMS(2, 1), MX_DIMS(1, 0), MX_DIMS(1, 2), 1, true, NULL))
LAYER_CASE(conv3d_groups2_nobias, mx_conv3d_new(2, 4, MX_DIMS(2), MX_DEFAULT, MX_DIMS(1), MX_DEFAULT, 2, false, NULL))
LAYER_CASE(conv_transpose1d_outpad,
           mx_conv_transpose1d_new(3, 4, MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DIMS(1), MX_DEFAULT, 1, true, NULL))
LAYER_CASE(conv_transpose2d_groups2,
           mx_conv_transpose2d_new(4, 6, MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DIMS(1, 0), MX_DEFAULT, 2, true, NULL))
LAYER_CASE(conv_transpose3d_dilation,
           mx_conv_transpose3d_new(2, 2, MX_DIMS(2), MX_DIMS(2), MX_DEFAULT, MX_DIMS(1), MX_DIMS(2), 1, true, NULL))
LAYER_CASE(batch_norm1d_train, mx_batch_norm1d_new(3, 1e-5, 0.1, true, true))
LAYER_CASE(batch_norm1d_train_3d_momentum, mx_batch_norm1d_new(3, 1e-5, 0.3, true, true))
LAYER_CASE(batch_norm2d_train, mx_batch_norm2d_new(3, 1e-5, 0.1, true, true))
LAYER_CASE(batch_norm2d_eval, mx_batch_norm2d_new(3, 1e-3, 0.1, true, true))
LAYER_CASE(batch_norm2d_cumulative, mx_batch_norm2d_new(2, 1e-5, NAN, true, true))
LAYER_CASE(batch_norm2d_no_stats_eval, mx_batch_norm2d_new(3, 1e-5, 0.1, true, false))
LAYER_CASE(batch_norm3d_train_noaffine, mx_batch_norm3d_new(2, 1e-5, 0.1, false, true))
LAYER_CASE(layer_norm, mx_layer_norm_new(MX_SHAPE(3, 4), 1e-5, true))
LAYER_CASE(layer_norm_noaffine, mx_layer_norm_new(MX_SHAPE(5), 1e-3, false))
LAYER_CASE(group_norm, mx_group_norm_new(2, 4, 1e-5, true))
LAYER_CASE(embedding, mx_embedding_new(10, 3, MX_NO_PADDING_IDX, NULL))
LAYER_CASE(embedding_padding, mx_embedding_new(6, 2, -5, NULL))
LAYER_CASE(max_pool1d, mx_max_pool1d_new(MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), MX_DEFAULT))
LAYER_CASE(max_pool2d_dilation, mx_max_pool2d_new(MX_DIMS(3, 2), MX_DIMS(2, 1), MX_DIMS(1, 0), MX_DIMS(1, 2)))
LAYER_CASE(max_pool3d, mx_max_pool3d_new(MX_DIMS(2), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT))
LAYER_CASE(avg_pool1d, mx_avg_pool1d_new(MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), true))
LAYER_CASE(avg_pool2d_exclude_pad, mx_avg_pool2d_new(MX_DIMS(3), MX_DIMS(2), MX_DIMS(1), false))
LAYER_CASE(avg_pool3d, mx_avg_pool3d_new(MX_DIMS(2, 2, 1), MX_DEFAULT, MX_DEFAULT, true))
LAYER_CASE(adaptive_avg_pool2d, mx_adaptive_avg_pool2d_new(2, 3))
LAYER_CASE(flatten, mx_flatten_new(1, -1))
LAYER_CASE(flatten_1_2, mx_flatten_new(1, 2))
LAYER_CASE(identity, mx_identity_new())
LAYER_CASE(relu, mx_relu_new())
LAYER_CASE(leaky_relu, mx_leaky_relu_new(0.2))
LAYER_CASE(prelu_channels, mx_prelu_new(3, 0.25))
LAYER_CASE(prelu_default, mx_prelu_new(1, 0.25))
LAYER_CASE(gelu, mx_gelu_new(false))
LAYER_CASE(gelu_tanh, mx_gelu_new(true))
LAYER_CASE(silu, mx_silu_new())
LAYER_CASE(tanh, mx_tanh_new())
LAYER_CASE(sigmoid, mx_sigmoid_new())
LAYER_CASE(softmax, mx_softmax_new(1))
LAYER_CASE(log_softmax, mx_log_softmax_new(-1))
LAYER_CASE(dropout_eval, mx_dropout_new(0.5, NULL))
LAYER_CASE(sequential_conv_bn_mlp,
           mx_sequential_new(5, (mx_module *[]){mx_conv2d_new(1, 4, MX_DIMS(3), MX_DEFAULT, MX_DEFAULT, MX_DEFAULT, 1,
                                                              true, NULL),
                                                mx_batch_norm2d_new(4, 1e-5, 0.1, true, true), mx_relu_new(),
                                                mx_flatten_new(1, -1), mx_linear_new(4 * 4 * 4, 5, true, NULL)}))
LAYER_CASE(residual,
           mx_residual_new(mx_sequential_new(2, (mx_module *[]){mx_linear_new(4, 4, true, NULL), mx_tanh_new()}),
                           mx_linear_new(4, 4, true, NULL)))

Test(nn_torch, every_fixture_case_has_a_test) {
  cr_expect_eq(fx_count_cases(NN_FIXTURES), 45, "update the LAYER_CASE list with tests/fixtures/make_nn_fixtures.py");
}
