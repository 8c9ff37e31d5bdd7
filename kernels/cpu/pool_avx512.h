/* Max pooling's 2x2 stride-2 loops in AVX-512 (F, BW, VL), row-major and
 * channels-last, forward (values and uint8 offsets) and backward (every dx
 * element of the covered block written once), for pool.c. They give the
 * bits of pool_search.h's scalar steps: a NaN wins (the last one), a tie
 * keeps the first, ReLU on load keeps -0 and NaN, a 16-bit NaN is stored
 * quiet, the backward stores 0 + dy. Built only for x86-64 GCC and clang
 * (MX__POOL_AVX512); pool.c asks mx__pool_avx512() before calling them. */
#ifndef MX_KERNELS_CPU_POOL_AVX512_H
#define MX_KERNELS_CPU_POOL_AVX512_H

#include <stdbool.h>
#include <stdint.h>

/* The hardware prefetcher falls behind the two input rows a row of 2x2
 * windows reads channels-last: on a (128, 32, 28, 28) float32 input, one
 * thread, the search ran at half the row-major loop's speed (2.0 ms against
 * 0.9); asking for the bytes this far ahead in both rows makes it 0.75 ms
 * (4 KiB ahead: 1.0 ms, 16 KiB: 0.65). */
enum { MX__POOL_PREFETCH_AHEAD = 8192 };

#if defined(__x86_64__) && defined(__GNUC__)
#define MX__POOL_AVX512 1

/* Whether this CPU runs the loops below (valgrind's does not: it hides AVX-512). */
bool mx__pool_avx512(void);

/* Row-major forward: n windows from input rows top and top + W (elements),
 * maxima to out, offsets (0 to 3) to offset. bf16: the values are bfloat16.
 * The plane's room past the row (pool_avx512.c): readable input elements
 * from top, and writable outputs from out and offset, which rows after this
 * one write again (so one thread's rows of one plane, in order). */
void mx__pool_row_2x2_avx512(const void *top, int64_t W, void *out, uint8_t *offset, int64_t n, int64_t readable,
                             int64_t writable, bool bf16, bool relu);

/* Row-major backward: the first 2 n elements of dx rows top and top + W from
 * n gradients and their offsets; dt_bits 32 (float32) or 16 with bf16
 * telling bfloat16 from float16. The room past the row: readable dy values
 * and offsets from dy and offset, writable dx elements from top, which later
 * rows (or the caller's zeroing of the uncovered edges, after the rows)
 * write again. */
void mx__pool_row_2x2_backward_avx512(void *top, int64_t W, const void *dy, const uint8_t *offset, int64_t n,
                                      int64_t readable, int64_t writable, int dt_bits, bool bf16);

/* Channels-last forward: the OW output pixels of one output row, their C
 * values each; top is the first of the two input rows, W pixels wide. */
void mx__pool_cl_row_2x2_avx512(const void *top, int64_t W, int64_t C, int64_t OW, void *out, uint8_t *offset,
                                bool bf16, bool relu);

/* Channels-last backward: the 2 OW pixels of dx rows top and top + W (W
 * pixels of C values) from the OW output pixels of dy and offset. */
void mx__pool_cl_row_2x2_backward_avx512(void *top, int64_t W, int64_t C, int64_t OW, const void *dy,
                                         const uint8_t *offset, int dt_bits, bool bf16);
#endif

#endif
