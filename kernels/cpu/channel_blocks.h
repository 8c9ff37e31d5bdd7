/* 16-bit tensors between the plain (N, C, *S) layout and oneDNN's blocks of
 * 16 channels (nChw16c: (N, C/16, *S, 16)), the layout its bf16 convolutions
 * work in. oneDNN 2.6 reorders bf16 with a generic kernel at half the speed
 * of its f32 one; these are SIMD transposes of 8x8 tiles. */
#ifndef MX_KERNELS_CPU_CHANNEL_BLOCKS_H
#define MX_KERNELS_CPU_CHANNEL_BLOCKS_H

#include <stdint.h>

#include "kernels/base.h"

/* blocked[n][c / 16][s][c % 16] = plain[n][c][s]; c is a multiple of 16. */
void mx__to_channel_blocks16(uint16_t *blocked, const uint16_t *plain, int64_t n, int64_t c, int64_t s);
/* The inverse. */
void mx__from_channel_blocks16(uint16_t *plain, const uint16_t *blocked, int64_t n, int64_t c, int64_t s);

/* The same between plain 16-bit values of dtype (MX_BF16 or MX_F16) and
 * float32 blocks, the layout of a float32 primitive computing 16-bit
 * convolutions (mx__dnnl_conv_in_f32): widened exactly on the way in,
 * rounded to nearest even on the way out (mx__f32_to_bf16_n's and
 * mx__f32_to_f16_n's bits). */
void mx__to_channel_blocks16_f32(float *blocked, const uint16_t *plain, mx_dtype dtype, int64_t n, int64_t c,
                                 int64_t s);
void mx__from_channel_blocks16_f32(uint16_t *plain, const float *blocked, mx_dtype dtype, int64_t n, int64_t c,
                                   int64_t s);

#endif
