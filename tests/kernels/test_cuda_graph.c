/* CUDA graphs' API where no graph can be made: a build without CUDA, or no
 * device (the captures themselves are tests/gpu/test_gpu_graph.c's). */
#include <criterion/criterion.h>
#include <string.h>

#include "mixgrad.h"
#include "tests/common/expect_error.h"

static int steps_run;

static mx_status count_step(void *ctx) {
  (void)ctx;
  steps_run++;
  return MX_OK;
}

/* Where a graph can be made (a GPU), these cases have nothing to check. */
static void skip_with_a_device(void) {
  if (mx_cuda_device_count() > 0) cr_skip_test("a CUDA device is here: tests/gpu captures graphs");
}

Test(cuda_graph, capture_without_cuda_is_not_supported) {
  skip_with_a_device();
  steps_run = 0;
  mx_clear_error();
  cr_assert_null(mx_cuda_graph_capture(count_step, NULL, 3));
  cr_expect_eq(mx_last_status(), MX_NOT_SUPPORTED);
  if (!mx_cuda_built())
    cr_expect_str_eq(mx_last_error(), "mx_cuda_graph_capture: CUDA graphs are not supported here: mixgrad was built "
                                      "without CUDA: cannot use device 'cuda' (rebuild with -Dcuda=enabled)");
  else {
    const char *prefix = "mx_cuda_graph_capture: CUDA graphs are not supported here: ";
    cr_expect(!strncmp(mx_last_error(), prefix, strlen(prefix)), "got: %s", mx_last_error());
  }
  cr_expect_eq(steps_run, 0, "no warm-up step runs when no graph can be made (%d ran)", steps_run);
  cr_expect_not(mx_cuda_graph_capturing(), "the capture flag is down again after the failure");
}

Test(cuda_graph, bad_arguments) {
  EXPECT_ERROR(mx_cuda_graph_capture(NULL, NULL, 1), "mx_cuda_graph_capture: argument 'step' is NULL");
  EXPECT_ERROR(mx_cuda_graph_capture(count_step, NULL, -1), "mx_cuda_graph_capture: warmup must be >= 0, got -1");
  cr_expect_eq(mx_last_status(), MX_INVALID_ARGUMENT);
  EXPECT_STATUS_ERROR(mx_cuda_graph_replay(NULL), "mx_cuda_graph_replay: argument 'g' is NULL");
  cr_expect_not(mx_cuda_graph_capturing());
}

Test(cuda_graph, a_handle_that_is_not_a_live_graph_is_refused) {
  char not_a_graph; /* an address no capture returned */
  mx_cuda_graph *g = (mx_cuda_graph *)(void *)&not_a_graph;
  EXPECT_STATUS_ERROR(mx_cuda_graph_replay(g),
                      "mx_cuda_graph_replay: the graph was freed (or was not made by mx_cuda_graph_capture)");
  cr_expect_eq(mx_last_status(), MX_STATE_ERROR);
  mx_clear_error();
  mx_cuda_graph_free(g);
  cr_expect_str_eq(mx_last_error(), "mx_cuda_graph_free: the graph was already freed (or was not made by "
                                    "mx_cuda_graph_capture)");
  mx_clear_error();
  mx_cuda_graph_free(NULL); /* nothing, as free(NULL) */
  cr_expect_eq(mx_last_status(), MX_OK);
}
