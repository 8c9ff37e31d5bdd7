/* mx_grid_sample: values and gradients against PyTorch's F.grid_sample
 * (tests/fixtures/grid_sample_fixtures.txt, written by
 * tests/fixtures/make_grid_sample_fixtures.py with torch 1.13) for every
 * mode x padding x align_corners, on grids with points inside, on the
 * border of and outside [-1, 1]; the same in float32; gradcheck in float64
 * on the grids whose points keep away from pixel boundaries; strided
 * grids; the op table's policy; the exact messages of bad inputs. */
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
#define FIXTURES MX_FIXTURES_DIR "/grid_sample_fixtures.txt"
/* float64 against PyTorch's float64: the relative tolerance of fx_expect_matches */
#define TORCH_RTOL 1e-10

/* --- the fixture file -------------------------------------------------------------------------- */

typedef struct {
  char id[96], args[256];
  mx_grid_mode mode;
  mx_grid_padding padding;
  bool align;
  fx_tensor in[2], out, weight, grad[2];
  int parts; /* records read: 2 inputs, weight, output, 2 grads */
} fx_case;

/* The value of key=... in args (up to the next space), or "". */
static void arg_str(const char *args, const char *key, char *out, size_t size) {
  const char *v = fx_arg(args, key);
  snprintf(out, size, "%.*s", v ? (int)strcspn(v, " ") : 0, v ? v : "");
}

static bool parse_args(fx_case *c) {
  char mode[32], padding[32], align[8];
  arg_str(c->args, "mode", mode, sizeof mode);
  arg_str(c->args, "padding", padding, sizeof padding);
  arg_str(c->args, "align", align, sizeof align);
  if (!strcmp(mode, "bilinear")) c->mode = MX_GRID_BILINEAR;
  else if (!strcmp(mode, "nearest")) c->mode = MX_GRID_NEAREST;
  else return false;
  if (!strcmp(padding, "zeros")) c->padding = MX_GRID_PAD_ZEROS;
  else if (!strcmp(padding, "border")) c->padding = MX_GRID_PAD_BORDER;
  else if (!strcmp(padding, "reflection")) c->padding = MX_GRID_PAD_REFLECTION;
  else return false;
  if (strcmp(align, "0") && strcmp(align, "1")) return false;
  c->align = align[0] == '1';
  return true;
}

static bool parse_header(void *p, const char *line) {
  fx_case *c = p;
  int used = 0;
  char op[64];
  if (sscanf(line, "case %95s %63s%n", c->id, op, &used) != 2 || strcmp(op, "grid_sample")) return false;
  snprintf(c->args, sizeof c->args, "%s", line + used);
  return parse_args(c);
}

/* "input|grad <0|1> <tensor>" or "output|weight 0 <tensor>", each once; the tensors are float64. */
static bool parse_line(void *p, char *line) {
  fx_case *c = p;
  char *save = NULL;
  char *kind = strtok_r(line, " ", &save);
  if (!kind) return true;
  char *tok = strtok_r(NULL, " ", &save);
  int i = tok ? atoi(tok) : -1;
  fx_tensor *t = NULL;
  if (!strcmp(kind, "input") && (i == 0 || i == 1)) t = &c->in[i];
  else if (!strcmp(kind, "grad") && (i == 0 || i == 1)) t = &c->grad[i];
  else if (!strcmp(kind, "output") && i == 0) t = &c->out;
  else if (!strcmp(kind, "weight") && i == 0) t = &c->weight;
  if (!t || t->v || !fx_parse_tensor(&save, t, FX_DTYPE(MX_F64))) return false;
  c->parts++;
  return true;
}

static bool load_case(int k, fx_case *c) {
  memset(c, 0, sizeof *c);
  return fx_load_case(FIXTURES, k, c, parse_header, parse_line) && c->parts == 6;
}

static void free_case(fx_case *c) {
  for (int i = 0; i < 2; i++) free(c->in[i].v), free(c->grad[i].v);
  free(c->out.v);
  free(c->weight.v);
}

static bool has_suffix(const char *id, const char *suffix) {
  size_t n = strlen(id), m = strlen(suffix);
  return n >= m && !strcmp(id + n - m, suffix);
}

