/* The losses (ops/losses.h):
 *   loss_torch   values and input gradients against PyTorch, every reduction
 *                (tests/fixtures/loss_fixtures.txt, written by
 *                tests/fixtures/make_loss_fixtures.py with torch 1.13): dtype
 *                and shape exactly, values within 1e-10 (float64) or 1e-5
 *                (float32) relative
 *   loss_grad    gradcheck of every float64 fixture case with respect to every
 *                differentiable input (weights and targets included), for the
 *                'none' and 'mean' reductions; gradgradcheck for cross_entropy
 *                and mse_loss
 *   loss_values  what a fixture cannot hold (all targets ignored, the policies)
 *   loss_errors  bad inputs, with the status and the exact message */
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
#define FIXTURES MX_FIXTURES_DIR "/loss_fixtures.txt"

#define MAX_IN 4
#define MAX_RED 4
#define MAX_PARAMS 6
#define MAX_CASES 256

/* --- the fixture file --------------------------------------------------------------------------------- */

typedef struct {
  char id[96], loss[64];
  int n_in, n_params, n_red, n_nograd;
  char in_name[MAX_IN][16], param_name[MAX_PARAMS][24], nograd[MAX_IN][16];
  double param[MAX_PARAMS];
  fx_tensor in[MAX_IN], weight;
  mx_reduction red[MAX_RED];
  fx_tensor out[MAX_RED], grad[MAX_RED][MAX_IN];
  bool has_grad[MAX_RED][MAX_IN];
} fx_case;

/* The dtypes of the loss fixtures. */
#define LOSS_DTYPES (FX_DTYPE(MX_F64) | FX_DTYPE(MX_F32) | FX_DTYPE(MX_I64))

static bool parse_reduction(const char *s, mx_reduction *r) {
  static const char *const names[] = {"none", "mean", "sum", "batchmean"};
  for (int k = 0; k < 4; k++)
    if (!strcmp(s, names[k])) return *r = (mx_reduction)k, true;
  return false;
}

static int input_index(const fx_case *c, const char *name) {
  for (int i = 0; i < c->n_in; i++)
    if (!strcmp(c->in_name[i], name)) return i;
  return -1;
}

static bool parse_line(void *p, char *line) {
  fx_case *c = p;
  char *save = NULL, *kind = strtok_r(line, " ", &save), *tok;
  if (!kind) return false;
  if (!strcmp(kind, "param") && c->n_params < MAX_PARAMS) {
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    snprintf(c->param_name[c->n_params], sizeof c->param_name[0], "%s", tok);
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    c->param[c->n_params++] = strtod(tok, NULL);
    return true;
  }
  if (!strcmp(kind, "nograd") && c->n_nograd < MAX_IN) {
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    snprintf(c->nograd[c->n_nograd++], sizeof c->nograd[0], "%s", tok);
    return true;
  }
  if (!strcmp(kind, "input") && c->n_in < MAX_IN) {
    if (!(tok = strtok_r(NULL, " ", &save))) return false;
    snprintf(c->in_name[c->n_in], sizeof c->in_name[0], "%s", tok);
    return fx_parse_tensor(&save, &c->in[c->n_in++], LOSS_DTYPES);
  }
  if (!strcmp(kind, "weight")) return fx_parse_tensor(&save, &c->weight, LOSS_DTYPES);
  mx_reduction r;
  if (!(tok = strtok_r(NULL, " ", &save)) || !parse_reduction(tok, &r)) return false;
  if (!strcmp(kind, "output") && c->n_red < MAX_RED) {
    c->red[c->n_red] = r;
    return fx_parse_tensor(&save, &c->out[c->n_red++], LOSS_DTYPES);
  }
  if (!strcmp(kind, "grad") && c->n_red > 0) {
    int i = (tok = strtok_r(NULL, " ", &save)) ? input_index(c, tok) : -1;
    if (i < 0) return false;
    c->has_grad[c->n_red - 1][i] = true;
    return fx_parse_tensor(&save, &c->grad[c->n_red - 1][i], LOSS_DTYPES);
  }
  return false;
}

