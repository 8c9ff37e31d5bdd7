/* The fuzz targets (fuzz/fuzz.h) on their seeds, on mutations of the seeds
 * (truncations, and single bytes set to 0, to 0xff or to one more), and on
 * the inputs kept in fuzz/corpus/<target>/, named ok-... when the reader
 * (or op) must accept them and bad-... when it must refuse them (so are the
 * broken gzipped seeds: a trailer cut or wrong, bytes after the data). A target
 * aborts when a reader breaks a promise, so a test passes when every input
 * was either read as the format says or refused with an error that names
 * the reader and the file and changes nothing; and every op either gave a
 * result that reads back or a clear error.
 *
 * MX_TEST_QUICK (set, non-empty and not "0"; CI sets it for the sanitizer
 * and valgrind runs) mutates every 7th byte instead of every one. */
#include <criterion/criterion.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz/fuzz.h"
#include "mixgrad.h"

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

typedef bool (*target_fn)(const uint8_t *data, size_t size);

Test(fuzz, seeds_run_and_the_files_are_accepted) {
  int n;
  mx_fuzz_seed *seeds = mx_fuzz_seeds(&n);
  int files = 0, ops_accepted = 0, ops = 0, broken = 0;
  for (int i = 0; i < n; i++) {
    target_fn target = mx_fuzz_target(seeds[i].target);
    cr_assert_not_null(target, "%s", seeds[i].target);
    bool accepted = target(seeds[i].data, seeds[i].size);
    cr_expect(accepted || !seeds[i].accepted, "%s seed %s is refused: %s", seeds[i].target, seeds[i].name,
              mx_last_error());
    cr_expect(!accepted || !seeds[i].refused, "%s seed %s is accepted", seeds[i].target, seeds[i].name);
    broken += seeds[i].refused;
    mx_clear_error();
    files += seeds[i].accepted;
    ops += !strcmp(seeds[i].target, "ops");
    ops_accepted += !strcmp(seeds[i].target, "ops") && accepted;
  }
  cr_expect_geq(files, 6, "a seed per file target at least");
  cr_expect_geq(broken, 6, "broken gzipped seeds for both dataset targets");
  /* on float64 inputs of their own shapes (random values, not their domains) nearly every op case runs */
  cr_expect_geq(ops_accepted, ops * 9 / 10, "%d of %d op cases ran on their own shapes", ops_accepted, ops);
  mx_fuzz_seeds_free(seeds, n);
}

/* Runs target on seed with byte i set to value (or, value < 0, cut to i
 * bytes); returns whether it was accepted. */
static bool mutated(target_fn target, const mx_fuzz_seed *seed, size_t i, int value) {
  uint8_t *copy = malloc(seed->size ? seed->size : 1);
  cr_assert_not_null(copy);
  memcpy(copy, seed->data, seed->size);
  size_t size = value < 0 ? i : seed->size;
  if (value >= 0) copy[i] = (uint8_t)value;
  bool accepted = target(copy, size);
  free(copy);
  return accepted;
}

Test(fuzz, mutated_seeds_are_read_or_refused, .timeout = 600) {
  int n;
  mx_fuzz_seed *seeds = mx_fuzz_seeds(&n);
  size_t stride = quick() ? 7 : 1;
  int op_runs = 0, op_refused = 0;
  for (int s = 0; s < n; s++) {
    const mx_fuzz_seed *seed = &seeds[s];
    target_fn target = mx_fuzz_target(seed->target);
    /* every byte of the first 512 (the headers), then 64 places further on */
    size_t head = seed->size < 512 ? seed->size : 512, step = seed->size > 512 ? (seed->size - 512) / 64 + 1 : 1;
    int runs = 0, refused = 0;
    for (size_t i = 0; i < seed->size; i += i < head ? stride : step) {
      refused += !mutated(target, seed, i, -1);
      refused += !mutated(target, seed, i, 0);
      refused += !mutated(target, seed, i, 0xff);
      refused += !mutated(target, seed, i, (seed->data[i] + 1) & 0xff);
      runs += 4;
    }
    if (!strcmp(seed->target, "ops")) { /* a short seed: counted over all cases */
      op_runs += runs, op_refused += refused;
      continue;
    }
    cr_expect_gt(refused, 0, "%s seed %s: none of %d mutations was refused", seed->target, seed->name, runs);
    if (!seed->refused) /* a broken file may stay broken under every mutation */
      cr_expect_lt(refused, runs, "%s seed %s: all %d mutations were refused", seed->target, seed->name, runs);
  }
  cr_expect(op_refused > 0 && op_refused < op_runs, "ops: %d of %d mutations refused", op_refused, op_runs);
  mx_fuzz_seeds_free(seeds, n);
}

Test(fuzz, kept_inputs_are_read_or_refused_as_named) {
  static const char *const targets[] = {"safetensors", "checkpoint", "idx", "cifar", "ops"};
  int kept = 0;
  for (int t = 0; t < 5; t++) {
    char dir_path[4096];
    snprintf(dir_path, sizeof dir_path, "%s/%s", MX_FUZZ_CORPUS_DIR, targets[t]);
    DIR *dir = opendir(dir_path);
    if (!dir) continue; /* no inputs kept for this target */
    struct dirent *e;
    while ((e = readdir(dir))) {
      if (e->d_name[0] == '.') continue;
      bool ok = !strncmp(e->d_name, "ok-", 3), bad = !strncmp(e->d_name, "bad-", 4);
      cr_expect(ok || bad, "%s/%s: a kept input's name begins with ok- or bad-", targets[t], e->d_name);
      char path[8192];
      snprintf(path, sizeof path, "%s/%s", dir_path, e->d_name);
      size_t size;
      uint8_t *data = mx_fuzz_read(path, &size);
      bool accepted = mx_fuzz_target(targets[t])(data, size);
      cr_expect(!ok || accepted, "%s/%s is refused: %s", targets[t], e->d_name, mx_last_error());
      cr_expect(!bad || !accepted, "%s/%s is accepted", targets[t], e->d_name);
      mx_clear_error();
      free(data);
      kept++;
    }
    closedir(dir);
  }
  cr_log_info("%d kept inputs", kept);
}