/* The cases whose grid points keep away from pixel boundaries (gradchecked). */
static bool is_smooth(const fx_case *c) { return has_suffix(c->id, "@smooth") || has_suffix(c->id, "@size1"); }

/* --- values and gradients against PyTorch ---------------------------------------------------------- */

static int *all_ids(size_t *count) {
  int n = fx_count_cases(FIXTURES);
  int *ids = cr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  for (int k = 0; k < n; k++) ids[k] = k;
  *count = n > 0 ? (size_t)n : 0;
  return ids;
}

ParameterizedTestParameters(grid_sample_torch, matches_pytorch) {
  size_t n;
  int *ids = all_ids(&n);
  return OP_PARAMS(ids, n);
}

ParameterizedTest(int *k, grid_sample_torch, matches_pytorch) {
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *input = fx_to_mx(&c.in[0]), *grid = fx_to_mx(&c.in[1]);
  cr_assert_eq(mx_set_requires_grad(input, true), MX_OK);
  cr_assert_eq(mx_set_requires_grad(grid, true), MX_OK);
  mx_tensor *out = mx_grid_sample(input, grid, c.mode, c.padding, c.align);
  fx_expect_matches(c.id, "output", out, &c.out, TORCH_RTOL);
  mx_tensor *loss = mx_sum(mx_mul(out, fx_to_mx(&c.weight)), MX_ALL_DIMS, false);
  cr_assert_not_null(loss, "%s: %s", c.id, mx_last_error());
  mx_tensor *grads[2] = {0};
  cr_assert_eq(mx_grad(1, &loss, 2, (mx_tensor *[]){input, grid}, NULL, false, false, true, grads), MX_OK, "%s: %s",
               c.id, mx_last_error());
  cr_expect(c.mode == MX_GRID_NEAREST || grads[1], "%s: bilinear gives the grid no gradient", c.id);
  fx_expect_matches(c.id, "grad of input", grads[0] ? grads[0] : mx_zeros_like(input), &c.grad[0], TORCH_RTOL);
  fx_expect_matches(c.id, "grad of grid", grads[1] ? grads[1] : mx_zeros_like(grid), &c.grad[1], TORCH_RTOL);
  mx_scope_end(s);
  free_case(&c);
}

/* The same cases in float32: within a float32 tolerance of PyTorch's float64 values (the
 * hand-written points are exact in float32, the random ones keep 1e-3 from any rounding
 * decision). */
ParameterizedTestParameters(grid_sample_torch, float32_is_close) {
  size_t n;
  int *ids = all_ids(&n);
  return OP_PARAMS(ids, n);
}

ParameterizedTest(int *k, grid_sample_torch, float32_is_close) {
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *input = mx_to_dtype(fx_to_mx(&c.in[0]), MX_F32), *grid = mx_to_dtype(fx_to_mx(&c.in[1]), MX_F32);
  mx_tensor *out = mx_grid_sample(input, grid, c.mode, c.padding, c.align);
  cr_assert_not_null(out, "%s: %s", c.id, mx_last_error());
  cr_expect_eq(mx_dtype_of(out), MX_F32, "%s: output is %s", c.id, mx_dtype_name(mx_dtype_of(out)));
  fx_expect_close_to_f64(c.id, "output", out, &c.out, 1e-5);
  mx_scope_end(s);
  free_case(&c);
}

/* Every mode x padding x align_corners has its three cases. */
Test(grid_sample_torch, every_combination_has_cases) {
  static const char *const modes[] = {"bilinear", "nearest"}, *const paddings[] = {"zeros", "border", "reflection"};
  static const char *const variants[] = {"", "@smooth", "@size1"};
  int n = fx_count_cases(FIXTURES);
  cr_assert_gt(n, 0, "cannot read %s (run tests/fixtures/make_grid_sample_fixtures.py)", FIXTURES);
  char *buf = fx_read_file(FIXTURES);
  int found = 0;
  for (int m = 0; m < 2; m++)
    for (int p = 0; p < 3; p++)
      for (int a = 0; a < 2; a++)
        for (int v = 0; v < 3; v++) {
          char line[160];
          snprintf(line, sizeof line, "case %s_%s_%d%s grid_sample mode=%s padding=%s align=%d\n", modes[m],
                   paddings[p], a, variants[v], modes[m], paddings[p], a);
          bool here = strstr(buf, line) != NULL;
          cr_expect(here, "no case: %s", line);
          found += here;
        }
  cr_expect_eq(found, 36);
  cr_expect_eq(n, 36, "%d cases", n);
  free(buf);
}