static bool parse_header(void *p, const char *line) {
  fx_case *c = p;
  return sscanf(line, "case %95s %63s", c->id, c->loss) == 2;
}

/* Reads case number k (0-based) of the file. */
static bool load_case(int k, fx_case *c) {
  memset(c, 0, sizeof *c);
  return fx_load_case(FIXTURES, k, c, parse_header, parse_line);
}

static void free_case(fx_case *c) {
  for (int i = 0; i < MAX_IN; i++) free(c->in[i].v);
  for (int r = 0; r < MAX_RED; r++) {
    free(c->out[r].v);
    for (int i = 0; i < MAX_IN; i++) free(c->grad[r][i].v);
  }
  free(c->weight.v);
}

/* The indices of the cases (static: the forked tests read them). */
static int case_count = -1;
static int all_ids[MAX_CASES], f64_ids[MAX_CASES], gradgrad_ids[MAX_CASES];

static void scan_cases(void) {
  if (case_count >= 0) return;
  case_count = 0;
  for (int k = 0; k < MAX_CASES; k++) {
    fx_case c;
    if (!load_case(k, &c)) break;
    all_ids[case_count++] = k;
    free_case(&c);
  }
}

/* A tensor holding t's values in t's dtype. */
/* --- running a case ------------------------------------------------------------------------------------- */

static double param(const fx_case *c, const char *name, double otherwise) {
  for (int k = 0; k < c->n_params; k++)
    if (!strcmp(c->param_name[k], name)) return c->param[k];
  return otherwise;
}

static mx_tensor *run_loss(const fx_case *c, mx_tensor *const *in, mx_reduction r) {
#define IN(name) (input_index(c, name) >= 0 ? in[input_index(c, name)] : NULL)
  const char *l = c->loss;
  mx_tensor *x = IN("input"), *t = IN("target"), *w = IN("weight");
  int64_t ignore = (int64_t)param(c, "ignore_index", MX_IGNORE_INDEX);
  double margin = param(c, "margin", NAN);
  if (!strcmp(l, "cross_entropy")) return mx_cross_entropy(x, t, w, ignore, r, param(c, "label_smoothing", 0));
  if (!strcmp(l, "nll_loss")) return mx_nll_loss(x, t, w, ignore, r);
  if (!strcmp(l, "binary_cross_entropy")) return mx_binary_cross_entropy(x, t, w, r);
  if (!strcmp(l, "binary_cross_entropy_with_logits"))
    return mx_binary_cross_entropy_with_logits(x, t, w, r, IN("pos_weight"));
  if (!strcmp(l, "multilabel_margin_loss")) return mx_multilabel_margin_loss(x, t, r);
  if (!strcmp(l, "multi_margin_loss"))
    return mx_multi_margin_loss(x, t, (int)param(c, "p", 1), isnan(margin) ? 1 : margin, w, r);
  if (!strcmp(l, "mse_loss")) return mx_mse_loss(x, t, r);
  if (!strcmp(l, "l1_loss")) return mx_l1_loss(x, t, r);
  if (!strcmp(l, "smooth_l1_loss")) return mx_smooth_l1_loss(x, t, r, param(c, "beta", 1));
  if (!strcmp(l, "huber_loss")) return mx_huber_loss(x, t, r, param(c, "delta", 1));
  if (!strcmp(l, "kl_div")) return mx_kl_div(x, t, r, param(c, "log_target", 0) != 0);
  if (!strcmp(l, "poisson_nll_loss"))
    return mx_poisson_nll_loss(x, t, param(c, "log_input", 1) != 0, param(c, "full", 0) != 0, param(c, "eps", 1e-8), r);
  if (!strcmp(l, "hinge_embedding_loss")) return mx_hinge_embedding_loss(x, t, isnan(margin) ? 1 : margin, r);
  if (!strcmp(l, "margin_ranking_loss"))
    return mx_margin_ranking_loss(IN("input1"), IN("input2"), t, isnan(margin) ? 0 : margin, r);
  if (!strcmp(l, "soft_margin_loss")) return mx_soft_margin_loss(x, t, r);
  if (!strcmp(l, "cosine_embedding_loss"))
    return mx_cosine_embedding_loss(IN("input1"), IN("input2"), t, isnan(margin) ? 0 : margin, r);
  if (!strcmp(l, "triplet_margin_loss"))
    return mx_triplet_margin_loss(IN("anchor"), IN("positive"), IN("negative"), isnan(margin) ? 1 : margin,
                                  param(c, "p", 2), param(c, "eps", 1e-6), param(c, "swap", 0) != 0, r);
#undef IN
  cr_assert_fail("%s: no loss named %s", c->id, l);
  return NULL;
}


