/* The composite ops of ops/composites.h: values and gradients against
 * PyTorch (tests/fixtures/composite_fixtures.txt, written by
 * tests/fixtures/make_composite_fixtures.py with torch 1.13), gradcheck on
 * the same inputs (gradgradcheck for linear, lstm_cell and einsum),
 * multi_dot's order, attention's dropout and empty rows, the op table's
 * policies, and the exact messages of bad inputs. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include "fixture_io.h"
#include "op_checks.h"
#include "op_cases.h"
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mixgrad.h>

#ifndef MX_FIXTURES_DIR
#error "MX_FIXTURES_DIR must name tests/fixtures"
#endif
#define FIXTURES MX_FIXTURES_DIR "/composite_fixtures.txt"
/* float64 against PyTorch's float64: the relative tolerance of fx_expect_matches */
#define TORCH_RTOL 1e-10

#define MAX_IN 8
#define LIST(...) ((mx_tensor *[]){__VA_ARGS__})
#define MAX_OUT 2

/* --- the fixture file -------------------------------------------------------------------------- */

typedef struct {
  char id[96], op[64], args[256];
  int n_in, n_out;
  fx_tensor in[MAX_IN], out[MAX_OUT], weight[MAX_OUT], grad[MAX_IN];
  bool has_weight, has_grad[MAX_IN];
} fx_case;

#define COMPOSITE_DTYPES (FX_DTYPE(MX_F64) | FX_DTYPE(MX_BOOL))

static bool parse_header(void *p, const char *line) {
  fx_case *c = p;
  int used = 0;
  if (sscanf(line, "case %95s %63s%n", c->id, c->op, &used) != 2) return false;
  snprintf(c->args, sizeof c->args, "%s", line + used);
  return true;
}

/* "input|grad <i> <tensor>" (i < MAX_IN) or "output|weight <i> <tensor>" (i < MAX_OUT). */
static bool parse_line(void *p, char *line) {
  fx_case *c = p;
  char *save = NULL;
  char *kind = strtok_r(line, " ", &save);
  if (!kind) return true;
  char *tok = strtok_r(NULL, " ", &save);
  int i = tok ? atoi(tok) : -1;
  if (!strcmp(kind, "input") && i >= 0 && i < MAX_IN) {
    if (!fx_parse_tensor(&save, &c->in[i], COMPOSITE_DTYPES)) return false;
    c->n_in = i + 1 > c->n_in ? i + 1 : c->n_in;
  } else if (!strcmp(kind, "grad") && i >= 0 && i < MAX_IN) {
    if (!fx_parse_tensor(&save, &c->grad[i], COMPOSITE_DTYPES)) return false;
    c->has_grad[i] = true;
  } else if (!strcmp(kind, "output") && i >= 0 && i < MAX_OUT) {
    if (!fx_parse_tensor(&save, &c->out[i], COMPOSITE_DTYPES)) return false;
    c->n_out = i + 1 > c->n_out ? i + 1 : c->n_out;
  } else if (!strcmp(kind, "weight") && i >= 0 && i < MAX_OUT) {
    if (!fx_parse_tensor(&save, &c->weight[i], COMPOSITE_DTYPES)) return false;
    c->has_weight = true;
  } else {
    return false;
  }
  return true;
}

static bool load_case(int k, fx_case *c) {
  memset(c, 0, sizeof *c);
  return fx_load_case(FIXTURES, k, c, parse_header, parse_line);
}

static void free_case(fx_case *c) {
  for (int i = 0; i < MAX_IN; i++) free(c->in[i].v), free(c->grad[i].v);
  for (int k = 0; k < MAX_OUT; k++) free(c->out[k].v), free(c->weight[k].v);
}

/* --- the op of a case, with its arguments ---------------------------------------------------------- */

static double arg_f(const char *args, const char *key, double fallback) {
  const char *v = fx_arg(args, key);
  return v ? strtod(v, NULL) : fallback;
}

static mx_shape arg_list(const char *args, const char *key) {
  mx_shape s = {0};
  const char *v = fx_arg(args, key);
  while (v && *v && *v != ' ' && s.ndim < MX_MAX_DIMS) {
    char *end;
    s.d[s.ndim++] = strtoll(v, &end, 10);
    v = *end == ',' ? end + 1 : end;
  }
  return s;
}

typedef struct {
  const char *op, *args;
} op_call;

