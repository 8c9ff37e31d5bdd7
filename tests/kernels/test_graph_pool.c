/* A CUDA graph's private pool (kernels/cuda/graph_pool.c) over a fake
 * device allocator: reuse within the capture, nothing handed out after it,
 * blocks and held memory kept while the graph or a tensor needs them. */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "kernels/base_internal.h"
#include "kernels/cuda/graph_pool.h"

/* The fake device: malloc'ed blocks, counted. */
typedef struct {
  int allocs, frees, held_freed;
  size_t held_bytes;
  bool fail_next;
} fake_device;

static mx_status fake_alloc(void *ctx, size_t bytes, void **out) {
  fake_device *d = ctx;
  if (d->fail_next) {
    d->fail_next = false;
    return mx__error(MX_OUT_OF_MEMORY, "fake: out of memory for %zu bytes", bytes);
  }
  d->allocs++;
  *out = malloc(bytes ? bytes : 1);
  return MX_OK;
}

static void fake_free(void *ctx, void *ptr) {
  ((fake_device *)ctx)->frees++;
  free(ptr);
}

static void fake_free_held(void *ctx, void *ptr, size_t bytes) {
  fake_device *d = ctx;
  d->held_freed++;
  d->held_bytes += bytes;
  free(ptr);
}

static mx__graph_pool *new_pool(fake_device *d) {
  mx__graph_pool_source source = {d, fake_alloc, fake_free, fake_free_held};
  mx__graph_pool *p = mx__graph_pool_new(&source);
  cr_assert_not_null(p);
  return p;
}

Test(graph_pool, a_block_freed_during_the_capture_is_reused_smallest_fit_first) {
  fake_device d = {0};
  mx__graph_pool *p = new_pool(&d);
  void *big, *small, *a, *b;
  cr_assert_eq(mx__graph_pool_alloc(p, 4096, &big), MX_OK);
  cr_assert_eq(mx__graph_pool_alloc(p, 256, &small), MX_OK);
  cr_expect_neq(big, small);
  cr_expect(mx__graph_pool_free(p, big));
  cr_expect(mx__graph_pool_free(p, small));
  cr_assert_eq(mx__graph_pool_alloc(p, 200, &a), MX_OK);
  cr_expect_eq(a, small, "the smallest free block that fits is taken");
  cr_assert_eq(mx__graph_pool_alloc(p, 1000, &b), MX_OK);
  cr_expect_eq(b, big);
  void *c;
  cr_assert_eq(mx__graph_pool_alloc(p, 100, &c), MX_OK); /* none free: a new block */
  cr_expect_eq(d.allocs, 3);
  mx__graph_pool_stats s = mx__graph_pool_stats_of(p);
  cr_expect_eq(s.blocks, 3);
  cr_expect_eq(s.in_use, 3);
  cr_expect_eq(s.bytes, 4096 + 256 + 100);
  mx__graph_pool_graph_gone(p);
  cr_expect_not(mx__graph_pool_done(p), "blocks in use keep the pool");
  mx__graph_pool_free(p, a), mx__graph_pool_free(p, b), mx__graph_pool_free(p, c);
  cr_expect(mx__graph_pool_done(p));
  mx__graph_pool_release(p);
  cr_expect_eq(d.frees, 3);
}

Test(graph_pool, a_sealed_pool_hands_out_nothing_and_keeps_freed_blocks) {
  fake_device d = {0};
  mx__graph_pool *p = new_pool(&d);
  void *out, *more = (void *)1;
  cr_assert_eq(mx__graph_pool_alloc(p, 64, &out), MX_OK);
  mx__graph_pool_seal(p);
  mx_clear_error();
  cr_expect_eq(mx__graph_pool_alloc(p, 64, &more), MX_STATE_ERROR);
  cr_expect_null(more);
  cr_expect_str_eq(mx_last_error(), "cuda graph: the graph's memory pool was sealed when its capture ended "
                                    "(allocating 64 bytes)");
  /* the user frees the static output: the graph still writes it, so the
   * block stays the pool's until the graph goes */
  cr_expect(mx__graph_pool_free(p, out));
  cr_expect_not(mx__graph_pool_free(p, out), "a block is freed once");
  cr_expect_not(mx__graph_pool_done(p), "the graph is alive");
  cr_expect_eq(d.frees, 0);
  mx__graph_pool_graph_gone(p);
  cr_expect(mx__graph_pool_done(p));
  mx__graph_pool_release(p);
  cr_expect_eq(d.frees, 1);
}

Test(graph_pool, memory_from_outside_freed_during_the_capture_is_held_until_the_graph_goes) {
  fake_device d = {0};
  mx__graph_pool *p = new_pool(&d);
  void *outside = malloc(32), *block;
  cr_expect_not(mx__graph_pool_free(p, outside), "not the pool's");
  cr_assert(mx__graph_pool_hold(p, outside, 32));
  cr_assert_eq(mx__graph_pool_alloc(p, 32, &block), MX_OK);
  cr_expect_neq(block, outside, "held memory is never handed out again");
  mx__graph_pool_seal(p);
  cr_expect_eq(mx__graph_pool_stats_of(p).held, 1);
  cr_expect_eq(d.held_freed, 0);
  mx__graph_pool_graph_gone(p); /* held memory goes with the graph, while a block is still in use */
  cr_expect_eq(d.held_freed, 1);
  cr_expect_eq(d.held_bytes, 32);
  cr_expect_not(mx__graph_pool_done(p));
  mx__graph_pool_free(p, block);
  mx__graph_pool_release(p);
  cr_expect_eq(d.frees, 1);
  cr_expect_eq(d.held_freed, 1);
}

Test(graph_pool, a_failed_device_allocation_is_reported_and_nothing_is_added) {
  fake_device d = {.fail_next = true};
  mx__graph_pool *p = new_pool(&d);
  void *out;
  mx_clear_error();
  cr_expect_eq(mx__graph_pool_alloc(p, 128, &out), MX_OUT_OF_MEMORY);
  cr_expect_str_eq(mx_last_error(), "fake: out of memory for 128 bytes");
  cr_expect_null(out);
  cr_expect_eq(mx__graph_pool_stats_of(p).blocks, 0);
  mx__graph_pool_graph_gone(p);
  cr_expect(mx__graph_pool_done(p));
  mx__graph_pool_release(p);
  cr_expect_eq(d.frees, 0);
}