static const char *reduction_name(mx_reduction r) {
  static const char *const names[] = {"none", "mean", "sum", "batchmean"};
  return names[r];
}

/* --- loss_torch ------------------------------------------------------------------------------------------- */

ParameterizedTestParameters(loss_torch, matches_pytorch) {
  scan_cases();
  if (case_count == 0) all_ids[case_count++] = -1; /* one case that reports the missing file */
  return OP_PARAMS(all_ids, (size_t)case_count);
}

ParameterizedTest(int *k, loss_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s (run tests/fixtures/make_loss_fixtures.py)", FIXTURES);
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  for (int r = 0; r < c.n_red; r++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *in[MAX_IN] = {0}, *wanted[MAX_IN], *grads[MAX_IN] = {0};
    int map[MAX_IN], n = 0;
    for (int i = 0; i < c.n_in; i++) {
      in[i] = fx_to_mx(&c.in[i]);
      cr_assert_not_null(in[i], "%s: input %s: %s", c.id, c.in_name[i], mx_last_error());
      if (c.has_grad[r][i]) {
        cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
        wanted[n] = in[i], map[n++] = i;
      }
    }
    char what[96];
    snprintf(what, sizeof what, "output (%s)", reduction_name(c.red[r]));
    mx_tensor *out = run_loss(&c, in, c.red[r]);
    cr_assert_not_null(out, "%s: %s: %s", c.id, what, mx_last_error());
    fx_expect_matches(c.id, what, out, &c.out[r], fx_rtol(c.out[r].dtype));
    if (n > 0) {
      mx_tensor *total = out;
      if (c.red[r] == MX_REDUCTION_NONE) total = mx_sum(mx_mul(out, fx_to_mx(&c.weight)), MX_ALL_DIMS, false);
      cr_assert(mx_requires_grad(total), "%s: %s records no graph", c.id, what);
      cr_assert_eq(mx_grad(1, &total, n, wanted, NULL, false, false, true, grads), MX_OK, "%s: %s", c.id,
                   mx_last_error());
      for (int j = 0; j < n; j++) {
        snprintf(what, sizeof what, "grad of %s (%s)", c.in_name[map[j]], reduction_name(c.red[r]));
        const fx_tensor *want = &c.grad[r][map[j]];
        fx_expect_matches(c.id, what, grads[j] ? grads[j] : mx_zeros_like(wanted[j]), want, fx_rtol(want->dtype));
      }
    }
    mx_scope_end(s);
  }
  free_case(&c);
}

/* Every loss of the header has a fixture. */
Test(loss_torch, every_loss_has_a_fixture) {
  static const char *const losses[] = {
      "cross_entropy", "nll_loss", "binary_cross_entropy", "binary_cross_entropy_with_logits",
      "multilabel_margin_loss", "multi_margin_loss", "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
      "poisson_nll_loss", "hinge_embedding_loss", "margin_ranking_loss", "soft_margin_loss", "cosine_embedding_loss",
      "triplet_margin_loss"};
  char *buf = fx_read_file(FIXTURES);
  cr_assert_not_null(buf, "cannot read %s", FIXTURES);
  for (size_t k = 0; k < sizeof losses / sizeof *losses; k++) {
    char needle[96];
    snprintf(needle, sizeof needle, "\ncase %s %s\n", losses[k], losses[k]);
    cr_expect(strstr(buf, needle) != NULL, "no PyTorch fixture for %s", losses[k]);
  }
  free(buf);
}

