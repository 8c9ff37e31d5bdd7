/* --amp-report on the demos (examples/train): the page written where the
 * flag says and its path printed, for a float16 and a bfloat16 run; a
 * folder that cannot be made stops the run before it trains. The page's
 * contents are the amp suite's (tests/amp/test_amp_report.c). */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

#ifdef MX_HAVE_VALGRIND_H
#include <valgrind/valgrind.h>
#else
#define RUNNING_ON_VALGRIND 0
#endif

TestSuite(amp_report_flag, .init = make_tmp_dir, .fini = remove_tmp_dir);

#define RUN(...) child_run_argv((const char *const[]){__VA_ARGS__, NULL}, 0)

static const char *mnist(void) {
  const char *path = getenv("MX_MNIST_DEMO");
  cr_assert(path && *path, "MX_MNIST_DEMO is not set (tests/examples/meson.build sets it)");
  return path;
}

static void writes_the_page(const char *amp, const char *summary) {
  if (RUNNING_ON_VALGRIND) {
    remove_tmp_dir(); /* Criterion runs no .fini after a skip */
    cr_skip_test("under valgrind: oneDNN's JIT kernels make a traced demo fail");
  }
  const char *dir = tmp_path("report");
  child_run r = RUN(mnist(), "--synthetic", "200", "--batch", "20", "--steps", "12", "--model", "cnn", "--amp", amp,
                    "--amp-report", dir);
  cr_assert_eq(r.status, 0, "mnist --amp-report exited with %d:\n%s\n%s", r.status, r.out, r.err);
  cr_expect(strstr(r.out, fmt("\nAMP report: %s/index.html\n", dir)), "the run says where the page is:\n%s", r.out);
  child_run_free(&r);
  char *page = read_file(fmt("%s/index.html", dir), NULL);
  cr_expect(strstr(page, summary), "the page's summary: %.400s", page);
  cr_expect(strstr(page, "id=\"histograms-end\""), "the page draws the last sample");
  free(page);
}

Test(amp_report_flag, f16_run_writes_the_page) {
  /* 12 steps: a sample every step (a tenth of the run, at least 1) */
  writes_the_page("f16", "Autocast float16 with a GradScaler; 12 steps, 12 sampled.");
}

Test(amp_report_flag, bf16_run_writes_the_page) {
  writes_the_page("bf16", "Autocast bfloat16, no loss scaling; 12 steps, 12 sampled.");
}

Test(amp_report_flag, a_folder_that_cannot_be_made_stops_the_run) {
  const char *dir = tmp_path("no/such/report");
  child_run r = RUN(mnist(), "--synthetic", "100", "--amp-report", dir);
  cr_expect_eq(r.status, 2);
  cr_expect_str_eq(r.err, fmt("mnist: --amp-report %s: No such file or directory\n", dir));
  cr_expect_str_eq(r.out, "");
  child_run_free(&r);
}