/* Runs the op on in[0..n): its outputs into out[], how many (0 on error). */
static int run_op(const op_call *call, int n, mx_tensor *const *in, mx_tensor **out) {
  const char *op = call->op, *a = call->args;
  mx_tensor *opt1 = NULL, *opt2 = NULL;
  out[0] = out[1] = NULL;
  if (!strcmp(op, "linear")) out[0] = mx_linear(in[0], in[1], n > 2 ? in[2] : NULL);
  else if (!strcmp(op, "bilinear")) out[0] = mx_bilinear(in[0], in[1], in[2], n > 3 ? in[3] : NULL);
  else if (!strcmp(op, "prelu")) out[0] = mx_prelu(in[0], in[1]);
  else if (!strcmp(op, "rnn_tanh_cell") || !strcmp(op, "rnn_relu_cell") || !strcmp(op, "gru_cell")) {
    opt1 = n > 4 ? in[4] : NULL, opt2 = n > 5 ? in[5] : NULL;
    mx_tensor *(*cell)(const mx_tensor *, const mx_tensor *, const mx_tensor *, const mx_tensor *, const mx_tensor *,
                       const mx_tensor *) = op[0] == 'g' ? mx_gru_cell : op[4] == 't' ? mx_rnn_tanh_cell : mx_rnn_relu_cell;
    out[0] = cell(in[0], in[1], in[2], in[3], opt1, opt2);
  } else if (!strcmp(op, "lstm_cell")) {
    opt1 = n > 5 ? in[5] : NULL, opt2 = n > 6 ? in[6] : NULL;
    if (mx_lstm_cell(in[0], in[1], in[2], in[3], in[4], opt1, opt2, &out[0], &out[1]) != MX_OK) return 0;
    return 2;
  } else if (!strcmp(op, "sdpa")) {
    out[0] = mx_scaled_dot_product_attention(in[0], in[1], in[2], n > 3 ? in[3] : NULL, 0, arg_f(a, "causal", 0) != 0,
                                             arg_f(a, "scale", 0), NULL);
  } else if (!strcmp(op, "chain_matmul")) out[0] = mx_chain_matmul(n, in);
  else if (!strcmp(op, "multi_dot")) out[0] = mx_multi_dot(n, in);
  else if (!strcmp(op, "einsum")) {
    char eq[64] = {0};
    const char *v = fx_arg(a, "eq");
    if (v) snprintf(eq, sizeof eq, "%.*s", (int)strcspn(v, " "), v);
    out[0] = mx_einsum(eq, n, in);
  } else if (!strcmp(op, "cross")) out[0] = mx_cross(in[0], in[1], (int)arg_f(a, "dim", -1));
  else if (!strcmp(op, "tensordot")) {
    out[0] = fx_arg(a, "count") ? mx_tensordot(in[0], in[1], (int64_t)arg_f(a, "count", 0))
                                 : mx_tensordot_dims(in[0], in[1], arg_list(a, "da"), arg_list(a, "db"));
  } else if (!strcmp(op, "normalize"))
    out[0] = mx_normalize(in[0], arg_f(a, "p", 2), (int)arg_f(a, "dim", 1), arg_f(a, "eps", 1e-12));
  else if (!strcmp(op, "dist")) out[0] = mx_dist(in[0], in[1], arg_f(a, "p", 2));
  else if (!strcmp(op, "cdist")) out[0] = mx_cdist(in[0], in[1], arg_f(a, "p", 2));
  else if (!strcmp(op, "pdist")) out[0] = mx_pdist(in[0], arg_f(a, "p", 2));
  else if (!strcmp(op, "cosine_similarity"))
    out[0] = mx_cosine_similarity(in[0], in[1], (int)arg_f(a, "dim", 1), arg_f(a, "eps", 1e-8));
  else if (!strcmp(op, "renorm"))
    out[0] = mx_renorm(in[0], arg_f(a, "p", 2), (int)arg_f(a, "dim", 0), arg_f(a, "maxnorm", 1));
  else cr_assert_fail("no op named %s", op);
  return out[0] ? 1 : 0;
}

/* --- values and gradients against PyTorch ---------------------------------------------------------- */

ParameterizedTestParameters(composite_torch, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(fx_count_cases(FIXTURES), &n);
  return OP_PARAMS(ids, n);
}

static void load_inputs(const fx_case *c, mx_tensor **in, bool grads) {
  for (int i = 0; i < c->n_in; i++) {
    in[i] = fx_to_mx(&c->in[i]);
    cr_assert_not_null(in[i], "%s: input %d: %s", c->id, i, mx_last_error());
    if (grads && c->in[i].dtype == MX_F64) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK);
  }
}

ParameterizedTest(int *k, composite_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s (run tests/fixtures/make_composite_fixtures.py)", FIXTURES);
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *in[MAX_IN] = {0}, *out[MAX_OUT] = {0};
  load_inputs(&c, in, c.has_weight);
  op_call call = {c.op, c.args};
  int n_out = run_op(&call, c.n_in, in, out);
  cr_assert_eq(n_out, c.n_out, "%s: %d outputs, PyTorch %d: %s", c.id, n_out, c.n_out, mx_last_error());
  for (int o = 0; o < n_out; o++) {
    char what[32];
    snprintf(what, sizeof what, "output %d", o);
    fx_expect_matches(c.id, what, out[o], &c.out[o], TORCH_RTOL);
  }
  if (c.has_weight) {
    mx_tensor *loss = NULL;
    for (int o = 0; o < n_out; o++) {
      mx_tensor *term = mx_sum(mx_mul(out[o], fx_to_mx(&c.weight[o])), MX_ALL_DIMS, false);
      loss = loss ? mx_add(loss, term) : term;
    }
    cr_assert_not_null(loss, "%s: %s", c.id, mx_last_error());
    mx_tensor *wanted[MAX_IN], *grads[MAX_IN] = {0};
    int map[MAX_IN], n = 0;
    for (int i = 0; i < c.n_in; i++)
      if (c.has_grad[i]) wanted[n] = in[i], map[n++] = i;
    cr_assert_eq(mx_grad(1, &loss, n, wanted, NULL, false, false, true, grads), MX_OK, "%s: %s", c.id, mx_last_error());
    for (int j = 0; j < n; j++) {
      char what[32];
      snprintf(what, sizeof what, "grad of input %d", map[j]);
      fx_expect_matches(c.id, what, grads[j] ? grads[j] : mx_zeros_like(in[map[j]]), &c.grad[map[j]], TORCH_RTOL);
    }
  }
  mx_scope_end(s);
  free_case(&c);
}

/* The same cases in float32 (oneDNN's matrix products on the CPU): float32 results within a
 * float32 tolerance of PyTorch's float64 ones -- a check of the float32 paths, not of rounding. */
ParameterizedTestParameters(composite_torch, float32_is_close) {
  int n = fx_count_cases(FIXTURES);
  int *ids = cr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  for (int k = 0; k < n; k++) ids[k] = k;
  return OP_PARAMS(ids, (size_t)(n > 0 ? n : 0));
}

