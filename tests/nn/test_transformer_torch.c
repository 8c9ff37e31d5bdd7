/* MultiheadAttention and the Transformer layers against PyTorch: every case of
 * tests/fixtures/transformer_fixtures.txt (made by tests/fixtures/make_transformer.py): parameter names and
 * shapes, outputs and the gradients of inputs and weights, in float32 and under bf16 autocast; the untyped
 * calls (mx_module_forward, mx_module_forward_n) give the typed call's result bit for bit. */
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
#define FIXTURES MX_FIXTURES_DIR "/transformer_fixtures.txt"

/* float32 against PyTorch's float64 answer for the same float32 weights and inputs, relative to
 * max(1, |expected|): a layer rounds a few hundred times (products of 8 to 16 terms, softmax, layer norm) and the
 * gradients go back through all of it; the worst seen is 9.2 eps (the gradient of in_proj_bias through a
 * post-norm encoder); allow 32 eps. */
#define F32_TOLERANCE (32 * FLT_EPSILON)
/* Under bf16 autocast the products take bf16 operands (8 significant bits: a relative error of 2^-9 each), layer
 * norm and softmax run in float32. Relative to the largest |expected| of the tensor, the worst seen is 2.2% (the
 * gradient of a decoder's norm2.bias); allow 6%, far below a wrong answer's error (of the order of 100%). */
#define BF16_TOLERANCE 0.06

#define MAX_NAMED 24

typedef struct {
  char id[96], kind[16], activation[8];
  int64_t d_model, nhead, dim_feedforward;
  int norm_first, bias, causal, memory_causal;
  torch_named param[MAX_NAMED], input[3], mask[4], weight[1], output[1], grad[MAX_NAMED];
  int n_param, n_input, n_mask, n_weight, n_output, n_grad;
} layer_case;

static bool parse_header(void *p, const char *line) {
  layer_case *c = p;
  long long d, h, ff;
  return sscanf(line, "case %95s %15s %lld %lld %lld %7s %d %d %d %d", c->id, c->kind, &d, &h, &ff, c->activation,
                &c->norm_first, &c->bias, &c->causal, &c->memory_causal) == 10 &&
         (c->d_model = d, c->nhead = h, c->dim_feedforward = ff, true);
}

/* "<param|input|mask|weight|output|grad> <name> <tensor>" */
static bool parse_line(void *p, char *line) {
  layer_case *c = p;
  char *save = NULL, *kind = strtok_r(line, " ", &save), *name = strtok_r(NULL, " ", &save);
  if (!kind || !name || strlen(name) >= sizeof c->param[0].name) return false;
  struct {
    const char *kind;
    torch_named *list;
    int *n, max;
  } lists[] = {{"param", c->param, &c->n_param, MAX_NAMED}, {"input", c->input, &c->n_input, 3},
               {"mask", c->mask, &c->n_mask, 4},           {"weight", c->weight, &c->n_weight, 1},
               {"output", c->output, &c->n_output, 1},     {"grad", c->grad, &c->n_grad, MAX_NAMED}};
  for (size_t k = 0; k < sizeof lists / sizeof *lists; k++) {
    if (strcmp(kind, lists[k].kind)) continue;
    if (*lists[k].n == lists[k].max) return false;
    torch_named *e = &lists[k].list[(*lists[k].n)++];
    snprintf(e->name, sizeof e->name, "%s", name);
    return fx_parse_tensor(&save, &e->t, FX_DTYPE(MX_F32) | FX_DTYPE(MX_F64) | FX_DTYPE(MX_BOOL));
  }
  return false;
}

static void case_free(layer_case *c) {
  torch_named *lists[] = {c->param, c->input, c->mask, c->weight, c->output, c->grad};
  int counts[] = {c->n_param, c->n_input, c->n_mask, c->n_weight, c->n_output, c->n_grad};
  for (int k = 0; k < 6; k++)
    for (int i = 0; i < counts[k]; i++) free(lists[k][i].t.v);
}

/* The fixture's tensor in its dtype (in the current scope), a leaf that requires grad when asked. */
static mx_tensor *tensor_of(const fx_tensor *t, bool requires_grad) {
  mx_tensor *x = fx_to_mx(t);
  cr_assert(x, "%s", mx_last_error());
  if (requires_grad) cr_assert_eq(mx_set_requires_grad(x, true), MX_OK, "%s", mx_last_error());
  return x;
}

static mx_module *module_of(const layer_case *c) {
  if (!strncmp(c->kind, "mha", 3)) return mx_multihead_attention_new(c->d_model, c->nhead, 0.0, c->bias, NULL);
  mx_transformer_opts o = mx_transformer_defaults();
  o.dim_feedforward = c->dim_feedforward, o.dropout = 0.0, o.norm_first = c->norm_first;
  o.activation = !strcmp(c->activation, "gelu") ? MX_TRANSFORMER_GELU : MX_TRANSFORMER_RELU;
  if (!strcmp(c->kind, "encoder")) return mx_transformer_encoder_layer_new(c->d_model, c->nhead, &o, NULL);
  return mx_transformer_decoder_layer_new(c->d_model, c->nhead, &o, NULL);
}

