/* Scopes, handle lifetimes and memory statistics. Every count is compared
 * against a baseline read at the start of the test. Run under ASan to prove
 * there is no double free or use after free. */
#include <criterion/criterion.h>
#include <mixgrad.h>
#include <pthread.h>

static mx_memory_stats cpu_stats(void) { return mx_memory_stats_get(MX_CPU); }

/* bytes, handles and storages in use are back to `base` */
#define ASSERT_BACK_TO(base)                                                                          \
  do {                                                                                                \
    mx_memory_stats now_ = cpu_stats();                                                               \
    cr_assert_eq(now_.live_tensors, (base).live_tensors, "live tensors %lld, expected %lld",          \
                 (long long)now_.live_tensors, (long long)(base).live_tensors);                       \
    cr_assert_eq(now_.live_storages, (base).live_storages, "live storages %lld, expected %lld",       \
                 (long long)now_.live_storages, (long long)(base).live_storages);                     \
    cr_assert_eq(now_.bytes_in_use, (base).bytes_in_use, "bytes in use %lld, expected %lld",          \
                 (long long)now_.bytes_in_use, (long long)(base).bytes_in_use);                       \
  } while (0)

/* live tensors and bytes are `base` plus the given deltas */
#define ASSERT_DELTA(base, tensors, bytes)                                                            \
  do {                                                                                                \
    mx_memory_stats now_ = cpu_stats();                                                               \
    cr_assert_eq(now_.live_tensors - (base).live_tensors, (tensors), "live tensors +%lld, expected +%lld", \
                 (long long)(now_.live_tensors - (base).live_tensors), (long long)(tensors));         \
    cr_assert_eq(now_.bytes_in_use - (base).bytes_in_use, (bytes), "bytes in use +%lld, expected +%lld", \
                 (long long)(now_.bytes_in_use - (base).bytes_in_use), (long long)(bytes));           \
  } while (0)

/* --- scopes release what they own ------------------------------------------------- */

Test(scope, end_releases_every_handle) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  cr_assert_not_null(s);
  mx_tensor *a = mx_zeros(MX_SHAPE(10, 10), MX_F32, MX_CPU);
  mx_tensor *b = mx_transpose(a, 0, 1);
  mx_tensor *c = mx_clone(b);
  mx_tensor *d = mx_reshape(b, MX_SHAPE(-1)); /* needs a copy */
  mx_tensor *e = mx_arange(0, 5, 1, MX_I64, MX_CPU);
  mx_tensor *f = mx_randn(MX_SHAPE(3, 4), MX_F64, MX_CPU, NULL);
  cr_assert(a && b && c && d && e && f, "%s", mx_last_error());
  mx_memory_stats mid = cpu_stats();
  cr_expect_eq(mid.live_tensors - base.live_tensors, 6);
  cr_expect_gt(mid.bytes_in_use, base.bytes_in_use);
  mx_scope_end(s);
  ASSERT_BACK_TO(base);
  cr_expect_eq(mx_last_status(), MX_OK, "%s", mx_last_error());
}

Test(scope, many_handles_in_one_scope) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  mx_tensor *keep_some[1000];
  for (int i = 0; i < 1000; i++) {
    keep_some[i] = mx_full(MX_SHAPE(2), i, MX_F32, MX_CPU);
    cr_assert_not_null(keep_some[i]);
  }
  ASSERT_DELTA(base, 1000, 1000 * 8);
  for (int i = 0; i < 1000; i += 3) mx_release(keep_some[i]); /* holes in the scope's list */
  ASSERT_DELTA(base, 1000 - 334, (1000 - 334) * 8);
  cr_expect_eq(mx_at(keep_some[998], MX_SHAPE(1)), 998.0);
  mx_scope_end(s);
  ASSERT_BACK_TO(base);
}

Test(scope, nested_scopes) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  mx_tensor *a = mx_full(MX_SHAPE(4), 3.0, MX_F32, MX_CPU);
  cr_assert_not_null(a);
  mx_memory_stats after_a = cpu_stats();
  mx_scope *inner = mx_scope_begin();
  mx_tensor *b = mx_ones(MX_SHAPE(8), MX_F64, MX_CPU);
  mx_tensor *c = mx_unsqueeze(a, 0); /* a view of an outer tensor, owned by inner */
  cr_assert(b && c);
  ASSERT_DELTA(base, 3, 16 + 64);
  mx_scope_end(inner);
  ASSERT_BACK_TO(after_a);
  cr_expect_eq(mx_at(a, MX_SHAPE(2)), 3.0, "the outer tensor survives the inner end");
  /* a new scope after the inner one works as before */
  mx_scope *again = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(3), MX_F32, MX_CPU));
  mx_scope_end(again);
  ASSERT_BACK_TO(after_a);
  mx_scope_end(outer);
  ASSERT_BACK_TO(base);
}