ParameterizedTest(int *k, composite_torch, float32_is_close) {
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *in[MAX_IN] = {0}, *out[MAX_OUT] = {0};
  load_inputs(&c, in, false);
  for (int i = 0; i < c.n_in; i++)
    if (c.in[i].dtype == MX_F64) in[i] = mx_to_dtype(in[i], MX_F32);
  op_call call = {c.op, c.args};
  int n_out = run_op(&call, c.n_in, in, out);
  cr_assert_eq(n_out, c.n_out, "%s: %s", c.id, mx_last_error());
  for (int o = 0; o < n_out; o++) {
    cr_expect_eq(mx_dtype_of(out[o]), MX_F32, "%s: output %d is %s", c.id, o, mx_dtype_name(mx_dtype_of(out[o])));
    char what[32];
    snprintf(what, sizeof what, "output %d", o);
    fx_expect_close_to_f64(c.id, what, out[o], &c.out[o], 1e-5);
  }
  mx_scope_end(s);
  free_case(&c);
}

/* --- gradcheck on the same inputs ------------------------------------------------------------------- */

/* The op's outputs as one flat tensor. */
static mx_tensor *flat_op(int n, mx_tensor *const *in, void *ctx) {
  mx_tensor *out[MAX_OUT];
  int n_out = run_op(ctx, n, in, out);
  if (n_out == 0) return NULL;
  if (n_out == 1) return out[0];
  mx_tensor *parts[MAX_OUT];
  for (int o = 0; o < n_out; o++) parts[o] = mx_reshape(out[o], MX_SHAPE(-1));
  return mx_cat(n_out, parts, 0);
}

/* Cases without a gradcheck: counts (p = 0) jump where two values are equal, and cosine_similarity's
 * clamped norm passes its gradient straight through (as PyTorch's does), which is no derivative. */
static bool skip_gradcheck(const fx_case *c) {
  return !strcmp(c->id, "dist@p0") || !strcmp(c->id, "cdist@p0") || !strcmp(c->id, "cosine_similarity@eps");
}

static bool wants_gradgrad(const fx_case *c) {
  static const char *const ids[] = {"linear", "linear@nobias", "lstm_cell", "lstm_cell@unbatched_nobias",
                                    "einsum@bmm", "einsum@diagonal", "einsum@trace", "einsum@ellipsis",
                                    "einsum@three", "einsum@implicit", "einsum@outer"};
  for (size_t k = 0; k < sizeof ids / sizeof *ids; k++)
    if (!strcmp(c->id, ids[k])) return true;
  return false;
}

/* The cases each check runs, into ids (Criterion's memory, which the forked tests read) unless
 * counting only. */
static int *select_ids(bool second_order, size_t *count, bool count_only) {
  int n = fx_count_cases(FIXTURES);
  int *ids = count_only ? NULL : cr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  *count = 0;
  for (int k = 0; k < n; k++) {
    fx_case c;
    if (!load_case(k, &c)) continue;
    if (second_order ? wants_gradgrad(&c) : !skip_gradcheck(&c)) {
      if (ids) ids[*count] = k;
      ++*count;
    }
    free_case(&c);
  }
  return ids;
}

