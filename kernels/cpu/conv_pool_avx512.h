/* The fused convolution-pooling op's 2x2 stride-2 loops for oneDNN's nChw16c layout in AVX-512 (F, BW, VL), for
 * dnnl_conv_pool.c: the forward pools a 16-channel block's plane into plain NCHW values and uint8 offsets, the
 * backward scatters plain NCHW gradients and offsets into the blocked layout. Bits as pool_search.h's scalar steps
 * (ReLU on load keeps -0 and NaN, a NaN wins, the last one, a tie keeps the first, a bfloat16 NaN is stored quiet,
 * the backward stores 0 + dy). Built where pool_avx512.h's loops are (MX__POOL_AVX512); callers ask
 * mx__pool_avx512() first. */
#ifndef MX_KERNELS_CPU_CONV_POOL_AVX512_H
#define MX_KERNELS_CPU_CONV_POOL_AVX512_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/base.h"
#include "kernels/cpu/pool_avx512.h"

#ifdef MX__POOL_AVX512
/* Forward, one block of one image: plane is the block's full-resolution image (W pixels of 16 channels a row), y
 * and offset its first real channel's OH x OW output plane (channel c's at c OH OW, its rows contiguous), m (1 to
 * 16) the real channels. dtype: y's (MX_F32, MX_BF16, MX_F16); f32_plane (16 bits only; float16 always): the plane
 * holds float32 values, each rounded to y's dtype (mx_f32_to_bf16, mx_f32_to_f16) before the search, as an unfused
 * convolution's output would have been. */
void mx__conv_pool16_avx512(const void *plane, int64_t W, int64_t OH, int64_t OW, void *y, uint8_t *offset,
                            int64_t m, mx_dtype dtype, bool f32_plane);

/* Backward, one block of one image: from dy and offset (the first real channel's OH x OW plane, its rows
 * contiguous, channel c's at c channel_stride; readable elements from the start may be read), dy masked by relu's
 * where mask (relu's output y, laid out as dy) is not NULL, as relu_backward masks it, the pixels of the
 * full-resolution image top (W pixels of 16 channels a row) that the windows cover; the padding channels past m get
 * zeros. dtype: dy's (MX_F32, MX_BF16, MX_F16); f32_top (16 bits only; float16 always): the full-resolution
 * image is float32, dy's values widened. */
void mx__conv_pool16_backward_avx512(void *top, int64_t W, int64_t OH, int64_t OW, const void *dy, const void *mask,
                                     const uint8_t *offset, int64_t channel_stride, int64_t m, int64_t readable,
                                     mx_dtype dtype, bool f32_top);
#endif

#endif