/* --- gradcheck ----------------------------------------------------------------------------------- */

typedef struct {
  mx_grid_mode mode;
  mx_grid_padding padding;
  bool align;
} sample_args;

static mx_tensor *sample(int n, mx_tensor *const *in, void *ctx) {
  (void)n;
  const sample_args *a = ctx;
  return mx_grid_sample(in[0], in[1], a->mode, a->padding, a->align);
}

ParameterizedTestParameters(grid_sample_grad, gradcheck) {
  int n = fx_count_cases(FIXTURES);
  int *ids = cr_malloc(sizeof(int) * (size_t)(n > 0 ? n : 1));
  size_t count = 0;
  for (int k = 0; k < n; k++) {
    fx_case c;
    if (load_case(k, &c) && is_smooth(&c)) ids[count++] = k;
    free_case(&c);
  }
  return OP_PARAMS(ids, count);
}

/* Both inputs: bilinear's gradients in input and grid; nearest's in input, and its grid's 0
 * (piecewise constant away from the halfway points). */
ParameterizedTest(int *k, grid_sample_grad, gradcheck) {
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  mx_scope *s = mx_scope_begin();
  mx_tensor *in[2] = {fx_to_mx(&c.in[0]), fx_to_mx(&c.in[1])};
  for (int i = 0; i < 2; i++) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK);
  sample_args args = {c.mode, c.padding, c.align};
  mx_status st = mx_gradcheck(sample, 2, in, &args, 1e-6, 1e-5, 1e-4);
  cr_expect_eq(st, MX_OK, "gradcheck %s: %s", c.id, mx_last_error());
  mx_scope_end(s);
  free_case(&c);
}

Test(grid_sample_grad, the_checked_cases) {
  int n = fx_count_cases(FIXTURES), smooth = 0, bilinear = 0;
  for (int k = 0; k < n; k++) {
    fx_case c;
    cr_assert(load_case(k, &c), "case %d does not parse", k);
    smooth += is_smooth(&c);
    bilinear += is_smooth(&c) && c.mode == MX_GRID_BILINEAR;
    free_case(&c);
  }
  cr_expect_eq(smooth, 24, "%d cases get a gradcheck", smooth);
  cr_expect_eq(bilinear, 12, "%d bilinear cases get a gradcheck", bilinear);
}

/* --- strided grids, the op table ---------------------------------------------------------------- */

/* A grid and an input that are views (transposed, strided) sample as their contiguous copies. */
Test(grid_sample, strided_inputs_match_contiguous_ones) {
  mx_scope *s = mx_scope_begin();
  mx_generator *gen = mx_generator_new(5);
  mx_tensor *grid_t = mx_sub_scalar(mx_mul_scalar(mx_rand(MX_SHAPE(2, 4, 3, 2), MX_F64, MX_CPU, gen), 3), 1.5);
  mx_tensor *input_t = mx_randn(MX_SHAPE(2, 3, 5, 4), MX_F64, MX_CPU, gen);
  mx_generator_free(gen);
  mx_tensor *grid = mx_transpose(grid_t, 1, 2), *input = mx_transpose(input_t, 2, 3); /* (2,3,4,2), (2,3,4,5) */
  for (int mode = 0; mode < 2; mode++)
    for (int padding = 0; padding < 3; padding++) {
      mx_tensor *a = mx_grid_sample(input, grid, mode, padding, padding == 1);
      mx_tensor *b = mx_grid_sample(mx_contiguous(input), mx_contiguous(grid), mode, padding, padding == 1);
      cr_expect(op_bitwise_equal(a, b), "mode %d padding %d: a strided grid samples differently", mode, padding);
    }
  mx_scope_end(s);
}

