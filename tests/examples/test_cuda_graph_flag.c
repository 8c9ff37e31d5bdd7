/* --cuda-graph on the demos (examples/train): refused without --device cuda
 * or with --amp-report before anything loads, listed by --help, and, where
 * a GPU is, a run that captures its step and replays it to the end. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "tests/common/child_run.h"
#include "tests/common/tmp_files.h"

TestSuite(cuda_graph_flag, .init = make_tmp_dir, .fini = remove_tmp_dir); /* child_run's output files */

#define RUN(...) child_run_argv((const char *const[]){__VA_ARGS__, NULL}, 0)

static const char *demo(const char *var) {
  const char *path = getenv(var);
  cr_assert(path && *path, "%s is not set (tests/examples/meson.build sets it)", var);
  return path;
}

Test(cuda_graph_flag, needs_device_cuda) {
  child_run r = RUN(demo("MX_MNIST_DEMO"), "--synthetic", "100", "--cuda-graph");
  cr_expect_eq(r.status, 2);
  cr_expect_str_eq(r.err, "mnist: --cuda-graph needs --device cuda (see --help)\n");
  cr_expect_str_eq(r.out, "");
  child_run_free(&r);
}

Test(cuda_graph_flag, refuses_amp_report) {
  child_run r = RUN(demo("MX_CIFAR10_DEMO"), "--synthetic", "100", "--device", "cuda", "--cuda-graph", "--amp-report",
                    "report");
  cr_expect_eq(r.status, 2);
  cr_expect_str_eq(r.err, "cifar10: --cuda-graph needs --device cuda and no --amp-report (its statistics are read on "
                          "the host each step) (see --help)\n");
  child_run_free(&r);
}

Test(cuda_graph_flag, help_lists_it) {
  child_run r = RUN(demo("MX_MNIST_DEMO"), "--help");
  cr_expect_eq(r.status, 0);
  cr_expect_not_null(strstr(r.out, "  --cuda-graph       with --device cuda: capture the training step once in a "
                                   "CUDA graph and\n"), "%s", r.out);
  child_run_free(&r);
}

/* Runs where a GPU is; elsewhere the demo says why it cannot, and the case skips. */
Test(cuda_graph_flag, trains_to_the_end_on_a_gpu) {
  child_run r = RUN(demo("MX_MNIST_DEMO"), "--synthetic", "300", "--batch", "64", "--epochs", "1", "--model", "mlp",
                    "--amp", "f16", "--device", "cuda", "--cuda-graph");
  if (r.status == 1 && (strstr(r.err, "no CUDA device") || strstr(r.err, "built without CUDA"))) {
    child_run_free(&r);
    remove_tmp_dir(); /* Criterion runs no .fini after a skip */
    cr_skip_test("no CUDA device here");
  }
  cr_expect_eq(r.status, 0, "mnist --cuda-graph exited with %d:\n%s\n%s", r.status, r.out, r.err);
  cr_expect_not_null(strstr(r.out, "test: loss"), "%s", r.out);
  child_run_free(&r);
}