static void check_case(int k, bool second_order) {
  fx_case c;
  cr_assert(load_case(k, &c), "case %d of %s does not parse", k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *in[MAX_IN] = {0};
  load_inputs(&c, in, true);
  op_call call = {c.op, c.args};
  mx_status st = second_order ? mx_gradgradcheck(flat_op, c.n_in, in, &call, 1e-6, 1e-5, 1e-4)
                              : mx_gradcheck(flat_op, c.n_in, in, &call, 1e-6, 1e-5, 1e-4);
  cr_expect_eq(st, MX_OK, "%s %s: %s", second_order ? "gradgradcheck" : "gradcheck", c.id, mx_last_error());
  mx_scope_end(s);
  free_case(&c);
}

ParameterizedTestParameters(composite_grad, gradcheck) {
  size_t n;
  int *ids = select_ids(false, &n, false);
  return OP_PARAMS(ids, n);
}

ParameterizedTest(int *k, composite_grad, gradcheck) { check_case(*k, false); }

ParameterizedTestParameters(composite_grad, gradgradcheck) {
  size_t n;
  int *ids = select_ids(true, &n, false);
  return OP_PARAMS(ids, n);
}

ParameterizedTest(int *k, composite_grad, gradgradcheck) { check_case(*k, true); }

/* Both lists are what they should be (a typo in an id would drop a check silently). */
Test(composite_grad, the_checked_cases) {
  size_t first, second;
  select_ids(false, &first, true);
  select_ids(true, &second, true);
  int n = fx_count_cases(FIXTURES);
  cr_expect_eq(first, (size_t)n - 3, "%zu of %d cases get a gradcheck", first, n);
  cr_expect_eq(second, 11, "%zu cases get a gradgradcheck", second);
}

/* Every composite op of the table has a PyTorch case. */
Test(composite_torch, every_op_has_a_case) {
  char *buf = fx_read_file(FIXTURES);
  cr_assert_not_null(buf, "cannot read %s", FIXTURES);
  static const char *const ops[] = {"linear", "bilinear", "prelu", "rnn_tanh_cell", "rnn_relu_cell", "lstm_cell",
                                    "gru_cell", "sdpa", "chain_matmul", "multi_dot", "einsum", "cross", "tensordot",
                                    "normalize", "dist", "cdist", "pdist", "cosine_similarity", "renorm"};
  for (size_t k = 0; k < sizeof ops / sizeof *ops; k++) {
    bool found = false;
    for (char *p = buf; !found && p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
      char id[96], op[64];
      found = sscanf(p, "case %95s %63s", id, op) == 2 && !strcmp(op, ops[k]);
    }
    cr_expect(found, "no PyTorch case for %s", ops[k]);
  }
  free(buf);
}

/* --- the op table ---------------------------------------------------------------------------------- */

Test(composite_table, policies) {
  static const struct {
    const char *op;
    mx_cast_policy policy;
  } want[] = {{"linear", MX_CAST_LOWER},        {"prelu", MX_CAST_LOWER},
              {"rnn_tanh_cell", MX_CAST_LOWER}, {"rnn_relu_cell", MX_CAST_LOWER},
              {"lstm_cell", MX_CAST_LOWER},     {"gru_cell", MX_CAST_LOWER},
              {"chain_matmul", MX_CAST_LOWER},  {"multi_dot", MX_CAST_LOWER},
              {"einsum", MX_CAST_LOWER},        {"scaled_dot_product_attention", MX_CAST_LOWER},
              {"bilinear", MX_CAST_PROMOTE},    {"cross", MX_CAST_PROMOTE},
              {"tensordot", MX_CAST_PROMOTE},   {"normalize", MX_CAST_FP32},
              {"dist", MX_CAST_FP32},           {"cdist", MX_CAST_FP32},
              {"pdist", MX_CAST_FP32},          {"cosine_similarity", MX_CAST_FP32},
              {"renorm", MX_CAST_FP32}};
  for (size_t k = 0; k < sizeof want / sizeof *want; k++) {
    int found = -1;
    for (int op = 0; op < mx_op_count(); op++)
      if (!strcmp(mx_op_name(op), want[k].op)) found = op;
    cr_assert_geq(found, 0, "no op %s in the table", want[k].op);
    cr_expect_eq(mx_op_policy(found), want[k].policy, "%s: policy %s", want[k].op,
                 mx_cast_policy_name(mx_op_policy(found)));
  }
}

/* --- multi_dot's order -------------------------------------------------------------------------------- */

static mx_tensor *uniform(mx_shape shape, mx_generator *gen) {
  return mx_sub_scalar(mx_mul_scalar(mx_rand(shape, MX_F64, MX_CPU, gen), 4), 2);
}

/* (10,100) (100,5) (5,50): (AB)C costs 7,500 multiplications, A(BC) 75,000. The product must be
 * bit for bit the one of the cheap order, which differs (in rounding) from the other. */
Test(composite_multi_dot, three_matrices_take_the_cheap_order) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(31);
  mx_tensor *a = uniform(MX_SHAPE(10, 100), gen), *b = uniform(MX_SHAPE(100, 5), gen), *c = uniform(MX_SHAPE(5, 50), gen);
  mx_generator_free(gen);
  mx_tensor *cheap = mx_mm(mx_mm(a, b), c), *dear = mx_mm(a, mx_mm(b, c));
  cr_assert(!op_bitwise_equal(cheap, dear), "the two orders round alike: the test cannot tell them apart");
  cr_expect(op_bitwise_equal(mx_multi_dot(3, (mx_tensor *[]){a, b, c}), cheap), "multi_dot did not compute (AB)C");
  cr_expect(op_bitwise_equal(mx_chain_matmul(3, (mx_tensor *[]){a, b, c}), cheap),
            "chain_matmul did not compute (AB)C");
  /* the mirror image: A(BC) is the cheap one */
  mx_tensor *at = mx_transpose(c, 0, 1), *bt = mx_transpose(b, 0, 1), *ct = mx_transpose(a, 0, 1);
  cr_expect(op_bitwise_equal(mx_multi_dot(3, (mx_tensor *[]){at, bt, ct}), mx_mm(at, mx_mm(bt, ct))),
            "multi_dot did not compute A(BC)");
  mx_scope_end(s);
}

/* p = 40, 20, 30, 10, 30: the best order is (A(BC))D at 26,000 multiplications (left to right costs
 * 48,000, A(B(CD)) 51,000); the dynamic program must find it. */
Test(composite_multi_dot, four_matrices_take_the_best_order) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(32);
  mx_tensor *a = uniform(MX_SHAPE(40, 20), gen), *b = uniform(MX_SHAPE(20, 30), gen);
  mx_tensor *c = uniform(MX_SHAPE(30, 10), gen), *d = uniform(MX_SHAPE(10, 30), gen);
  mx_generator_free(gen);
  mx_tensor *best = mx_mm(mx_mm(a, mx_mm(b, c)), d), *left = mx_mm(mx_mm(mx_mm(a, b), c), d);
  cr_assert(!op_bitwise_equal(best, left), "the two orders round alike: the test cannot tell them apart");
  cr_expect(op_bitwise_equal(mx_multi_dot(4, (mx_tensor *[]){a, b, c, d}), best), "multi_dot did not compute (A(BC))D");
  cr_expect(op_bitwise_equal(mx_chain_matmul(4, (mx_tensor *[]){a, b, c, d}), best), "chain_matmul: not (A(BC))D");
  mx_scope_end(s);
}

/* A vector first is a row of one: (100) (100,5) (5,50) multiplies (vA)B, not v(AB). */
Test(composite_multi_dot, a_vector_first_is_a_row) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(33);
  mx_tensor *v = uniform(MX_SHAPE(100), gen), *a = uniform(MX_SHAPE(100, 5), gen), *b = uniform(MX_SHAPE(5, 50), gen);
  mx_generator_free(gen);
  mx_tensor *row = mx_unsqueeze(v, 0);
  mx_tensor *cheap = mx_select(mx_mm(mx_mm(row, a), b), 0, 0);
  mx_tensor *out = mx_multi_dot(3, (mx_tensor *[]){v, a, b});
  cr_assert_not_null(out, "%s", mx_last_error());
  cr_expect_eq(mx_ndim(out), 1);
  cr_expect_eq(mx_size(out, 0), 50);
  cr_expect(op_bitwise_equal(out, cheap), "multi_dot did not compute (vA)B");
  mx_scope_end(s);
}

