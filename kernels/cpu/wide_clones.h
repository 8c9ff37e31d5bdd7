/* MX_WIDE_CLONES: build a hot loop for AVX-512 and AVX2 as well as the
 * baseline, the widest one picked at load time. */
#ifndef MX_KERNELS_CPU_WIDE_CLONES_H
#define MX_KERNELS_CPU_WIDE_CLONES_H

/* The AVX-512 build is x86-64-v4's whole set, not avx512f alone: without VL
 * and BW the compiler keeps to 16 ymm registers and spills, and a bf16 relu
 * ran 2.5x slower (bench/NOTES.md, round 9). Not under ThreadSanitizer: the
 * clones' ifunc resolvers run while the dynamic loader relocates the
 * library, before TSan's runtime is set up, and their instrumentation
 * crashed the process at start-up. */
#if defined(__has_feature)
#if __has_feature(thread_sanitizer) /* clang's way of saying it */
#define MX__UNDER_TSAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define MX__UNDER_TSAN 1
#endif

#if defined(__x86_64__) && defined(__GNUC__) && !defined(MX__UNDER_TSAN)
#define MX_WIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define MX_WIDE_CLONES
#endif

#endif
