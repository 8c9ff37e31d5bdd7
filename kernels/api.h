/* What libmixgrad.so exports. The library is built with hidden visibility;
 * an installed header opens its declarations with MX_API_BEGIN and closes
 * them with MX_API_END (which also give them C linkage in C++), and only
 * the functions declared between the two are exported. A new public header
 * needs nothing more; a function declared in a header that is not
 * installed stays inside the library. tests/layers/abi.py checks the exported list
 * against share/abi/libmixgrad.symbols (scripts/update-abi rewrites it). */
#ifndef MX_KERNELS_API_H
#define MX_KERNELS_API_H

#if defined(__GNUC__)
#define MX__VISIBILITY_PUSH _Pragma("GCC visibility push(default)")
#define MX__VISIBILITY_POP _Pragma("GCC visibility pop")
#else
#define MX__VISIBILITY_PUSH
#define MX__VISIBILITY_POP
#endif

#ifdef __cplusplus
#define MX_API_BEGIN MX__VISIBILITY_PUSH extern "C" {
#define MX_API_END } MX__VISIBILITY_POP
#else
#define MX_API_BEGIN MX__VISIBILITY_PUSH
#define MX_API_END MX__VISIBILITY_POP
#endif

#endif
