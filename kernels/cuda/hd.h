/* MX_HD marks the scalar math of kernels/math.h as callable from host and
 * device code: __host__ __device__ under nvcc, nothing for a C compiler. */
#ifndef MX_KERNELS_CUDA_HD_H
#define MX_KERNELS_CUDA_HD_H

#ifdef __CUDACC__
#define MX_HD __host__ __device__
#else
#define MX_HD
#endif

#endif
