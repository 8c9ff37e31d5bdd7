/* Saved-tensor hooks (what ops save goes through pack and comes back through unpack) and mx_graph_saved_bytes. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>

#include <mixgrad.h>

#include "../common/expect_error.h"

typedef struct {
  int packs, unpacks, frees;
} counts;

/* Packs a detached view of the tensor, owned by no scope (pack runs inside the saving op's scope). */
typedef struct {
  counts *c;
  mx_tensor *copy;
} packed_copy;

static void *pack_copy(mx_tensor *t, void *ctx) {
  packed_copy *p = malloc(sizeof *p);
  *p = (packed_copy){ctx, mx_detach_unscoped(t)};
  p->c->packs++;
  return p;
}

static mx_tensor *unpack_copy(void *packed) {
  packed_copy *p = packed;
  p->c->unpacks++;
  return mx_clone(p->copy);
}

static void free_copy(void *packed) {
  packed_copy *p = packed;
  p->c->frees++;
  mx_release(p->copy);
  free(p);
}

static const mx_saved_tensor_hooks copy_hooks = {"copy_hooks", pack_copy, unpack_copy, free_copy};

static mx_tensor *param(int n, const double *v) {
  mx_tensor *t = mx_from_data(v, MX_SHAPE(n), MX_F64, MX_CPU);
  cr_assert_eq(mx_set_requires_grad(t, true), MX_OK);
  return t;
}

/* sum(tanh(x)^2 * c): tanh saves its output, the square saves tanh(x) twice, the product saves c */
static mx_tensor *loss_of(mx_tensor *x, mx_tensor *c) {
  mx_tensor *h = mx_tanh(x);
  return mx_sum(mx_mul(mx_mul(h, h), c), MX_ALL_DIMS, false);
}

Test(saved_tensor_hooks, saved_tensors_go_through_pack_and_unpack) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(3, (double[]){0.5, -1, 2});
  mx_tensor *c = mx_from_data((double[]){1, 2, 3}, MX_SHAPE(3), MX_F64, MX_CPU);
  counts n = {0};
  cr_assert_eq(mx_saved_tensor_hooks_push(&copy_hooks, &n), MX_OK);
  mx_tensor *loss = loss_of(x, c);
  cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
  /* tanh's output, h twice, h*h and c: the hooks hold them, the graph nothing */
  cr_expect_eq(n.packs, 5);
  cr_expect_eq(mx_graph_saved_bytes(loss), 0);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  /* the product's gradient goes to h*h only, which needs c but not h*h: that one is freed unused */
  cr_expect_eq(n.unpacks, 4, "%d unpacks", n.unpacks);
  cr_expect_eq(n.frees, 5);
  const double xs[] = {0.5, -1, 2}, cs[] = {1, 2, 3};
  for (int i = 0; i < 3; i++) {
    double t = tanh(xs[i]), want = cs[i] * 2 * t * (1 - t * t);
    cr_expect(fabs(mx_at(mx_grad_of(x), MX_SHAPE(i)) - want) < 1e-12, "element %d", i);
  }
  mx_scope_end(s);
}

Test(saved_tensor_hooks, weights_are_kept_as_they_are) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = param(2, (double[]){1, 2});
  counts n = {0};
  cr_assert_eq(mx_saved_tensor_hooks_push(&copy_hooks, &n), MX_OK);
  mx_tensor *sq = mx_mul(w, w);
  cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
  cr_expect_eq(n.packs, 0, "a leaf that requires grad is not packed");
  cr_expect_eq(mx_graph_saved_bytes(sq), 16, "the weight itself is saved");
  mx_scope_end(s);
}

Test(saved_tensor_hooks, gradients_of_gradients_reach_through_unpacked_tensors) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(3, (double[]){0.5, -1, 2});
  mx_tensor *c = mx_from_data((double[]){1, 2, 3}, MX_SHAPE(3), MX_F64, MX_CPU);
  double penalty_grad[2][3];
  counts n = {0};
  for (int hooked = 0; hooked < 2; hooked++) {
    if (hooked) cr_assert_eq(mx_saved_tensor_hooks_push(&copy_hooks, &n), MX_OK);
    mx_tensor *loss = loss_of(x, c);
    if (hooked) cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
    mx_tensor *g = NULL;
    cr_assert_eq(mx_grad(1, &loss, 1, &x, NULL, true, true, false, &g), MX_OK, "%s", mx_last_error());
    mx_tensor *penalty = mx_sum(mx_mul(g, g), MX_ALL_DIMS, false);
    mx_zero_grad(x);
    cr_assert_eq(mx_backward(penalty, NULL, false), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_to_host(mx_grad_of(x), penalty_grad[hooked], sizeof penalty_grad[0]), MX_OK);
  }
  cr_expect_eq(n.unpacks, 4, "%d unpacks", n.unpacks);
  cr_expect_arr_eq(penalty_grad[0], penalty_grad[1], sizeof penalty_grad[0]);
  mx_scope_end(s);
}

Test(saved_tensor_hooks, graph_saved_bytes_counts_each_storage_once) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(4, (double[]){1, 2, 3, 4});
  mx_tensor *e = mx_exp(x);                     /* saves its output: 32 bytes */
  mx_tensor *y = mx_sum(mx_mul(e, e), MX_ALL_DIMS, false); /* saves e twice: the same storage */
  cr_expect_eq(mx_graph_saved_bytes(y), 32);
  cr_expect_eq(mx_graph_saved_bytes(x), 0, "a leaf has no graph");
  EXPECT_ERROR(mx_graph_saved_bytes(NULL) == 0, "mx_graph_saved_bytes: argument 'root' is NULL");
  mx_scope_end(s);
}

static void *failing_pack(mx_tensor *t, void *ctx) {
  mx_set_requires_grad(NULL, true); /* sets an error, as a real failure would */
  return NULL;
}

static const mx_saved_tensor_hooks failing_hooks = {"failing_hooks", failing_pack, unpack_copy, free_copy};

Test(saved_tensor_hooks, errors) {
  EXPECT_STATUS_ERROR(mx_saved_tensor_hooks_pop(), "mx_saved_tensor_hooks_pop: no hooks are pushed");
  EXPECT_STATUS_ERROR(mx_saved_tensor_hooks_push(NULL, NULL),
                      "mx_saved_tensor_hooks_push: argument 'hooks' is NULL");
  mx_scope *s = mx_scope_begin();
  mx_tensor *x = param(2, (double[]){1, 2});
  cr_assert_eq(mx_saved_tensor_hooks_push(&failing_hooks, NULL), MX_OK);
  EXPECT_ERROR(mx_exp(x), "mx_set_requires_grad: argument 't' is NULL");
  cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
  /* a second backward through nodes whose packed tensors were freed names the hooks */
  counts n = {0};
  cr_assert_eq(mx_saved_tensor_hooks_push(&copy_hooks, &n), MX_OK);
  mx_tensor *y = mx_sum(mx_exp(x), MX_ALL_DIMS, false);
  cr_assert_eq(mx_saved_tensor_hooks_pop(), MX_OK);
  cr_assert_eq(mx_backward(y, NULL, false), MX_OK, "%s", mx_last_error());
  EXPECT_STATUS_ERROR(mx_backward(y, NULL, false),
                      "mx_backward: trying to backward through the graph a second time (the saved tensors of "
                      "EXPBackward, packed by copy_hooks, were freed by the first backward); pass retain_graph=true "
                      "the first time");
  mx_scope_end(s);
}
