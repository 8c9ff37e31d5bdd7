/* The codes of the elementwise functions in kernels/elementwise.def. */
#ifndef MX_KERNELS_ELEMENTWISE_H
#define MX_KERNELS_ELEMENTWISE_H

#include "kernels/base.h"

typedef enum {
#define MX_UNARY_FN(code, expr) MX_UN_##code,
#include "kernels/elementwise.def"
  MX_UN_COUNT
} mx_unary_code;

/* Binary codes: the arithmetic ones keep the dtype, the comparisons and
 * logical ones (from MX_BIN_EQ on) give bool. */
typedef enum {
#define MX_BINARY_FN(code, expr) MX_BIN_##code,
#define MX_COMPARE_FN(code, expr) MX_BIN_##code,
#include "kernels/elementwise.def"
  MX_BIN_COUNT
} mx_binary_code;

#ifdef __cplusplus
extern "C" {
#endif

/* Whether a code also runs on integer (and bool) inputs. */
bool mx__unary_has_int(int code);
bool mx__binary_has_int(int code);

#ifdef __cplusplus
}
#endif

#endif
