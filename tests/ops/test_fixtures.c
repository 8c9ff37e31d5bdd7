/* Values and gradients against PyTorch: tests/fixtures/ops_fixtures.txt
 * (written by tests/fixtures/make_fixtures.py with torch 1.13) holds, per
 * case, the inputs, PyTorch's output and the gradients of
 * sum(output * weight). Each case names an op case (op_cases.h); the test runs
 * that row on the same inputs and compares: the dtype and shape exactly,
 * integer and bool values exactly, floating values within a relative
 * tolerance of the dtype (float64 1e-10, float32 1e-5, 16-bit: half an
 * ulp), NaN matching NaN and infinities matching exactly. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fixture_io.h"
#include "op_cases.h"

#ifndef MX_FIXTURES_DIR
#error "MX_FIXTURES_DIR must name tests/fixtures"
#endif
#define FIXTURES MX_FIXTURES_DIR "/ops_fixtures.txt"

typedef struct {
  char id[96], op[64];
  int n_in;
  fx_tensor in[OP_MAX_IN];
  fx_tensor out, weight, grad[OP_MAX_IN];
  bool has_weight, has_grad[OP_MAX_IN];
} fx_case;

static bool parse_header(void *p, const char *line) {
  fx_case *c = p;
  return sscanf(line, "case %95s %63s", c->id, c->op) == 2;
}

/* "input <i> <tensor>", "grad <i> <tensor>", "output <tensor>" or "weight <tensor>". */
static bool parse_line(void *p, char *line) {
  fx_case *c = p;
  char *save = NULL;
  char *kind = strtok_r(line, " ", &save);
  if (!kind) return true;
  if (!strcmp(kind, "input") || !strcmp(kind, "grad")) {
    char *tok = strtok_r(NULL, " ", &save);
    int i = tok ? atoi(tok) : -1;
    if (i < 0 || i >= OP_MAX_IN) return false;
    if (kind[0] == 'i') {
      if (!fx_parse_tensor(&save, &c->in[i], FX_ANY_DTYPE)) return false;
      c->n_in = i + 1 > c->n_in ? i + 1 : c->n_in;
    } else {
      if (!fx_parse_tensor(&save, &c->grad[i], FX_ANY_DTYPE)) return false;
      c->has_grad[i] = true;
    }
    return true;
  }
  if (!strcmp(kind, "output")) return fx_parse_tensor(&save, &c->out, FX_ANY_DTYPE);
  if (!strcmp(kind, "weight")) return c->has_weight = fx_parse_tensor(&save, &c->weight, FX_ANY_DTYPE);
  return false;
}

/* Reads case number k (0-based) of the file. */
static bool load_case(int k, fx_case *c) {
  memset(c, 0, sizeof *c);
  return fx_load_case(FIXTURES, k, c, parse_header, parse_line);
}

static void free_case(fx_case *c) {
  for (int i = 0; i < OP_MAX_IN; i++) free(c->in[i].v), free(c->grad[i].v);
  free(c->out.v);
  free(c->weight.v);
}

ParameterizedTestParameters(ops_torch, matches_pytorch) {
  size_t n;
  int *ids = fx_case_ids(fx_count_cases(FIXTURES), &n);
  return OP_PARAMS(ids, n);
}

ParameterizedTest(int *k, ops_torch, matches_pytorch) {
  cr_assert_geq(*k, 0, "cannot read %s", FIXTURES);
  fx_case c;
  cr_assert(load_case(*k, &c), "case %d of %s does not parse", *k, FIXTURES);
  const op_case *row = op_case_find(c.op);
  cr_assert_not_null(row, "%s: no row named %s in the op cases (op_cases.h)", c.id, c.op);
  cr_assert_eq(c.n_in, row->n_in, "%s: %d inputs in the file, %d in the op cases (op_cases.h)", c.id, c.n_in, row->n_in);

  mx_scope *s = mx_scope_begin();
  mx_tensor *in[OP_MAX_IN] = {0};
  for (int i = 0; i < c.n_in; i++) {
    in[i] = fx_to_mx(&c.in[i]);
    cr_assert_not_null(in[i], "%s: input %d: %s", c.id, i, mx_last_error());
    if (c.has_grad[i]) cr_assert_eq(mx_set_requires_grad(in[i], true), MX_OK, "%s", mx_last_error());
  }
  mx_tensor *out = row->fn(row->n_in, in, NULL);
  cr_assert_not_null(out, "%s: %s", c.id, mx_last_error());
  fx_expect_matches(c.id, "output", out, &c.out, fx_rtol(c.out.dtype));

  if (c.has_weight) {
    mx_tensor *w = fx_to_mx(&c.weight);
    mx_tensor *loss = mx_sum(mx_mul(out, w), MX_ALL_DIMS, false);
    cr_assert_not_null(loss, "%s: %s", c.id, mx_last_error());
    mx_tensor *wanted[OP_MAX_IN], *grads[OP_MAX_IN] = {0};
    int map[OP_MAX_IN], n = 0;
    for (int i = 0; i < c.n_in; i++)
      if (c.has_grad[i]) wanted[n] = in[i], map[n++] = i;
    cr_assert(mx_requires_grad(loss), "%s: the output records no graph", c.id);
    cr_assert_eq(mx_grad(1, &loss, n, wanted, NULL, false, false, true, grads), MX_OK, "%s: %s", c.id,
                 mx_last_error());
    for (int j = 0; j < n; j++) {
      char what[32];
      snprintf(what, sizeof what, "grad of input %d", map[j]);
      /* an unused input: PyTorch's zeros */
      mx_tensor *g = grads[j] ? grads[j] : mx_zeros_like(in[map[j]]);
      fx_expect_matches(c.id, what, g, &c.grad[map[j]], fx_rtol(c.grad[map[j]].dtype));
    }
  }
  mx_scope_end(s);
  free_case(&c);
}

/* The file covers every op case but those marked OP_NO_FIXTURE. */
Test(ops_torch, every_case_has_a_fixture) {
  mx_scope *s = mx_scope_begin();
  char *buf = fx_read_file(FIXTURES);
  cr_assert_not_null(buf, "cannot read %s", FIXTURES);
  for (int k = 0; k < op_case_count(); k++) {
    if (op_case_at(k)->flags & OP_NO_FIXTURE) continue;
    char needle[96];
    snprintf(needle, sizeof needle, "\ncase %s %s\n", op_case_at(k)->name, op_case_at(k)->name);
    cr_expect(strstr(buf, needle) != NULL, "no PyTorch fixture for %s (run tests/fixtures/make_fixtures.py)",
              op_case_at(k)->name);
  }
  free(buf);
  mx_scope_end(s);
}