/* --- attention: dropout and rows with nothing to attend to -------------------------------------------- */

Test(composite_sdpa, dropout_is_mx_dropout_of_the_weights) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(41);
  mx_tensor *q = uniform(MX_SHAPE(2, 3, 4), gen), *k = uniform(MX_SHAPE(2, 5, 4), gen), *v = uniform(MX_SHAPE(2, 5, 6), gen);
  mx_generator_free(gen);
  mx_generator *g1 = mx_generator_new(7), *g2 = mx_generator_new(7);
  mx_tensor *got = mx_scaled_dot_product_attention(q, k, v, NULL, 0.4, false, 0, g1);
  mx_tensor *weights = mx_softmax(mx_mul_scalar(mx_matmul(q, mx_transpose(k, -2, -1)), 0.5), -1);
  mx_tensor *want = mx_matmul(mx_dropout(weights, 0.4, true, g2), v);
  cr_expect(op_bitwise_equal(got, want), "dropout_p 0.4 is not mx_dropout of the attention weights");
  mx_tensor *plain = mx_matmul(weights, v);
  cr_expect(!op_bitwise_equal(got, plain), "dropout_p 0.4 dropped nothing");
  cr_expect(op_bitwise_equal(mx_scaled_dot_product_attention(q, k, v, NULL, 0, false, 0, g1), plain),
            "dropout_p 0 is not the plain attention");
  mx_generator_free(g1);
  mx_generator_free(g2);
  mx_scope_end(s);
}

Test(composite_sdpa, a_row_with_nothing_to_attend_to_gives_zeros) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(42);
  mx_tensor *q = uniform(MX_SHAPE(3, 4), gen), *k = uniform(MX_SHAPE(5, 4), gen), *v = uniform(MX_SHAPE(5, 2), gen);
  mx_generator_free(gen);
  for (int i = 0; i < 3; i++) cr_assert_eq(mx_set_requires_grad((mx_tensor *[]){q, k, v}[i], true), MX_OK);
  bool m[15] = {1, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
  mx_tensor *mask = mx_from_data(m, MX_SHAPE(3, 5), MX_BOOL, MX_CPU);
  mx_tensor *out = mx_scaled_dot_product_attention(q, k, v, mask, 0, false, 0, NULL);
  cr_assert_not_null(out, "%s", mx_last_error());
  cr_expect_eq(mx_at(out, MX_SHAPE(1, 0)), 0);
  cr_expect_eq(mx_at(out, MX_SHAPE(1, 1)), 0);
  cr_expect(isfinite(mx_at(out, MX_SHAPE(0, 0))) && mx_at(out, MX_SHAPE(0, 0)) != 0);
  mx_tensor *loss = mx_sum(out, MX_ALL_DIMS, false), *grads[3] = {0};
  cr_assert_eq(mx_grad(1, &loss, 3, (mx_tensor *[]){q, k, v}, NULL, false, false, true, grads), MX_OK, "%s",
               mx_last_error());
  for (int i = 0; i < 3; i++) {
    mx_tensor *finite = mx_all(mx_eq(grads[i], grads[i]), MX_ALL_DIMS, false);
    cr_expect(mx_item(finite) != 0, "gradient %d has NaNs", i);
  }
  cr_expect_eq(mx_at(grads[0], MX_SHAPE(1, 2)), 0, "the empty row's query has a gradient");
  mx_scope_end(s);
}

/* --- the cells' second output and the public edge cases ------------------------------------------------ */

Test(composite_cells, lstm_outputs_may_be_dropped) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = mx_ones(MX_SHAPE(2, 3), MX_F64, MX_CPU), *h = mx_zeros(MX_SHAPE(2, 4), MX_F64, MX_CPU);
  mx_tensor *w_ih = mx_full(MX_SHAPE(16, 3), 0.1, MX_F64, MX_CPU), *w_hh = mx_full(MX_SHAPE(16, 4), 0.2, MX_F64, MX_CPU);
  mx_tensor *h1 = NULL, *c1 = NULL, *c2 = NULL;
  cr_assert_eq(mx_lstm_cell(x, h, h, w_ih, w_hh, NULL, NULL, &h1, NULL), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_lstm_cell(x, h, h, w_ih, w_hh, NULL, NULL, NULL, &c1), MX_OK, "%s", mx_last_error());
  cr_assert_eq(mx_lstm_cell(x, h, h, w_ih, w_hh, NULL, NULL, NULL, &c2), MX_OK, "%s", mx_last_error());
  /* gates 0.3: c' = s(0.3) tanh(0.3), h' = s(0.3) tanh(c') */
  double sg = 1 / (1 + exp(-0.3)), c = sg * tanh(0.3);
  cr_expect_float_eq(mx_at(c1, MX_SHAPE(1, 2)), c, 1e-15);
  cr_expect_float_eq(mx_at(h1, MX_SHAPE(0, 3)), sg * tanh(c), 1e-15);
  mx_scope_end(s);
}

/* --- einsum's and chain_matmul's edges ------------------------------------------------------------------ */