/* --- loss_grad -------------------------------------------------------------------------------------------- */

#define EPS 1e-6
#define ATOL 1e-5
#define RTOL 1e-4

typedef struct {
  const fx_case *c;
  mx_reduction r;
} grad_ctx;

static mx_tensor *loss_fn(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  grad_ctx *g = ctx;
  return run_loss(g->c, in, g->r);
}

/* Floating inputs the loss is differentiable in: not the +-1 labels that
 * only select a branch (finite differences would move them off 1). */
static bool differentiable(const fx_case *c, int i) {
  if (c->in[i].dtype != MX_F64) return false;
  for (int k = 0; k < c->n_nograd; k++)
    if (!strcmp(c->nograd[k], c->in_name[i])) return false;
  bool label = !strcmp(c->in_name[i], "target") &&
               (!strcmp(c->loss, "hinge_embedding_loss") || !strcmp(c->loss, "cosine_embedding_loss"));
  return !label;
}

static int select_f64(bool (*keep)(const fx_case *c), int *ids) {
  scan_cases();
  int n = 0;
  for (int k = 0; k < case_count; k++) {
    fx_case c;
    if (!load_case(all_ids[k], &c)) continue;
    bool any = false;
    for (int i = 0; i < c.n_in; i++) any |= differentiable(&c, i);
    if (any && (!keep || keep(&c))) ids[n++] = all_ids[k];
    free_case(&c);
  }
  if (n == 0) ids[n++] = -1;
  return n;
}

static void check_gradients(int k, bool second_order) {
  cr_assert_geq(k, 0, "no float64 cases in %s", FIXTURES);
  fx_case c;
  cr_assert(load_case(k, &c), "case %d does not parse", k);
  static const mx_reduction reductions[] = {MX_REDUCTION_NONE, MX_REDUCTION_MEAN};
  for (int r = 0; r < 2; r++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *in[MAX_IN] = {0};
    for (int i = 0; i < c.n_in; i++) {
      in[i] = fx_to_mx(&c.in[i]);
      if (differentiable(&c, i)) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
    }
    grad_ctx ctx = {&c, reductions[r]};
    mx_status st = second_order ? mx_gradgradcheck(loss_fn, c.n_in, in, &ctx, EPS, ATOL, RTOL)
                                : mx_gradcheck(loss_fn, c.n_in, in, &ctx, EPS, ATOL, RTOL);
    cr_expect_eq(st, MX_OK, "%s (%s): %s", c.id, reduction_name(reductions[r]), mx_last_error());
    mx_scope_end(s);
  }
  free_case(&c);
}

ParameterizedTestParameters(loss_grad, gradcheck) {
  int n = select_f64(NULL, f64_ids);
  return OP_PARAMS(f64_ids, (size_t)n);
}

ParameterizedTest(int *k, loss_grad, gradcheck) { check_gradients(*k, false); }

static bool second_order_case(const fx_case *c) {
  return !strcmp(c->loss, "cross_entropy") || !strcmp(c->loss, "mse_loss");
}

ParameterizedTestParameters(loss_grad, gradgradcheck) {
  int n = select_f64(second_order_case, gradgrad_ids);
  return OP_PARAMS(gradgrad_ids, (size_t)n);
}

ParameterizedTest(int *k, loss_grad, gradgradcheck) { check_gradients(*k, true); }

/* --- loss_values ------------------------------------------------------------------------------------------ */

