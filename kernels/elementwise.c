/* Which elementwise functions have an integer version. */
#include "kernels/elementwise.h"

static const bool unary_int[MX_UN_COUNT] = {
#define MX_UNARY_INT_FN(code, expr) [MX_UN_##code] = true,
#include "kernels/elementwise.def"
};

static const bool binary_int[MX_BIN_COUNT] = {
#define MX_BINARY_INT_FN(code, expr) [MX_BIN_##code] = true,
#define MX_COMPARE_FN(code, expr) [MX_BIN_##code] = true,
#include "kernels/elementwise.def"
};

bool mx__unary_has_int(int code) { return code >= 0 && code < MX_UN_COUNT && unary_int[code]; }
bool mx__binary_has_int(int code) { return code >= 0 && code < MX_BIN_COUNT && binary_int[code]; }