Test(scope, outer_end_ends_inner_scopes) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(5), MX_F32, MX_CPU));
  mx_scope *middle = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(6), MX_F32, MX_CPU));
  mx_scope *inner = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(7), MX_F32, MX_CPU));
  cr_assert(middle && inner);
  ASSERT_DELTA(base, 3, (5 + 6 + 7) * 4);
  mx_scope_end(outer); /* middle and inner end with it */
  ASSERT_BACK_TO(base);
  cr_expect_eq(mx_last_status(), MX_OK, "%s", mx_last_error());
  /* no scope is open now: a new tensor belongs to the caller */
  mx_tensor *t = mx_ones(MX_SHAPE(2), MX_F32, MX_CPU);
  cr_assert_not_null(t);
  ASSERT_DELTA(base, 1, 8);
  mx_release(t);
  ASSERT_BACK_TO(base);
  /* and scopes still work */
  mx_scope *s = mx_scope_begin();
  cr_assert_not_null(mx_ones(MX_SHAPE(2), MX_F32, MX_CPU));
  mx_scope_end(s);
  ASSERT_BACK_TO(base);
}

Test(scope, middle_end_keeps_outer) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  mx_tensor *a = mx_full(MX_SHAPE(3), 2.0, MX_F32, MX_CPU);
  cr_assert_not_null(a);
  mx_memory_stats after_a = cpu_stats();
  mx_scope *middle = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(6), MX_F32, MX_CPU));
  mx_scope_begin(); /* left open, ended with middle */
  cr_assert_not_null(mx_zeros(MX_SHAPE(7), MX_F32, MX_CPU));
  mx_scope_end(middle);
  ASSERT_BACK_TO(after_a);
  /* outer is the innermost scope again: new tensors go to it */
  cr_assert_not_null(mx_zeros(MX_SHAPE(9), MX_F32, MX_CPU));
  ASSERT_DELTA(base, 2, 12 + 36);
  cr_expect_eq(mx_at(a, MX_SHAPE(0)), 2.0);
  mx_scope_end(outer);
  ASSERT_BACK_TO(base);
}

/* --- mx_keep ---------------------------------------------------------------------------- */

Test(scope, keep_moves_to_enclosing_scope) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  mx_scope *inner = mx_scope_begin();
  mx_tensor *tmp = mx_arange(0, 4, 1, MX_F32, MX_CPU);
  mx_tensor *kept = mx_keep(mx_clone(tmp));
  cr_assert_not_null(kept);
  mx_scope_end(inner);
  ASSERT_DELTA(base, 1, 16);
  cr_expect_eq(mx_at(kept, MX_SHAPE(3)), 3.0, "a kept tensor survives the inner end");
  mx_scope_end(outer);
  ASSERT_BACK_TO(base);
}

Test(scope, keep_twice_moves_two_levels) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *a = mx_scope_begin();
  mx_scope *b = mx_scope_begin();
  mx_scope *c = mx_scope_begin();
  mx_tensor *t = mx_keep(mx_keep(mx_full(MX_SHAPE(2), 9.0, MX_F32, MX_CPU)));
  cr_assert_not_null(t);
  mx_scope_end(c);
  mx_scope_end(b);
  ASSERT_DELTA(base, 1, 8);
  cr_expect_eq(mx_at(t, MX_SHAPE(1)), 9.0);
  mx_scope_end(a);
  ASSERT_BACK_TO(base);
}

Test(scope, keep_outside_any_scope_gives_to_caller) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  mx_tensor *t = mx_keep(mx_full(MX_SHAPE(5), 1.5, MX_F64, MX_CPU));
  cr_assert_not_null(t);
  cr_assert_not_null(mx_zeros(MX_SHAPE(5), MX_F64, MX_CPU)); /* a temporary */
  mx_scope_end(s);
  ASSERT_DELTA(base, 1, 40);
  cr_expect_eq(mx_at(t, MX_SHAPE(4)), 1.5);
  /* keeping a caller-owned tensor changes nothing */
  cr_expect_eq(mx_keep(t), t);
  mx_scope *s2 = mx_scope_begin();
  mx_scope_end(s2);
  ASSERT_DELTA(base, 1, 40);
  mx_release(t);
  ASSERT_BACK_TO(base);
}