#define IDX(shape, ...) mx_from_data((const int64_t[]){__VA_ARGS__}, shape, MX_I64, MX_CPU)
#define F64(shape, ...) mx_from_data((const double[]){__VA_ARGS__}, shape, MX_F64, MX_CPU)

/* Every target ignored: the mean divides 0 by a weight of 0, NaN as in PyTorch. */
Test(loss_values, all_targets_ignored) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = F64(MX_SHAPE(2, 3), 0.1, 0.2, 0.3, 0.4, 0.5, 0.6), *t = IDX(MX_SHAPE(2), -100, -100);
  cr_expect(isnan(mx_item(mx_cross_entropy(x, t, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0))));
  cr_expect(isnan(mx_item(mx_cross_entropy(x, t, NULL, MX_IGNORE_INDEX, MX_REDUCTION_MEAN, 0.1))));
  cr_expect_eq(mx_item(mx_nll_loss(x, t, NULL, MX_IGNORE_INDEX, MX_REDUCTION_SUM)), 0);
  mx_tensor *none = mx_nll_loss(x, t, NULL, MX_IGNORE_INDEX, MX_REDUCTION_NONE);
  cr_expect(mx_at(none, MX_SHAPE(0)) == 0 && mx_at(none, MX_SHAPE(1)) == 0);
  mx_scope_end(s);
}

/* The autocast policy of each loss, as PyTorch's CUDA lists have it. */
Test(loss_values, policies) {
  static const char *const fp32[] = {
      "cross_entropy", "nll_loss", "binary_cross_entropy_with_logits", "multilabel_margin_loss", "multi_margin_loss",
      "mse_loss", "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div", "poisson_nll_loss", "hinge_embedding_loss",
      "margin_ranking_loss", "soft_margin_loss", "cosine_embedding_loss", "triplet_margin_loss"};
  int found = 0;
  for (int op = 0; op < mx_op_count(); op++) {
    const char *name = mx_op_name(op);
    if (!strcmp(name, "binary_cross_entropy")) {
      cr_expect_eq(mx_op_policy(op), MX_CAST_BANNED, "binary_cross_entropy: %s", mx_cast_policy_name(mx_op_policy(op)));
      found++;
    }
    for (size_t k = 0; k < sizeof fp32 / sizeof *fp32; k++)
      if (!strcmp(name, fp32[k])) {
        cr_expect_eq(mx_op_policy(op), MX_CAST_FP32, "%s: %s", name, mx_cast_policy_name(mx_op_policy(op)));
        found++;
      }
  }
  cr_expect_eq(found, 17, "%d of the 17 losses in the op table", found);
}

/* --- loss_errors ------------------------------------------------------------------------------------------ */

static mx_tensor *zeros(mx_shape shape) { return mx_zeros(shape, MX_F64, MX_CPU); }
static mx_tensor *halves(mx_shape shape) { return mx_full(shape, 0.5, MX_F64, MX_CPU); }

#define MEAN MX_REDUCTION_MEAN
#define IGNORE MX_IGNORE_INDEX

