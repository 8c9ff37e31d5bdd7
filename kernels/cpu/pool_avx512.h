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

/* Row-major forward: rows output rows of n windows, row r's from input
 * rows top + 2 r W and top + 2 r W + W (W elements a row), its maxima to
 * out + r n and offsets (0 to 3) to offset + r n. bf16: the values are
 * bfloat16. readable: the input elements from top that may be read (the
 * rows' last vectors run on past a row where there is room, pool_avx512.c). */
void mx__pool_rows_2x2_avx512(const void *top, int64_t W, void *out, uint8_t *offset, int64_t rows, int64_t n,
                              int64_t readable, bool bf16, bool relu);

/* Row-major backward: the first 2 n elements of dx rows 2 r and 2 r + 1
 * from top (W elements a row) for r < rows, from the n gradients and
 * offsets r n past dy and offset; dt_bits 32 (float32) or 16 with bf16
 * telling bfloat16 from float16. writable: the dx elements from top that
 * may be written; the caller zeroes the uncovered right column and bottom
 * row afterwards, as the rows' last vectors may run into them. */
void mx__pool_rows_2x2_backward_avx512(void *top, int64_t W, const void *dy, const uint8_t *offset, int64_t rows,
                                       int64_t n, int64_t writable, int dt_bits, bool bf16);

/* Channels-last forward: the OW output pixels of one output row, their C
 * values each; top is the first of the two input rows, W pixels wide;
 * dt_bits 32 (float32) or 16 with bf16 telling bfloat16 from float16. */
void mx__pool_cl_row_2x2_avx512(const void *top, int64_t W, int64_t C, int64_t OW, void *out, uint8_t *offset,
                                int dt_bits, bool bf16, bool relu);

/* Channels-last backward: the 2 OW pixels of dx rows top and top + W (W
 * pixels of C values) from the OW output pixels of dy and offset. */
void mx__pool_cl_row_2x2_backward_avx512(void *top, int64_t W, int64_t C, int64_t OW, const void *dy,
                                         const uint8_t *offset, int dt_bits, bool bf16);
#endif

#endif
