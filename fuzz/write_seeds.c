/* fuzz_seeds DIR: writes each target's seeds into DIR/<target>/, the
 * corpus scripts/fuzz starts libFuzzer from. */
#include <errno.h>
#include <stdio.h>
#include <sys/stat.h>

#include "fuzz/fuzz.h"

int main(int argc, char **argv) {
  if (argc != 2) {
    fprintf(stderr, "usage: fuzz_seeds DIR\n");
    return 2;
  }
  int n;
  mx_fuzz_seed *seeds = mx_fuzz_seeds(&n);
  for (int i = 0; i < n; i++) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", argv[1], seeds[i].target);
    if (mkdir(path, 0755) != 0 && errno != EEXIST) {
      perror(path);
      return 1;
    }
    snprintf(path, sizeof path, "%s/%s/%s", argv[1], seeds[i].target, seeds[i].name);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(seeds[i].data, 1, seeds[i].size, f) != seeds[i].size || fclose(f) != 0) {
      perror(path);
      return 1;
    }
  }
  mx_fuzz_seeds_free(seeds, n);
  return 0;
}