Test(scope, release_kept_tensor_in_enclosing_scope) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  mx_scope *inner = mx_scope_begin();
  mx_tensor *t = mx_keep(mx_ones(MX_SHAPE(4), MX_F32, MX_CPU));
  mx_scope_end(inner);
  mx_release(t); /* removed from outer: no second release at its end */
  ASSERT_BACK_TO(base);
  mx_scope_end(outer);
  ASSERT_BACK_TO(base);
}

/* --- mx_release ------------------------------------------------------------------------- */

Test(scope, release_scope_owned_no_double_free) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(10, 10), MX_F32, MX_CPU);
  mx_tensor *b = mx_ones(MX_SHAPE(3), MX_F32, MX_CPU);
  cr_assert(a && b);
  ASSERT_DELTA(base, 2, 412);
  mx_release(a);
  ASSERT_DELTA(base, 1, 12);
  mx_scope_end(s); /* releases b only: a double free would show in ASan and in the counts */
  ASSERT_BACK_TO(base);
  cr_expect_eq(cpu_stats().live_tensors, base.live_tensors, "the count must not go below the baseline");
}

Test(scope, release_in_outer_scope_while_inner_open) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *outer = mx_scope_begin();
  mx_tensor *a = mx_ones(MX_SHAPE(6), MX_F32, MX_CPU);
  mx_scope *inner = mx_scope_begin();
  mx_tensor *b = mx_ones(MX_SHAPE(6), MX_F32, MX_CPU);
  mx_release(a); /* owned by outer, released while inner is innermost */
  ASSERT_DELTA(base, 1, 24);
  mx_scope_end(inner);
  (void)b;
  ASSERT_BACK_TO(base);
  mx_scope_end(outer);
  ASSERT_BACK_TO(base);
}

Test(scope, release_caller_owned) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_tensor *t = mx_zeros(MX_SHAPE(2, 2), MX_F32, MX_CPU); /* no scope: the caller's */
  cr_assert_not_null(t);
  mx_scope *s = mx_scope_begin();
  mx_scope_end(s); /* does not own t */
  ASSERT_DELTA(base, 1, 16);
  mx_release(t);
  ASSERT_BACK_TO(base);
}

/* --- views keep storage alive --------------------------------------------------------- */

Test(scope, view_keeps_storage_after_base_released) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_tensor *a = mx_arange(0, 6, 1, MX_F32, MX_CPU);
  cr_assert_not_null(a);
  mx_tensor *m = mx_reshape(a, MX_SHAPE(2, 3));
  mx_tensor *t = mx_transpose(m, 0, 1);
  mx_tensor *col = mx_select(t, 1, 1); /* row 1 of m: 3, 4, 5 */
  cr_assert(m && t && col);
  cr_assert(mx_shares_storage(a, col));
  ASSERT_DELTA(base, 4, 24);
  mx_release(a);
  mx_release(m);
  mx_release(t);
  ASSERT_DELTA(base, 1, 24);
  cr_expect_eq(cpu_stats().live_storages - base.live_storages, 1);
  cr_expect_eq(mx_at(col, MX_SHAPE(0)), 3.0);
  cr_expect_eq(mx_at(col, MX_SHAPE(2)), 5.0);
  mx_release(col);
  ASSERT_BACK_TO(base);
}

Test(scope, view_kept_from_scope_keeps_storage) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_arange(0, 10, 1, MX_F64, MX_CPU);
  mx_tensor *v = mx_keep(mx_slice(a, 0, 2, 10, 3)); /* 2, 5, 8 */
  cr_assert_not_null(v);
  mx_scope_end(s); /* a's handle goes, its storage stays for v */
  ASSERT_DELTA(base, 1, 80);
  cr_expect_eq(mx_numel(v), 3);
  cr_expect_eq(mx_at(v, MX_SHAPE(1)), 5.0);
  cr_expect_eq(mx_at(v, MX_SHAPE(2)), 8.0);
  mx_release(v);
  ASSERT_BACK_TO(base);
}

/* --- statistics ------------------------------------------------------------------------- */