Test(loss_errors, target_shape) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_cross_entropy(x, IDX(MX_SHAPE(2), 0, 1), NULL, IGNORE, MEAN, 0), MX_SHAPE_ERROR,
              "mx_cross_entropy: target of shape [2] does not match input of shape [3,4] (expected [3] for class "
              "indices or [3,4] for class probabilities)");
  mx_tensor *spatial_target = mx_zeros(MX_SHAPE(2, 4), MX_I64, MX_CPU);
  EXPECT_NULL(mx_cross_entropy(zeros(MX_SHAPE(2, 4, 5)), spatial_target, NULL, IGNORE, MEAN, 0), MX_SHAPE_ERROR,
              "mx_cross_entropy: target of shape [2,4] does not match input of shape [2,4,5] (expected [2,5] for "
              "class indices or [2,4,5] for class probabilities)");
  EXPECT_NULL(mx_nll_loss(x, mx_zeros(MX_SHAPE(3, 1), MX_I64, MX_CPU), NULL, IGNORE, MEAN), MX_SHAPE_ERROR,
              "mx_nll_loss: target of shape [3,1] does not match input of shape [3,4] (expected [3])");
  EXPECT_NULL(mx_binary_cross_entropy(halves(MX_SHAPE(3)), halves(MX_SHAPE(3, 1)), NULL, MEAN), MX_SHAPE_ERROR,
              "mx_binary_cross_entropy: target of shape [3,1] does not match input of shape [3]");
  EXPECT_NULL(mx_binary_cross_entropy_with_logits(x, zeros(MX_SHAPE(4)), NULL, MEAN, NULL), MX_SHAPE_ERROR,
              "mx_binary_cross_entropy_with_logits: target of shape [4] does not match input of shape [3,4]");
  EXPECT_NULL(mx_multilabel_margin_loss(x, mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU), MEAN), MX_SHAPE_ERROR,
              "mx_multilabel_margin_loss: target of shape [3] does not match input of shape [3,4]");
  EXPECT_NULL(mx_multi_margin_loss(x, mx_zeros(MX_SHAPE(4), MX_I64, MX_CPU), 1, 1, NULL, MEAN), MX_SHAPE_ERROR,
              "mx_multi_margin_loss: target of shape [4] does not match input of shape [3,4] (expected [3])");
  /* elementwise losses broadcast, as PyTorch's do, until shapes cannot */
  EXPECT_NULL(mx_mse_loss(zeros(MX_SHAPE(2, 3)), zeros(MX_SHAPE(4)), MEAN), MX_SHAPE_ERROR,
              "mx_mse_loss: shapes [2,3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  EXPECT_NULL(mx_margin_ranking_loss(x, x, zeros(MX_SHAPE(4)), 0, MEAN), MX_SHAPE_ERROR,
              "mx_margin_ranking_loss: input1, input2 and target must have the same number of dims, got 2, 2 and 1");
  EXPECT_NULL(mx_cosine_embedding_loss(x, x, zeros(MX_SHAPE(3, 1)), 0, MEAN), MX_SHAPE_ERROR,
              "mx_cosine_embedding_loss: target must be 0-d or 1-d, got 2 dims");
  EXPECT_NULL(mx_cosine_embedding_loss(zeros(MX_SHAPE(4)), zeros(MX_SHAPE(4)), zeros(MX_SHAPE(4)), 0, MEAN),
              MX_SHAPE_ERROR, "mx_cosine_embedding_loss: a 1-d target needs 2-d inputs, got [4] and [4]");
  EXPECT_NULL(mx_triplet_margin_loss(x, x, zeros(MX_SHAPE(4)), 1, 2, 1e-6, false, MEAN), MX_SHAPE_ERROR,
              "mx_triplet_margin_loss: anchor, positive and negative must have the same number of dims (at least "
              "1), got 2, 2 and 1");
  mx_scope_end(s);
}

Test(loss_errors, class_index_out_of_range) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_cross_entropy(x, IDX(MX_SHAPE(3), 0, 4, 1), NULL, IGNORE, MEAN, 0), MX_INDEX_ERROR,
              "mx_cross_entropy: target 4 out of range for 4 classes");
  /* -1 is no ignore_index unless asked for */
  EXPECT_NULL(mx_nll_loss(x, IDX(MX_SHAPE(3), 0, -1, 1), NULL, IGNORE, MEAN), MX_INDEX_ERROR,
              "mx_nll_loss: target -1 out of range for 4 classes");
  cr_expect_not_null(mx_nll_loss(x, IDX(MX_SHAPE(3), 0, -1, 1), NULL, -1, MEAN), "%s", mx_last_error());
  EXPECT_NULL(mx_cross_entropy(x, IDX(MX_SHAPE(3), 0, 2, 7), NULL, IGNORE, MEAN, 0.1), MX_INDEX_ERROR,
              "mx_cross_entropy: target 7 out of range for 4 classes");
  EXPECT_NULL(mx_multi_margin_loss(x, IDX(MX_SHAPE(3), 0, 5, 1), 1, 1, NULL, MEAN), MX_INDEX_ERROR,
              "mx_multi_margin_loss: target 5 out of range for 4 classes");
  EXPECT_NULL(mx_multilabel_margin_loss(x, IDX(MX_SHAPE(3, 4), 0, -1, 0, 0, 1, 2, -2, 0, 3, -1, 0, 0), MEAN),
              MX_INDEX_ERROR, "mx_multilabel_margin_loss: target -2 out of range for 4 classes (expected -1 to 3)");
  EXPECT_NULL(mx_multilabel_margin_loss(x, IDX(MX_SHAPE(3, 4), 0, -1, 0, 0, 1, 2, 4, 0, 3, -1, 0, 0), MEAN),
              MX_INDEX_ERROR, "mx_multilabel_margin_loss: target 4 out of range for 4 classes (expected -1 to 3)");
  mx_scope_end(s);
}