Test(composite_einsum, spaces_are_ignored) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(51);
  mx_tensor *a = uniform(MX_SHAPE(2, 3), gen), *b = uniform(MX_SHAPE(3, 4), gen);
  mx_generator_free(gen);
  mx_tensor *spaced = mx_einsum(" ij , jk -> ki ", 2, LIST(a, b)), *plain = mx_einsum("ij,jk->ki", 2, LIST(a, b));
  cr_expect(op_bitwise_equal(spaced, plain));
  cr_expect(op_bitwise_equal(plain, mx_transpose(mx_mm(a, b), 0, 1)));
  mx_scope_end(s);
}

/* One operand returned as it is still gives a new handle (the caller may release either). */
Test(composite_einsum, an_identity_is_a_new_handle) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_ones(MX_SHAPE(2, 3), MX_F64, MX_CPU);
  mx_tensor *same = mx_einsum("ij->ij", 1, LIST(a)), *one = mx_chain_matmul(1, LIST(a));
  cr_assert_not_null(same, "%s", mx_last_error());
  cr_assert_not_null(one, "%s", mx_last_error());
  cr_expect_neq(same, a);
  cr_expect_neq(one, a);
  cr_expect(op_bitwise_equal(same, a) && op_bitwise_equal(one, a));
  mx_scope_end(s);
}

/* --- errors ------------------------------------------------------------------------------------------------- */

static mx_tensor *zeros(mx_shape shape) { return mx_zeros(shape, MX_F64, MX_CPU); }

Test(composite_errors, einsum) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = zeros(MX_SHAPE(2, 3)), *b = zeros(MX_SHAPE(4, 5)), *sq = zeros(MX_SHAPE(3, 3));
  EXPECT_NULL(mx_einsum("ij,jk->ik", 1, LIST(a)), MX_INVALID_ARGUMENT,
              "mx_einsum: the equation 'ij,jk->ik' has 2 operands but 1 tensor was given");
  EXPECT_NULL(mx_einsum("ij,jk->ik", 3, LIST(a, a, a)), MX_INVALID_ARGUMENT,
              "mx_einsum: the equation 'ij,jk->ik' has 2 operands but 3 tensors were given");
  EXPECT_NULL(mx_einsum("ij,jk->ik", 2, LIST(a, b)), MX_SHAPE_ERROR,
              "mx_einsum: subscript 'j' has size 4 in operand 1 but 3 in operand 0");
  EXPECT_NULL(mx_einsum("ijk->k", 1, LIST(a)), MX_SHAPE_ERROR,
              "mx_einsum: operand 0 has 2 dims but its subscripts 'ijk' name 3");
  EXPECT_NULL(mx_einsum("...ijk", 1, LIST(a)), MX_SHAPE_ERROR,
              "mx_einsum: operand 0 has 2 dims but its subscripts '...ijk' name at least 3");
  EXPECT_NULL(mx_einsum("ij->k", 1, LIST(a)), MX_INVALID_ARGUMENT,
              "mx_einsum: output subscript 'k' does not appear in the inputs");
  EXPECT_NULL(mx_einsum("ij->ii", 1, LIST(a)), MX_INVALID_ARGUMENT,
              "mx_einsum: output subscript 'i' appears more than once");
  EXPECT_NULL(mx_einsum("i1->i", 1, LIST(a)), MX_INVALID_ARGUMENT,
              "mx_einsum: invalid subscript '1' (subscripts are letters)");
  EXPECT_NULL(mx_einsum("i.j->i", 1, LIST(a)), MX_INVALID_ARGUMENT,
              "mx_einsum: '.' must be part of an ellipsis '...', at most one per term");
  EXPECT_NULL(mx_einsum("ii->i", 1, LIST(a)), MX_SHAPE_ERROR,
              "mx_einsum: subscript 'i' is repeated in operand 0 with sizes 2 and 3");
  EXPECT_NULL(mx_einsum("ij-ji", 1, LIST(a)), MX_INVALID_ARGUMENT, "mx_einsum: '-' must be part of '->'");
  EXPECT_NULL(mx_einsum("...ij,...jk", 2, LIST(zeros(MX_SHAPE(2, 2, 3)), zeros(MX_SHAPE(3, 3, 1)))), MX_SHAPE_ERROR,
              "mx_einsum: the dims under '...' do not broadcast: size 3 in operand 1, 2 in operand 0");
  EXPECT_NULL(mx_einsum(NULL, 1, LIST(sq)), MX_NULL_INPUT, "mx_einsum: argument 'equation' is NULL");
  EXPECT_NULL(mx_einsum("ij,jk", 2, LIST(a, NULL)), MX_NULL_INPUT, "mx_einsum: argument 'input 1' is NULL");
  mx_scope_end(s);
}

Test(composite_errors, linear_and_bilinear) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(2, 3));
  EXPECT_NULL(mx_linear(x, zeros(MX_SHAPE(4, 5)), NULL), MX_SHAPE_ERROR,
              "mx_linear: input [2,3] and weight [4,5] do not fit: 3 input features, weight expects 5");
  EXPECT_NULL(mx_linear(x, zeros(MX_SHAPE(2, 2, 3)), NULL), MX_SHAPE_ERROR,
              "mx_linear: weight must be 1-d or 2-d, got shape [2,2,3]");
  EXPECT_NULL(mx_linear(x, NULL, NULL), MX_NULL_INPUT, "mx_linear: argument 'weight' is NULL");
  EXPECT_NULL(mx_linear(x, zeros(MX_SHAPE(4, 3)), zeros(MX_SHAPE(5))), MX_SHAPE_ERROR,
              "mx_linear: shapes [2,4] and [5] cannot be broadcast together (dim 1: 4 vs 5)");
  mx_tensor *w = zeros(MX_SHAPE(5, 3, 4));
  EXPECT_NULL(mx_bilinear(x, zeros(MX_SHAPE(2, 5)), w, NULL), MX_SHAPE_ERROR,
              "mx_bilinear: input2 [2,5] does not fit weight [5,3,4] (expected 4 features)");
  EXPECT_NULL(mx_bilinear(x, zeros(MX_SHAPE(3, 4)), w, NULL), MX_SHAPE_ERROR,
              "mx_bilinear: input1 [2,3] and input2 [3,4] have different batch dims");
  EXPECT_NULL(mx_bilinear(x, zeros(MX_SHAPE(2, 4)), w, zeros(MX_SHAPE(4))), MX_SHAPE_ERROR,
              "mx_bilinear: bias [4] does not fit weight [5,3,4] (expected [5])");
  EXPECT_NULL(mx_prelu(zeros(MX_SHAPE(2, 3, 4)), zeros(MX_SHAPE(2))), MX_SHAPE_ERROR,
              "mx_prelu: weight [2] must have 1 element or one per channel of input [2,3,4] (3)");
  mx_scope_end(s);
}

