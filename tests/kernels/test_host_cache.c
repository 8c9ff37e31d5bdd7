/* The CPU backend's caching allocator (kernels/cpu/host_cache.c), built
 * into this test on its own so each case controls its limit through
 * MX_CPU_CACHE_BYTES before the first allocation. The cache turns itself
 * off under AddressSanitizer and valgrind, so these cases skip there. */
#include <criterion/criterion.h>
#include <stdint.h>
#include <stdlib.h>

#include "kernels/cpu/host_cache.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

static void skip_if_checked(void) {
#if defined(__SANITIZE_ADDRESS__)
  cr_skip_test("the cache is off under AddressSanitizer");
#endif
#ifdef RUNNING_ON_VALGRIND
  if (RUNNING_ON_VALGRIND) cr_skip_test("the cache is off under valgrind");
#endif
}

/* 4 MiB of cache for every case (each runs in a process of its own). */
static void limit_4mib(void) {
  setenv("MX_CPU_CACHE_BYTES", "4194304", 1);
  skip_if_checked();
}

TestSuite(host_cache, .init = limit_4mib, .fini = mx__host_cache_empty);

Test(host_cache, a_freed_block_serves_the_next_request_of_its_class) {
  char *a = mx__host_cache_alloc(1000000);
  cr_assert_not_null(a);
  cr_expect_eq((uintptr_t)a % 64, 0, "blocks are 64-byte aligned");
  a[999999] = 1; /* the whole request is usable */
  mx__host_cache_free(a, 1000000);
  /* 1000000 bytes round up to 16 steps of 2^19 / 8 = 65536: 1048576 */
  cr_expect_eq(mx__host_cache_bytes(), 1048576);
  char *b = mx__host_cache_alloc(1040000); /* another size, the same class */
  cr_expect_eq(b, a);
  cr_expect_eq(mx__host_cache_bytes(), 0);
  char *c = mx__host_cache_alloc(1000000); /* nothing cached: a fresh block */
  cr_expect_neq(c, a);
  mx__host_cache_free(b, 1040000);
  mx__host_cache_free(c, 1000000);
  cr_expect_eq(mx__host_cache_bytes(), 2 * 1048576);
}

Test(host_cache, blocks_of_other_classes_are_not_handed_out) {
  void *small = mx__host_cache_alloc(100); /* 100 -> 128 */
  mx__host_cache_free(small, 100);
  cr_expect_eq(mx__host_cache_bytes(), 128);
  void *other = mx__host_cache_alloc(200); /* 200 -> 224: another class */
  cr_expect_neq(other, small);
  cr_expect_eq(mx__host_cache_bytes(), 128);
  mx__host_cache_free(other, 200);
}

Test(host_cache, frees_beyond_the_limit_go_to_the_system) {
  void *blocks[5];
  for (int i = 0; i < 5; i++) blocks[i] = mx__host_cache_alloc(1 << 20);
  for (int i = 0; i < 5; i++) mx__host_cache_free(blocks[i], 1 << 20);
  cr_expect_eq(mx__host_cache_bytes(), 4 << 20, "four 1 MiB blocks fill the 4 MiB limit; the fifth is freed");
}

Test(host_cache, emptying_gives_every_block_back) {
  void *a = mx__host_cache_alloc(3000), *b = mx__host_cache_alloc(70000);
  mx__host_cache_free(a, 3000);
  mx__host_cache_free(b, 70000);
  cr_expect_gt(mx__host_cache_bytes(), 0);
  mx__host_cache_empty();
  cr_expect_eq(mx__host_cache_bytes(), 0);
}

Test(host_cache, a_zero_limit_turns_it_off) {
  setenv("MX_CPU_CACHE_BYTES", "0", 1);
  void *a = mx__host_cache_alloc(4096);
  cr_assert_not_null(a);
  mx__host_cache_free(a, 4096);
  cr_expect_eq(mx__host_cache_bytes(), 0);
}
