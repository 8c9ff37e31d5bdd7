/* The free lists for small objects (tensor/object_cache.c), built into this
 * test on its own so it can count what a thread keeps. The lists are off
 * under AddressSanitizer and valgrind, so the cases that count skip there;
 * the zeroing and cross-thread cases run everywhere. */
#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include "tensor/object_cache.h"

#if defined(__has_include)
#if __has_include(<valgrind/valgrind.h>)
#include <valgrind/valgrind.h>
#endif
#endif

static bool lists_are_on(void) {
#if defined(__SANITIZE_ADDRESS__)
  return false;
#endif
#ifdef RUNNING_ON_VALGRIND
  if (RUNNING_ON_VALGRIND) return false;
#endif
  return true;
}

static void skip_if_checked(void) {
  if (!lists_are_on()) cr_skip_test("the lists are off under AddressSanitizer and valgrind");
}

static bool all_zero(const unsigned char *p, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (p[i]) return false;
  return true;
}

Test(object_cache, a_freed_object_serves_the_next_request_of_its_class_zeroed) {
  skip_if_checked();
  unsigned char *a = mx__object_new(40);
  cr_assert_not_null(a);
  memset(a, 0xAB, 40);
  mx__object_free(a, 40);
  cr_expect_eq(mx__object_cache_count(), 1);
  unsigned char *b = mx__object_new(64); /* 40 and 64 share the class 33..64 */
  cr_expect_eq(b, a);
  cr_expect(all_zero(b, 64), "a reused object comes back zeroed, all 64 bytes");
  cr_expect_eq(mx__object_cache_count(), 0);
  mx__object_free(b, 64);
}

Test(object_cache, other_classes_and_large_objects_are_not_kept) {
  skip_if_checked();
  void *small = mx__object_new(32);
  mx__object_free(small, 32);
  void *other = mx__object_new(33); /* the next class */
  cr_expect_neq(other, small);
  mx__object_free(other, 33);
  void *large = mx__object_new(5000); /* beyond the lists: plain calloc and free */
  cr_assert_not_null(large);
  cr_expect(all_zero(large, 5000));
  mx__object_free(large, 5000);
  cr_expect_eq(mx__object_cache_count(), 2);
}

Test(object_cache, a_thread_keeps_at_most_4096_objects_and_1_mib_of_a_class) {
  skip_if_checked();
  enum { N = 5000 };
  static void *objects[N];
  for (int i = 0; i < N; i++) cr_assert_not_null(objects[i] = mx__object_new(200));
  for (int i = 0; i < N; i++) mx__object_free(objects[i], 200);
  cr_expect_eq(mx__object_cache_count(), 4096, "the rest went back to malloc");
  for (int i = 0; i < N; i++) cr_assert_not_null(objects[i] = mx__object_new(1000)); /* class 993..1024 */
  for (int i = 0; i < N; i++) mx__object_free(objects[i], 1000);
  cr_expect_eq(mx__object_cache_count(), 4096 + 1024, "1 MiB of 1 KiB objects");
}

/* Objects made on one thread and freed on another go to the freeing
 * thread's lists: they are plain malloc blocks, owned by no thread. */
static void *free_all(void *p) {
  void **objects = p;
  size_t kept = mx__object_cache_count();
  for (int i = 0; i < 100; i++) {
    cr_expect(all_zero(objects[i], 100));
    mx__object_free(objects[i], 100);
  }
  return (void *)(uintptr_t)(mx__object_cache_count() - kept);
}

Test(object_cache, objects_may_be_freed_by_another_thread) {
  void *objects[100];
  for (int i = 0; i < 100; i++) cr_assert_not_null(objects[i] = mx__object_new(100));
  pthread_t thread;
  cr_assert_eq(pthread_create(&thread, NULL, free_all, objects), 0);
  void *kept;
  pthread_join(thread, &kept);
  cr_expect_eq((uintptr_t)kept, lists_are_on() ? 100 : 0, "the freeing thread keeps them");
  cr_expect_eq(mx__object_cache_count(), 0, "this thread does not");
}
