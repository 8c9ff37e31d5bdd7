/* Backends are vtables: one struct of function pointers per device.
 *
 * The CPU backend is always there. The CUDA backend registers when mixgrad
 * was built with CUDA and a device is found at run time; otherwise asking for
 * it fails with "mixgrad was built without CUDA" or "no CUDA device".
 * Nothing above this header knows which backend it is talking to.
 */
#ifndef MX_KERNELS_BACKEND_H
#define MX_KERNELS_BACKEND_H

#include "kernels/base_internal.h"
#include "kernels/math.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mx_backend {
  const char *name;
  mx_device device;

  /* memory: sizes in bytes; free is given the size for the statistics */
  mx_status (*alloc)(size_t bytes, void **out);
  void (*free)(void *ptr, size_t bytes);
  /* copy bytes between this device and the host (to_host: device -> host) */
  mx_status (*copy_from_host)(void *dst, const void *src, size_t bytes);
  mx_status (*copy_to_host)(void *dst, const void *src, size_t bytes);
  mx_status (*synchronize)(void);

  /* kernels on views of this device's memory */
  mx_status (*fill)(const mx_kview *out, double value);
  /* out = src converted to out's dtype; shapes equal, strides arbitrary */
  mx_status (*convert)(const mx_kview *out, const mx_kview *src);
  mx_status (*random)(const mx_kview *out, const mx_rand_params *params);
  /* out[i] = (u_i < p[i]), p a view with out's shape, u from the params */
  mx_status (*bernoulli)(const mx_kview *out, const mx_kview *p, const mx_rand_params *params);
} mx_backend;

/* The backend for a device, or NULL with the error set. */
const mx_backend *mx__backend(mx_device device);


extern const mx_backend mx__cpu_backend;

#ifdef __cplusplus
}
#endif

#endif
