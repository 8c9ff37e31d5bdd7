/* The launchers of kernels/cuda/common.cuh on the CPU, for the host-run tests
 * (tests/gpu/test_host_grid.cu, built with MX_CUDA_HOST_GRID): the same MX_HD
 * kernel bodies over a simulated grid, every (block, thread) pair in order,
 * with the GPU launch's grid and block sizes; a block reduction runs its
 * phases between barriers thread by thread over a simulated shared memory.
 * Scratch memory is host memory. Included by common.cuh only. */
#ifndef MX_KERNELS_CUDA_HOST_GRID_H
#define MX_KERNELS_CUDA_HOST_GRID_H

#include <stdlib.h>
#include <string.h>

#include <vector>

/* common.cuh's index32_fits, with a bound the tests lower (tests/gpu/host_grid.cu) so that the kernels'
 * general paths for larger tensors run too. */
extern int64_t host_grid_index32_limit;
static inline bool index32_fits(int64_t n) { return n <= host_grid_index32_limit; }

template <class Op>
static inline mx_status launch_elementwise(const char *what, int64_t n, Op op) {
  (void)what;
  if (n <= 0) return MX_OK;
  grid_pos at = {0, 0, grid_blocks(n), THREADS_PER_BLOCK};
  for (at.block = 0; at.block < at.blocks; at.block++)
    for (at.thread = 0; at.thread < at.threads; at.thread++) grid_stride(at, n, op);
  return MX_OK;
}

template <class Body>
static inline mx_status launch_threads(const char *what, int64_t blocks, int64_t threads, const Body &body) {
  (void)what;
  grid_pos at = {0, 0, blocks, threads};
  for (at.block = 0; at.block < blocks; at.block++)
    for (at.thread = 0; at.thread < threads; at.thread++) body(at);
  return MX_OK;
}

/* Between two barriers the threads of a block touch disjoint slots of
 * parts, so running them one after another is one of the GPU's orders. */
template <unsigned MAX_THREADS, unsigned LANES = 1, class Body>
static inline mx_status launch_block_reduce(const char *what, int64_t blocks, unsigned threads, const Body &body) {
  static_assert(LANES <= MAX_THREADS, "a block reduction has at least one thread a lane");
  if (threads > MAX_THREADS || threads < LANES || (threads & (threads - 1)))
    return mx__error(MX_INVALID_ARGUMENT, "host grid: %s with %u threads (at least %u, at most %u, a power of two)",
                     what, threads, LANES, MAX_THREADS);
  std::vector<typename Body::partial> parts(threads);
  for (int64_t block = 0; block < blocks; block++)
    for (int64_t item = block; item < body.items; item += blocks) {
      for (unsigned t = 0; t < threads; t++) parts[t] = body.thread_partial(item, t, threads);
      for (unsigned half = threads / 2; half >= LANES; half /= 2)
        for (unsigned t = 0; t < half; t++) parts[t] = body.combine(parts[t], parts[t + half]);
      for (unsigned lane = 0; lane < LANES; lane++) finish_lane<LANES>(body, item, lane, parts[lane]);
    }
  return MX_OK;
}

/* Each block's phases thread by thread, over one simulated shared memory. */
template <class Body>
static inline mx_status launch_block_counts(const char *what, int64_t blocks, int64_t threads, const Body &body) {
  (void)what;
  std::vector<typename Body::shared> shared(1); /* on the heap: it may be tens of KiB */
  grid_pos at = {0, 0, blocks, threads};
  for (at.block = 0; at.block < blocks; at.block++) {
    for (at.thread = 0; at.thread < threads; at.thread++) body.clear(shared[0], at);
    for (at.thread = 0; at.thread < threads; at.thread++) body.count(shared[0], at);
    for (at.thread = 0; at.thread < threads; at.thread++) body.publish(shared[0], at);
  }
  return MX_OK;
}

static inline mx_status scratch_alloc(void **p, size_t bytes) {
  *p = malloc(bytes ? bytes : 1);
  return *p ? MX_OK : mx__error(MX_OUT_OF_MEMORY, "host grid: no memory for %zu bytes of scratch", bytes);
}

static inline mx_status scratch_free(void *p) {
  free(p);
  return MX_OK;
}

static inline mx_status scratch_zero(void *p, size_t bytes) {
  memset(p, 0, bytes);
  return MX_OK;
}

static inline mx_status scratch_read(void *host, const void *p, size_t bytes) {
  memcpy(host, p, bytes);
  return MX_OK;
}

#endif