Test(composite_errors, cells) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(2, 3)), *h = zeros(MX_SHAPE(2, 4)), *out = NULL;
  EXPECT_FAIL(mx_lstm_cell(x, zeros(MX_SHAPE(2, 5)), h, zeros(MX_SHAPE(16, 3)), zeros(MX_SHAPE(16, 4)), NULL, NULL,
                           &out, NULL),
              MX_SHAPE_ERROR,
              "mx_lstm_cell: hidden state h of shape [2,5] does not fit input [2,3] and hidden size 4 (expected [2,4])");
  cr_expect_null(out);
  EXPECT_FAIL(mx_lstm_cell(x, h, zeros(MX_SHAPE(2, 3)), zeros(MX_SHAPE(16, 3)), zeros(MX_SHAPE(16, 4)), NULL, NULL,
                           &out, NULL),
              MX_SHAPE_ERROR,
              "mx_lstm_cell: cell state c of shape [2,3] does not fit input [2,3] and hidden size 4 (expected [2,4])");
  EXPECT_NULL(mx_gru_cell(x, zeros(MX_SHAPE(3, 4)), zeros(MX_SHAPE(12, 3)), zeros(MX_SHAPE(12, 4)), NULL, NULL),
              MX_SHAPE_ERROR,
              "mx_gru_cell: hidden state h of shape [3,4] does not fit input [2,3] and hidden size 4 (expected [2,4])");
  EXPECT_NULL(mx_gru_cell(x, h, zeros(MX_SHAPE(12, 5)), zeros(MX_SHAPE(12, 4)), NULL, NULL), MX_SHAPE_ERROR,
              "mx_gru_cell: w_ih [12,5] does not fit input [2,3] and hidden size 4 (expected [12,3])");
  EXPECT_NULL(mx_rnn_tanh_cell(x, h, zeros(MX_SHAPE(4, 3)), zeros(MX_SHAPE(4, 5)), NULL, NULL), MX_SHAPE_ERROR,
              "mx_rnn_tanh_cell: w_hh must be (1 * hidden_size, hidden_size), got shape [4,5]");
  EXPECT_NULL(mx_rnn_relu_cell(x, h, zeros(MX_SHAPE(4, 3)), zeros(MX_SHAPE(4, 4)), zeros(MX_SHAPE(5)), NULL),
              MX_SHAPE_ERROR, "mx_rnn_relu_cell: b_ih of shape [5] does not fit hidden size 4 (expected [4])");
  EXPECT_NULL(mx_rnn_tanh_cell(x, NULL, zeros(MX_SHAPE(4, 3)), zeros(MX_SHAPE(4, 4)), NULL, NULL), MX_NULL_INPUT,
              "mx_rnn_tanh_cell: argument 'h' is NULL");
  mx_scope_end(s);
}

Test(composite_errors, attention) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *q = zeros(MX_SHAPE(2, 3, 4)), *k = zeros(MX_SHAPE(2, 5, 4)), *v = zeros(MX_SHAPE(2, 5, 6));
  EXPECT_NULL(mx_scaled_dot_product_attention(q, zeros(MX_SHAPE(2, 5, 6)), v, NULL, 0, false, 0, NULL), MX_SHAPE_ERROR,
              "mx_scaled_dot_product_attention: query [2,3,4] and key [2,5,6] have different embedding sizes (4 != 6)");
  EXPECT_NULL(mx_scaled_dot_product_attention(q, k, zeros(MX_SHAPE(2, 4, 6)), NULL, 0, false, 0, NULL), MX_SHAPE_ERROR,
              "mx_scaled_dot_product_attention: key [2,5,4] and value [2,4,6] have different sequence lengths (5 != 4)");
  EXPECT_NULL(mx_scaled_dot_product_attention(q, k, v, zeros(MX_SHAPE(3, 5)), 0, true, 0, NULL), MX_INVALID_ARGUMENT,
              "mx_scaled_dot_product_attention: attn_mask and is_causal cannot both be set");
  EXPECT_NULL(mx_scaled_dot_product_attention(q, k, v, mx_zeros(MX_SHAPE(3, 5), MX_I64, MX_CPU), 0, false, 0, NULL),
              MX_DTYPE_ERROR, "mx_scaled_dot_product_attention: attn_mask must be bool or floating, got int64");
  EXPECT_NULL(mx_scaled_dot_product_attention(q, k, v, NULL, 1.5, false, 0, NULL), MX_INVALID_ARGUMENT,
              "mx_scaled_dot_product_attention: dropout_p 1.5 is not in [0, 1]");
  EXPECT_NULL(mx_scaled_dot_product_attention(q, k, v, zeros(MX_SHAPE(4, 5)), 0, false, 0, NULL), MX_SHAPE_ERROR,
              "mx_scaled_dot_product_attention: shapes [2,3,5] and [4,5] cannot be broadcast together (dim 1: 3 vs 4)");
  mx_scope_end(s);
}