Test(grid_sample, policy_is_promote) {
  int found = -1;
  for (int op = 0; op < mx_op_count(); op++)
    if (!strcmp(mx_op_name(op), "grid_sample")) found = op;
  cr_assert_geq(found, 0, "no op grid_sample in the table");
  cr_expect_eq(mx_op_policy(found), MX_CAST_PROMOTE, "policy %s", mx_cast_policy_name(mx_op_policy(found)));
}

/* --- errors ------------------------------------------------------------------------------------------------- */

static mx_tensor *zeros(mx_shape shape) { return mx_zeros(shape, MX_F64, MX_CPU); }

Test(grid_sample_errors, bad_inputs) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *input = zeros(MX_SHAPE(2, 3, 4, 5)), *grid = zeros(MX_SHAPE(2, 6, 7, 2));
  const mx_grid_mode bl = MX_GRID_BILINEAR;
  const mx_grid_padding zp = MX_GRID_PAD_ZEROS;
  EXPECT_NULL(mx_grid_sample(input, zeros(MX_SHAPE(2, 6, 7, 3)), bl, zp, false), MX_SHAPE_ERROR,
              "mx_grid_sample: grid must be (N, H_out, W_out, 2), got shape [2,6,7,3]");
  EXPECT_NULL(mx_grid_sample(input, zeros(MX_SHAPE(2, 6, 2)), bl, zp, false), MX_SHAPE_ERROR,
              "mx_grid_sample: grid must be (N, H_out, W_out, 2), got shape [2,6,2]");
  EXPECT_NULL(mx_grid_sample(input, zeros(MX_SHAPE(3, 6, 7, 2)), bl, zp, true), MX_SHAPE_ERROR,
              "mx_grid_sample: input [2,3,4,5] and grid [3,6,7,2] have different batch sizes (2 != 3)");
  EXPECT_NULL(mx_grid_sample(zeros(MX_SHAPE(3, 4, 5)), grid, bl, zp, false), MX_SHAPE_ERROR,
              "mx_grid_sample: input must be 4-d (N, C, H_in, W_in), got shape [3,4,5]");
  EXPECT_NULL(mx_grid_sample(zeros(MX_SHAPE(2, 3, 0, 5)), grid, bl, zp, false), MX_SHAPE_ERROR,
              "mx_grid_sample: input [2,3,0,5] has an empty spatial dim");
  EXPECT_NULL(mx_grid_sample(mx_zeros(MX_SHAPE(2, 3, 4, 5), MX_F32, MX_CPU), grid, bl, zp, false), MX_DTYPE_ERROR,
              "mx_grid_sample: input and grid must have one floating dtype, got float32 and float64");
  mx_tensor *int_input = mx_zeros(MX_SHAPE(2, 3, 4, 5), MX_I64, MX_CPU);
  mx_tensor *int_grid = mx_zeros(MX_SHAPE(2, 6, 7, 2), MX_I64, MX_CPU);
  EXPECT_NULL(mx_grid_sample(int_input, int_grid, bl, zp, false), MX_DTYPE_ERROR,
              "mx_grid_sample: input and grid must have one floating dtype, got int64 and int64");
  EXPECT_NULL(mx_grid_sample(input, grid, (mx_grid_mode)2, zp, false), MX_INVALID_ARGUMENT,
              "mx_grid_sample: unknown mode 2 (expected bilinear or nearest)");
  EXPECT_NULL(mx_grid_sample(input, grid, bl, (mx_grid_padding)3, false), MX_INVALID_ARGUMENT,
              "mx_grid_sample: unknown padding mode 3 (expected zeros, border or reflection)");
  EXPECT_NULL(mx_grid_sample(NULL, grid, bl, zp, false), MX_NULL_INPUT, "mx_grid_sample: argument 'input' is NULL");
  EXPECT_NULL(mx_grid_sample(input, NULL, bl, zp, false), MX_NULL_INPUT, "mx_grid_sample: argument 'grid' is NULL");
  mx_scope_end(s);
}