Test(loss_errors, target_dtype) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4));
  EXPECT_NULL(mx_cross_entropy(x, zeros(MX_SHAPE(3)), NULL, IGNORE, MEAN, 0), MX_DTYPE_ERROR,
              "mx_cross_entropy: target must be int64 class indices, got float64");
  EXPECT_NULL(mx_cross_entropy(x, mx_zeros(MX_SHAPE(3, 4), MX_I64, MX_CPU), NULL, IGNORE, MEAN, 0), MX_DTYPE_ERROR,
              "mx_cross_entropy: a target of the input's shape holds class probabilities and must be floating, got "
              "int64");
  EXPECT_NULL(mx_nll_loss(x, mx_zeros(MX_SHAPE(3), MX_I32, MX_CPU), NULL, IGNORE, MEAN), MX_DTYPE_ERROR,
              "mx_nll_loss: target must be int64 class indices, got int32");
  EXPECT_NULL(mx_multilabel_margin_loss(x, zeros(MX_SHAPE(3, 4)), MEAN), MX_DTYPE_ERROR,
              "mx_multilabel_margin_loss: target must be int64 class indices, got float64");
  EXPECT_NULL(mx_multi_margin_loss(x, zeros(MX_SHAPE(3)), 1, 1, NULL, MEAN), MX_DTYPE_ERROR,
              "mx_multi_margin_loss: target must be int64 class indices, got float64");
  EXPECT_NULL(mx_mse_loss(mx_zeros(MX_SHAPE(3), MX_I64, MX_CPU), zeros(MX_SHAPE(3)), MEAN), MX_DTYPE_ERROR,
              "mx_mse_loss: input must be floating, got int64");
  EXPECT_NULL(mx_triplet_margin_loss(mx_zeros(MX_SHAPE(3), MX_I32, MX_CPU), x, x, 1, 2, 1e-6, false, MEAN),
              MX_DTYPE_ERROR, "mx_triplet_margin_loss: anchor must be floating, got int32");
  mx_scope_end(s);
}