/* got is expected elementwise within tol: relative to max(1, |expected|) (absolute false), or to the largest
 * |expected| of the tensor (absolute true). The first mismatch is reported. */
static void expect_close(const char *id, const char *what, const mx_tensor *got, const fx_tensor *want, double tol,
                         bool absolute) {
  cr_assert(got, "%s: %s is missing (%s)", id, what, mx_last_error());
  cr_assert(torch_same_shape(mx_shape_get(got), want->shape), "%s: %s has %d dims, expected %d", id, what, mx_ndim(got),
            want->shape.ndim);
  double *v = malloc(sizeof *v * (size_t)want->n), largest = 0;
  cr_assert_eq(mx_to_host(mx_to_dtype(got, MX_F64), v, sizeof *v * (size_t)want->n), MX_OK, "%s", mx_last_error());
  for (int64_t i = 0; i < want->n; i++) largest = fmax(largest, fabs(want->v[i]));
  for (int64_t i = 0; i < want->n; i++) {
    double scale = absolute ? largest : fmax(1, fabs(want->v[i]));
    if (!(fabs(v[i] - want->v[i]) <= tol * scale)) {
      cr_expect_fail("%s: %s[%lld] is %.9g, PyTorch says %.12g (tolerance %g of %g)", id, what, (long long)i, v[i],
                     want->v[i], tol, scale);
      break;
    }
  }
  free(v);
}

/* The case's inputs and masks as tensors (inputs requiring grad). */
typedef struct {
  mx_tensor *in[3];
  const char *in_names[3];
  int n_in;
  mx_tensor *kpm, *attn, *memory_kpm, *memory_attn;
} case_inputs;

static case_inputs inputs_of(const layer_case *c) {
  case_inputs ci = {0};
  for (int i = 0; i < c->n_input; i++) {
    ci.in[i] = tensor_of(&c->input[i].t, true);
    ci.in_names[i] = c->input[i].name;
  }
  ci.n_in = c->n_input;
  const char *slots[4] = {"key_padding_mask", "attn_mask", "memory_key_padding_mask", "memory_mask"};
  mx_tensor **to[4] = {&ci.kpm, &ci.attn, &ci.memory_kpm, &ci.memory_attn};
  for (int k = 0; k < 4; k++) {
    const fx_tensor *t = torch_find(c->mask, c->n_mask, slots[k]);
    if (t) *to[k] = tensor_of(t, false);
  }
  return ci;
}

/* The typed forward of the case's module. */
static mx_tensor *forward(const layer_case *c, mx_module *m, const case_inputs *ci) {
  mx_attention_mask mask = {.attn_mask = ci->attn, .key_padding_mask = ci->kpm, .is_causal = c->causal};
  mx_attention_mask memory_mask = {.attn_mask = ci->memory_attn, .key_padding_mask = ci->memory_kpm,
                                   .is_causal = c->memory_causal};
  mx_tensor *out;
  if (!strcmp(c->kind, "mha_self")) out = mx_multihead_attention_forward(m, ci->in[0], ci->in[0], ci->in[0], &mask);
  else if (!strcmp(c->kind, "mha")) out = mx_multihead_attention_forward(m, ci->in[0], ci->in[1], ci->in[2], &mask);
  else if (!strcmp(c->kind, "encoder")) out = mx_transformer_encoder_layer_forward(m, ci->in[0], &mask);
  else out = mx_transformer_decoder_layer_forward(m, ci->in[0], ci->in[1], &mask, &memory_mask);
  cr_assert(out, "%s: %s", c->id, mx_last_error());
  return out;
}