Test(scope, stats_count_storage_bytes_exactly) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  mx_tensor *a = mx_zeros(MX_SHAPE(10, 10), MX_F32, MX_CPU);
  cr_assert_not_null(a);
  mx_memory_stats st = cpu_stats();
  cr_expect_eq(st.bytes_in_use - base.bytes_in_use, 400);
  cr_expect_eq(st.live_tensors - base.live_tensors, 1);
  cr_expect_eq(st.live_storages - base.live_storages, 1);
  cr_expect_eq(st.allocations - base.allocations, 1);

  /* a view: one more handle, no bytes, no storage, no allocation */
  mx_tensor *v = mx_transpose(a, 0, 1);
  cr_assert_not_null(v);
  mx_memory_stats sv = cpu_stats();
  cr_expect_eq(sv.bytes_in_use, st.bytes_in_use);
  cr_expect_eq(sv.live_tensors, st.live_tensors + 1);
  cr_expect_eq(sv.live_storages, st.live_storages);
  cr_expect_eq(sv.allocations, st.allocations);

  /* the element size of every dtype */
  cr_assert_not_null(mx_empty(MX_SHAPE(3), MX_F64, MX_CPU));   /* 24 */
  cr_assert_not_null(mx_empty(MX_SHAPE(5), MX_F16, MX_CPU));   /* 10 */
  cr_assert_not_null(mx_empty(MX_SHAPE(5), MX_BF16, MX_CPU));  /* 10 */
  cr_assert_not_null(mx_empty(MX_SHAPE(2), MX_I64, MX_CPU));   /* 16 */
  cr_assert_not_null(mx_empty(MX_SHAPE(3), MX_I32, MX_CPU));   /* 12 */
  cr_assert_not_null(mx_empty(MX_SHAPE(7), MX_U8, MX_CPU));    /* 7 */
  cr_assert_not_null(mx_empty(MX_SHAPE(7), MX_BOOL, MX_CPU));  /* 7 */
  cr_assert_not_null(mx_empty(MX_SHAPE(0, 4), MX_F32, MX_CPU)); /* 0 */
  cr_assert_not_null(mx_scalar(1, MX_F32, MX_CPU));             /* 4 */
  mx_memory_stats sd = cpu_stats();
  cr_expect_eq(sd.bytes_in_use - sv.bytes_in_use, 24 + 10 + 10 + 16 + 12 + 7 + 7 + 0 + 4);
  cr_expect_eq(sd.live_tensors - sv.live_tensors, 9);
  cr_expect_eq(sd.live_storages - sv.live_storages, 9);
  cr_expect_eq(sd.allocations - sv.allocations, 9);

  /* a copy: clone and a non-contiguous mx_contiguous allocate once each and
   * leave no hidden handle behind */
  mx_tensor *c = mx_clone(v);
  mx_tensor *d = mx_contiguous(v);
  mx_tensor *e = mx_contiguous(a); /* already contiguous: a view */
  cr_assert(c && d && e);
  mx_memory_stats sc = cpu_stats();
  cr_expect_eq(sc.bytes_in_use - sd.bytes_in_use, 800);
  cr_expect_eq(sc.live_tensors - sd.live_tensors, 3);
  cr_expect_eq(sc.allocations - sd.allocations, 2);
  mx_scope_end(s);
  ASSERT_BACK_TO(base);
  /* allocations counts allocations ever made: it does not go down */
  cr_expect_eq(cpu_stats().allocations - base.allocations, 1 + 9 + 2);
}

Test(scope, peak_bytes_and_reset) {
  mx_clear_error();
  mx_memory_reset_peak(MX_CPU);
  mx_memory_stats base = cpu_stats();
  cr_expect_eq(base.peak_bytes, base.bytes_in_use, "reset sets the peak to the current use");
  mx_tensor *small = mx_zeros(MX_SHAPE(250), MX_F32, MX_CPU); /* 1000 bytes */
  mx_tensor *big = mx_zeros(MX_SHAPE(1000), MX_F32, MX_CPU);  /* 4000 bytes */
  cr_assert(small && big);
  cr_expect_eq(cpu_stats().peak_bytes, base.bytes_in_use + 5000);
  mx_release(big);
  mx_memory_stats st = cpu_stats();
  cr_expect_eq(st.bytes_in_use, base.bytes_in_use + 1000);
  cr_expect_eq(st.peak_bytes, base.bytes_in_use + 5000, "the peak remembers the maximum");
  mx_tensor *mid = mx_zeros(MX_SHAPE(500), MX_F32, MX_CPU); /* 2000: below the peak */
  cr_expect_eq(cpu_stats().peak_bytes, base.bytes_in_use + 5000);
  mx_release(mid);
  mx_memory_reset_peak(MX_CPU);
  cr_expect_eq(cpu_stats().peak_bytes, base.bytes_in_use + 1000, "reset to the current use");
  mx_tensor *more = mx_zeros(MX_SHAPE(25), MX_F32, MX_CPU); /* 100 bytes */
  cr_assert_not_null(more);
  cr_expect_eq(cpu_stats().peak_bytes, base.bytes_in_use + 1100);
  mx_release(more);
  mx_release(small);
  ASSERT_BACK_TO(base);
  cr_expect_eq(cpu_stats().peak_bytes, base.bytes_in_use + 1100);
  /* an invalid device has no statistics and does not crash */
  mx_memory_stats none = mx_memory_stats_get(MX_DEVICE_COUNT);
  cr_expect_eq(none.bytes_in_use, 0);
  cr_expect_eq(none.allocations, 0);
  mx_memory_reset_peak(MX_DEVICE_COUNT);
}

