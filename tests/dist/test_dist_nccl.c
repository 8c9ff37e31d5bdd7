/* Collectives on CUDA tensors, which run on NCCL (dist/nccl.c, kernels/cuda/nccl.cu):
 * without CUDA or without a GPU, the clear error a CUDA tensor's collective
 * gets (white-box: no CUDA tensor can be made there, so the case asks for
 * the group's NCCL communicator as such a collective does); with a GPU, a
 * world of one through NCCL, every collective and dtype. */
#include <criterion/criterion.h>
#include <stdlib.h>
#include <string.h>

#include "dist/dist_internal.h"
#include "mixgrad.h"
#include "tests/common/expect_error.h"

#define WHY "mx_dist_all_reduce: collectives on CUDA tensors run on NCCL, which cannot start: "

/* A world of one, whatever launched the test. */
static mx_process_group *world_of_one(void) {
  const char *vars[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_STEP_NUM_TASKS", "WORLD_SIZE", "PMIX_RANK"};
  for (size_t i = 0; i < sizeof vars / sizeof *vars; i++) unsetenv(vars[i]);
  mx_process_group *g = mx_dist_init(0);
  cr_assert_not_null(g, "%s", mx_last_error());
  return g;
}

Test(dist_nccl, without_cuda_or_a_gpu_a_cuda_collective_says_why) {
  if (mx_cuda_device_count() > 0) cr_skip_test("a CUDA device is here: nccl_world_of_one runs NCCL instead");
  mx_process_group *g = world_of_one();
  mx_clear_error();
  cr_expect_null(mx__dist_nccl_get(g, "mx_dist_all_reduce"));
  if (!mx_cuda_built()) {
    cr_expect_eq(mx_last_status(), MX_NOT_BUILT);
    cr_expect_str_eq(mx_last_error(), WHY "mixgrad was built without CUDA: cannot use device 'cuda' (rebuild with "
                                          "-Dcuda=enabled)");
  } else {
    cr_expect_eq(mx_last_status(), MX_NO_CUDA_DEVICE, "%s", mx_last_error());
    cr_expect(!strncmp(mx_last_error(), WHY "no CUDA device: ", strlen(WHY "no CUDA device: ")), "%s",
              mx_last_error());
  }
  /* as after any error, the group is broken, and says why */
  char why[1024];
  snprintf(why, sizeof why, "mx_dist_barrier: the process group failed earlier (%s)", mx_last_error());
  EXPECT_STATUS_ERROR(mx_dist_barrier(g), why);
  mx_dist_free(g);
}

/* t's elements, read back to the host as doubles. */
static void expect_values(mx_tensor *t, const double *want, int64_t n) {
  cr_assert_eq(mx_numel(t), n);
  mx_scope *s = mx_scope_begin();
  mx_tensor *host = mx_to_dtype(mx_to_device(mx_reshape(t, MX_SHAPE(n)), MX_CPU), MX_F64);
  cr_assert_not_null(host, "%s", mx_last_error());
  for (int64_t i = 0; i < n; i++) cr_expect_eq(mx_at(host, MX_SHAPE(i)), want[i], "element %lld", (long long)i);
  mx_scope_end(s);
}

Test(dist_nccl, nccl_world_of_one) {
  if (mx_cuda_device_count() == 0) cr_skip_test("no CUDA device");
  mx_process_group *g = world_of_one();
  mx_scope *s = mx_scope_begin();
  const double values[] = {1.5, -2, 3, 0.25, 8, -0.5};
  const mx_dtype dtypes[] = {MX_F32, MX_F16, MX_BF16};
  for (size_t d = 0; d < 3; d++) {
    mx_tensor *t = mx_to_device(mx_to_dtype(mx_from_data((float[]){1.5f, -2, 3, 0.25f, 8, -0.5f}, MX_SHAPE(2, 3),
                                                         MX_F32, MX_CPU), dtypes[d]), MX_CUDA);
    cr_assert_not_null(t, "%s", mx_last_error());
    for (int how = MX_DIST_SUM; how <= MX_DIST_MIN; how++)
      cr_assert_eq(mx_dist_all_reduce(g, t, (mx_dist_reduce_op)how), MX_OK, "%s", mx_last_error());
    expect_values(t, values, 6);
    mx_dist_work *w = mx_dist_all_reduce_async(g, t, MX_DIST_AVG);
    cr_assert_not_null(w, "%s", mx_last_error());
    cr_assert_eq(mx_dist_wait(w), MX_OK, "%s", mx_last_error());
    expect_values(t, values, 6);
    /* not contiguous: through a copy */
    mx_tensor *columns = mx_transpose(t, 0, 1);
    cr_assert_eq(mx_dist_all_reduce(g, columns, MX_DIST_SUM), MX_OK, "%s", mx_last_error());
    cr_assert_eq(mx_dist_broadcast(g, columns, 0), MX_OK, "%s", mx_last_error());
    expect_values(t, values, 6);
    mx_tensor *stacked = mx_dist_all_gather(g, t);
    cr_assert_not_null(stacked, "%s", mx_last_error());
    cr_expect_eq(mx_ndim(stacked), 3);
    cr_expect_eq(mx_device_of(stacked), MX_CUDA);
    expect_values(stacked, values, 6);
    mx_tensor *mine = mx_dist_reduce_scatter(g, mx_reshape(t, MX_SHAPE(1, 6)), MX_DIST_AVG);
    cr_assert_not_null(mine, "%s", mx_last_error());
    cr_expect_eq(mx_ndim(mine), 1);
    cr_expect_eq(mx_dtype_of(mine), dtypes[d]);
    expect_values(mine, values, 6);
  }
  mx_scope_end(s);
  mx_dist_free(g);
}

/* The ranks compare the device too (a CPU tensor goes to MPI, a CUDA one
 * to NCCL), and a mismatch names it. */
Test(dist_nccl, a_cuda_call_is_described_with_its_device) {
  char text[160];
  mx__call cuda = {.seq = 3, .kind = CALL_SUM, .dtype = MX_F16, .numel = 5, .root = -1, .device = MX_CUDA};
  mx__dist_describe(&cuda, text, sizeof text);
  cr_expect_str_eq(text, "all_reduce(sum) on 5 float16 elements on cuda");
  mx__call broadcast = {.kind = CALL_BROADCAST, .dtype = MX_F32, .numel = 2, .root = 1, .device = MX_CUDA};
  mx__dist_describe(&broadcast, text, sizeof text);
  cr_expect_str_eq(text, "broadcast on 2 float32 elements from root 1 on cuda");
  broadcast.device = MX_CPU;
  mx__dist_describe(&broadcast, text, sizeof text);
  cr_expect_str_eq(text, "broadcast on 2 float32 elements from root 1");
}