/* Runs the case (under autocast to dtype unless MX_F32) and compares the output and every gradient. */
static void check_case(const layer_case *c, mx_module *m, mx_dtype dtype) {
  mx_scope *s = mx_scope_begin();
  for (int i = 0; i < mx_module_num_parameters(m); i++) mx_zero_grad(mx_module_parameter(m, i, NULL));
  case_inputs ci = inputs_of(c);
  mx_tensor *out = NULL;
  if (dtype == MX_F32) out = forward(c, m, &ci);
  else {
    MX_AUTOCAST(MX_CPU, dtype, true, true) { out = forward(c, m, &ci); }
  }
  double tol = dtype == MX_F32 ? F32_TOLERANCE : BF16_TOLERANCE;
  bool absolute = dtype != MX_F32;
  char what[96];
  snprintf(what, sizeof what, "out (%s)", mx_dtype_name(dtype));
  expect_close(c->id, what, out, &c->output[0].t, tol, absolute);
  mx_tensor *loss = mx_sum(mx_mul(mx_to_dtype(out, MX_F32), tensor_of(&c->weight[0].t, false)), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s: %s", c->id, mx_last_error());
  for (int i = 0; i < c->n_grad; i++) {
    const char *name = c->grad[i].name;
    int j = 0;
    while (j < ci.n_in && strcmp(ci.in_names[j], name)) j++;
    const mx_tensor *of = j < ci.n_in ? ci.in[j] : mx_module_get_parameter(m, name);
    cr_assert(of, "%s: no tensor %s to check the gradient of", c->id, name);
    snprintf(what, sizeof what, "d loss / d %s (%s)", name, mx_dtype_name(dtype));
    expect_close(c->id, what, mx_grad_of(of), &c->grad[i].t, tol, absolute);
  }
  cr_expect_eq(c->n_grad, c->n_input + c->n_param, "%s: a gradient is missing from the fixture", c->id);

  /* Without is_causal, the untyped calls take the same masks as tensors: the typed result, bit for bit. */
  if (dtype == MX_F32 && !c->causal && !c->memory_causal) {
    mx_tensor *y = NULL;
    mx_status st;
    if (!strcmp(c->kind, "mha_self"))
      st = mx_module_forward_n(m, 5, (const mx_tensor *[]){ci.in[0], NULL, NULL, ci.kpm, ci.attn}, 1, &y);
    else if (!strcmp(c->kind, "mha"))
      st = mx_module_forward_n(m, 5, (const mx_tensor *[]){ci.in[0], ci.in[1], ci.in[2], ci.kpm, ci.attn}, 1, &y);
    else if (!strcmp(c->kind, "encoder"))
      st = mx_module_forward_n(m, 3, (const mx_tensor *[]){ci.in[0], ci.kpm, ci.attn}, 1, &y);
    else
      st = mx_module_forward_n(m, 6, (const mx_tensor *[]){ci.in[0], ci.in[1], ci.kpm, ci.attn, ci.memory_kpm,
                                                           ci.memory_attn}, 1, &y);
    cr_assert_eq(st, MX_OK, "%s: %s", c->id, mx_last_error());
    torch_expect_identical(c->id, "mx_module_forward_n", y, out);
    if (!ci.kpm && !ci.attn && strcmp(c->kind, "decoder") && strcmp(c->kind, "mha"))
      torch_expect_identical(c->id, "mx_module_forward", mx_module_forward(m, ci.in[0]), out);
  }
  mx_scope_end(s);
}

ParameterizedTestParameters(transformer_torch, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(fx_count_cases(FIXTURES), &n); /* -1 for a missing file: the test reports it */
  return cr_make_param_array(int, ids, n);
}

ParameterizedTest(int *k, transformer_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s (run tests/fixtures/make_transformer.py)", FIXTURES);
  layer_case *c = calloc(1, sizeof *c);
  cr_assert(fx_load_case(FIXTURES, *k, c, parse_header, parse_line), "case %d of %s does not parse", *k, FIXTURES);
  mx_module *m = module_of(c);
  cr_assert(m, "%s: %s", c->id, mx_last_error());
  mx_scope *s = mx_scope_begin();
  torch_set_parameters(c->id, c->param, c->n_param, m);
  check_case(c, m, MX_F32);
  check_case(c, m, MX_BF16);
  mx_scope_end(s);
  mx_module_free(m);
  case_free(c);
  free(c);
}

/* The fixture holds what the suite promises: self and cross attention, both mask kinds in bool and float, per-head
 * masks, causal, unbatched, without bias; both layers pre- and post-norm with both activations. */
Test(transformer_torch, fixture_covers_every_configuration) {
  static const char *const ids[] = {"mha_self_no_mask",
                                    "mha_self_causal_padding",
                                    "mha_cross_padding",
                                    "mha_cross_no_bias",
                                    "mha_cross_float_attn_mask",
                                    "mha_cross_float_padding",
                                    "mha_self_bool_mask_per_head",
                                    "mha_self_unbatched",
                                    "encoder_post_norm_relu",
                                    "encoder_pre_norm_gelu_causal_padding",
                                    "encoder_post_norm_gelu_bool_mask",
                                    "decoder_post_norm_relu_causal_memory_padding",
                                    "decoder_pre_norm_gelu",
                                    "decoder_pre_norm_relu_float_memory_mask"};
  char *text = fx_read_file(FIXTURES);
  cr_assert(text, "cannot read %s", FIXTURES);
  for (size_t i = 0; i < sizeof ids / sizeof *ids; i++) {
    char line[128];
    snprintf(line, sizeof line, "\ncase %s ", ids[i]);
    cr_expect(strstr(text, line), "%s has no case %s", FIXTURES, ids[i]);
  }
  free(text);
}