/* Freed CPU storage may sit in the allocator's cache; bytes_in_use never
 * counts it, and emptying the cache leaves live tensors alone. */
Test(scope, empty_cache_keeps_live_tensors_and_the_statistics) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_tensor *kept = mx_full(MX_SHAPE(1000), 3, MX_F32, MX_CPU);
  mx_release(mx_zeros(MX_SHAPE(1 << 16), MX_F32, MX_CPU));
  cr_expect_eq(cpu_stats().bytes_in_use, base.bytes_in_use + 4000, "a freed block is not in use, cached or not");
  cr_assert_eq(mx_memory_empty_cache(MX_CPU), MX_OK, "%s", mx_last_error());
  cr_expect_eq(cpu_stats().bytes_in_use, base.bytes_in_use + 4000);
  cr_expect_eq(mx_at(kept, MX_SHAPE(999)), 3);
  mx_release(kept);
  cr_expect_eq(mx_memory_empty_cache(MX_DEVICE_COUNT), MX_DEVICE_ERROR);
  cr_expect(strstr(mx_last_error(), "mx_memory_empty_cache: invalid device") != NULL, "%s", mx_last_error());
  mx_clear_error();
  ASSERT_BACK_TO(base);
}

Test(scope, allocations_counter_increases) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  for (int i = 1; i <= 5; i++) {
    mx_tensor *t = mx_ones(MX_SHAPE(i), MX_F32, MX_CPU);
    cr_assert_not_null(t);
    cr_expect_eq(cpu_stats().allocations, base.allocations + i);
    mx_release(t);
  }
  ASSERT_BACK_TO(base);
  cr_expect_eq(cpu_stats().allocations, base.allocations + 5);
}

Test(scope, loop_of_scopes_does_not_grow) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_memory_reset_peak(MX_CPU);
  mx_tensor *acc = mx_zeros(MX_SHAPE(16, 16), MX_F64, MX_CPU); /* caller-owned */
  cr_assert_not_null(acc);
  mx_memory_stats start = cpu_stats();
  int64_t per_iteration = 0;
  for (int i = 0; i < 1000; i++) {
    mx_memory_stats before = cpu_stats();
    mx_scope *s = mx_scope_begin();
    mx_tensor *x = mx_randn(MX_SHAPE(16, 16), MX_F32, MX_CPU, NULL);
    mx_tensor *t = mx_transpose(x, 0, 1);
    mx_tensor *flat = mx_reshape(t, MX_SHAPE(-1)); /* a copy */
    mx_tensor *back = mx_view(flat, MX_SHAPE(16, 16));
    mx_tensor *wide = mx_to_dtype(back, MX_F64);
    cr_assert(wide, "iteration %d: %s", i, mx_last_error());
    cr_assert_eq(mx_copy_(acc, wide), MX_OK);
    if (i == 0) per_iteration = cpu_stats().bytes_in_use - before.bytes_in_use;
    mx_scope_end(s);
    if (cpu_stats().bytes_in_use != start.bytes_in_use || cpu_stats().live_tensors != start.live_tensors)
      cr_assert_fail("iteration %d leaked: %lld bytes, %lld handles", i,
                     (long long)(cpu_stats().bytes_in_use - start.bytes_in_use),
                     (long long)(cpu_stats().live_tensors - start.live_tensors));
  }
  ASSERT_BACK_TO(start);
  cr_expect_gt(per_iteration, 0);
  cr_expect_leq(cpu_stats().peak_bytes, start.bytes_in_use + per_iteration,
                "the peak is one iteration's worth, not a thousand");
  mx_release(acc);
  ASSERT_BACK_TO(base);
}

