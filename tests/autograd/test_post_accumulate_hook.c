/* The post-accumulate-grad hook (DDP starts its all-reduces from it): it
 * runs after backward stored the leaf's gradient, once per backward, sees
 * the accumulated value, is not run by mx_grad, and can be removed. */
#include <criterion/criterion.h>

#include "mixgrad.h"
#include "tests/common/expect_error.h"

typedef struct {
  int calls;
  double seen; /* grad[0] when the hook ran */
} hook_log;

static void record(mx_tensor *t, void *ctx) {
  hook_log *log = ctx;
  log->calls++;
  log->seen = mx_at(mx_grad_of(t), MX_SHAPE(0));
}

Test(post_accumulate_hook, runs_after_the_gradient_is_stored) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *w = mx_full(MX_SHAPE(2), 3.0, MX_F32, MX_CPU);
  cr_assert_eq(mx_set_requires_grad(w, true), MX_OK);
  hook_log log = {0, 0};
  cr_assert_eq(mx_register_post_accumulate_grad_hook(w, record, &log), MX_OK, "%s", mx_last_error());
  /* w used twice: one hook call, after both contributions are in */
  mx_tensor *loss = mx_sum(mx_add(mx_mul(w, w), mx_mul_scalar(w, 5)), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(log.calls, 1);
  cr_expect_eq(log.seen, 11.0); /* 2w + 5 */
  loss = mx_sum(mx_mul_scalar(w, 2), MX_ALL_DIMS, false);
  cr_assert_eq(mx_backward(loss, NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(log.calls, 2);
  cr_expect_eq(log.seen, 13.0, "the hook sees the accumulated gradient, not the new part");
  mx_tensor *g = NULL;
  loss = mx_sum(mx_mul(w, w), MX_ALL_DIMS, false);
  cr_assert_eq(mx_grad(1, &loss, 1, &w, NULL, false, false, false, &g), MX_OK, "%s", mx_last_error());
  cr_expect_eq(log.calls, 2, "mx_grad stores no gradient, so runs no hook");
  mx_remove_post_accumulate_grad_hook(w, record, &log);
  cr_assert_eq(mx_backward(mx_sum(w, MX_ALL_DIMS, false), NULL, false), MX_OK, "%s", mx_last_error());
  cr_expect_eq(log.calls, 2, "a removed hook ran");
  mx_scope_end(s);
}

Test(post_accumulate_hook, leaves_that_require_grad_only) {
  mx_scope *s = mx_scope_begin();
  mx_tensor *plain = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU), *w = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_eq(mx_set_requires_grad(w, true), MX_OK);
  hook_log log = {0, 0};
  EXPECT_STATUS_ERROR(mx_register_post_accumulate_grad_hook(plain, record, &log),
                      "mx_register_post_accumulate_grad_hook: the tensor is not a leaf that requires grad");
  EXPECT_STATUS_ERROR(mx_register_post_accumulate_grad_hook(mx_mul_scalar(w, 2), record, &log),
                      "mx_register_post_accumulate_grad_hook: the tensor is not a leaf that requires grad");
  EXPECT_STATUS_ERROR(mx_register_post_accumulate_grad_hook(w, NULL, &log),
                      "mx_register_post_accumulate_grad_hook: argument 'hook' is NULL");
  mx_scope_end(s);
}
