/* The demos' --channels-last (examples/train/flags.c, trainer.c): a switch
 * without a value that lays each batch out channels-last once; the MNIST CNN
 * trains as it does without it (the same losses within float32 rounding:
 * other oneDNN kernels sum in other orders), and the ResNet-9 trains with it.
 * Runs that train are skipped under valgrind, as in test_demos.c. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

TestSuite(channels_last_flag, .init = make_tmp_dir, .fini = remove_tmp_dir);

static bool quick(void) {
  const char *q = getenv("MX_TEST_QUICK");
  return q && *q && strcmp(q, "0") != 0;
}

static void skip(const char *why) {
  remove_tmp_dir(); /* Criterion runs no .fini after a skip */
  cr_skip_test("%s", why);
}

static const char *demo(const char *var) {
  const char *path = getenv(var);
  cr_assert(path && *path, "%s is not set (tests/examples/meson.build sets it)", var);
  return path;
}

#define RUN(...) child_run_argv((const char *const[]){__VA_ARGS__, NULL}, 0)

static void expect_ok(const child_run *r, const char *what) {
  size_t n = strlen(r->err);
  cr_assert_eq(r->status, 0, "%s exited with %d\n--- stderr:\n%s", what, r->status, n > 3000 ? r->err + n - 3000 : r->err);
}

/* The losses of the step rows of a --metrics CSV (kind,step,epoch,loss,...), at most max. */
static int step_losses(const char *path, double *loss, int max) {
  char *text = read_file(path, NULL), *rest = text, *line;
  int n = 0;
  strsep(&rest, "\n"); /* the header */
  while ((line = strsep(&rest, "\n")) != NULL && *line && n < max) {
    if (strncmp(line, "step,", 5)) continue;
    char *field = line;
    for (int k = 0; k < 3 && field; k++) field = strchr(field, ',') ? strchr(field, ',') + 1 : NULL;
    cr_assert(field, "%s: a short row '%s'", path, line);
    loss[n++] = strtod(field, NULL);
  }
  free(text);
  return n;
}

Test(channels_last_flag, help_lists_it) {
  child_run r = RUN(demo("MX_MNIST_DEMO"), "--help");
  expect_ok(&r, "mnist --help");
  cr_expect(strstr(r.out, "  --channels-last ") != NULL, "--channels-last is not listed:\n%s", r.out);
  child_run_free(&r);
}

Test(channels_last_flag, the_mnist_cnn_trains_as_without_it) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  int steps = quick() ? 4 : 10;
  double loss[2][10];
  for (int cl = 0; cl < 2; cl++) {
    const char *csv = tmp_path(cl ? "cl.csv" : "rm.csv");
    /* the switch between two flags with values: it takes none */
    child_run r = cl ? RUN(demo("MX_MNIST_DEMO"), "--synthetic", fmt("%d", 16 * steps), "--channels-last", "--model",
                           "cnn", "--batch", "16", "--epochs", "1", "--amp", "off", "--metrics", csv)
                     : RUN(demo("MX_MNIST_DEMO"), "--synthetic", fmt("%d", 16 * steps), "--model", "cnn", "--batch",
                           "16", "--epochs", "1", "--amp", "off", "--metrics", csv);
    expect_ok(&r, cl ? "mnist --channels-last" : "mnist");
    cr_assert_eq(step_losses(csv, loss[cl], steps), steps);
    child_run_free(&r);
  }
  for (int i = 0; i < steps; i++)
    cr_expect(fabs(loss[1][i] - loss[0][i]) <= 1e-3 * fabs(loss[0][i]), "step %d: loss %.6f channels-last, %.6f not",
              i + 1, loss[1][i], loss[0][i]);
}

Test(channels_last_flag, the_resnet9_trains_with_it) {
  if (RUNNING_ON_VALGRIND) skip("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  if (quick()) skip("MX_TEST_QUICK: the ResNet-9 is slow under the sanitizers");
  const char *csv = tmp_path("c.csv");
  child_run r = RUN(demo("MX_CIFAR10_DEMO"), "--synthetic", "60", "--batch", "20", "--epochs", "1", "--amp", "bf16",
                     "--channels-last", "--metrics", csv);
  expect_ok(&r, "cifar10 --channels-last");
  double loss[3];
  cr_assert_eq(step_losses(csv, loss, 3), 3);
  for (int i = 0; i < 3; i++) cr_expect(isfinite(loss[i]) && loss[i] > 0, "step %d: loss %g", i + 1, loss[i]);
  child_run_free(&r);
}