Test(loss_errors, weights_and_arguments) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = zeros(MX_SHAPE(3, 4)), *t = IDX(MX_SHAPE(3), 0, 1, 2);
  EXPECT_NULL(mx_cross_entropy(x, t, zeros(MX_SHAPE(3)), IGNORE, MEAN, 0), MX_SHAPE_ERROR,
              "mx_cross_entropy: weight of shape [3] does not hold one value per class (4 classes)");
  EXPECT_NULL(mx_multi_margin_loss(x, t, 1, 1, zeros(MX_SHAPE(1, 4)), MEAN), MX_SHAPE_ERROR,
              "mx_multi_margin_loss: weight of shape [1,4] does not hold one value per class (4 classes)");
  EXPECT_NULL(mx_binary_cross_entropy_with_logits(x, x, zeros(MX_SHAPE(2, 3, 4)), MEAN, NULL), MX_SHAPE_ERROR,
              "mx_binary_cross_entropy_with_logits: weight of shape [2,3,4] does not broadcast to the input's shape "
              "[3,4]");
  EXPECT_NULL(mx_binary_cross_entropy_with_logits(x, x, NULL, MEAN, zeros(MX_SHAPE(5))), MX_SHAPE_ERROR,
              "mx_binary_cross_entropy_with_logits: shapes [3,4] and [5] cannot be broadcast together (dim 1: 4 vs "
              "5)");
  EXPECT_NULL(mx_cross_entropy(x, t, NULL, IGNORE, MEAN, 1.5), MX_INVALID_ARGUMENT,
              "mx_cross_entropy: label_smoothing must be between 0 and 1, got 1.5");
  EXPECT_NULL(mx_cross_entropy(x, halves(MX_SHAPE(3, 4)), NULL, 0, MEAN, 0), MX_INVALID_ARGUMENT,
              "mx_cross_entropy: ignore_index (0) is not supported with class-probability targets");
  EXPECT_NULL(mx_cross_entropy(zeros(MX_SCALAR), t, NULL, IGNORE, MEAN, 0), MX_SHAPE_ERROR,
              "mx_cross_entropy: expected an input of shape (C), (N, C) or (N, C, d1, ...), got a 0-d tensor");
  EXPECT_NULL(mx_binary_cross_entropy(F64(MX_SHAPE(2), 0.5, 1.5), halves(MX_SHAPE(2)), NULL, MEAN),
              MX_INVALID_ARGUMENT, "mx_binary_cross_entropy: all elements of input should be between 0 and 1");
  EXPECT_NULL(mx_smooth_l1_loss(x, x, MEAN, -1), MX_INVALID_ARGUMENT,
              "mx_smooth_l1_loss: beta must be non-negative, got -1");
  EXPECT_NULL(mx_huber_loss(x, x, MEAN, 0), MX_INVALID_ARGUMENT, "mx_huber_loss: delta must be positive, got 0");
  EXPECT_NULL(mx_multi_margin_loss(x, t, 3, 1, NULL, MEAN), MX_INVALID_ARGUMENT,
              "mx_multi_margin_loss: p must be 1 or 2, got 3");
  EXPECT_NULL(mx_multi_margin_loss(zeros(MX_SHAPE(2, 3, 4)), t, 1, 1, NULL, MEAN), MX_SHAPE_ERROR,
              "mx_multi_margin_loss: expected an input of shape (C) or (N, C) with C > 0, got [2,3,4]");
  EXPECT_NULL(mx_mse_loss(x, x, (mx_reduction)7), MX_INVALID_ARGUMENT,
              "mx_mse_loss: invalid reduction 7 (expected MX_REDUCTION_NONE, _MEAN or _SUM)");
  EXPECT_NULL(mx_mse_loss(x, x, MX_REDUCTION_BATCHMEAN), MX_INVALID_ARGUMENT,
              "mx_mse_loss: invalid reduction 3 (expected MX_REDUCTION_NONE, _MEAN or _SUM)");
  EXPECT_NULL(mx_kl_div(x, x, (mx_reduction)-1, false), MX_INVALID_ARGUMENT,
              "mx_kl_div: invalid reduction -1 (expected MX_REDUCTION_NONE, _MEAN, _SUM or _BATCHMEAN)");
  EXPECT_NULL(mx_mse_loss(NULL, x, MEAN), MX_NULL_INPUT, "mx_mse_loss: argument 'input' is NULL");
  EXPECT_NULL(mx_margin_ranking_loss(x, NULL, x, 0, MEAN), MX_NULL_INPUT,
              "mx_margin_ranking_loss: argument 'input2' is NULL");
  EXPECT_NULL(mx_cross_entropy(x, NULL, NULL, IGNORE, MEAN, 0), MX_NULL_INPUT,
              "mx_cross_entropy: argument 'target' is NULL");
  mx_scope_end(s);
}