Test(composite_errors, products) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = zeros(MX_SHAPE(2, 3)), *b = zeros(MX_SHAPE(3, 4)), *c = zeros(MX_SHAPE(5, 2));
  EXPECT_NULL(mx_multi_dot(1, LIST(a)), MX_INVALID_ARGUMENT, "mx_multi_dot: expected at least 2 tensors, got 1");
  EXPECT_NULL(mx_multi_dot(3, LIST(a, b, c)), MX_SHAPE_ERROR,
              "mx_multi_dot: tensors 1 and 2 cannot be multiplied: shapes [3,4] and [5,2] (4 != 5)");
  EXPECT_NULL(mx_multi_dot(3, LIST(a, zeros(MX_SHAPE(3)), c)), MX_SHAPE_ERROR,
              "mx_multi_dot: tensor 1 must be 2-d, got shape [3]");
  EXPECT_NULL(mx_multi_dot(2, LIST(a, zeros(MX_SHAPE(2, 3, 4)))), MX_SHAPE_ERROR,
              "mx_multi_dot: tensor 1 must be 1-d or 2-d, got shape [2,3,4]");
  EXPECT_NULL(mx_multi_dot(2, LIST(a, mx_zeros(MX_SHAPE(3, 4), MX_F32, MX_CPU))), MX_DTYPE_ERROR,
              "mx_multi_dot: expected one dtype, got float64 (tensor 0) and float32 (tensor 1)");
  EXPECT_NULL(mx_chain_matmul(2, LIST(zeros(MX_SHAPE(3)), b)), MX_SHAPE_ERROR,
              "mx_chain_matmul: tensor 0 must be 2-d, got shape [3]");
  EXPECT_NULL(mx_chain_matmul(0, LIST(a)), MX_INVALID_ARGUMENT, "mx_chain_matmul: expected at least 1 tensors, got 0");
  EXPECT_NULL(mx_tensordot(a, zeros(MX_SHAPE(4, 5)), 1), MX_SHAPE_ERROR,
              "mx_tensordot: dim 1 of a has size 3 but dim 0 of b has size 4");
  EXPECT_NULL(mx_tensordot(a, b, 3), MX_INVALID_ARGUMENT, "mx_tensordot: cannot contract 3 dims of tensors with 2 and 2 dims");
  EXPECT_NULL(mx_tensordot_dims(a, b, MX_DIMS(1, 0), MX_DIMS(0)), MX_INVALID_ARGUMENT,
              "mx_tensordot: the dims lists have different lengths (2 and 1)");
  EXPECT_NULL(mx_tensordot_dims(a, zeros(MX_SHAPE(3, 3)), MX_DIMS(1, 1), MX_DIMS(0, 1)), MX_INVALID_ARGUMENT,
              "mx_tensordot: dim 1 of a is contracted twice");
  EXPECT_NULL(mx_cross(zeros(MX_SHAPE(2, 4)), zeros(MX_SHAPE(2, 4)), 1), MX_SHAPE_ERROR,
              "mx_cross: dim 1 must have size 3 in both inputs, got 4 and 4");
  EXPECT_NULL(mx_cross(a, zeros(MX_SHAPE(2, 2)), 1), MX_SHAPE_ERROR,
              "mx_cross: shapes [2,3] and [2,2] cannot be broadcast together (dim 1: 3 vs 2)");
  mx_scope_end(s);
}

Test(composite_errors, distances) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_cdist(a, zeros(MX_SHAPE(5, 3)), 2), MX_SHAPE_ERROR,
              "mx_cdist: x1 [3,4] and x2 [5,3] have rows of different sizes (4 != 3)");
  EXPECT_NULL(mx_cdist(zeros(MX_SHAPE(4)), a, 2), MX_SHAPE_ERROR,
              "mx_cdist: x1 [4] and x2 [3,4] need at least 2 dims (..., rows, M)");
  EXPECT_NULL(mx_cdist(a, a, -1), MX_INVALID_ARGUMENT, "mx_cdist: p must be non-negative, got -1");
  EXPECT_NULL(mx_pdist(zeros(MX_SHAPE(3)), 2), MX_SHAPE_ERROR, "mx_pdist: input must be 2-d (N, M), got shape [3]");
  EXPECT_NULL(mx_pdist(mx_zeros(MX_SHAPE(3, 2), MX_I64, MX_CPU), 2), MX_DTYPE_ERROR,
              "mx_pdist: expected a floating input, got int64");
  EXPECT_NULL(mx_renorm(a, 0, 0, 1), MX_INVALID_ARGUMENT, "mx_renorm: p must be positive, got 0");
  EXPECT_NULL(mx_renorm(a, 2, 0, -1), MX_INVALID_ARGUMENT, "mx_renorm: maxnorm must be non-negative, got -1");
  EXPECT_NULL(mx_renorm(zeros(MX_SHAPE(4)), 2, 0, 1), MX_SHAPE_ERROR, "mx_renorm: input needs at least 2 dims, got 1");
  EXPECT_NULL(mx_normalize(a, 2, 2, 1e-12), MX_INDEX_ERROR,
              "mx_normalize: dim 2 out of range for a 2-d tensor (expected -2 to 1)");
  EXPECT_NULL(mx_cosine_similarity(zeros(MX_SHAPE(2, 3)), zeros(MX_SHAPE(2, 4)), 1, 1e-8), MX_SHAPE_ERROR,
              "mx_cosine_similarity: shapes [2,3] and [2,4] cannot be broadcast together (dim 1: 3 vs 4)");
  mx_scope_end(s);
}
