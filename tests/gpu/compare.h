/* What the GPU suite's files share (tests/gpu): the skip without a device,
 * comparing a CPU tensor with a CUDA tensor bit for bit or within a bound,
 * and inputs planted with the awkward values of every conversion. */
#ifndef MX_TESTS_GPU_COMPARE_H
#define MX_TESTS_GPU_COMPARE_H

#include <mixgrad.h>

extern const mx_dtype all_dtypes[8];  /* every dtype */
extern const mx_dtype float_dtypes[4];
#define COUNT(a) ((int)(sizeof(a) / sizeof *(a)))

/* The same input on both devices. */
typedef struct {
  mx_tensor *cpu, *gpu;
} device_pair;

/* Skips the test without a CUDA device. */
void require_gpu(void);

/* t's elements in row-major order, as its dtype's C type, in a malloc'ed
 * buffer of *bytes bytes. */
void *host_copy(const mx_tensor *t, size_t *bytes);
/* cpu on the CPU, gpu on CUDA, both non-NULL with one dtype and shape. */
void assert_same_geometry(const mx_tensor *cpu, const mx_tensor *gpu, const char *what);
/* Where cpu and gpu first differ, written to why (empty if they agree):
 * with rel 0, in their bits, except that a NaN matches any NaN; with
 * rel > 0 (a float dtype), by more than rel of the larger magnitude, or of
 * `floor` if that is larger, infinities being equal. Returns how many
 * elements differ. */
size_t differences(const mx_tensor *cpu, const mx_tensor *gpu, double rel, double floor, char *why,
                   size_t why_size);
void assert_identical(const mx_tensor *cpu, const mx_tensor *gpu, const char *what);
/* Within rel of the larger magnitude; subnormal results compare absolutely. */
void assert_close(const mx_tensor *cpu, const mx_tensor *gpu, double rel, const char *what);
/* 8 units in the last place of a float dtype, relative. */
double eight_ulps(mx_dtype dtype);
/* The smallest normal value of a float dtype. */
double smallest_normal(mx_dtype dtype);

/* n normal values at scales from 1e-3 to 1e5 with NaN, infinities, signed
 * zero, fp16/bf16 ties and overflow edges, subnormals and the edges of the
 * integer ranges planted among them (malloc'ed). */
double *awkward_values(int64_t n, uint64_t seed);
/* A (6, 7, 9) CPU tensor of dtype made from awkward_values. */
mx_tensor *awkward_tensor(mx_dtype dtype, uint64_t seed);
/* t copied to the CUDA device (asserts it worked). */
mx_tensor *to_cuda(const mx_tensor *t);

#endif