/* --- scopes are per thread ------------------------------------------------------------- */

typedef struct {
  pthread_barrier_t *barrier;
  mx_tensor *made;      /* a tensor the thread made outside any of its scopes */
  bool ok;
} worker;

static void *make_outside_scope(void *arg) {
  worker *w = arg;
  mx_scope *own = mx_scope_begin();
  bool tmp_ok = mx_ones(MX_SHAPE(32), MX_F32, MX_CPU) != NULL;
  mx_scope_end(own);
  w->made = mx_full(MX_SHAPE(4), 6.0, MX_F32, MX_CPU); /* no scope open in this thread */
  w->ok = tmp_ok && w->made;
  return NULL;
}

/* A scope open in the main thread does not own a tensor made in another. */
Test(scope, other_thread_tensor_not_owned) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  mx_scope *s = mx_scope_begin();
  cr_assert_not_null(mx_zeros(MX_SHAPE(2), MX_F32, MX_CPU));
  worker w = {0};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, make_outside_scope, &w), 0);
  cr_assert_eq(pthread_join(th, NULL), 0);
  cr_assert(w.ok);
  ASSERT_DELTA(base, 2, 8 + 16); /* the thread's own scope freed its temporary */
  mx_scope_end(s);
  ASSERT_DELTA(base, 1, 16);
  cr_expect_eq(mx_at(w.made, MX_SHAPE(3)), 6.0);
  mx_release(w.made);
  ASSERT_BACK_TO(base);
}

static void *hold_scope_open(void *arg) {
  worker *w = arg;
  mx_scope *own = mx_scope_begin();
  w->ok = mx_ones(MX_SHAPE(8), MX_F32, MX_CPU) != NULL;
  pthread_barrier_wait(w->barrier); /* 1: our scope is open */
  pthread_barrier_wait(w->barrier); /* 2: main made its tensor */
  mx_scope_end(own);
  pthread_barrier_wait(w->barrier); /* 3: our scope has ended */
  return NULL;
}

/* A scope open in another thread does not own a tensor made here. */
Test(scope, foreign_scope_does_not_adopt) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  pthread_barrier_t barrier;
  cr_assert_eq(pthread_barrier_init(&barrier, NULL, 2), 0);
  worker w = {.barrier = &barrier};
  pthread_t th;
  cr_assert_eq(pthread_create(&th, NULL, hold_scope_open, &w), 0);
  pthread_barrier_wait(&barrier);
  mx_tensor *mine = mx_full(MX_SHAPE(3), 4.0, MX_F32, MX_CPU); /* no scope open on this thread */
  pthread_barrier_wait(&barrier);
  pthread_barrier_wait(&barrier);
  cr_assert_eq(pthread_join(th, NULL), 0);
  pthread_barrier_destroy(&barrier);
  cr_assert(w.ok);
  cr_assert_not_null(mine);
  ASSERT_DELTA(base, 1, 12);
  cr_expect_eq(mx_at(mine, MX_SHAPE(2)), 4.0);
  mx_release(mine);
  ASSERT_BACK_TO(base);
}

typedef struct {
  int iterations;
  bool ok;
} loop_worker;

static void *scoped_loop(void *arg) {
  loop_worker *w = arg;
  w->ok = true;
  for (int i = 0; i < w->iterations; i++) {
    mx_scope *s = mx_scope_begin();
    mx_tensor *a = mx_rand(MX_SHAPE(8, 8), MX_F32, MX_CPU, NULL);
    mx_tensor *b = mx_clone(mx_transpose(a, 0, 1));
    if (!b) w->ok = false;
    mx_scope_end(s);
  }
  return NULL;
}

/* Threads with their own scope stacks, running at once, free everything. */
Test(scope, concurrent_thread_scopes) {
  mx_clear_error();
  mx_memory_stats base = cpu_stats();
  enum { N = 4 };
  pthread_t th[N];
  loop_worker w[N];
  for (int i = 0; i < N; i++) {
    w[i] = (loop_worker){.iterations = 200};
    cr_assert_eq(pthread_create(&th[i], NULL, scoped_loop, &w[i]), 0);
  }
  for (int i = 0; i < N; i++) {
    cr_assert_eq(pthread_join(th[i], NULL), 0);
    cr_expect(w[i].ok);
  }
  ASSERT_BACK_TO(base);
}
